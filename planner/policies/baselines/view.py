"""What Crius's baselines know about a job's speed: data-parallel profiles (Crius §8.1).

"For a fair comparison, we enable Alpa's adaptive parallelism in the baselines' job training
process but only allow them to schedule jobs with data profiled from data parallelism"
(§8.1). The artifact does exactly this with its tables: its ``prof_database`` holds only
best-plan iteration times, so the "data-parallel throughput" a baseline queries is the
best-plan time, and what data parallelism changes is *feasibility*: a shape where one
data-parallel replica does not fit in GPU memory (``dp_mem.json``,
:mod:`profiles.perfmodel.dp_memory`) is infeasible to the baseline even where the job's best
plan would run. Once placed, a job runs at its best plan's speed (the simulator's truth).

:class:`DpView` answers ``throughput(job, gpu_type, gpus)`` in samples per second:

* a model in Crius's table (:mod:`profiles.perfmodel.crius`): global batch over the measured
  best-plan time at that type and count, looked up as the artifact does (consolidated layout;
  an unmeasured shape borrows the next larger measured size of the family, 1.8x faster per
  step; :func:`planner.traces.crius.iteration_time`, which made the Crius traces' durations),
  0 where nothing is found, it does not fit under any plan, or (``dp_check``) a data-parallel
  replica does not fit;
* any other model: the profile store's estimate, Gavel's measured per-type throughput
  ratio (:func:`profiles.speed.gpu_type_factor`) times the fitted data-parallel scaling
  (:class:`profiles.scaling.ScalingModel`; linear without data; corrected by the running
  jobs' measurements the store carries, :mod:`profiles.scaling_correction`). Units differ between
  models, so callers compare a job only with itself (ratios, normalised throughputs).

Pure and memoised per instance (one instance per stage).
"""

from __future__ import annotations

from planner.core.model import Job
from planner.traces.crius import iteration_time, split_model
from profiles.perfmodel.crius import CriusTable, builtin_crius
from profiles.perfmodel.dp_memory import DpMemory, builtin_dp_memory
from profiles.scaling import ScalingModel
from profiles.scaling_correction import scaling_for
from profiles.speed import gpu_type_factor
from profiles.store import ProfileStore


class DpView:
    """Per-(model, batch, type, count) throughput as a data-parallel-profiling baseline sees it."""

    def __init__(
        self,
        profiles: ProfileStore,
        table: CriusTable | None = None,
        memory: DpMemory | None = None,
    ) -> None:
        self.profiles = profiles
        self.table = builtin_crius() if table is None else table
        self.memory = builtin_dp_memory() if memory is None else memory
        self.scaling: ScalingModel = scaling_for(profiles)
        self._memo: dict[tuple[object, ...], float] = {}

    def throughput(self, job: Job, gpu_type: str, gpus: int, *, dp_check: bool = True) -> float:
        """Samples/s of ``job`` on ``gpus`` GPUs of ``gpu_type``; 0 where the baseline sees it
        cannot run (not measured, out of memory, or a data-parallel replica does not fit)."""
        key = (job.model, job.batch_size, job.gpu_type, gpu_type, gpus, dp_check)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._throughput(job, gpu_type, gpus, dp_check)
            self._memo[key] = cached
        return cached

    def _throughput(self, job: Job, gpu_type: str, gpus: int, dp_check: bool) -> float:
        if gpus < 1:
            return 0.0
        if self.table.knows(job.model):
            if job.batch_size is None:
                return 0.0
            seconds = self._best_time_s(job.model, job.batch_size, gpu_type, gpus)
            if seconds is None or seconds <= 0:
                return 0.0
            if dp_check and self.memory.fits(job.model, job.batch_size, gpu_type, gpus) is False:
                return 0.0
            return job.batch_size / seconds
        profile = self.profiles.resolve(job.model)
        factor = gpu_type_factor(
            profile, gpu_type=gpu_type, reference_type=job.gpu_type, num_gpus=job.num_gpus, batch_size=None
        )
        return factor * self.scaling.throughput(job.model, gpu_type, job.batch_size, gpus)

    def _best_time_s(self, model: str, batch: int, gpu_type: str, gpus: int) -> float | None:
        """The best-plan time as the artifact looks it up (:func:`planner.traces.crius.iteration_time`:
        consolidated layout; an unmeasured shape takes the next larger measured model size of the
        family, 1.8x faster per size step), as the Crius traces' durations were made."""
        split = split_model(model)
        if split is None:
            return self.table.best_time_s(model, batch, gpu_type, gpus)
        found = iteration_time(self.table, split[0], split[1], batch, gpu_type, gpus)
        return None if found is None else found.time_s

    def feasible(self, job: Job, gpu_type: str, gpus: int, *, dp_check: bool = True) -> bool:
        return self.throughput(job, gpu_type, gpus, dp_check=dp_check) > 0

    def reference_throughput(self, job: Job, gpu_type: str) -> float:
        """Samples/s at the job's reference: its ``num_gpus`` on its requested type (``gpu_type``
        when the job names none), best plan: the allocation its ``duration_s`` was measured on."""
        return self.throughput(job, job.gpu_type or gpu_type, job.num_gpus, dp_check=False)

    def time_s(self, job: Job, work_s: float, gpu_type: str, gpus: int) -> float | None:
        """Seconds to do ``work_s`` seconds of reference work on ``gpus`` GPUs of ``gpu_type``
        (``None``: the baseline sees it cannot run there)."""
        here = self.throughput(job, gpu_type, gpus)
        reference = self.reference_throughput(job, gpu_type)
        if here <= 0 or reference <= 0:
            return None
        return work_s * reference / here
