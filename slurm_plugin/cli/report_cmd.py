"""``mosaic report --since T [--until T]``: the live cluster's jobs and summary, from sacct."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from planner.config import tenants_from_list
from planner.metrics import jobs_csv
from slurm_plugin.cli.controller_cmd import _live_args, load_config
from slurm_plugin.cli.sim_cmd import format_summary
from slurm_plugin.files import read_toml, write_atomic, write_json
from slurm_plugin.report import (
    Report,
    accounting_error,
    build_report,
    shards_per_gpu_by_node,
    summary,
    with_store_starts,
)
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import parse_time
from slurm_plugin.slurm.runner import SlurmCommandError, SlurmError
from slurm_plugin.store import Store


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "report",
        parents=[common],
        help="per-job table and summary of the live cluster, from Slurm accounting (sacct)",
        description="Reads sacct -D -X -P (one row per run of a requeued job) for the managed "
        "partitions and prints the same summary keys as 'mosaic sim' (text, CSV or JSON); --out "
        "writes summary.json, jobs.csv and plot.png. Needs Slurm accounting (slurmdbd).",
    )
    _live_args(p)
    p.add_argument("--since", required=True, help="sacct start time (e.g. 2026-01-01T00:00, now-1hours)")
    p.add_argument("--until", help="sacct end time (default: now)")
    p.add_argument("--format", choices=("text", "csv", "json"), default="text")
    p.add_argument("--out", type=Path, help="also write summary.json, jobs.csv and plot.png here")
    p.add_argument("--no-plot", action="store_true")
    p.set_defaults(run=run)


def _quotas(path: str | None) -> dict[str, float] | None:
    """GPU quota per tenant from the config's ``[[tenants]]`` (or ``[[scheduler.tenants]]``)."""
    if not path:
        return None
    document = read_toml(path)
    scheduler = document.get("scheduler")
    items = document.get("tenants", scheduler.get("tenants") if isinstance(scheduler, dict) else None)
    if items is None:
        return None
    return {t.name: float(t.gpu_quota) for t in tenants_from_list(items, f"{path}: tenants")}


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    client = CliSlurm(config.slurm_env, timeout_s=max(config.command_timeout_s, 120.0))
    now = time.time()
    try:
        rows = client.sacct_runs(args.since, args.until)
    except SlurmCommandError as e:
        raise SlurmError(accounting_error(e)) from e
    # The controller's store (when this host has it): why each run started, where sacct's
    # AdminComment lacks it (an Operator's controller), and the rounds' decision times.
    store = Store(config.store_path) if config.store_path.exists() else None
    try:
        if store is not None and rows:
            submits = [t for t in (parse_time(r.get("Submit", "")) for r in rows) if t is not None]
            rows = with_store_starts(rows, store.starts_done(min(submits, default=now)))
        nodes = [n for n in client.nodes() if set(n.partitions) & set(config.partitions)]
        report = build_report(rows, config.partitions, now, shards_per_gpu_by_node(nodes))
        decisions = _decision_times(store, report) if store is not None else []
    finally:
        if store is not None:
            store.close()
    doc = summary(
        report,
        cluster_gpus=sum(n.gpus for n in nodes),
        cluster_cpus=sum(n.cpus for n in nodes),
        decision_times_s=decisions,
        end_time_s=now,
        quotas=_quotas(args.config),
    )
    doc["since"], doc["until"] = args.since, args.until
    doc["partitions"] = list(config.partitions)
    table = jobs_csv(report.records, doc["gpus"])
    if args.format == "json":
        print(json.dumps({"summary": doc, "jobs": table.splitlines()}, indent=2))
    elif args.format == "csv":
        print(table, end="")
    else:
        doc["scheduler"] = "live"
        doc["trace"] = f"sacct {args.since} .. {args.until or 'now'}"
        print(format_summary(doc))
    if args.out:
        write_json(args.out / "summary.json", doc)
        write_atomic(args.out / "jobs.csv", table)
        if not args.no_plot:
            write_plot(report, args.out / "plot.png", doc["gpus"])
    return 0


def _decision_times(store: Store, report: Report) -> list[float]:
    """The controller's decision times for the rounds inside the report's window."""
    if not report.records:
        return []
    return store.decision_times(min(r.submit_time_s for r in report.records))


def write_plot(report: Report, path: Path, total_gpus: int, title: str | None = None) -> None:
    """Each job's runs as bars (a requeue starts a new bar) and busy GPUs over time, under
    ``title`` (the scheduler, for the demo) when given."""
    from slurm_plugin.cli.plot import can_plot, save_png

    if not can_plot(path):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (gantt, busy) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    starts = [run.start for runs in report.runs.values() for run in runs if run.start is not None]
    origin = min(starts) if starts else 0.0
    events: list[tuple[float, float]] = []
    for row, record in enumerate(report.records):
        for run in report.runs.get(record.job_id, []):
            if run.start is None:
                continue
            end = run.end if run.end is not None else time.time()
            gantt.barh(row, end - run.start, left=run.start - origin, height=0.6,
                       color="tab:red" if run.state == "REQUEUED" else "tab:blue")  # fmt: skip
            events += [(run.start - origin, run.gpus), (end - origin, -run.gpus)]
    gantt.set_yticks(range(len(report.records)), [r.job_id for r in report.records])
    gantt.set_ylabel("job (red: run ended by a requeue)")
    if title:
        gantt.set_title(title)
    level = 0.0
    xs: list[float] = []
    ys: list[float] = []
    for t, delta in sorted(events):
        level += delta
        xs.append(t)
        ys.append(level)
    busy.step(xs, ys, where="post", label="busy GPUs")
    busy.axhline(total_gpus, color="grey", linestyle=":", label=f"{total_gpus} GPUs")
    busy.set_xlabel("seconds since the first start")
    busy.legend(loc="upper right")
    fig.tight_layout()
    save_png(fig, path, dpi=100)
