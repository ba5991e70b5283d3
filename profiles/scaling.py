"""How a data-parallel job's throughput changes with its GPU count, global batch fixed.

An elastic job keeps its global batch ``B`` when it grows or shrinks (its loss curve does
not change): on ``g`` GPUs each worker processes ``B / g`` examples per update, so its
throughput is ``B / t_iter(B / g, g, nodes)`` samples/s, with ``t_iter`` the fitted
iteration model of SJF-BSBF §IV-A (Eq. 3, 4, 7: compute linear in the per-GPU batch,
ring all-reduce inside or across servers, overlap). A model measured on one GPU type lends
its curve's shape to another (the absolute speed of a type is not needed to compare counts
of one job). Without measurements, or without a known global batch, every GPU adds the
same (linear scaling): no data, no preference.
"""

from __future__ import annotations

from profiles.iteration import IterationModel, IterationModels
from profiles.store import ProfileStore


class ScalingModel:
    """Relative throughput of a job at a GPU count (memoised fits; pure)."""

    def __init__(self, store: ProfileStore) -> None:
        self.store = store
        self.models = IterationModels()

    def fitted(self, model: str, gpu_type: str, global_batch: int | None, gpus: int) -> IterationModel | None:
        """The fitted iteration model :meth:`throughput` answers from at ``gpus``; ``None``
        where it answers by the linear rule (no data, no batch, fewer examples than GPUs)."""
        if gpus < 1 or global_batch is None or global_batch < gpus:
            return None
        return self.models.borrowed(self.store.resolve(model), gpu_type)

    def throughput(
        self, model: str, gpu_type: str, global_batch: int | None, gpus: int, nodes: int = 1
    ) -> float:
        """Samples per second on ``gpus`` GPUs over ``nodes`` servers (linear units without data)."""
        if gpus < 1:
            return 0.0
        fitted = self.fitted(model, gpu_type, global_batch, gpus)
        if fitted is not None:
            assert global_batch is not None
            return global_batch / fitted.iteration_s(global_batch / gpus, gpus, nodes)
        return float(gpus)

    def speedup(
        self, model: str, gpu_type: str, global_batch: int | None, gpus: int, nodes: int, base: int
    ) -> float:
        """Throughput at ``gpus`` over throughput at ``base`` GPUs (one node for the base)."""
        reference = self.throughput(model, gpu_type, global_batch, base, 1)
        return self.throughput(model, gpu_type, global_batch, gpus, nodes) / reference if reference else 1.0
