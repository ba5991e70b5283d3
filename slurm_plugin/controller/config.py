"""The ``[controller]`` table of ``mosaic.toml`` (validated; unknown keys list the valid ones).

.. code-block:: toml

    [controller]
    partitions = ["gpu"]            # the partitions Mosaic schedules; others are never touched
    spool_dir = "/var/spool/mosaic" # state store, plan files, job status, metrics
    round_s = 300                   # seconds between rounds (the papers' round length: 6 min)
    event_poll_s = 5                # event-driven presets: how often arrivals/completions are looked for
    checkpoint_grace_s = 60         # how long a stopped job may take to checkpoint
    max_restarts_per_hour = 6       # a job is stopped at most this often (rate limit)
    spool_keep_s = 86400            # an ended job's plan file and status stay this long
    round_plans_kept = 288          # rounds whose whole plan the store keeps (older: compacted)
    history_days = 90               # the store forgets ended jobs, rounds, actions older (0: never)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from planner.core.errors import ConfigError
from profiles.gpus import catalog

DEFAULT_GPU_TYPES = tuple(t.slurm_feature for t in catalog().types.values())
"""The node features that name a GPU type: the GPU catalog's (``profiles/builtin/gpus.toml``)."""


@dataclass(frozen=True)
class ControllerConfig:
    """What the controller needs besides the scheduler; defaults live here only."""

    partitions: tuple[str, ...] = ("gpu",)
    spool_dir: Path = Path("/var/spool/mosaic")
    round_s: float = 300.0
    event_poll_s: float = 5.0  # an event-driven scheduler's look for arrivals and completions (loop.py)
    slurm_conf: str | None = None
    command_timeout_s: float = 30.0
    checkpoint_signal: str = "USR1"
    checkpoint_grace_s: float = 60.0
    stop_timeout_s: float = 60.0
    max_restarts_per_hour: int = 6
    gpu_types: tuple[str, ...] = DEFAULT_GPU_TYPES
    default_gpu_type: str | None = None  # nodes whose GRES and features name no type; None: "unknown"
    default_model: str = "unknown"
    metrics_file: str | None = "metrics.prom"
    spool_keep_s: float = 86400.0  # after Slurm stops listing a job (slurm_plugin/controller/spoolsweep.py)
    round_plans_kept: int = 288  # a day of 5-minute rounds (Store.compact_rounds)
    history_days: float = 90.0  # Store.prune_history; 0 keeps everything

    @property
    def store_path(self) -> Path:
        return self.spool_dir / "mosaic.db"

    @property
    def slurm_env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.slurm_conf} if self.slurm_conf else {}

    def metrics_path(self) -> Path | None:
        if not self.metrics_file:
            return None
        p = Path(self.metrics_file)
        return p if p.is_absolute() else self.spool_dir / p


_KINDS: dict[str, str] = {
    "partitions": "str-list",
    "spool_dir": "path",
    "round_s": "positive",
    "event_poll_s": "positive",
    "slurm_conf": "str",
    "command_timeout_s": "positive",
    "checkpoint_signal": "signal",
    "checkpoint_grace_s": "non-negative",
    "stop_timeout_s": "positive",
    "max_restarts_per_hour": "count",
    "gpu_types": "str-list",
    "default_gpu_type": "str",
    "default_model": "str",
    "metrics_file": "str",
    "spool_keep_s": "non-negative",
    "round_plans_kept": "count",
    "history_days": "non-negative",
}


def controller_config(table: Any, source: str = "[controller]", **overrides: Any) -> ControllerConfig:
    """Validate a ``[controller]`` table; ``overrides`` (non-``None``) win over it."""
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise ConfigError(f"{source} must be a table")
    valid = [f.name for f in fields(ControllerConfig)]
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key not in _KINDS:
            raise ConfigError(f"{source}: unknown key {key!r}; valid keys: {', '.join(valid)}")
        values[key] = _check(source, key, _KINDS[key], raw)
    for key, value in overrides.items():
        if value is not None:
            values[key] = _check("command line", key, _KINDS[key], value)
    return ControllerConfig(**values)


def _check(source: str, key: str, kind: str, value: Any) -> Any:
    where = f"{source}: {key}"
    if kind == "str-list":
        if not (isinstance(value, list | tuple) and value and all(isinstance(v, str) and v for v in value)):
            raise ConfigError(f"{where}: expected a non-empty list of names, got {value!r}")
        return tuple(value)
    if kind in {"str", "path", "signal"}:
        if not isinstance(value, str | Path) or not str(value):
            raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
        if kind == "signal" and not str(value).isalnum():
            raise ConfigError(f"{where}: {value!r} is not a signal name (e.g. USR1)")
        return Path(value) if kind == "path" else str(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if kind == "count":
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: expected an integer >= 1, got {value!r}")
        return value
    if (kind == "positive" and value <= 0) or (kind == "non-negative" and value < 0):
        raise ConfigError(f"{where}: expected a {kind} number, got {value!r}")
    return float(value)
