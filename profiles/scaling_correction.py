"""Observed throughput corrects the scaling model, per model and near what was measured (pure).

:class:`profiles.scaling.ScalingModel` answers a data-parallel job's throughput at a GPU
count from the iteration model fitted to the profile's measurements (possibly another GPU
type's, possibly another cluster's). A running job measures the truth at the count, nodes
and GPU type it holds (the controller's heartbeats,
:class:`profiles.observed.ObservedPoint`); as Rubick's pricer
(:mod:`profiles.plan_correction`) and Crius's Cells
(:class:`planner.policies.crius.cells.CorrectedCells`) do, :class:`CorrectedScaling` turns
those into corrections of the model's answers:

* each point is a ratio ``r = observed / modelled`` iteration time (the modelled
  throughput over the measured one, at the point's global batch, GPU count, nodes and GPU
  type), filed under its model's name (:meth:`ProfileStore.model_key`: jobs of one model
  share what they measured);
* ``throughput`` is the model's divided by :func:`profiles.plan_correction.correction` of
  the model's ratios at the target (GPU type, GPUs, nodes): exactly what was measured where
  it was measured, elsewhere a distance-weighted geometric mean of the ratios shrunk
  toward 1 (nearby counts, the same node count and the same GPU type count most);
* ``speedup`` stays the ratio of two such throughputs of one job, so a correction common
  to both counts cancels there, and two measured counts give exactly the measured speedup.

A point says nothing where the model answers by its linear rule (no fit, no batch, fewer
examples than GPUs: unit-less "one per GPU", not samples/s), nor without its batch size or
node count (older records): such points are not used, and such answers are not corrected.
Plans are not compared (the model is plain data parallelism; a point measured under
another plan still measures the job's throughput there). The simulator's truth uses the
uncorrected model (it feeds no observations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.core.execplan import ExecPlan
from profiles.observed import ObservedPoint
from profiles.plan_correction import Config, correction
from profiles.scaling import ScalingModel
from profiles.store import ProfileStore

_NEUTRAL_PLAN = ExecPlan()
"""Points are compared by GPU type, count and nodes only (the model has one plan)."""


class CorrectedScaling(ScalingModel):
    """A :class:`ScalingModel` whose samples/s answers for observed models are corrected
    (module docstring). The fits are the base model's (shared, memoised); the correction
    factors are memoised per (model, GPU type, GPUs, nodes)."""

    def __init__(self, base: ScalingModel, ratios: Mapping[str, Sequence[tuple[Config, float]]]) -> None:
        super().__init__(base.store)
        self.models = base.models
        self.ratios: Mapping[str, tuple[tuple[Config, float], ...]] = {k: tuple(v) for k, v in ratios.items()}
        self._factors: dict[tuple[str, str, int, int], float] = {}

    def factor(self, model: str, gpu_type: str, gpus: int, nodes: int) -> float:
        """What the model's iteration time at (type, GPUs, nodes) is multiplied by (1: not observed)."""
        key = self.store.model_key(model)
        ratios = self.ratios.get(key)
        if not ratios:
            return 1.0
        memo = (key, gpu_type.lower(), gpus, nodes)
        found = self._factors.get(memo)
        if found is None:
            found = correction(ratios, Config(_NEUTRAL_PLAN, gpus, nodes, gpu_type=gpu_type.lower()))
            self._factors[memo] = found
        return found

    def throughput(
        self, model: str, gpu_type: str, global_batch: int | None, gpus: int, nodes: int = 1
    ) -> float:
        modelled = super().throughput(model, gpu_type, global_batch, gpus, nodes)
        if self.fitted(model, gpu_type, global_batch, gpus) is None:
            return modelled  # the linear rule's units: nothing measured compares with them
        return modelled / self.factor(model, gpu_type, gpus, nodes)


def scaling_ratios(
    base: ScalingModel, observed: Sequence[ObservedPoint]
) -> dict[str, list[tuple[Config, float]]]:
    """Per model name, each usable point's configuration and observed / modelled iteration time."""
    ratios: dict[str, list[tuple[Config, float]]] = {}
    for p in observed:
        s = p.shape
        if s.batch_size is None or s.nodes is None or s.nodes < 1:
            continue
        if base.fitted(p.model, s.gpu_type, s.batch_size, s.num_gpus) is None:
            continue
        modelled = base.throughput(p.model, s.gpu_type, s.batch_size, s.num_gpus, s.nodes)
        measured = p.samples_per_s_per_gpu * s.num_gpus
        if not modelled > 0:
            continue
        config = Config(_NEUTRAL_PLAN, s.num_gpus, s.nodes, gpu_type=s.gpu_type.lower())
        ratios.setdefault(base.store.model_key(p.model), []).append((config, modelled / measured))
    return ratios


def corrected_scaling(base: ScalingModel, observed: Sequence[ObservedPoint]) -> ScalingModel:
    """``base`` corrected by ``observed`` (:class:`CorrectedScaling`); ``base`` itself when no
    point measured a model it answers in samples/s."""
    ratios = scaling_ratios(base, observed)
    return CorrectedScaling(base, ratios) if ratios else base


def scaling_for(store: ProfileStore) -> ScalingModel:
    """The scaling model a planner stage uses: ``store``'s, corrected by the observations it
    carries (:meth:`ProfileStore.with_observations`; none: the plain :class:`ScalingModel`)."""
    return corrected_scaling(ScalingModel(store), store.observations)
