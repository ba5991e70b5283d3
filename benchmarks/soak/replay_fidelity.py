"""Replay fidelity: jobs run on the accounting test cluster, turned into a trace by
``mosaic trace from-sacct``, replayed by ``mosaic sim``; each job's JCT (queueing included)
as sacct recorded it against the replay's.

    .venv/bin/python -m benchmarks.soak.replay_fidelity
    .venv/bin/python -m benchmarks.soak.replay_fidelity --min-s 30 --max-s 120 --window-s 120 \
        --result replay_fidelity_long

Needs root and Slurm (the project's test cluster, ``slurm_plugin.testcluster``, with
accounting: MariaDB and slurmdbd). The workload (seeded): ``--jobs`` ``sleep`` jobs of 1, 2, 4
or 8 GPUs (8: two whole nodes) of ``--min-s``..``--max-s`` seconds arriving over
``--window-s`` seconds, so that they queue for the 16 GPUs; plus a 4-task array, one job
requeued while it runs, one that fails, and one cancelled while pending (held by a
``--begin`` in the future, so that it delays no one). All go to the partition Slurm
schedules itself (``other``): priority/basic (FIFO by submission), sched/backfill.

Each replay runs ``mosaic sim --scheduler fifo`` on the trace and the cluster file with one
of :data:`REPLAYS` (trigger, round length, backfill) or :data:`BACKFILL_PASS` (backfill every
``bf_interval`` only), and the event-driven ones again with Slurm's start latency
(:func:`start_latency`) as ``--launch-s``; :data:`PRIMARY` models both of Slurm's passes, its
backfill pass at the phase sacct shows (why: BENCHMARKS.md, "Replay fidelity"). A job's sacct
JCT is its last ``End`` minus its first ``Submit`` (a requeued job's runs together, as
``from-sacct`` writes its submit time); the replay's is ``finish_time_s - submit_time_s`` of
jobs.csv. slurmctld's log says which of Slurm's passes (main or backfill) started each job, and
on which nodes.

Writes ``benchmarks/results/<--result>.json`` and ``docs/img/replay-fidelity.png``: one panel
per stored result of ``--panels`` (both workloads above), each job's JCT in the
event-driven replays of :data:`SHOWN` against sacct's. ``--reanalyse`` replays the
trace and cluster file stored in the result again (no Slurm); ``--plot-only`` redraws the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import random
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, wait_until, write_result

ROOT = Path(__file__).resolve().parents[2]
FIGURE = ROOT / "docs" / "img" / "replay-fidelity.png"
NAME = "replay_fidelity"
WITHIN = 0.05  # the "within a few percent"

REPLAYS: dict[str, list[str]] = {
    # Slurm's main scheduler runs at every submission and completion (batch_sched_delay=0,
    # sched_min_interval=0) and walks the queue in priority order, stopping a partition at its
    # first job that does not fit: an event-driven FIFO that does not backfill. Its backfill
    # pass runs every bf_interval (30 s by default) only.
    "fifo-event-nobackfill": ["--trigger", "event", "-o", "placement.backfill=false"],
    # Mosaic's fifo as it comes, planning at every event: it backfills at every event too.
    "fifo-event": ["--trigger", "event"],
    "fifo-round-1s-nobackfill": ["--round-s", "1", "-o", "placement.backfill=false"],
    "fifo-round-360s": [],  # the preset's defaults: 6-minute rounds, backfill
}
BACKFILL_PASS = "fifo-event-bf"
"""The replay that models both of Slurm's passes: the event-driven main scheduler without
backfill, and its backfill pass every ``bf_interval`` (:func:`bf_interval`) as the placement's
``backfill_interval_s``; at simulated times that are multiples of it (``BACKFILL_PASS``), and
at Slurm's own phase as sacct shows it (``BACKFILL_PASS`` + ``-phase``, :func:`backfill_phase`)."""
PHASE = "-phase"
LATENCY = "+latency"
"""Suffix of the replays that also charge Slurm's start latency (:func:`start_latency`, measured
on sacct's own records) as the simulator's cost at a job's first start (``--launch-s``)."""
WITH_LATENCY = ("fifo-event-nobackfill", "fifo-event", BACKFILL_PASS)
PRIMARY = BACKFILL_PASS + PHASE + LATENCY
SHOWN = {
    "fifo-event-nobackfill+latency": "no backfill, start latency",
    "fifo-event+latency": "backfill at every event, start latency",
    PRIMARY: "backfill pass every bf_interval, start latency",
}


def bf_interval(settings: dict[str, str]) -> float:
    """Slurm's ``bf_interval`` (s) from its ``SchedulerParameters`` (default 30)."""
    m = re.search(r"(?:^|,)bf_interval=(\d+)", settings.get("SchedulerParameters", ""))
    return float(m.group(1)) if m else 30.0


def backfill_phase(
    records: list[dict[str, str]], started_by: dict[str, str], interval: float
) -> float | None:
    """When Slurm's backfill pass runs, as the replay's ``backfill_offset_s``: the median, over the
    jobs the pass started (slurmctld's log), of their sacct ``Start`` less the trace's origin (the
    first ``Submit``, as ``from-sacct`` writes it), modulo ``interval``; None when the pass started
    none. The replay's jobs end when sacct's do (``--launch-s`` included), so its cluster at that
    time is the one Slurm's pass saw."""
    submits = [float(r["Submit"]) for r in records if r["Submit"].isdigit()]
    starts = {r["JobID"]: float(r["Start"]) for r in records if r["Start"].isdigit() and r["AllocTRES"]}
    phases = [
        (starts[j] - min(submits)) % interval
        for j, kind in started_by.items()
        if kind == "backfill" and j in starts
    ]
    return float(statistics.median(phases)) if phases else None


def start_latency(truth: dict[str, dict[str, float]]) -> float:
    """Slurm's start latency on this cluster: the median ``Start - Submit`` of the jobs that
    found their GPUs free (started within 2 s of submission; a wait for a busy GPU is most of a
    run, and every run here is 3 s or more). sacct's times are whole seconds."""
    waits = [t["wait_s"] for t in truth.values() if t["wait_s"] <= 2]
    return float(statistics.median(waits)) if waits else 0.0


SACCT_FIELDS = ("JobID", "Submit", "Start", "End", "ElapsedRaw", "State", "AllocTRES")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=24, help="plain sleep jobs (besides the special ones)")
    parser.add_argument("--window-s", type=float, default=20.0, help="arrivals spread over this window")
    parser.add_argument("--min-s", type=int, default=3)
    parser.add_argument("--max-s", type=int, default=20)
    parser.add_argument("--result", default=NAME)
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument(
        "--panels", nargs="+", default=[NAME, f"{NAME}_long"], help="the stored results the figure shows"
    )
    parser.add_argument("--plot-only", action="store_true", help="only draw the figure from stored results")
    parser.add_argument(
        "--reanalyse", action="store_true", help="replay the stored trace of results/<result>.json again"
    )
    return parser.parse_args(argv)


# -- the workload ------------------------------------------------------------------------


def workload(seed: int, jobs: int, window_s: float, min_s: int, max_s: int) -> list[dict[str, Any]]:
    """The plain jobs: name, arrival offset (s), GPUs, nodes, sleep seconds (seeded)."""
    rng = random.Random(seed)
    offsets = sorted(round(rng.uniform(0, window_s), 1) for _ in range(jobs))
    out = []
    for k, offset in enumerate(offsets):
        gpus = rng.choices([1, 2, 4, 8], weights=[4, 3, 2, 1])[0]
        out.append(
            {
                "name": f"j{k:02d}",
                "offset_s": offset,
                "gpus": gpus,
                "nodes": 2 if gpus == 8 else 1,
                "sleep_s": rng.randint(min_s, max_s),
            }
        )
    return out


def _sbatch(env: dict[str, str], *args: str) -> str:
    from slurm_plugin.slurm.runner import run
    from slurm_plugin.testcluster.shapes import OTHER_PARTITION

    out = run(
        ["sbatch", "--parsable", "-p", OTHER_PARTITION, "-o", "/dev/null", "-c", "1", "--mem=1G", *args],
        env=env,
    ).stdout
    return out.strip().split(";")[0]


def _gres(gpus: int, nodes: int) -> list[str]:
    return ["-N", str(nodes), f"--gres=gpu:{gpus // nodes}"]


def _states(env: dict[str, str]) -> dict[str, str]:
    from slurm_plugin.slurm.runner import run

    out = run(["squeue", "-h", "-o", "%i %T"], env=env).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def submit_workload(env: dict[str, str], plain: list[dict[str, Any]]) -> dict[str, Any]:
    """Submit everything at its offset; requeue and cancel the special jobs; wait for the end.
    Returns what was submitted (job id -> description) and the special jobs' ids."""
    from slurm_plugin.slurm.runner import run

    submitted: dict[str, dict[str, Any]] = {}
    # The special jobs arrive among the plain ones: (offset, name, GPUs, nodes, sbatch args).
    # The requeued one comes first, so it starts at once; requeued after 4 s of running, it
    # waits for the requeue to clear (cred_expire) and queues again behind later arrivals.
    special = [
        (0.0, "requeued", 2, 1, ["--wrap", "sleep 10"]),
        (3.0, "failed", 1, 1, ["--wrap", "sleep 5; exit 3"]),
        (5.0, "array", 1, 1, ["--array=0-3", "--wrap", "sleep 6"]),
        (6.0, "cancelled", 1, 1, ["--begin=now+3600", "--wrap", "true"]),
    ]
    actions = [(4.0, "requeue", "requeued"), (9.0, "scancel", "cancelled")]
    queue: list[tuple[float, str, Any, Any, Any]] = sorted(
        [
            (j["offset_s"], j["name"], j["gpus"], j["nodes"], ["--wrap", f"sleep {j['sleep_s']}"])
            for j in plain
        ]
        + special
        + [(offset, f"~{verb}", target, 0, []) for offset, verb, target in actions]
    )
    ids: dict[str, str] = {}
    t0 = time.monotonic()
    for offset, name, gpus, nodes, args in queue:
        delay = t0 + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if name == "~requeue":
            if _states(env).get(ids[gpus]) != "RUNNING":
                raise SystemExit(f"job {ids[gpus]} is not running when it should be requeued")
            run(["scontrol", "requeue", ids[gpus]], env=env)
            continue
        if name == "~scancel":
            run(["scancel", ids[gpus]], env=env)
            continue
        job_id = _sbatch(env, "-J", name, *_gres(gpus, nodes), *args)
        ids[name] = job_id
        submitted[job_id] = {"name": name, "gpus": gpus, "nodes": nodes, "offset_s": offset}
    wait_until(lambda: not _states(env), "every job to end", 600)
    return {"submitted": submitted, "ids": ids}


# -- sacct, from-sacct, from-slurm -------------------------------------------------------


def sacct_records(env: dict[str, str], since: str) -> list[dict[str, str]]:
    """Every record (``--duplicates``: each run of a requeued job), times in epoch seconds."""
    from slurm_plugin.slurm.runner import run

    out = run(
        ["sacct", "-n", "-P", "-X", "--duplicates", "-S", since, "-o", ",".join(SACCT_FIELDS)],
        env={**env, "SLURM_TIME_FORMAT": "%s"},
    ).stdout
    return [
        dict(zip(SACCT_FIELDS, line.split("|"), strict=True)) for line in out.splitlines() if line.strip()
    ]


def sacct_jct(records: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    """Per job that ran: first Submit, first Start, last End, JCT (End - Submit), runs."""
    by_id: dict[str, list[dict[str, str]]] = {}
    for r in records:
        by_id.setdefault(r["JobID"], []).append(r)
    out: dict[str, dict[str, float]] = {}
    for job_id, rs in by_id.items():
        ran = [r for r in rs if r["AllocTRES"] and r["Start"].isdigit() and r["End"].isdigit()]
        if not ran:
            continue
        submit = min(float(r["Submit"]) for r in rs if r["Submit"].isdigit())
        start = min(float(r["Start"]) for r in ran)
        end = max(float(r["End"]) for r in ran)
        out[job_id] = {
            "submit": submit,
            "start": start,
            "end": end,
            "jct_s": end - submit,
            "wait_s": start - submit,
            "runs": len(ran),
        }
    return out


def scheduler_settings(env: dict[str, str]) -> dict[str, str]:
    """The slurmctld settings that decide when a job starts (``scontrol show config``)."""
    from slurm_plugin.slurm.runner import run

    out = run(["scontrol", "show", "config"], env=env).stdout
    keys = ("SchedulerType", "SchedulerParameters", "PriorityType", "SelectType", "AuthInfo", "KillWait")
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in keys:
            found[key.strip()] = value.strip()
    return found


def how_started(log_text: str) -> dict[str, str]:
    """Job id -> ``main`` or ``backfill``: which of slurmctld's passes started it (its log)."""
    out: dict[str, str] = {}
    for line in log_text.splitlines():
        m = re.search(r"sched: Allocate (JobId=\S+)", line)
        if m is None:
            m = re.search(r"_start_job: Started (JobId=\S+) in ", line)
            kind = "backfill"
        else:
            kind = "main"
        if m is not None:
            job = m.group(1).removeprefix("JobId=")
            job = re.sub(r"\((\d+)\)$", "", job)  # array task: 12_3(15)
            out.setdefault(job, kind)
    return out


def allocated_nodes(log_text: str) -> dict[str, str]:
    """Job id -> the nodes slurmctld first gave it (its log: ``NodeList=`` of the main pass,
    ``... on <nodes>`` of the backfill pass), to compare with the replay's placement."""
    out: dict[str, str] = {}
    for line in log_text.splitlines():
        m = re.search(r"sched: Allocate JobId=(\S+) NodeList=(\S+)", line)
        if m is None:
            m = re.search(r"_start_job: Started JobId=(\S+) in \S+ on (\S+)", line)
        if m is not None:
            out.setdefault(re.sub(r"\((\d+)\)$", "", m.group(1)), m.group(2))
    return out


def run_live(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from slurm_plugin.cli.main import main as mosaic
    from slurm_plugin.testcluster import lifecycle
    from slurm_plugin.testcluster.shapes import shape_named

    plain = workload(args.seed, args.jobs, args.window_s, args.min_s, args.max_s)
    cluster = lifecycle.up(shape_named("homogeneous", accounting=True), work / "cluster")
    try:
        env = cluster.env
        settings = scheduler_settings(env)
        since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
        time.sleep(1)
        started = time.monotonic()
        sub = submit_workload(env, plain)
        live_s = time.monotonic() - started
        conf = ["--slurm-conf", str(cluster.layout.conf)]
        trace_path, cluster_path = work / "site.csv", work / "site.toml"
        ids = sub["ids"]
        expected = {i for i, j in sub["submitted"].items() if j["name"] not in ("array", "cancelled")}
        expected |= {f"{ids['array']}_{k}" for k in range(4)}

        def traced() -> bool:
            records = sacct_records(env, since)
            done = sacct_jct(records)
            if not expected <= set(done) or any(r["State"] in ("RUNNING", "PENDING") for r in records):
                return False
            return (
                mosaic(["-q", "trace", "from-sacct", *conf, "--since", since, "--out", str(trace_path)]) == 0
            )

        wait_until(traced, "sacct to record every job", 60)
        records = sacct_records(env, since)
        if mosaic(["-q", "cluster", "from-slurm", *conf, "--out", str(cluster_path)]) != 0:
            raise SystemExit("mosaic cluster from-slurm failed")
        log_text = (cluster.layout.root / "log" / "slurmctld.log").read_text(errors="replace")
    finally:
        lifecycle.down(work / "cluster")
    return {
        "workload": {
            "seed": args.seed,
            "plain_jobs": plain,
            "window_s": args.window_s,
            "sleep_s": [args.min_s, args.max_s],
        },
        "submitted": sub["submitted"],
        "special_ids": sub["ids"],
        "slurm_settings": settings,
        "live_wall_s": round(live_s, 1),
        "sacct_records": records,
        "started_by": how_started(log_text),
        "slurm_nodes": allocated_nodes(log_text),
        "trace_csv": trace_path.read_text(),
        "cluster_toml": cluster_path.read_text(),
    }


# -- the replays and the comparison ------------------------------------------------------


def replay(trace_csv: str, cluster_toml: str, flags: list[str], work: Path) -> dict[str, dict[str, float]]:
    """``mosaic sim --scheduler fifo`` on the trace: job id -> submit, start, finish (s)."""
    from slurm_plugin.cli.main import main as mosaic

    trace, cluster, out = work / "trace.csv", work / "cluster.toml", work / "sim"
    trace.write_text(trace_csv)
    cluster.write_text(cluster_toml)
    argv = ["-q", "sim", "--cluster", str(cluster), "--trace", str(trace), "--scheduler", "fifo"]
    with contextlib.redirect_stdout(io.StringIO()):  # its summary table
        code = mosaic([*argv, *flags, "--out", str(out), "--no-plot", "--no-progress"])
    if code != 0:
        raise SystemExit(f"mosaic sim {' '.join(flags)} failed")
    with (out / "jobs.csv").open() as f:
        return {
            r["job_id"]: {
                "submit": float(r["submit_time_s"]),
                "start": float(r["start_time_s"]),
                "finish": float(r["finish_time_s"]),
            }
            for r in csv.DictReader(f)
        }


def compare(
    truth: dict[str, dict[str, float]], sim: dict[str, dict[str, float]], kinds: dict[str, str]
) -> dict[str, Any]:
    rows = []
    for job_id in sorted(sim, key=lambda j: (truth[j]["submit"], j)):
        t, s = truth[job_id], sim[job_id]
        jct = s["finish"] - s["submit"]
        rows.append(
            {
                "job_id": job_id,
                "kind": kinds.get(job_id, "plain"),
                "sacct_jct_s": t["jct_s"],
                "replay_jct_s": round(jct, 3),
                "abs_error_s": round(jct - t["jct_s"], 3),
                "rel_error": round((jct - t["jct_s"]) / t["jct_s"], 4),
                "sacct_wait_s": t["wait_s"],
                "replay_wait_s": round(s["start"] - s["submit"], 3),
            }
        )
    return {
        "summary": summary(rows),
        "summary_without_requeued": summary(rows, skip=("requeued",)),
        "jobs": rows,
    }


def summary(rows: list[dict[str, Any]], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    kept = [r for r in rows if r["kind"] not in skip]
    rel = [abs(r["rel_error"]) for r in kept]
    err = [abs(r["abs_error_s"]) for r in kept]
    sacct_mean = statistics.mean(r["sacct_jct_s"] for r in kept)
    replay_mean = statistics.mean(r["replay_jct_s"] for r in kept)
    return {
        "jobs": len(kept),
        "within_5pct": sum(1 for x in rel if x <= WITHIN),
        "within_2s": sum(1 for x in err if x <= 2.0),
        "mean_abs_rel_error": round(statistics.mean(rel), 4),
        "median_abs_rel_error": round(statistics.median(rel), 4),
        "max_abs_rel_error": round(max(rel), 4),
        "mean_abs_error_s": round(statistics.mean(err), 2),
        "median_abs_error_s": round(statistics.median(err), 2),
        "max_abs_error_s": round(max(err), 2),
        "mean_signed_error_s": round(statistics.mean(r["abs_error_s"] for r in kept), 2),
        "sacct_avg_jct_s": round(sacct_mean, 2),
        "replay_avg_jct_s": round(replay_mean, 2),
        "avg_jct_rel_error": round((replay_mean - sacct_mean) / sacct_mean, 4),
    }


def job_kinds(live: dict[str, Any]) -> dict[str, str]:
    ids = live["special_ids"]
    kinds = {ids["requeued"]: "requeued", ids["failed"]: "failed"}
    for record in live["sacct_records"]:
        if record["JobID"].startswith(f"{ids['array']}_"):
            kinds[record["JobID"]] = "array"
    for job_id, job in live["submitted"].items():
        if job["nodes"] > 1:
            kinds.setdefault(job_id, "2-node")
    return kinds


def plot(names: list[str], path: Path) -> None:
    """One panel per stored result: each job's JCT in the replays of :data:`SHOWN` against
    sacct's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(p.read_text()) for n in names if (p := RESULTS / f"{n}.json").exists()]
    fig, axes = plt.subplots(1, len(results), figsize=(5.0 * len(results), 6.0), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        work = result["workload"]
        top = 1.05 * max(
            max(r["sacct_jct_s"], r["replay_jct_s"]) for k in SHOWN for r in result["replays"][k]["jobs"]
        )
        ax.plot([0, top], [0, top], color="0.5", lw=1, label="y = x")
        ax.fill_between(
            [0, top], [0, top * (1 - WITHIN)], [0, top * (1 + WITHIN)], color="0.9", label=f"±{WITHIN:.0%}"
        )
        launch = f"--launch-s {result['start_latency_s']:g}"
        for k, (name, label) in enumerate(SHOWN.items()):
            rows = result["replays"][name]["jobs"]
            s = result["replays"][name]["summary"]
            color = f"C{k}"
            plain = [r for r in rows if r["kind"] != "requeued"]
            ax.scatter(
                [r["sacct_jct_s"] for r in plain],
                [r["replay_jct_s"] for r in plain],
                s=28,
                color=color,
                marker="os^"[k],
                label=f"{label.replace('start latency', launch)}: {s['within_5pct']}/{s['jobs']} within 5 %, "
                f"mean |err| {s['mean_abs_error_s']} s",
            )
            requeued = [r for r in rows if r["kind"] == "requeued"]
            ax.scatter(
                [r["sacct_jct_s"] for r in requeued],
                [r["replay_jct_s"] for r in requeued],
                s=60,
                color=color,
                marker="X",
                label="the requeued job" if k == 0 else None,
            )
        starts = result["started_by_count"]
        ax.set_title(
            f"{len(result['replays'][PRIMARY]['jobs'])} jobs of {work['sleep_s'][0]}-{work['sleep_s'][1]} s "
            f"arriving over {work['window_s']:g} s\nSlurm started {starts['main']} in its main pass, "
            f"{starts['backfill']} in its backfill pass",
            fontsize=9,
        )
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel("JCT recorded by sacct (s)")
        ax.set_ylabel("JCT in mosaic sim --scheduler fifo --trigger event (s)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.plot_only:
        plot(args.panels, args.figure)
        return
    with tempfile.TemporaryDirectory(prefix="mosaic-replay-fidelity-") as tmp:
        work = Path(tmp)
        if args.reanalyse:
            stored = json.loads((RESULTS / f"{args.result}.json").read_text())
            live = {k: stored[k] for k in stored if k not in ("benchmark", "machine", "replays")}
        else:
            live = run_live(args, work)
        truth = sacct_jct(live["sacct_records"])
        kinds = job_kinds(live)
        latency = start_latency(truth)
        interval = bf_interval(live["slurm_settings"])
        phase = backfill_phase(live["sacct_records"], live["started_by"], interval)
        configs = {
            **REPLAYS,
            BACKFILL_PASS: ["--trigger", "event", "-o", f"placement.backfill_interval_s={interval:g}"],
        }
        for name in WITH_LATENCY:
            configs[name + LATENCY] = [*configs[name], "--launch-s", f"{latency:g}"]
        configs[PRIMARY] = [
            *configs[BACKFILL_PASS],
            "-o",
            f"placement.backfill_offset_s={phase or 0.0:g}",
            "--launch-s",
            f"{latency:g}",
        ]
        replays = {}
        for name, flags in configs.items():
            (work / name).mkdir()
            sim = replay(live["trace_csv"], live["cluster_toml"], flags, work / name)
            replays[name] = {"flags": ["--scheduler", "fifo", *flags], **compare(truth, sim, kinds)}
            print(name, json.dumps(replays[name]["summary"]))
    started = live["started_by"]
    result = {
        **live,
        "started_by_count": {k: sum(1 for v in started.values() if v == k) for k in ("main", "backfill")},
        "start_latency_s": latency,
        "bf_interval_s": interval,
        "backfill_phase_s": phase,
        "primary": PRIMARY,
        "replays": replays,
    }
    write_result(args.result, result)
    plot(args.panels, args.figure)


if __name__ == "__main__":
    main()
