"""``mosaic demo``: a bundled trace (or ``--trace CSV``) of emulated jobs, live vs the simulator."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from planner.metrics import SUMMARY_KEYS, jobs_csv
from slurm_plugin.cli.report_cmd import write_plot
from slurm_plugin.cli.scheduler_args import add_scheduler_args, scheduler_config
from slurm_plugin.demo import load_trace, run_demo
from slurm_plugin.files import write_atomic, write_json


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run a small trace of emulated jobs on a local Slurm test cluster, then compare with sim",
        description="Brings up a test cluster (root; installs Slurm when missing), submits the bundled "
        "trace through 'mosaic submit', runs the controller until every job finished, tears the "
        "cluster down and prints the summary from sacct next to the simulator's for the same trace.",
    )
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="summary.json, jobs.csv, plot.png")
    p.add_argument("--dir", type=Path, help="the cluster's private directory (default: a temporary one)")
    p.add_argument("--time-scale", type=float, default=60.0, help="emulated seconds per real second")
    p.add_argument("--round-s", type=float, default=2.0, help="real seconds between rounds")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument(
        "--trace",
        default="demo",
        help="bundled trace (demo: 10 jobs, the default; fidelity24: 24 jobs) or a trace CSV path",
    )
    add_scheduler_args(p, default_preset="mosaic")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)  # before the cluster comes up: a bad path fails at once
    root = args.dir or Path(tempfile.mkdtemp(prefix="mosaic-demo-"))

    def progress(t: float, done: int, total: int) -> None:
        print(f"  t={t:6.1f} s  {done}/{total} jobs done", file=sys.stderr)

    result = run_demo(
        root,
        scheduler_config(args),
        python=sys.executable,
        time_scale=args.time_scale,
        round_s=args.round_s,
        timeout_s=args.timeout_s,
        trace=trace,
        trace_name=args.trace,
        on_tick=progress,
    )
    out: Path = args.out
    write_json(out / "summary.json", {"live": result.live, "sim": result.sim})
    write_atomic(out / "jobs.csv", jobs_csv(result.report.records, result.live["gpus"]))
    restarts = result.live.get("restarts")
    title = f"scheduler {result.live.get('scheduler')}: {restarts} restarts (live, sacct)"
    write_plot(result.report, out / "plot.png", result.live["gpus"], title)
    print(f"{'key':<22} {'live (sacct)':>14} {'sim':>14}")
    for key in SUMMARY_KEYS:
        print(f"{key:<22} {_fmt(result.live.get(key)):>14} {_fmt(result.sim.get(key)):>14}")
    print(f"wrote {out / 'summary.json'}, {out / 'jobs.csv'}, {out / 'plot.png'}")
    if getattr(args, "json", False):
        print(json.dumps(result.live))
    return 0


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
