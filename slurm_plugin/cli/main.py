"""Entry point of the ``mosaic`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from planner.errors import MosaicError
from slurm_plugin.cli import info_cmd, plan_cmd, sim_cmd, trace_cmd


def _version() -> str:
    try:
        return version("slurm-mosaic")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosaic",
        description="Deep-learning-aware scheduling rounds for Slurm GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_cmd.add_parser(sub)
    trace_cmd.add_parser(sub)
    plan_cmd.add_parser(sub)
    info_cmd.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = (
        logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    )
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        code: int = args.run(args)
        return code
    except MosaicError as e:
        print(f"mosaic: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mosaic: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
