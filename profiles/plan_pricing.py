"""Iteration time of a job's execution plan on given resources: Rubick's plan pricing (§4-5).

Rubick's scheduler prices every candidate plan of a job with its fitted performance model
and drops the plans whose memory estimate does not fit the GPU (§5.2: "enumerating the
feasible plans and the performance predictions"). :class:`PlanPricer` is that price list:

* a model name -> its shape (:class:`ModelShape`) from the bundled
  ``profiles/builtin/data/rubick/models.csv`` (the seven models of Rubick's artifact;
  common aliases such as ``llama2-7b`` or ``gpt2-xl`` map to them);
* (shape, resolved plan, nodes, CPUs per GPU) -> seconds per iteration, from the
  :class:`PerfModel` fitted on the bundled ``samples.csv``, or ``None`` when the plan's
  per-GPU memory estimate exceeds the GPU's memory (infeasible). The memory is the one of
  the GPUs the job is priced on (``gpu_mem_gb`` per call: the node's own), else the
  pricer's default, the A800's of the GPU catalog (``profiles/builtin/gpus.toml``), the GPU
  the measurements come from. Answers are memoised, and :meth:`PlanPricer.iteration_times`
  prices many plans in one vectorised call.

Pure: the bundled files are read once, through :func:`builtin_pricer`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan
from profiles.gpus import catalog
from profiles.names import normalise
from profiles.perfmodel import ModelShape, PerfModel, Query, fit_perfmodel, fits
from profiles.perfmodel.csvio import parse_table

_DATA = Path(__file__).parent / "builtin" / "data" / "rubick"
A800_MEMORY_GB = catalog().types["a800"].mem_gb
"""GPU memory of the cluster the bundled measurements come from (A800-80GB), from the catalog."""

# Other spellings of the artifact's model names (normalised keys).
ALIASES: Mapping[str, str] = {
    "bertlarge": "bert",
    "gpt2xl": "gpt2",
    "llama27b": "llama7",
    "llama7b": "llama7",
    "llama2": "llama7",
    "llama30b": "llama30",
    "llama": "llama30",
    "robertalarge": "roberta",
    "t5large": "t5",
    "vitb16": "vit",
}

PlanKey = tuple[str, ExecPlan, int, float | None, float | None]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A priced model: its shape and the global batch its measurements were taken with."""

    shape: ModelShape
    global_batch: int


def read_models(text: str, source: str) -> dict[str, ModelInfo]:
    """The ``models.csv`` table: model -> shape and reference global batch (errors name the line)."""
    reader = csv.DictReader(io.StringIO(text))
    out: dict[str, ModelInfo] = {}
    for cells in reader:
        where = f"{source}:{reader.line_num}"
        try:
            name = cells["model"].strip()
            shape = ModelShape(
                name=name,
                params=float(cells["params_m"]) * 1e6,
                seq_len=int(cells["seq_len"]),
                hidden=int(cells["hidden"]),
                layers=int(cells["layers"]),
            )
            batch = int(cells["global_batch"])
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{where}: bad model row ({e})") from None
        if batch < 1:
            raise InputError(f"{where}: column 'global_batch': expected an integer >= 1, got {batch}")
        out[normalise(name)] = ModelInfo(shape, batch)
    if not out:
        raise InputError(f"{source}: no model rows")
    return out


@dataclass
class PlanPricer:
    """Memoised plan prices (module docstring). ``gpu_mem_gb``: the memory of one GPU when a
    call names none; ``None``: no memory check."""

    perf: PerfModel
    models: Mapping[str, ModelInfo]
    gpu_mem_gb: float | None = A800_MEMORY_GB
    _times: dict[PlanKey, float | None] = field(default_factory=dict, repr=False)

    def model(self, name: str) -> ModelInfo | None:
        """The priced model ``name`` stands for; ``None``: not one of the artifact's models."""
        key = normalise(name)
        return self.models.get(ALIASES.get(key, key))

    def iteration_time_s(
        self,
        model: str,
        plan: ExecPlan,
        nodes: int = 1,
        cpus_per_gpu: float | None = None,
        gpu_mem_gb: float | None = None,
    ) -> float | None:
        """Seconds per iteration of the resolved ``plan`` on GPUs of ``gpu_mem_gb`` (default:
        the pricer's); ``None``: unknown model or out of memory."""
        return self.iteration_times(model, [(plan, nodes, cpus_per_gpu)], gpu_mem_gb)[0]

    def iteration_times(
        self,
        model: str,
        configs: Sequence[tuple[ExecPlan, int, float | None]],
        gpu_mem_gb: float | None = None,
    ) -> list[float | None]:
        """:meth:`iteration_time_s` of many ``(plan, nodes, cpus_per_gpu)``, vectorised."""
        info = self.model(model)
        if info is None:
            return [None] * len(configs)
        name = info.shape.name
        memory = self.gpu_mem_gb if gpu_mem_gb is None else gpu_mem_gb
        out: list[float | None] = []
        todo: list[tuple[int, PlanKey, Query]] = []
        for k, (plan, nodes, given_cpus) in enumerate(configs):
            cpus = given_cpus if plan.offload_optimizer else None  # only ZeRO-Offload depends on CPUs
            key: PlanKey = (name, plan, nodes, cpus, memory)
            if key in self._times:
                out.append(self._times[key])
                continue
            out.append(None)
            query = Query(info.shape, plan, nodes, cpus)
            if memory is not None and not fits(query, memory, self.perf.environment):
                self._times[key] = None
                continue
            todo.append((k, key, query))
        if todo:
            times = self.perf.predict_many([q for _, _, q in todo])
            for (k, key, _), t in zip(todo, times, strict=True):
                value = t if t > 0 else None
                self._times[key] = value
                out[k] = value
        return out


@lru_cache(maxsize=1)
def builtin_perfmodel() -> PerfModel:
    """Rubick's model fitted on the bundled ``samples.csv`` (about a second; once per process)."""
    rows = parse_table((_DATA / "samples.csv").read_text(), "samples.csv", require_time=True).rows
    return fit_perfmodel([r.measurement() for r in rows])


@lru_cache(maxsize=1)
def builtin_models() -> Mapping[str, ModelInfo]:
    return read_models((_DATA / "models.csv").read_text(), "models.csv")


def builtin_pricer(gpu_mem_gb: float | None = A800_MEMORY_GB) -> PlanPricer:
    """A fresh pricer over the bundled fit and shapes (its memo is its own)."""
    return PlanPricer(builtin_perfmodel(), builtin_models(), gpu_mem_gb)
