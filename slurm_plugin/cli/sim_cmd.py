"""``mosaic sim``: replay a trace on a cluster with a scheduler preset."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.cluster import cluster_from_toml
from planner.config import build_scheduler
from planner.core.codec import round_plan_to_json
from planner.core.errors import InputError
from planner.core.model import RoundPlan
from planner.explain import ROUNDS_FILE, rounds_header
from planner.metrics import CLASS_KEYS, SUMMARY_KEYS, jobs_csv, tenant_summary
from planner.sim import SimConfig, Simulator, TimelinePoint
from planner.sim.feasibility import describe, never_startable
from planner.sim.progress import TRUTHS
from planner.traces import parse_trace
from profiles.store import ProfileStore
from slurm_plugin.cli.plot import write_sim_plot
from slurm_plugin.cli.scheduler_args import add_scheduler_args, scheduler_config
from slurm_plugin.files import bundled_text, read_text, write_atomic, write_json
from slurm_plugin.profiles_file import load_profile_store

log = logging.getLogger(__name__)

DEMO_CLUSTER = "demo_cluster.toml"
DEMO_TRACE = "demo_trace.csv"
# The cluster after every planning point: what `mosaic compare` draws utilisation over time from.
TIMELINE_FILE = "timeline.csv"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "sim",
        parents=[common],
        help="simulate a trace on a cluster",
        description="Replay a trace with the planner's own plan_round and write summary.json, jobs.csv, "
        "timeline.csv and plot.png. Without --cluster/--trace, runs the bundled demo (64 GPUs, 240 jobs).",
    )
    p.add_argument("--cluster", metavar="TOML", help="cluster description (default: the bundled demo)")
    p.add_argument("--trace", metavar="CSV", help="job trace (default: the bundled demo trace)")
    p.add_argument("--out", metavar="DIR", required=True, help="output directory")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for random draws (the profiling noise); recorded in summary.json",
    )
    p.add_argument("--round-s", type=float, default=360.0, help="round length in seconds (default 360)")
    p.add_argument("--checkpoint-s", type=float, default=10.0, help="checkpoint cost per restart (s)")
    p.add_argument("--relaunch-s", type=float, default=20.0, help="relaunch cost per restart (s)")
    p.add_argument(
        "--launch-s",
        type=float,
        default=0.0,
        help="cost at a job's first start (s; default 0, Rubick's artifact simulator: 260)",
    )
    p.add_argument(
        "--trigger",
        choices=("round", "event"),
        default=None,
        help="plan every round only, or also at every arrival and completion "
        "(default: the preset's own; event for sjf-bsbf and sjf-ffs)",
    )
    p.add_argument(
        "--truth",
        choices=TRUTHS,
        default=TRUTHS[0],
        help="what prices Rubick's seven models on A800s: Mosaic's measurements (default), or the "
        "Rubick artifact simulator's rule (its placements.csv: the plan's row, else the placement's "
        "ga row, else interpolated; Mosaic's where it has no time)",
    )
    p.add_argument("--horizon-s", type=float, help="stop after this much simulated time")
    p.add_argument("--profiles", action="append", default=[], metavar="JSON", help="extra profile file(s)")
    p.add_argument(
        "--profile-noise",
        type=float,
        default=0.0,
        metavar="N",
        help="the planner sees every profiled throughput times a fixed random factor in [1-N, 1+N] "
        "(Tesserae §7.2); true speeds are unchanged",
    )
    p.add_argument("--json", action="store_true", help="also print summary.json on stdout")
    p.add_argument("--no-plot", action="store_true", help="do not write plot.png")
    p.add_argument(
        "--record-rounds",
        action="store_true",
        help="also write rounds.jsonl: every round's plan, for mosaic explain JOB --run DIR",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_scheduler_args(p, default_preset="mosaic")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    cluster_name = args.cluster or f"bundled:{DEMO_CLUSTER}"
    trace_name = args.trace or f"bundled:{DEMO_TRACE}"
    nodes = cluster_from_toml(
        read_text(args.cluster) if args.cluster else bundled_text(DEMO_CLUSTER), source=cluster_name
    )
    trace = parse_trace(read_text(args.trace) if args.trace else bundled_text(DEMO_TRACE), source=trace_name)
    impossible = never_startable(nodes, trace)
    if impossible:  # sbatch refuses such a job; the simulation would only stall on it
        raise InputError(describe(impossible, f"{trace_name} on {cluster_name}"))
    profiles: ProfileStore = load_profile_store(args.profiles)
    config = scheduler_config(args)
    scheduler = build_scheduler(config, profiles, profile_noise=args.profile_noise, seed=args.seed)
    sim_config = SimConfig(
        round_s=args.round_s,
        checkpoint_s=args.checkpoint_s,
        relaunch_s=args.relaunch_s,
        launch_s=args.launch_s,
        trigger=args.trigger or config.trigger,
        horizon_s=args.horizon_s,
        truth=args.truth,
    )
    log.info("simulating %d jobs on %d nodes with %s", len(trace), len(nodes), scheduler.name)
    bar = None
    if not args.no_progress and sys.stderr.isatty() and len(trace) >= 500:
        try:
            from tqdm import tqdm
        except ImportError:  # the plots extra is not installed: no progress bar
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=len(trace), unit="job", desc=f"sim {scheduler.name}", leave=False)

    def progress(sim_time_s: float, finished: int, total: int) -> None:
        assert bar is not None
        bar.n = finished
        bar.set_postfix_str(f"t={sim_time_s / 3600:.1f}h", refresh=False)
        bar.refresh()

    recorded: list[str] = []
    if args.record_rounds:
        recorded.append(json.dumps(rounds_header(nodes, trace, config), sort_keys=True))

    def record(sim_time_s: float, plan: RoundPlan) -> None:
        doc = round_plan_to_json(plan)
        for key in ("decision_time_s", "stage_times_s"):
            doc.pop(key, None)  # wall-clock noise: the record says what was decided
        recorded.append(json.dumps({"round": len(recorded), "time_s": sim_time_s, "plan": doc}))

    started = time.perf_counter()
    simulator = Simulator(
        nodes,
        trace,
        scheduler,
        sim_config,
        profiles=profiles,
        clock=time.perf_counter,
        on_progress=progress if bar is not None else None,
        on_round=record if args.record_rounds else None,
    )
    result = simulator.run()
    wall = time.perf_counter() - started
    if bar is not None:
        bar.close()
    summary: dict[str, Any] = {
        **result.summary,
        "cluster": cluster_name,
        "trace": trace_name,
        "gpus": simulator.total_gpus,
        "round_s": args.round_s,
        "restart_cost_s": sim_config.restart_cost_s,
        "trigger": sim_config.trigger,
        "truth": sim_config.truth,
        "seed": args.seed,
        "profile_noise": args.profile_noise,
        "wall_time_s": wall,
        "unknown_models": sorted(result.unknown_models),
    }
    if config.tenants:  # the quotas are the scheduler's ([[tenants]]): their use per tenant
        quotas = {t.name: float(t.gpu_quota) for t in config.tenants}
        summary["tenants"] = tenant_summary(result.records, summary.get("makespan_s"), quotas)
    write_json(out / "summary.json", summary)
    write_atomic(out / "jobs.csv", jobs_csv(result.records, simulator.total_gpus))
    write_atomic(out / TIMELINE_FILE, timeline_csv(result.timeline))
    if args.record_rounds:
        write_atomic(out / ROUNDS_FILE, "\n".join(recorded) + "\n")
    if not args.no_plot:
        write_sim_plot(result, out / "plot.png", f"{scheduler.name} on {cluster_name}", simulator.total_gpus)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
        print(
            f"wrote {out / 'summary.json'}, {out / 'jobs.csv'}, {out / TIMELINE_FILE}"
            + ("" if args.no_plot else f", {out / 'plot.png'}")
            + (f", {out / ROUNDS_FILE}" if args.record_rounds else "")
        )
    return 0


def timeline_csv(timeline: Sequence[TimelinePoint]) -> str:
    """``timeline.csv``: one row per planning point (time, busy GPUs, running and waiting jobs)."""
    lines = ["time_s,busy_gpus,running,pending"]
    lines += [f"{p.time_s:.3f},{p.busy_gpus},{p.running},{p.pending}" for p in timeline]
    return "\n".join(lines) + "\n"


def format_summary(summary: dict[str, Any]) -> str:
    """A short human-readable table of the contract keys."""
    lines = [f"scheduler {summary.get('scheduler')}  ({summary.get('gpus')} GPUs, {summary.get('trace')})"]
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        if value is None:
            text = "-"
        elif key.endswith("_s") and key.startswith(("avg_jct", "p50", "p99", "makespan", "avg_queue")):
            text = f"{value:,.0f} s  ({value / 3600:.2f} h)"
        elif isinstance(value, float):
            text = f"{value:.4g}"
        else:
            text = str(value)
        lines.append(f"  {key:<22} {text}")
    if summary.get("guaranteed_jobs"):
        for key in CLASS_KEYS[1:]:
            value = summary.get(key)
            text = "-" if value is None else f"{value:,.0f} s  ({value / 3600:.2f} h)"
            lines.append(f"  {key:<22} {text}")
    if summary.get("deadline_jobs"):
        ratio = summary.get("deadline_satisfactory_ratio")
        lines.append(
            f"  {'deadlines met':<22} {summary.get('deadline_met')} of {summary['deadline_jobs']}"
            + ("" if ratio is None else f"  ({ratio:.1%})")
        )
    for name, t in (summary.get("tenants") or {}).items():
        jct = "-" if t["avg_jct_s"] is None else f"{t['avg_jct_s'] / 3600:.2f} h"
        use = "" if t["quota_use"] is None else f", {t['quota_use']:.0%} of a {t['gpu_quota']:g}-GPU quota"
        lines.append(f"  tenant {name}: {t['jobs']} jobs, avg JCT {jct}, {t['avg_gpus'] or 0:.1f} GPUs{use}")
    return "\n".join(lines)
