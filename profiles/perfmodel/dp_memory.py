"""Does a data-parallel-only replica fit in GPU memory? Crius's ``dp_mem.json`` check.

Crius's baselines (Gandiva, Gavel, ElasticFlow, §8.1) cannot change a job's parallel plan,
so the artifact schedules them with data-parallel profiles: a placement is out of memory when
one data-parallel replica needs more than the GPU holds. The bundled
``builtin/data/crius/dp_mem.json`` (provenance in ``builtin/data/crius/README.md``) gives, per
``{model}_{global batch}``, the GB one replica needs per GPU on 1, 2, 4, 8 and 16 GPUs. The
artifact's rule, kept here: out of memory when the value is ``-1`` or ``needed x 1.2 > 0.8 x
GPU memory`` (XLA pre-allocates 80 % of the GPU; 1.2 is its safety margin); a value of ``0``
fits; a model and batch absent from the file counts as out of memory ("not profiled: too large
for data parallelism"). GPU memory: the catalog's (``profiles/builtin/gpus.toml``) for the
artifact's devices (:data:`profiles.perfmodel.crius.DEVICES`: A100 40 GB, V100 32, A40 48, A10
24), or the node's own where the caller gives it.

Measured alongside the best-plan times (:mod:`profiles.perfmodel.crius`): the artifact's
``prof_database`` holds only best-plan times, so a baseline's "data-parallel throughput" there
is the best-plan time wherever this check passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from planner.core.errors import InputError
from profiles.gpus import catalog
from profiles.names import normalise
from profiles.perfmodel.crius import DEVICES

SOURCE = "Crius dp_mem.json (sjtu-epcc/arena, branch ae-eurosys, Apache-2.0)"
_DATA = ("builtin", "data", "crius", "dp_mem.json")
COUNTS = (1, 2, 4, 8, 16)
PREALLOCATED = 0.8  # XLA takes 80 % of a GPU's memory up front
MARGIN = 1.2  # the artifact's safety factor on the measured need


def parse_dp_memory(document: object) -> dict[tuple[str, int], tuple[float, ...]]:
    """``{(normalised model, global batch): (GB on 1, 2, 4, 8, 16 GPUs)}`` of a ``dp_mem`` document."""
    if isinstance(document, list) and len(document) == 1:
        document = document[0]
    if not isinstance(document, dict):
        raise InputError(
            "Crius dp_mem: expected {model_batch: [GB on 1, 2, 4, 8, 16 GPUs]} (or a list of one)"
        )
    out: dict[tuple[str, int], tuple[float, ...]] = {}
    for label, values in document.items():
        model, _, batch = str(label).rpartition("_")
        if not model or not batch.isdigit():
            raise InputError(f"Crius dp_mem: entry {label!r} is not <model>_<global batch>")
        if (
            not isinstance(values, list)
            or len(values) != len(COUNTS)
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        ):
            raise InputError(
                f"Crius dp_mem: {label}: expected {len(COUNTS)} numbers (GB on 1, 2, 4, 8, 16 GPUs)"
            )
        out[(normalise(model), int(batch))] = tuple(float(v) for v in values)
    return out


@dataclass(frozen=True)
class DpMemory:
    """The data-parallel-only memory check over a parsed ``dp_mem`` table."""

    needs: dict[tuple[str, int], tuple[float, ...]]
    models: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", frozenset(m for m, _ in self.needs))

    @classmethod
    def builtin(cls) -> DpMemory:
        return builtin_dp_memory()

    def knows(self, model: str) -> bool:
        """True when the table has the model (at any batch)."""
        return normalise(model) in self.models

    def fits(
        self, model: str, batch: int | None, gpu_type: str, gpus: int, gpu_mem_gb: float | None = None
    ) -> bool | None:
        """True/False by the artifact's rule, with ``gpu_mem_gb`` of memory per GPU (default: the
        catalog's for the artifact's devices); ``None`` when the table cannot say (a model it does
        not know at all, a GPU type of unknown memory, or a count other than 1-16 in powers of 2)."""
        key = normalise(model)
        memory = gpu_mem_gb if gpu_mem_gb is not None else device_memory_gb(gpu_type)
        if key not in self.models or memory is None or gpus not in COUNTS:
            return None
        needs = self.needs.get((key, batch)) if batch is not None else None
        if needs is None:
            return False  # not profiled at this batch: too large for data parallelism
        needed = needs[COUNTS.index(gpus)]
        if needed == 0:
            return True
        return needed > 0 and needed * MARGIN <= memory * PREALLOCATED


def device_memory_gb(gpu_type: str) -> float | None:
    """Memory of one GPU of one of the artifact's devices (the catalog's); ``None`` otherwise."""
    name = gpu_type.lower()
    return catalog().mem_gb(name) if name in DEVICES else None


@cache
def builtin_dp_memory() -> DpMemory:
    """The bundled ``dp_mem.json``, parsed once."""
    text = resources.files("profiles").joinpath(*_DATA).read_text(encoding="utf-8")
    return DpMemory(parse_dp_memory(json.loads(text)))
