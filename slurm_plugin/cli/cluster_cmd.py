"""``mosaic cluster from-slurm``: a Slurm cluster's GPU nodes as the cluster TOML ``mosaic sim`` reads."""

from __future__ import annotations

import argparse
import sys

from planner.core.errors import ConfigError
from profiles.gpus import catalog
from slurm_plugin.files import read_text, write_atomic
from slurm_plugin.slurm import parse
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.sacct_trace import DEFAULT_GPU_TYPE, cluster_toml


def known_gpu_types() -> tuple[str, ...]:
    """Node features taken for a GPU type when a node's GRES names none (the test cluster's
    way): the GPU catalog's types, by name and by Slurm name."""
    return tuple(dict.fromkeys(n for t in catalog().types.values() for n in (t.name, t.slurm_feature)))


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("cluster", parents=[common], help="describe a cluster as a cluster TOML file")
    csub = p.add_subparsers(dest="cluster_command", required=True, metavar="{from-slurm}")
    fs = csub.add_parser(
        "from-slurm",
        parents=[common],
        help="the GPU nodes of a Slurm cluster (sinfo --json) as the cluster TOML mosaic sim reads",
        description="Reads sinfo --json: GPUs and their type from each node's GRES (gpu:<type>:<n>; "
        "untyped: the node feature naming a GPU type, or its only feature, else --gpu-type), CPUs "
        "and memory; identical nodes become one [[nodes]] group. Nodes without GPUs are left out "
        "and counted.",
    )
    fs.add_argument("--slurm-conf", help="slurm.conf of the cluster (default: Slurm's own)")
    fs.add_argument("--partition", action="append", default=[], help="only nodes of this partition")
    fs.add_argument(
        "--gpu-type",
        default=DEFAULT_GPU_TYPE,
        help=f"type of GPUs no GRES or feature names (default {DEFAULT_GPU_TYPE!r})",
    )
    fs.add_argument("--input", metavar="JSON", help="read saved sinfo --json output instead of running sinfo")
    fs.add_argument("--out", required=True, metavar="TOML", help="output file ('-' for stdout)")
    fs.set_defaults(run=run_from_slurm)


def run_from_slurm(args: argparse.Namespace) -> int:
    if args.input:
        nodes = parse.parse_sinfo_json(read_text(args.input))
        source = args.input
    else:
        nodes = CliSlurm({"SLURM_CONF": args.slurm_conf} if args.slurm_conf else {}).nodes()
        source = "sinfo --json"
    if args.partition:
        wanted = set(args.partition)
        nodes = [n for n in nodes if wanted.intersection(n.partitions)]
    text, left_out = cluster_toml(nodes, known_gpu_types(), args.gpu_type.lower(), source)
    if "[[nodes]]" not in text:
        raise ConfigError(
            f"{source}: no node with GPUs" + (f" in {', '.join(args.partition)}" if args.partition else "")
        )
    if args.out == "-":
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
    kept = len(nodes) - sum(left_out.values())
    print(
        f"wrote {kept} GPU node(s) to {args.out}"
        + (f"; left out {left_out['no GPU']} without GPUs" if left_out else ""),
        file=sys.stderr,
    )
    return 0
