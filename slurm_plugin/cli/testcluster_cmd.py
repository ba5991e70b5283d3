"""``mosaic testcluster up|down|status``: a real Slurm cluster on this host."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import SHAPES, shape_named


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "testcluster",
        parents=[common],
        help="bring a local Slurm test cluster (fake GPU nodes) up or down",
        description="A private Slurm cluster on this host: munged, slurmctld and one slurmd per fake "
        "GPU node (optionally MariaDB + slurmdbd), with its own ports, state and munge socket. "
        "Installs Debian's Slurm packages when missing (root). Point Slurm's commands at it with "
        "SLURM_CONF=DIR/etc/slurm.conf.",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    up = verbs.add_parser("up", parents=[common], help="start a cluster and wait until its nodes are idle")
    up.add_argument("--shape", choices=sorted(SHAPES), default="homogeneous")
    up.add_argument("--accounting", action="store_true", help="also MariaDB + slurmdbd (sacct works)")
    up.add_argument("--timeout-s", type=float, default=60.0)
    for verb in (up, verbs.add_parser("down", parents=[common], help="cancel its jobs and stop its daemons")):
        verb.add_argument("--dir", type=Path, default=lifecycle.DEFAULT_ROOT, help="its private directory")
    st = verbs.add_parser("status", parents=[common], help="daemons and node states, as JSON")
    st.add_argument("--dir", type=Path, default=lifecycle.DEFAULT_ROOT, help="its private directory")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "up":
        started = time.monotonic()
        cluster = lifecycle.up(shape_named(args.shape, args.accounting), args.dir, args.timeout_s)
        print(f"test cluster '{cluster.shape.name}' up in {time.monotonic() - started:.1f} s")
        print(f"export SLURM_CONF={cluster.layout.conf}")
        return 0
    if args.verb == "down":
        stopped = lifecycle.down(args.dir)
        print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        return 0
    doc = lifecycle.status(args.dir)
    print(json.dumps(doc, indent=2))
    return 0 if doc["running"] else 1
