"""Rubick's measured iteration times on A800 GPUs, behind :class:`IterationTimeModel`.

The Rubick artifact (MLSys'25; ``builtin/data/rubick/README.md`` has the provenance)
measured seven transformer jobs (``vit``, ``roberta``, ``bert``, ``t5``, ``gpt2``,
``llama7``, ``llama30``), each at its fixed global batch, under their execution plans and
many GPU *placements* on 8 x 8 A800-80GB: 539 rows of
``builtin/data/rubick/placements_decoded.csv``, of which 512 are these seven models (the
rest, ``llama7b_bsz16`` and ``t5_3B``, are micro-benchmark variants at other batches and
are not read here). A placement is the GPUs used on each node, e.g. ``(3, 3, 2)``.

What a measurement matches (the *plan family*, :func:`plan_family`):

* data-parallel plans by kind: ``ga`` (ZeRO 0, no checkpointing), ``gc`` (activation
  checkpointing), ``zero-dp`` (ZeRO-2), ``zero-offload`` (ZeRO-2 + optimizer offload; the
  artifact ran it with checkpointing for gpt2/llama7/llama30 and without for the others
  and has one such plan per model, so checkpointing is not compared for it);
* 3D plans (``tp x pp > 1``) by their ``(dp, tp, pp)`` sizes (ZeRO 0, no checkpointing).

Gradient accumulation is never compared: the artifact does not record the count (its
``ga`` and ``zero-dp`` runs accumulate as memory requires). The global batch must be the
model's measured one (``models.csv``); the CPUs per GPU are not compared (not varied).

The rule where a shape was not measured (:meth:`RubickMeasured.lookup`, ``how``):

1. ``measured``: the placement itself (mean of its repeated rows);
2. ``nearest``: among the measured placements of the same model, plan family and GPU
   count, the one with the closest node count, then the smallest L1 distance between the
   two placements' per-node GPU counts (largest first), then the placement code;
3. ``scaled``: otherwise, at the model's measured global batch, the Rubick performance
   model fitted on the bundled samples (:func:`profiles.perfmodel.fit_perfmodel` on
   ``samples.csv``, shapes from ``models.csv``; 80 GB of GPU memory, so a plan that does
   not fit answers ``None``) *scaled by its error at the nearest measured configuration of
   the same model* (:meth:`RubickMeasured.anchor`): the fitted time times
   measured / fitted there. The nearest is the one with the closest GPU count (ratio),
   then the closest ``dp x tp x pp`` shape, then the fewest differences among ZeRO
   sharding, optimizer offload and activation checkpointing, then the family's name, then
   the placement closest to the GPUs packed 8 to a node. The fit alone is off by up to 2x
   on some measured shapes (LLaMA-30B's 4 x 4 x 3 plan on 48 GPUs: 1.07 s fitted, 2.23 s
   measured), so an unscaled fitted time next to measured ones would make any plan or
   count that was not measured look that much faster or slower than its measured
   neighbours; scaled, the fit only answers how the unmeasured configuration differs from
   the nearest measured one. Its field ``placement`` is the anchor's;
4. ``fitted``: the fitted time itself, for another global batch (or when no measured
   configuration of the model can be priced by the fit). Its errors are a few to ~15 %
   (BENCHMARKS.md), so a ratio of a fitted time to a measured one carries that error.

Pure code: the bundled files are read as package data.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan, PlanError, resolve
from profiles.gpus import catalog
from profiles.names import normalise
from profiles.perfmodel.csvio import parse_table
from profiles.perfmodel.fit import PerfModel, fit_perfmodel
from profiles.perfmodel.query import ModelShape, Query

GPU_TYPE = "a800"
GPU_MEM_GB = catalog().types[GPU_TYPE].mem_gb
"""Memory of one A800 (80 GB), from the GPU catalog (``profiles/builtin/gpus.toml``)."""
GPUS_PER_NODE = catalog().types[GPU_TYPE].gpus_per_node or 8
MODELS = ("vit", "roberta", "bert", "t5", "gpt2", "llama7", "llama30")
# The artifact's CPU threads per GPU for ZeRO-Offload (samples.csv), when a query gives none.
OFFLOAD_CPUS_PER_GPU = 4.0
# The models whose ZeRO-Offload runs the artifact measured with activation checkpointing.
OFFLOAD_WITH_CHECKPOINTING = frozenset({"gpt2", "llama7", "llama30"})
_DATA = ("builtin", "data", "rubick")

Placement = tuple[int, ...]
Family = tuple[str, int, int, int]  # kind, dp, tp, pp
How = Literal["measured", "nearest", "scaled", "fitted"]
Sizes = tuple[int, int, int]  # dp, tp, pp
Features = tuple[bool, bool, bool]  # ZeRO sharding, optimizer offload, activation checkpointing


def plan_family(plan: ExecPlan) -> Family | None:
    """The measured plan family of a resolved ``plan`` (module docstring), or ``None``
    when the artifact measured nothing of its kind (ZeRO-1/3, parameter offload, a 3D
    plan with ZeRO or checkpointing, ZeRO-DP with checkpointing)."""
    dp = plan.dp or 1
    if plan.offload_param:
        return None
    if plan.tp * plan.pp > 1:
        if plan.zero_stage or plan.offload_optimizer or plan.activation_checkpointing:
            return None
        return ("ga", dp, plan.tp, plan.pp)
    if plan.offload_optimizer:
        return ("zero-offload", dp, 1, 1) if plan.zero_stage == 2 else None
    if plan.zero_stage == 2:
        return None if plan.activation_checkpointing else ("zero-dp", dp, 1, 1)
    if plan.zero_stage:
        return None
    return ("gc" if plan.activation_checkpointing else "ga", dp, 1, 1)


def packed(gpus: int, per_node: int = GPUS_PER_NODE) -> Placement:
    """``gpus`` packed ``per_node`` to a node: the reference placement (``12`` -> ``(8, 4)``)."""
    if gpus < 1:
        raise InputError(f"placement: GPU count must be >= 1, got {gpus}")
    full, rest = divmod(gpus, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


def normal_placement(counts: Iterable[int]) -> Placement:
    """Per-node GPU counts, largest first, empty nodes dropped."""
    return tuple(sorted((c for c in counts if c > 0), reverse=True))


@dataclass(frozen=True, slots=True)
class Lookup:
    """One answer: seconds per iteration, how it was found and the placement it came from
    (for a scaled time the anchor's; ``None`` for a fitted time)."""

    time_s: float
    how: How
    placement: Placement | None


@dataclass(frozen=True, slots=True)
class RubickMeasured:
    """Iteration times of the seven models on A800s: measured, nearest placement, or fitted.

    ``times`` maps (model, plan family, GPU count) to the mean time of each measured
    placement; ``batches`` and ``shapes`` are each model's global batch and shape
    (``models.csv``); ``fitted`` gives the fallback model when first needed (``None``: no
    fallback), so the fit only runs for a shape that was not measured.
    """

    times: Mapping[tuple[str, Family, int], Mapping[Placement, float]]
    batches: Mapping[str, int]
    shapes: Mapping[str, ModelShape]
    fitted: Callable[[], PerfModel] | None = field(default=None, repr=False, compare=False)
    _anchors: dict[tuple[str, int, Sizes, Features], tuple[float, Placement] | None] = field(
        default_factory=dict, repr=False, compare=False
    )

    def knows(self, model: str, gpu_type: str | None = GPU_TYPE) -> bool:
        """True for the seven models on ``a800`` (or no GPU type named)."""
        return (gpu_type is None or gpu_type.lower() == GPU_TYPE) and normalise(model) in self.batches

    def measured(self, model: str, family: Family, gpus: int) -> Mapping[Placement, float]:
        return self.times.get((normalise(model), family, gpus), {})

    def lookup(
        self,
        model: str,
        plan: ExecPlan,
        placement: Sequence[int],
        cpus_per_gpu: float | None = None,
    ) -> Lookup | None:
        """The time of ``model`` with the resolved ``plan`` on ``placement`` (GPUs per node),
        by the rule of the module docstring; ``None`` for another model, a batch not
        measured without a fallback, or a plan that does not fit in memory."""
        key = normalise(model)
        if key not in self.batches:
            return None
        where = normal_placement(placement)
        gpus = sum(where)
        if not plan.is_resolved or plan.world_size != gpus:
            raise InputError(f"model {model!r}: the plan must be resolved for the placement's {gpus} GPUs")
        family = plan_family(plan)
        if family is not None and plan.global_batch == self.batches[key]:
            found = self.measured(key, family, gpus)
            if where in found:
                return Lookup(found[where], "measured", where)
            if found:
                best = min(found, key=lambda p: _distance(p, where))
                return Lookup(found[best], "nearest", best)
        return self._fit(key, plan, where, cpus_per_gpu)

    def _fit(self, key: str, plan: ExecPlan, where: Placement, cpus_per_gpu: float | None) -> Lookup | None:
        found = self._fitted(key, plan, where, cpus_per_gpu)
        if found is None or plan.global_batch != self.batches[key]:
            return found
        anchor = self.anchor(key, plan)
        if anchor is None:
            return found
        ratio, placement = anchor
        return Lookup(found.time_s * ratio, "scaled", placement)

    def anchor(self, model: str, plan: ExecPlan) -> tuple[float, Placement] | None:
        """The nearest measured configuration of ``model`` to the resolved ``plan`` (module
        docstring, rule 3): measured / fitted time there, and its placement; ``None`` when
        the fit prices none of the model's measured configurations."""
        key = normalise(model)
        gpus = plan.world_size
        sizes: Sizes = (plan.dp or 1, plan.tp, plan.pp)
        features: Features = (plan.zero_stage > 0, plan.offload_optimizer, plan.activation_checkpointing)
        memo = (key, gpus, sizes, features)
        if memo not in self._anchors:
            self._anchors[memo] = self._find_anchor(key, gpus, sizes, features)
        return self._anchors[memo]

    def _find_anchor(
        self, key: str, gpus: int, sizes: Sizes, features: Features
    ) -> tuple[float, Placement] | None:
        def distance(item: tuple[str, Family, int]) -> tuple[float, float, int, str]:
            _, family, count = item
            kind, dp, tp, pp = family
            apart = sum(abs(math.log2(a / b)) for a, b in zip((dp, tp, pp), sizes, strict=True))
            differ = sum(a != b for a, b in zip(self._features(key, kind), features, strict=True))
            return (abs(math.log2(count / gpus)), apart, differ, kind)

        for item in sorted((k for k in self.times if k[0] == key), key=distance):
            _, family, count = item
            found = self.times[item]
            placement = min(found, key=lambda p: _distance(p, packed(count)))
            reference = None
            for plan in self._family_plans(key, family, count):
                reference = self._fitted(key, plan, placement, OFFLOAD_CPUS_PER_GPU)
                if reference is not None:
                    break
            if reference is not None:
                return found[placement] / reference.time_s, placement
        return None

    @staticmethod
    def _features(key: str, kind: str) -> Features:
        """(ZeRO sharding, optimizer offload, activation checkpointing) of a measured kind."""
        if kind == "zero-offload":
            return (True, True, key in OFFLOAD_WITH_CHECKPOINTING)
        return (kind == "zero-dp", False, kind == "gc")

    def _family_plans(self, key: str, family: Family, gpus: int) -> Iterable[ExecPlan]:
        """The resolved plans a measured family ran as, fewest accumulation steps first (the
        artifact's runs accumulate gradients as memory requires; the fit prices only those
        whose memory estimate fits)."""
        kind, dp, tp, pp = family
        zero, offload, checkpointing = self._features(key, kind)
        per_rank, rest = divmod(self.batches[key], dp)
        if rest:
            return
        for accum in (a for a in range(1, per_rank + 1) if per_rank % a == 0):
            plan = ExecPlan(dp=dp, tp=tp, pp=pp, zero_stage=2 if zero else 0, offload_optimizer=offload,
                            activation_checkpointing=checkpointing, micro_batch=per_rank // accum,
                            grad_accum=accum)  # fmt: skip
            try:
                yield resolve(plan, gpus, self.batches[key])
            except PlanError:
                return

    def _fitted(
        self, key: str, plan: ExecPlan, where: Placement, cpus_per_gpu: float | None
    ) -> Lookup | None:
        if self.fitted is None:
            return None
        gpus = sum(where)
        # The formulas spread GPUs evenly: the fewest nodes >= the placement's that divide them.
        nodes = next(n for n in range(len(where), gpus + 1) if gpus % n == 0)
        cpus = (cpus_per_gpu or OFFLOAD_CPUS_PER_GPU) if plan.offload_optimizer else cpus_per_gpu
        query = Query(model=self.shapes[key], plan=plan, nodes=nodes, cpus_per_gpu=cpus, gpu_type=GPU_TYPE)
        t = self.fitted().iteration_time_s(query)
        return None if t is None or not t > 0 else Lookup(t, "fitted", None)

    def time_s(
        self,
        model: str,
        plan: ExecPlan | None,
        placement: Sequence[int],
        batch_size: int | None = None,
        cpus_per_gpu: float | None = None,
    ) -> Lookup | None:
        """:meth:`lookup` for an unresolved ``plan`` (``None``: plain data parallelism) at
        ``batch_size`` (default: the model's measured batch); ``None`` when the plan does
        not resolve for the placement's GPU count."""
        key = normalise(model)
        if key not in self.batches:
            return None
        batch = self.batches[key] if batch_size is None else batch_size
        try:
            resolved = resolve(plan or ExecPlan(), sum(placement), batch, f"model {model!r}")
        except PlanError:
            return None
        return self.lookup(key, resolved, placement, cpus_per_gpu)

    def iteration_time_s(self, query: Query) -> float | None:
        """:class:`IterationTimeModel`: the query's GPUs spread evenly over its nodes."""
        if not self.knows(query.model.name, query.gpu_type):
            return None
        found = self.lookup(
            query.model.name, query.plan, (query.gpus_per_node,) * query.nodes, query.cpus_per_gpu
        )
        return None if found is None else found.time_s


def _distance(measured: Placement, wanted: Placement) -> tuple[int, int, str]:
    n = max(len(measured), len(wanted))
    a, b = measured + (0,) * (n - len(measured)), wanted + (0,) * (n - len(wanted))
    return (
        abs(len(measured) - len(wanted)),
        sum(abs(x - y) for x, y in zip(a, b, strict=True)),
        _code(measured),
    )


def _code(placement: Placement) -> str:
    return "".join(str(c) for c in placement)


# -- reading the bundled files --------------------------------------------------------------


def parse_placements(
    text: str, source: str, models: Iterable[str] = MODELS
) -> dict[tuple[str, Family, int], dict[Placement, float]]:
    """``placements_decoded.csv`` -> mean time per (model, family, GPUs) and placement.

    Rows of other models are skipped; every error names the source, line and column.
    """
    wanted = {normalise(m) for m in models}
    reader = csv.DictReader(io.StringIO(text))
    needed = ("model", "placement_code", "gpus", "dp", "tp", "pp", "zero_stage", "offload_optimizer",
              "activation_checkpointing", "iter_time_s")  # fmt: skip
    missing = [c for c in needed if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{source}:1: missing column(s) {', '.join(missing)}")
    sums: dict[tuple[str, Family, int], dict[Placement, list[float]]] = {}
    for cells in reader:
        model = normalise(cells["model"] or "")
        if model not in wanted:
            continue
        row = _Row(cells, f"{source}:{reader.line_num}")
        code = (cells["placement_code"] or "").strip()
        if not code.isdigit():
            raise row.fail("placement_code", f"expected digits (GPUs per node), got {code!r}")
        placement = normal_placement(int(c) for c in code)
        gpus = int(row.number("gpus"))
        if sum(placement) != gpus:
            raise row.fail("gpus", f"{gpus}, but placement {code} has {sum(placement)} GPUs")
        time = row.number("iter_time_s")
        if not time > 0:
            raise row.fail("iter_time_s", f"expected a positive number, got {time}")
        dp, tp, pp = int(row.number("dp")), int(row.number("tp")), int(row.number("pp"))
        if dp * tp * pp != gpus:
            raise row.fail("dp", f"dp {dp} x tp {tp} x pp {pp} is not the {gpus} GPUs")
        plan = ExecPlan(
            dp=dp,
            tp=tp,
            pp=pp,
            zero_stage=int(row.number("zero_stage")),
            offload_optimizer=bool(row.number("offload_optimizer")),
            activation_checkpointing=bool(row.number("activation_checkpointing", blank=0.0)),
        )
        family = plan_family(plan)
        if family is None:
            raise row.fail("exec_plan_code", "the plan of this row is no measured plan family")
        sums.setdefault((model, family, gpus), {}).setdefault(placement, []).append(time)
    return {k: {p: sum(v) / len(v) for p, v in by.items()} for k, by in sums.items()}


class _Row:
    """One CSV row; errors name the source, line and column."""

    def __init__(self, cells: Mapping[str, str | None], where: str) -> None:
        self.cells, self.where = cells, where

    def fail(self, column: str, message: str) -> InputError:
        return InputError(f"{self.where}: column '{column}': {message}")

    def number(self, column: str, *, blank: float | None = None) -> float:
        text = (self.cells.get(column) or "").strip()
        if not text and blank is not None:
            return blank
        try:
            value = float(text)
        except ValueError:
            raise self.fail(column, f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(column, f"expected a number >= 0, got {text!r}")
        return value


def parse_models(text: str, source: str) -> tuple[dict[str, int], dict[str, ModelShape]]:
    """``models.csv`` -> each model's global batch and shape."""
    batches: dict[str, int] = {}
    shapes: dict[str, ModelShape] = {}
    reader = csv.DictReader(io.StringIO(text))
    for cells in reader:
        where = f"{source}:{reader.line_num}"
        name = (cells.get("model") or "").strip()
        try:
            batches[normalise(name)] = int(cells["global_batch"])
            shapes[normalise(name)] = ModelShape(
                name=name,
                params=float(cells["params_m"]) * 1e6,
                seq_len=int(cells["seq_len"]),
                hidden=int(cells["hidden"]),
                layers=int(cells["layers"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{where}: model {name!r}: unreadable shape or batch ({e})") from None
    return batches, shapes


def _read(name: str) -> str:
    return resources.files("profiles").joinpath(*_DATA, name).read_text(encoding="utf-8")


@cache
def builtin_rubick_fit() -> PerfModel:
    """The Rubick model fitted on the bundled ``samples.csv`` (default options), 80 GB GPUs."""
    samples = parse_table(_read("samples.csv"), "samples.csv", require_time=True)
    return fit_perfmodel([r.measurement() for r in samples.rows]).with_gpu_memory(GPU_MEM_GB)


@cache
def builtin_rubick_measured() -> RubickMeasured:
    """The bundled measurements with the fitted fallback (cached; the fit runs on first use
    of the fallback)."""
    batches, shapes = parse_models(_read("models.csv"), "models.csv")
    times = parse_placements(_read("placements_decoded.csv"), "placements_decoded.csv")
    return RubickMeasured(times, batches, shapes, builtin_rubick_fit)
