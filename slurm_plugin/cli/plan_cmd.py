"""``mosaic plan SNAPSHOT.json``: the admin's dry run of one round."""

from __future__ import annotations

import argparse
import json
import sys
import time

from planner import plan_round
from planner.config import build_scheduler
from planner.core.codec import round_plan_to_json, snapshot_from_json
from slurm_plugin.cli.scheduler_args import add_scheduler_args, scheduler_config
from slurm_plugin.files import read_json
from slurm_plugin.profiles_file import load_profile_store


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "plan",
        parents=[common],
        help="plan one round for a snapshot (dry run) and print the RoundPlan JSON",
        description="Reads a Snapshot (docs/reference.md, 'Snapshot and RoundPlan JSON'; '-' for stdin) and "
        "prints the RoundPlan "
        "the scheduler would apply. decision_time_s is the planner's own time.",
    )
    p.add_argument("snapshot", metavar="SNAPSHOT.json")
    p.add_argument("--profiles", action="append", default=[], metavar="JSON", help="extra profile file(s)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    add_scheduler_args(p, default_preset="mosaic")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.snapshot == "-":
        document = sys.stdin.read()
        source = "<stdin>"
    else:
        source = args.snapshot
        document = read_json(source)
    snapshot = snapshot_from_json(document, source=source)
    scheduler = build_scheduler(scheduler_config(args), load_profile_store(args.profiles))
    plan = plan_round(snapshot, scheduler, clock=time.perf_counter)
    out = round_plan_to_json(plan)
    out["scheduler"] = scheduler.name
    print(json.dumps(out, indent=None if args.compact else 2))
    return 0
