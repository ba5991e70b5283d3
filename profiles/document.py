"""Reading profile documents (``mosaic-profiles/1``), the format in ``profiles/README.md``.

A site adds or overrides models with a JSON file of its own measurements; errors name
the model and the key at fault.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from planner.core.errors import ProfileError
from planner.core.fields import Fields, json_document
from profiles.optimistic import CacheModel, OptimisticProfile
from profiles.schema import ColocationEntry, Profile, SensitivityMatrix, ThroughputKey, plan_key

FORMAT = "mosaic-profiles/1"
_MODEL_KEYS = (
    "task",
    "aliases",
    "batch_size",
    "throughput",
    "sensitivity",
    "optimistic",
    "ideal_cpus_per_gpu",
    "ideal_mem_gb_per_gpu",
    "colocation",
    "source",
)
_POINT_KEYS = ("gpu_type", "num_gpus", "batch_size", "consolidated", "plan", "steps_per_s")
_PAIR_KEYS = (
    "with",
    "gpu_type",
    "num_gpus",
    "batch_size",
    "plan",
    "steps_per_s",
    "with_batch_size",
    "with_num_gpus",
    "with_plan",
    "with_steps_per_s",
)


def profiles_from_document(document: Any, source: str = "profiles") -> dict[str, Profile]:
    """Parse a profile document (parsed JSON, or JSON text) into profiles by name."""
    top = Fields(json_document(document, source, ProfileError), source, ProfileError)
    top.only(["format", "models", "_doc"])
    if top.req_str("format") != FORMAT:
        top.fail_key("format", f"expected {FORMAT!r}, got {top.data['format']!r}")
    models = top.opt_object("models")
    if models is None:
        top.fail("missing required key 'models'")
    return {str(name): _profile(str(name), raw, f"{source}: model '{name}'") for name, raw in models.items()}


def _profile(name: str, raw: Any, where: str) -> Profile:
    f = Fields(raw, where, ProfileError)
    f.only(_MODEL_KEYS)
    aliases = f.data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        f.fail_key("aliases", f"expected a list of names, got {aliases!r}")
    throughput: dict[ThroughputKey, float] = {}
    for i, point in enumerate(_list(f, "throughput")):
        p = Fields(point, f"{where}: throughput[{i}]", ProfileError)
        p.only(_POINT_KEYS)
        key = ThroughputKey(
            gpu_type=p.req_str("gpu_type").lower(),
            num_gpus=p.req_int("num_gpus", minimum=1),
            batch_size=p.opt_int("batch_size", minimum=1),
            consolidated=p.flag("consolidated", True),
            plan=plan_key(p.opt_object("plan")),
        )
        steps = p.req_float("steps_per_s", minimum=0.0)
        if steps <= 0:
            p.fail_key("steps_per_s", f"must be positive, got {steps}")
        throughput[key] = steps
    sensitivity = None
    raw_sens = f.opt_object("sensitivity")
    if raw_sens is not None:
        sensitivity = _sensitivity(Fields(raw_sens, f"{where}: sensitivity", ProfileError))
    raw_optimistic = f.opt_object("optimistic")
    optimistic = None
    if raw_optimistic is not None:
        if sensitivity is not None:
            f.fail_key(
                "optimistic", "give either 'sensitivity' (a measured matrix) or 'optimistic', not both"
            )
        optimistic, sensitivity = _optimistic(Fields(raw_optimistic, f"{where}: optimistic", ProfileError))
    colocation = []
    for i, pair in enumerate(_list(f, "colocation")):
        c = Fields(pair, f"{where}: colocation[{i}]", ProfileError)
        c.only(_PAIR_KEYS)
        colocation.append(
            ColocationEntry(
                with_model=c.req_str("with"),
                gpu_type=c.req_str("gpu_type").lower(),
                num_gpus=c.req_int("num_gpus", minimum=1),
                steps_per_s=c.req_float("steps_per_s", minimum=0.0),
                with_steps_per_s=c.req_float("with_steps_per_s", minimum=0.0),
                batch_size=c.opt_int("batch_size", minimum=1),
                with_batch_size=c.opt_int("with_batch_size", minimum=1),
                with_num_gpus=c.opt_int("with_num_gpus", minimum=1),
                plan=plan_key(c.opt_object("plan")),
                with_plan=plan_key(c.opt_object("with_plan")),
            )
        )
    kind, note = source_kind(f.opt_str("source"), f)
    blocks = {
        "throughput": bool(throughput),
        "sensitivity": sensitivity is not None,
        "colocation": bool(colocation),
    }
    return Profile(
        name=name,
        task=f.opt_str("task") or "unknown",
        aliases=tuple(aliases),
        batch_size=f.opt_int("batch_size", minimum=1),
        throughput=throughput,
        sensitivity=sensitivity,
        ideal_cpus_per_gpu=f.opt_float("ideal_cpus_per_gpu", minimum=0.0),
        ideal_mem_gb_per_gpu=f.opt_float("ideal_mem_gb_per_gpu", minimum=0.0),
        colocation=tuple(colocation),
        sources=(note,) if note else (),
        provenance={block: kind for block, present in blocks.items() if present},
        optimistic=optimistic,
    )


BUILT_IN = "built-in"
PROFILED = "profiled"
OBSERVED = "observed"
SOURCE_KINDS = (BUILT_IN, PROFILED, OBSERVED)


def source_kind(text: str | None, f: Fields | None = None) -> tuple[str, str | None]:
    """A model's ``source``: (kind, the text as a note).

    The kind is the text's first word when it names one (``"profiled: mosaic profile on
    cluster X"``, ``"observed"``); any other text is a free note on numbers a site
    measured, so ``profiled``, the default of a site document.
    """
    if text is None or not text.strip():
        return PROFILED, None
    head = text.strip().split(":", 1)[0].strip().lower()
    if head in SOURCE_KINDS:
        return head, text.strip()
    if head in {"builtin", "built_in", "built in"} and f is not None:
        f.fail_key("source", f"write 'built-in' (one of {', '.join(SOURCE_KINDS)}), got {text!r}")
    return PROFILED, text.strip()


def _list(f: Fields, key: str) -> list[Any]:
    return f.req_list(key) if f.has(key) else []


def _number(value: Any, positive: bool = False) -> bool:
    """A finite number (``positive``: above 0), not a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and (number > 0 or not positive)


def _axis(f: Fields, key: str) -> tuple[float, ...]:
    values = f.req_list(key)
    if not values or not all(_number(v) for v in values):
        f.fail_key(key, f"expected a non-empty list of finite numbers, got {values!r}")
    axis = tuple(float(v) for v in values)
    if any(b <= a for a, b in pairwise(axis)):
        f.fail_key(key, f"must be strictly increasing, got {list(axis)}")
    return axis


def _sensitivity(f: Fields) -> SensitivityMatrix:
    f.only(["cpus_per_gpu", "mem_gb_per_gpu", "throughput"])
    rows = _axis(f, "cpus_per_gpu")
    cols = _axis(f, "mem_gb_per_gpu")
    matrix = f.req_list("throughput")
    if len(matrix) != len(rows):
        f.fail_key("throughput", f"has {len(matrix)} rows, expected one per cpus_per_gpu value ({len(rows)})")
    values = []
    for i, row in enumerate(matrix):
        if not isinstance(row, list) or len(row) != len(cols):
            f.fail_key("throughput", f"row {i} must list {len(cols)} numbers (one per mem_gb_per_gpu value)")
        # A zero would mean a job never finishes at that allocation: leave unmeasured
        # cells out with a coarser grid instead.
        if not all(_number(v, positive=True) for v in row):
            f.fail_key("throughput", f"row {i} must hold positive numbers, got {row!r}")
        values.append(tuple(float(v) for v in row))
    return SensitivityMatrix(rows, cols, tuple(values))


# Synergy's grid (its simulator's rows and columns) and reference allocation: 3 CPUs and
# 62.5 GB per GPU, the GPU-proportional share of its 8-GPU, 24-CPU, 500 GB servers.
SYNERGY_CPUS_PER_GPU = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0)
SYNERGY_MEM_GB_PER_GPU = (20.83, 62.5, 125.0, 187.5, 250.0)
_OPTIMISTIC_KEYS = (
    "cpu_samples_per_s",
    "dataset_gb",
    "sample_kb",
    "storage_mb_per_s_per_gpu",
    "working_set_gb_per_gpu",
    "gpus",
    "cpus_per_gpu",
    "mem_gb_per_gpu",
    "reference",
)


def _optimistic(f: Fields) -> tuple[OptimisticProfile, SensitivityMatrix]:
    """CPU measurements at full memory plus the cache model, and the matrix (Synergy §3.1)."""
    f.only(_OPTIMISTIC_KEYS)
    raw_points = f.opt_object("cpu_samples_per_s")
    if not raw_points:
        f.fail("missing required key 'cpu_samples_per_s' (samples/s per GPU by CPU count)")
    points: dict[int, float] = {}
    for key, value in raw_points.items():
        if not (str(key).isascii() and str(key).isdigit() and len(str(key)) <= 6) or int(key) < 1:
            f.fail_key("cpu_samples_per_s", f"keys are CPU counts >= 1, got {key!r}")
        if not _number(value, positive=True):
            f.fail_key("cpu_samples_per_s", f"value at {key} CPUs must be a positive number, got {value!r}")
        points[int(key)] = float(value)
    try:
        optimistic = _optimistic_block(f, points)
        matrix = optimistic.matrix()
    except ProfileError as e:  # the cache model's own checks name the key, not the model
        if str(e).startswith(f.where):
            raise
        f.fail(str(e))
    return optimistic, matrix


def _optimistic_block(f: Fields, points: dict[int, float]) -> OptimisticProfile:
    cache = CacheModel(
        dataset_gb=f.req_float("dataset_gb", minimum=0.0),
        sample_kb=f.req_float("sample_kb", minimum=0.0),
        storage_mb_per_s_per_gpu=f.req_float("storage_mb_per_s_per_gpu", minimum=0.0),
        working_set_gb_per_gpu=f.opt_float("working_set_gb_per_gpu", minimum=0.0) or 0.0,
        gpus=f.opt_int("gpus", minimum=1) or 1,
    )
    rows = _axis(f, "cpus_per_gpu") if f.has("cpus_per_gpu") else SYNERGY_CPUS_PER_GPU
    cols = _axis(f, "mem_gb_per_gpu") if f.has("mem_gb_per_gpu") else SYNERGY_MEM_GB_PER_GPU
    reference = (3.0, 62.5)
    if f.has("reference"):
        ref = f.req_list("reference")
        if len(ref) != 2 or not all(_number(v, positive=True) for v in ref):
            f.fail_key("reference", f"expected [cpus_per_gpu, mem_gb_per_gpu], got {ref!r}")
        reference = (float(ref[0]), float(ref[1]))
    return OptimisticProfile(dict(sorted(points.items())), cache, rows, cols, reference)
