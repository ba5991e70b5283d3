"""Gavel's measured per-type throughputs, behind :class:`IterationTimeModel`.

The bundled Gavel measurements (``builtin/data/gavel_isolated_throughputs.csv``, read into
each :class:`~profiles.schema.Profile`'s ``throughput``) give steps per second summed over
a job's workers, per GPU type (k80, p100, v100), GPU count (1/2/4/8), per-worker batch size
and consolidation (the ``_unconsolidated`` rows spread the workers over servers). One
iteration of ``g`` workers therefore takes ``g / steps_per_s`` seconds, which is the global
batch (``g`` x per-worker batch) over the samples per second (steps/s x per-worker batch).

:class:`GavelTable` answers only what was measured: a model the profile store knows, a GPU
type, a GPU count, a per-worker batch (the query's global batch divided by its GPUs) and
the layout (one node: consolidated; more: unconsolidated; a model measured without a batch
label counts as measured at its catalog batch), for plain data parallelism
without gradient accumulation (the plan Gavel ran). The linear estimate and the
nearest-batch fallback of :meth:`Profile.steps_per_s` are not used here: ``None`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.perfmodel.query import Query
from profiles.schema import ThroughputKey
from profiles.store import ProfileStore


@dataclass(frozen=True, slots=True)
class GavelTable:
    """Exact lookup over the store's measured (plan-less) throughputs."""

    store: ProfileStore

    @classmethod
    def builtin(cls) -> GavelTable:
        return cls(ProfileStore.builtin())

    def steps_per_s(
        self, model: str, gpu_type: str, gpus: int, batch_size: int | None, consolidated: bool = True
    ) -> float | None:
        """The measured steps/s (summed over workers), or ``None`` when not measured."""
        name = self.store.canonical_name(model)
        if name is None:
            return None
        profile = self.store.resolve(name)
        value = profile.throughput.get(ThroughputKey(gpu_type, gpus, batch_size, consolidated))
        if value is None and profile.batch_size in (None, batch_size):
            # A model measured without a batch label (A3C, CycleGAN) ran at its default batch.
            value = profile.throughput.get(ThroughputKey(gpu_type, gpus, None, consolidated))
        return value if value is not None and value > 0 else None

    def iteration_time_s(self, query: Query) -> float | None:
        plan = query.plan
        plain = (
            plan.tp == plan.pp == 1
            and plan.zero_stage == 0
            and not (plan.offload_optimizer or plan.offload_param or plan.activation_checkpointing)
            and query.grad_accum == 1
        )
        if query.gpu_type is None or not plain or query.global_batch % query.gpus:
            return None
        per_worker = query.global_batch // query.gpus
        steps = self.steps_per_s(query.model.name, query.gpu_type, query.gpus, per_worker, query.nodes == 1)
        return None if steps is None else query.gpus / steps
