"""Entry point of the ``mosaic`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from planner.core.errors import MosaicError
from slurm_plugin.cli import (
    cluster_cmd,
    compare_cmd,
    controller_cmd,
    demo_cmd,
    emulate_cmd,
    explain_cmd,
    info_cmd,
    perfmodel_cmd,
    plan_cmd,
    profile_cmd,
    report_cmd,
    sim_cmd,
    sweep_cmd,
    testcluster_cmd,
    trace_cmd,
)


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
    parser.add_argument("-q", "--quiet", action="store_true", default=False, help="only errors on stderr")
    # The same flags after the command (``mosaic sim -q ...``); SUPPRESS keeps the
    # top-level values when they are not repeated there.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim_cmd.add_parser(sub, common)
    trace_cmd.add_parser(sub, common)
    cluster_cmd.add_parser(sub, common)
    plan_cmd.add_parser(sub, common)
    info_cmd.add_parsers(sub, common)
    testcluster_cmd.add_parser(sub, common)
    controller_cmd.add_parsers(sub, common)
    emulate_cmd.add_parser(sub, common)
    report_cmd.add_parser(sub, common)
    compare_cmd.add_parser(sub, common)
    explain_cmd.add_parser(sub, common)
    demo_cmd.add_parser(sub, common)
    perfmodel_cmd.add_parser(sub, common)
    profile_cmd.add_parser(sub, common)
    sweep_cmd.add_parser(sub, common)
    return parser


class _Formatter(logging.Formatter):
    """Progress lines as they are; warnings and errors prefixed like other CLI errors."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno == logging.INFO:
            return message
        if record.levelno == logging.DEBUG:
            return f"debug {record.name}: {message}"
        return f"mosaic: {record.levelname.lower()}: {message}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.ERROR if args.quiet else (logging.INFO, logging.DEBUG)[min(args.verbose, 1)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
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
