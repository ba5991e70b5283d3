"""Scheduler configuration: presets, overrides and composition into a :class:`Scheduler`.

A configuration names one component per stage and carries per-component options.
It comes from a preset (the compared systems of DESIGN.md), optionally overridden
field by field (CLI flags, or a ``[scheduler]`` TOML table):

.. code-block:: toml

    [scheduler]
    preset = "tiresias"
    preemptive = true            # omit for the policy's published default

    [scheduler.options.tiresias]
    queue_thresholds_gpu_s = [3600, 36000]
    promote_knob = 8
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import planner.policies  # noqa: F401  (registers the built-in components)
from planner.errors import ConfigError
from planner.fields import Fields
from planner.pipeline import Scheduler
from planner.registry import StageContext
from planner.stages import MIGRATIONS, ORDERINGS, PACKINGS, PLACEMENTS, RECONFIGURATIONS, SHAPINGS
from profiles.store import ProfileStore


@dataclass(frozen=True)
class SchedulerConfig:
    """Names of the components per stage (``None``: the stage is skipped) and their options."""

    name: str = "custom"
    policy: str = "fifo"
    preemptive: bool | None = None
    placement: str = "consolidated"
    packing: str | None = None
    shaping: str = "proportional"
    reconfiguration: str | None = None
    migration: str | None = None
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def with_overrides(self, **changes: Any) -> SchedulerConfig:
        """Apply the non-``None`` overrides (``preemptive`` may be set to either bool)."""
        given = {k: v for k, v in changes.items() if v is not None}
        if not given:
            return self
        return replace(self, **given)


PRESETS: Mapping[str, SchedulerConfig] = MappingProxyType(
    {
        "fifo": SchedulerConfig(name="fifo", policy="fifo"),
        "sjf": SchedulerConfig(name="sjf", policy="sjf"),
        "srtf": SchedulerConfig(name="srtf", policy="srtf"),
        "las": SchedulerConfig(name="las", policy="las"),
        "tiresias": SchedulerConfig(name="tiresias", policy="tiresias"),
        "ftf": SchedulerConfig(name="ftf", policy="ftf"),
    }
)


def preset(name: str) -> SchedulerConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown scheduler preset {name!r}; known presets: {', '.join(PRESETS)}") from None


_SCHEDULER_KEYS = (
    "preset",
    "policy",
    "preemptive",
    "placement",
    "packing",
    "shaping",
    "reconfiguration",
    "migration",
    "options",
)


def config_from_mapping(table: Any, source: str = "[scheduler]") -> SchedulerConfig:
    """Read a ``[scheduler]`` table (already parsed from TOML)."""
    f = Fields(table, source, ConfigError)
    f.only(_SCHEDULER_KEYS)
    base = preset(f.req_str("preset")) if f.has("preset") else SchedulerConfig()
    options: dict[str, Mapping[str, Any]] = {k: dict(v) for k, v in base.options.items()}
    raw_options = f.opt_object("options") or {}
    for component, opts in raw_options.items():
        if not isinstance(opts, Mapping):
            f.fail_key("options", f"options.{component} must be a table")
        options[component] = dict(opts)
    preemptive = f.flag("preemptive", False) if f.has("preemptive") else None
    return replace(
        base,
        policy=f.opt_str("policy") or base.policy,
        preemptive=preemptive if preemptive is not None else base.preemptive,
        placement=f.opt_str("placement") or base.placement,
        packing=_optional_stage(f, "packing", base.packing),
        shaping=f.opt_str("shaping") or base.shaping,
        reconfiguration=_optional_stage(f, "reconfiguration", base.reconfiguration),
        migration=_optional_stage(f, "migration", base.migration),
        options=options,
    )


def _optional_stage(f: Fields, key: str, default: str | None) -> str | None:
    """An optional stage may be switched off with the value "none"."""
    if not f.has(key):
        return default
    value = f.req_str(key)
    return None if value == "none" else value


def build_scheduler(config: SchedulerConfig, profiles: ProfileStore | None = None) -> Scheduler:
    """Compose the configured components; unknown names and bad options are ConfigErrors."""
    context = StageContext(profiles=profiles or ProfileStore.builtin())

    def opts(name: str) -> Mapping[str, Any]:
        return config.options.get(name, {})

    ordering = ORDERINGS.create(config.policy, opts(config.policy), context)
    preemptive = config.preemptive if config.preemptive is not None else ordering.preemptive_by_default
    return Scheduler(
        name=config.name,
        ordering=ordering,
        preemptive=preemptive,
        placement=PLACEMENTS.create(config.placement, opts(config.placement), context),
        shaping=SHAPINGS.create(config.shaping, opts(config.shaping), context),
        packing=None
        if config.packing is None
        else PACKINGS.create(config.packing, opts(config.packing), context),
        reconfiguration=None
        if config.reconfiguration is None
        else RECONFIGURATIONS.create(config.reconfiguration, opts(config.reconfiguration), context),
        migration=None
        if config.migration is None
        else MIGRATIONS.create(config.migration, opts(config.migration), context),
    )


def component_names() -> dict[str, tuple[str, ...]]:
    """Known component names per stage (for ``mosaic presets`` and error messages)."""
    return {
        "policy": ORDERINGS.names(),
        "placement": PLACEMENTS.names(),
        "packing": PACKINGS.names(),
        "shaping": SHAPINGS.names(),
        "reconfiguration": RECONFIGURATIONS.names(),
        "migration": MIGRATIONS.names(),
    }
