"""Scheduler configuration: presets, overrides and composition into a :class:`Scheduler`.

A configuration names one component per stage and carries options per stage (for
whichever component fills it). It comes from a preset (the compared systems of
docs/choosing-a-scheduler.md), optionally overridden field by field (CLI flags, or a ``[scheduler]`` TOML
table):

.. code-block:: toml

    [scheduler]
    preset = "tiresias"
    preemptive = true            # omit for the policy's published default
    restart_cost_s = 30          # what one restart of a job costs (checkpoint + relaunch)

    [scheduler.options.policy]   # options of the tiresias ordering
    queue_thresholds_gpu_s = [3600, 36000]
    promote_knob = 8

Tenants and their GPU quotas (Rubick §5.1, AntMan: a tenant's guaranteed jobs are served first
while their demands fit its quota) are ``[[tenants]]`` tables, at the top of the config file or
as ``[[scheduler.tenants]]``:

.. code-block:: toml

    [[tenants]]
    name = "vision"
    gpu_quota = 64
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

import planner.policies  # noqa: F401  (registers the built-in components)
from planner.core.errors import ConfigError
from planner.core.fields import Fields
from planner.pipeline import Scheduler
from planner.registry import DEFAULT_RESTART_COST_S, Registry, StageContext
from planner.stages import MIGRATIONS, ORDERINGS, PACKINGS, PLACEMENTS, RECONFIGURATIONS, SHAPINGS
from profiles.store import ProfileStore

T = TypeVar("T")
TENANT_KEYS = ("name", "gpu_quota")
STAGES = ("policy", "placement", "packing", "shaping", "reconfiguration", "migration")


@dataclass(frozen=True)
class Tenant:
    """A tenant and its GPU quota: what its guaranteed jobs may hold as guaranteed."""

    name: str
    gpu_quota: int


@dataclass(frozen=True)
class SchedulerConfig:
    """Names of the components per stage (``None``: the stage is skipped) and options per stage."""

    name: str = "custom"
    policy: str = "fifo"
    preemptive: bool | None = None
    placement: str = "consolidated"
    packing: str | None = None
    shaping: str = "proportional"
    reconfiguration: str | None = None
    migration: str | None = None
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # When the published system plans: every round, or also at each arrival and completion
    # (SJF-BSBF and SJF-FFS are event-driven, §V). A simulation uses it unless told otherwise.
    trigger: str = "round"
    # Tenants with GPU quotas (``[[tenants]]``); the rubick and antman orderings read them.
    tenants: tuple[Tenant, ...] = ()
    # What one restart of a job costs (checkpoint, relaunch, warm-up), for every stage that
    # weighs restarts (Rubick §5.3's δ, Crius's and mosaic's restart charge) unless a stage's
    # own ``restart_cost_s`` option says otherwise; ``None``: DEFAULT_RESTART_COST_S.
    restart_cost_s: float | None = None

    def with_overrides(self, **changes: Any) -> SchedulerConfig:
        """Apply the non-``None`` overrides (``preemptive`` may be set to either bool)."""
        given = {k: v for k, v in changes.items() if v is not None}
        if not given:
            return self
        changed = replace(self, **given)
        if "options" in given:
            return changed
        return replace(
            changed, options=_options_kept(self, {stage: getattr(changed, stage) for stage in STAGES})
        )


PRESETS: Mapping[str, SchedulerConfig] = MappingProxyType(
    {
        "fifo": SchedulerConfig(name="fifo", policy="fifo"),
        "sjf": SchedulerConfig(name="sjf", policy="sjf"),
        "srtf": SchedulerConfig(name="srtf", policy="srtf"),
        "las": SchedulerConfig(name="las", policy="las"),
        "tiresias": SchedulerConfig(name="tiresias", policy="tiresias"),
        "ftf": SchedulerConfig(name="ftf", policy="ftf"),
        # Tesserae §6.1: the placement policies on top of Tiresias and FTF ordering.
        "tesserae-t": SchedulerConfig(
            name="tesserae-t", policy="tiresias", packing="tesserae", migration="tesserae"
        ),
        "tesserae-ftf": SchedulerConfig(
            name="tesserae-ftf", policy="ftf", packing="tesserae", migration="tesserae"
        ),
        # Tiresias-Single: Tesserae's packing for 1-GPU jobs only, as Lucid and Pollux do.
        "tiresias-single": SchedulerConfig(
            name="tiresias-single",
            policy="tiresias",
            packing="tesserae",
            migration="tesserae",
            options={"packing": {"max_gpus": 1}},
        ),
        # Gavel with LAS: greedy same-scale pairing, and Gavel's rule for migrations (a job
        # keeps its GPU ids only if they are free at its turn; no reservation, no relabelling).
        "gavel-las": SchedulerConfig(
            name="gavel-las", policy="las", packing="gavel", options={"placement": {"reserve": False}}
        ),
        # SJF-BSBF §V-B: non-preemptive SJF, free GPUs first, then GPU sharing of at most two
        # jobs that Theorem 1 approves (bsbf) or first-fit sharing (ffs, the paper's baseline).
        # Published event-driven: simulate with --trigger event.
        "sjf-bsbf": SchedulerConfig(
            name="sjf-bsbf",
            trigger="event",
            policy="sjf",
            preemptive=False,
            placement="shared-consolidated",
            packing="bsbf",
        ),
        "sjf-ffs": SchedulerConfig(
            name="sjf-ffs",
            trigger="event",
            policy="sjf",
            preemptive=False,
            placement="shared-consolidated",
            packing="ffs",
        ),
        # Synergy §5: FIFO by default (combine with --policy srtf|las|ftf); the runnable set is
        # chosen on GPUs, then the mechanism shapes CPUs and memory.
        "synergy-proportional": SchedulerConfig(name="synergy-proportional", policy="fifo"),
        "synergy-greedy": SchedulerConfig(name="synergy-greedy", policy="fifo", shaping="greedy"),
        "synergy-tune": SchedulerConfig(name="synergy-tune", policy="fifo", shaping="tune"),
        "synergy-opt": SchedulerConfig(name="synergy-opt", policy="fifo", shaping="opt"),
        # Elastic jobs (#MOSAIC --min-gpus/--max-gpus) grow into free GPUs while the fitted
        # scaling model says it pays, and give GPUs back to waiting jobs: the joint
        # allocation stage Rubick and Crius build on (planner/policies/elastic.py).
        "elastic": SchedulerConfig(name="elastic", policy="fifo", reconfiguration="elastic"),
        # Synergy §5.7: big-data multi-resource schedulers fed Synergy's best-case demands.
        "drf": SchedulerConfig(name="drf", policy="fifo", shaping="drf"),
        "tetris": SchedulerConfig(name="tetris", policy="fifo", shaping="tetris"),
        # Rubick §5 (planner/policies/rubick/): privileged guaranteed jobs of a tenant within its
        # quota first, then by resource-sensitivity slope; the reconfiguration stage shrinks the
        # lowest-slope jobs, grows, and picks each job's best execution plan and CPUs.
        "rubick": SchedulerConfig(name="rubick", policy="rubick", reconfiguration="rubick"),
        # Rubick §7.1's variants: plans only (E), resources only (R), neither (N).
        "rubick-e": SchedulerConfig(
            name="rubick-e",
            policy="rubick",
            reconfiguration="rubick",
            options={"reconfiguration": {"resources": False}},
        ),
        "rubick-r": SchedulerConfig(
            name="rubick-r",
            policy="rubick",
            reconfiguration="rubick",
            options={"policy": {"plans": False}, "reconfiguration": {"plans": False}},
        ),
        "rubick-n": SchedulerConfig(
            name="rubick-n",
            policy="rubick",
            reconfiguration="rubick",
            options={"policy": {"plans": False}, "reconfiguration": {"plans": False, "resources": False}},
        ),
        # Sia-like (Rubick §7.1's baseline): each job's GPU count scaled by the fitted throughput
        # of its own (data-parallel) plan, no plan search, no CPU tuning, no guarantees; with
        # the global batch fixed, goodput is throughput.
        "sia": SchedulerConfig(
            name="sia",
            policy="rubick",
            reconfiguration="rubick",
            options={
                "policy": {"plans": False, "guarantees": False},
                "reconfiguration": {"plans": False, "cpus": False, "guarantees": False},
            },
        ),
        # Crius §8.1's baselines (planner/policies/baselines/), scheduling with data-parallel
        # profiles (the jobs then run at their best plan's speed). Gandiva: FIFO on each job's
        # requested type and count (heterogeneity-unaware), per-type queues, elastic jobs grow
        # into idle GPUs of their node and shrink back for waiting jobs, and move for locality.
        "gandiva": SchedulerConfig(name="gandiva", policy="fifo", preemptive=False, placement="gandiva"),
        # Gavel (heterogeneity-aware, fixed GPU counts): max-min fairness over normalised
        # throughput as an LP over time fractions per type (HiGHS), realised each round by
        # Gavel's priorities (allocation / time received); -o policy.objective=max-throughput.
        "gavel-het": SchedulerConfig(name="gavel-het", policy="gavel-het", placement="gavel-het"),
        # ElasticFlow(-LS): deadline jobs admitted on their minimum satisfactory share (EDF),
        # best-effort jobs after them, GPUs left to the largest marginal throughput gain; one
        # GPU type per job (homogeneous pools).
        "elasticflow": SchedulerConfig(name="elasticflow", policy="elasticflow", placement="elasticflow"),
        # AntMan (Rubick §7.1's multi-tenant baseline): guaranteed jobs within their tenant's
        # quota of requested GPUs first, best-effort jobs opportunistically, preempted first.
        "antman": SchedulerConfig(name="antman", policy="antman"),
        # Crius §6.1 (planner/policies/crius/): Cell-based greedy scheduling in submission order
        # on arrival and completion (event-driven) and every round, up to 3 running jobs
        # rescaled or moved per decision, opportunistic execution, restarts charged; jobs
        # without min/max/types run on half to twice their GPUs on any type (scale).
        "crius": SchedulerConfig(
            name="crius",
            trigger="event",
            policy="fifo",
            reconfiguration="crius",
            options={"reconfiguration": {"scale": [0.5, 2]}},
        ),
        # Everything composed (planner/policies/mosaic/rules.py says which stage owns what):
        # guaranteed jobs within their tenant's quota first, then 2D-LAS with declared time
        # limits as a bound (never the true run times); CPUs and memory by Synergy-Tune; plans
        # and resources by Rubick, GPU types and counts by Crius, each for the jobs it fits.
        # Not in the default, each measured beside it (BENCHMARKS.md): Tesserae's relabelling
        # (--migration tesserae; the sticky, reserving placement and keep-in-place already
        # leave running jobs where they ran, and with it the average JCT is the same on the
        # mixes and Tesserae's trace), and sharing of rigid best-effort jobs: SJF-BSBF's
        # Theorem 1 is the stage ``bsbf-rigid`` (--placement shared-consolidated --packing
        # bsbf-rigid), Tesserae's matching ``tesserae-rigid`` (with -o placement.dissolve=true;
        # restarts past the bar on the mixes, and live it needs jobs
        # submitted on gres/shard).
        # Tune leaves a new rigid job on the placement's node unless its wish fits only
        # elsewhere: its best fit otherwise swapped new jobs between the GPUs the placement had
        # freed for each, and the next round's placement undid it (a restart for nothing).
        "mosaic": SchedulerConfig(
            name="mosaic",
            policy="mosaic",
            shaping="tune",
            reconfiguration="mosaic",
            options={"shaping": {"placement_first": True}},
        ),
        # Crius §8.5: deadline-aware (a Cell must finish the job by its deadline; ElasticFlow's
        # admission of the minimum satisfactory share; hopeless jobs dropped).
        "crius-ddl": SchedulerConfig(
            name="crius-ddl",
            trigger="event",
            policy="fifo",
            reconfiguration="crius",
            options={"reconfiguration": {"scale": [0.5, 2], "deadlines": True}},
        ),
    }
)

PRESET_TIERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # What a site should run: every paper's mechanism on the jobs it fits, no true run times.
        "recommended": ("mosaic",),
        # One published system each, for comparison (BENCHMARKS.md sets mosaic beside them).
        "paper reproductions": (
            "tiresias",
            "tesserae-t",
            "tesserae-ftf",
            "sjf-bsbf",
            "synergy-tune",
            "synergy-opt",
            "rubick",
            "crius",
            "crius-ddl",
        ),
        # The papers' baselines (other systems as they reproduced them) and ablations.
        "baselines and ablations": (
            "fifo",
            "sjf",
            "srtf",
            "las",
            "ftf",
            "tiresias-single",
            "gavel-las",
            "sjf-ffs",
            "synergy-proportional",
            "synergy-greedy",
            "drf",
            "tetris",
            "elastic",
            "rubick-e",
            "rubick-r",
            "rubick-n",
            "sia",
            "antman",
            "gandiva",
            "gavel-het",
            "elasticflow",
        ),
    }
)
"""The presets by tier (``mosaic presets``): each preset in exactly one."""


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
    "tenants",
    "restart_cost_s",
)


def config_from_mapping(table: Any, source: str = "[scheduler]") -> SchedulerConfig:
    """Read a ``[scheduler]`` table (already parsed from TOML)."""
    f = Fields(table, source, ConfigError)
    f.only(_SCHEDULER_KEYS)
    try:
        base = preset(f.req_str("preset")) if f.has("preset") else SchedulerConfig()
    except ConfigError as e:
        if str(e).startswith(source):
            raise
        raise ConfigError(f"{source}: key 'preset': {e}") from None
    components = {stage: f.opt_str(stage) if f.has(stage) else getattr(base, stage) for stage in STAGES}
    options: dict[str, Mapping[str, Any]] = _options_kept(base, components)
    raw_options = f.opt_object("options") or {}
    for stage, opts in raw_options.items():
        if stage not in STAGES:
            f.fail_key("options", f"unknown stage {stage!r}; options go under one of {', '.join(STAGES)}")
        if not isinstance(opts, Mapping):
            f.fail_key("options", f"options.{stage} must be a table")
        options[stage] = {**options.get(stage, {}), **opts}
    preemptive = f.flag("preemptive", False) if f.has("preemptive") else None
    restart_cost = f.opt_float("restart_cost_s", minimum=0.0)
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
        tenants=tenants_from_list(f.req_list("tenants"), f"{source}: tenants")
        if f.has("tenants")
        else base.tenants,
        restart_cost_s=restart_cost if restart_cost is not None else base.restart_cost_s,
    )


def _options_kept(
    base: SchedulerConfig, components: Mapping[str, str | None]
) -> dict[str, Mapping[str, Any]]:
    """``base``'s options for the stages that ``components`` (stage -> component name) fills with
    ``base``'s own component: a preset's options are its components' (``mosaic``'s
    ``placement_first`` is Synergy-Tune's), and a stage given another component (``--shaping
    proportional``) starts from that component's defaults."""
    return {
        stage: dict(opts)
        for stage, opts in base.options.items()
        if components.get(stage) == getattr(base, stage)
    }


def tenants_from_list(items: Any, where: str = "tenants") -> tuple[Tenant, ...]:
    """Read ``[[tenants]]`` tables: each a unique non-empty ``name`` and a ``gpu_quota`` >= 0."""
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected a list of tables ([[tenants]]), got {type(items).__name__}")
    out: list[Tenant] = []
    seen: set[str] = set()
    for k, item in enumerate(items):
        f = Fields(item, f"{where}[{k}]", ConfigError)
        f.only(TENANT_KEYS)
        name = f.req_str("name").strip()
        if not name:
            f.fail_key("name", "must not be empty")
        if name in seen:
            f.fail_key("name", f"tenant {name!r} is listed twice")
        seen.add(name)
        out.append(Tenant(name, f.req_int("gpu_quota", minimum=0)))
    return tuple(out)


def _optional_stage(f: Fields, key: str, default: str | None) -> str | None:
    """An optional stage may be switched off with the value "none"."""
    if not f.has(key):
        return default
    value = f.req_str(key)
    return None if value == "none" else value


def build_scheduler(
    config: SchedulerConfig,
    profiles: ProfileStore | None = None,
    *,
    profile_noise: float = 0.0,
    seed: int = 0,
) -> Scheduler:
    """Compose the configured components; unknown names and bad options are ConfigErrors.

    ``profile_noise`` (in [0, 1]) and ``seed`` make the stages plan with perturbed
    profiles (Tesserae §7.2).
    """
    if not 0.0 <= profile_noise <= 1.0:
        raise ConfigError(f"profile noise must be in [0, 1], got {profile_noise}")
    context = StageContext(
        profiles or ProfileStore.builtin(),
        profile_noise,
        seed,
        {t.name: t.gpu_quota for t in config.tenants},
        restart_cost_s=DEFAULT_RESTART_COST_S if config.restart_cost_s is None else config.restart_cost_s,
    )

    def create(registry: Registry[T], stage: str, name: str | None) -> T | None:
        if name is None:
            if config.options.get(stage):
                raise ConfigError(f"options given for the {stage} stage, which this scheduler skips")
            return None
        return registry.create(name, config.options.get(stage, {}), context)

    ordering = create(ORDERINGS, "policy", config.policy)
    placement = create(PLACEMENTS, "placement", config.placement)
    shaping = create(SHAPINGS, "shaping", config.shaping)
    assert ordering is not None and placement is not None and shaping is not None
    preemptive = config.preemptive if config.preemptive is not None else ordering.preemptive_by_default
    # The stages below may resize running jobs: they shrink none when told non-preemptive
    # (``--non-preemptive``, ``preemptive = false``). A policy that is non-preemptive by default
    # (FIFO under ``elastic``) still lets them take back GPUs: resizing is those presets' mechanism.
    context = replace(context, preemptive=config.preemptive is not False)
    packing = create(PACKINGS, "packing", config.packing)
    return Scheduler(
        name=config.name,
        ordering=ordering,
        preemptive=preemptive,
        placement=placement,
        shaping=shaping,
        packing=packing,
        reconfiguration=create(RECONFIGURATIONS, "reconfiguration", config.reconfiguration),
        migration=create(MIGRATIONS, "migration", config.migration),
        max_jobs_per_gpu=packing.max_jobs_per_gpu if packing is not None else 1,
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
