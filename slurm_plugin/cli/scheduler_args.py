"""Command-line flags that choose and tune a scheduler (shared by ``sim`` and ``plan``)."""

from __future__ import annotations

import argparse
import logging
import tomllib
from typing import Any

from planner.config import PRESETS, SchedulerConfig, config_from_mapping
from planner.core.errors import ConfigError
from slurm_plugin.files import read_toml

log = logging.getLogger(__name__)


def add_scheduler_args(parser: argparse.ArgumentParser, default_preset: str | None) -> None:
    g = parser.add_argument_group("scheduler")
    g.add_argument(
        "--scheduler",
        metavar="PRESET",
        default=None,
        help=f"preset naming a compared system ({', '.join(PRESETS)}); default: {default_preset}",
    )
    g.add_argument("--config", metavar="TOML", help="a Mosaic config file; its [scheduler] table is used")
    g.add_argument("--policy", help="ordering policy (overrides the preset)")
    g.add_argument("--placement", help="placement stage (overrides the preset)")
    g.add_argument("--packing", help="packing stage, or 'none'")
    g.add_argument("--shaping", help="CPU/memory shaping stage")
    g.add_argument("--reconfig", help="reconfiguration stage, or 'none'")
    g.add_argument("--migration", help="migration stage, or 'none'")
    pre = g.add_mutually_exclusive_group()
    pre.add_argument(
        "--preemptive",
        dest="preemptive",
        action="store_true",
        default=None,
        help="running jobs may be stopped for higher-priority ones",
    )
    pre.add_argument(
        "--non-preemptive",
        dest="preemptive",
        action="store_false",
        help="running jobs keep running (default: the policy's published behaviour)",
    )
    g.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="STAGE.KEY=VALUE",
        help="an option of the component filling STAGE (policy, placement, packing, shaping, "
        "reconfiguration, migration), VALUE in TOML syntax (e.g. -o policy.promote_knob=4); a stage "
        "given another component than the preset's keeps none of the preset's options for it",
    )
    parser.set_defaults(default_preset=default_preset)


def scheduler_config(args: argparse.Namespace) -> SchedulerConfig:
    """The configuration the flags describe: config file, then preset, then overrides."""
    table: dict[str, Any] = {}
    if args.config:
        document = read_toml(args.config)
        raw = document.get("scheduler", {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{args.config}: [scheduler] must be a table")
        table = dict(raw)
        if "tenants" in document and "tenants" not in table:
            table["tenants"] = document["tenants"]  # top-level [[tenants]]
    if args.scheduler is not None:
        if args.scheduler not in PRESETS:  # the flag's mistake, not the config file's
            known = ", ".join(PRESETS)
            raise ConfigError(
                f"--scheduler: unknown scheduler preset {args.scheduler!r}; known presets: {known}"
            )
        written = table.get("preset", args.default_preset)
        if "options" in table and written != args.scheduler:
            # The file's options are its preset's stages' (etc/mosaic.toml: the mosaic ordering's).
            log.warning(
                "%s: [scheduler.options] are for preset %r; --scheduler %s runs without them",
                args.config,
                written,
                args.scheduler,
            )
            del table["options"]
        table["preset"] = args.scheduler
    elif "preset" not in table and args.default_preset is not None:
        table["preset"] = args.default_preset
    if args.option:
        given = table.get("options", {})
        if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
            raise ConfigError(f"{args.config}: [scheduler] key 'options': expected one table per stage")
        options = {k: dict(v) for k, v in given.items()}
        for text in args.option:
            stage, key, value = _parse_option(text)
            options.setdefault(stage, {})[key] = value
        table["options"] = options
    for flag, key in (("packing", "packing"), ("reconfig", "reconfiguration"), ("migration", "migration")):
        if getattr(args, flag) is not None:
            table[key] = getattr(args, flag)
    for key in ("policy", "placement", "shaping"):
        if getattr(args, key) is not None:
            table[key] = getattr(args, key)
    if args.preemptive is not None:
        table["preemptive"] = args.preemptive
    config = config_from_mapping(table, source=f"{args.config or 'command line'} [scheduler]")
    changed = [
        f"{flag}={getattr(args, flag)}"
        for flag in ("policy", "placement", "packing", "shaping", "reconfig", "migration")
        if getattr(args, flag) is not None
    ]
    if args.preemptive is not None:
        changed.append("preemptive" if args.preemptive else "non-preemptive")
    if changed:
        config = config.with_overrides(name=f"{config.name}[{','.join(changed)}]")
    return config


def _parse_option(text: str) -> tuple[str, str, Any]:
    name, sep, value = text.partition("=")
    stage, dot, key = name.strip().partition(".")
    if not sep or not dot or not stage or not key:
        raise ConfigError(f"--option {text!r}: expected STAGE.KEY=VALUE, e.g. policy.promote_knob=4")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except (ValueError, RecursionError):  # TOMLDecodeError, a 5,000-digit integer, deep nesting
        parsed = value.strip()  # a bare word is a string
    return stage, key, parsed
