"""How fast a simulated job makes progress on the resources it was given.

A trace's ``duration_s`` is the job's run time at its reference allocation (its
GPU-proportional share, consolidated, alone, on its ``gpu_type`` if the trace names
one). A job advances ``dt * speed`` seconds of that work in ``dt`` seconds, where
``speed`` multiplies the profile's factors for what differs from the reference:

* GPU type (Gavel's measured throughputs), the slowest of the job's nodes (synchronous
  data-parallel workers wait for each other);
* GPU count, for an elastic job given another count than its trace row's: the fitted
  throughput ratio at its global batch (:mod:`profiles.scaling`; linear without data);
* for a model without measured throughputs in its profile (so the two factors above
  have no data), GPU type, count and plan together from an iteration-time model
  (``times``, by default Crius's measured best-plan times,
  :mod:`profiles.perfmodel.crius`): the iteration time at the reference (the trace row's
  GPU type and count, consolidated, its submitted plan) over the time at the assignment,
  the slowest of the job's nodes' types; where the model does not know the job, the two
  factors above apply unchanged;
* for one of Rubick's seven models on A800 GPUs (``gpu_type`` ``a800`` on every node and,
  when the trace names one, in the trace row): plan, GPU count and placement together
  from Rubick's measurements (:mod:`profiles.perfmodel.rubick_measured`): the iteration
  time at the reference (the row's GPU count packed 8 to a node, its submitted plan) over
  the time at the assignment's plan (the submitted one when it gives none) and per-node
  GPU counts; this replaces the three factors above and the accumulation factor below
  (the measurements include the plan's accumulation);
* CPUs and memory per GPU against the GPU-proportional share of the GPUs it holds
  (Synergy's sensitivity matrix), or against a fixed ``reference_share`` per GPU when
  the trace's durations were measured on servers of another shape (Synergy Figure 12:
  the same jobs on servers with more CPUs per GPU); a job sharing its GPUs is compared
  with its share of them, since the packed measurements below already include the
  sharing;
* the GPU's other job, if any: the normalised packed throughput of the pair, 1/ξ
  (:class:`profiles.interference.PairInterference` over
  :class:`profiles.colocation.ColocationModel`, the true values: the profiling noise
  of Tesserae §7.2 only affects what the planner believes). A job sharing different
  GPUs with several jobs runs at the pace of its slowest GPU (gang-scheduled workers
  wait for each other), so the worst partner counts; ``interference`` injects one ξ for
  every pair (SJF-BSBF Figure 6(b));
* gradient accumulation in the plan (``micro_batch`` x ``grad_accum``): the
  update takes longer by the fitted iteration-time model's ratio (SJF-BSBF Eq. 7,
  :mod:`profiles.iteration`).

The *truth* (``truth``, :data:`TRUTHS`; ``SimConfig.truth``, ``mosaic sim --truth``) chooses
what prices Rubick's seven models where the measurements above apply: ``measured`` (the
default) is Mosaic's lookup; ``rubick-artifact`` is the Rubick artifact simulator's own rule
(:mod:`profiles.perfmodel.rubick_artifact`): the job runs its iterations (the trace row's
``duration_s`` over its ``iterations``) at the artifact's time per iteration for its
placement, in node order, and plan, so its speed is the trace's time per iteration over the
artifact's; where the artifact answers NaN (outside its interpolation: its job would fail),
or the row gives no ``iterations``, Mosaic's truth is kept. It puts Mosaic's policies and the
artifact's on one truth; every other model, and every other factor, is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from planner.core.errors import ConfigError, SimulationError
from planner.core.execplan import PlanError, plan_from_mapping, resolve
from planner.core.model import Assignment, Node
from planner.policies.shaping import proportional_share
from planner.traces.records import TraceJob
from profiles.interference import PairInterference, Sharer
from profiles.iteration import IterationModels, accumulation_of
from profiles.perfmodel.crius import builtin_crius
from profiles.perfmodel.rubick_artifact import (
    ArtifactTable,
    artifact_label,
    artifact_time,
    builtin_artifact_tables,
)
from profiles.perfmodel.rubick_measured import GPU_TYPE, RubickMeasured, builtin_rubick_measured
from profiles.perfmodel.table import IterationTimeModel
from profiles.scaling import ScalingModel
from profiles.schema import Profile, plan_key
from profiles.speed import cpu_mem_factor, gpu_type_factor, measured_factor, table_factor
from profiles.store import ProfileStore

Partner = tuple[TraceJob, Assignment]
TRUTHS = ("measured", "rubick-artifact")
"""The truths a simulation can price Rubick's models by (module docstring); the first is the default."""


def check_truth(truth: str) -> str:
    """``truth`` if it is one of :data:`TRUTHS`, else a :class:`ConfigError` naming them."""
    if truth not in TRUTHS:
        raise ConfigError(f"truth must be one of {', '.join(TRUTHS)}, got {truth!r}")
    return truth


class SpeedModel:
    """Relative speed of a trace job under an assignment (memoised per configuration)."""

    def __init__(
        self,
        profiles: ProfileStore,
        nodes: Mapping[str, Node],
        interference: float | None = None,
        reference_share: tuple[float, float] | None = None,
        times: IterationTimeModel | None = None,
        measured: RubickMeasured | None = None,
        truth: str = TRUTHS[0],
        artifact: Mapping[str, ArtifactTable] | None = None,
    ) -> None:
        """``truth``: :data:`TRUTHS` (module docstring); ``artifact``: the Rubick artifact's
        tables by model for ``rubick-artifact`` (default: the bundled ones,
        :func:`~profiles.perfmodel.rubick_artifact.builtin_artifact_tables`)."""
        self.profiles = profiles
        self.truth = check_truth(truth)
        self.artifact: Mapping[str, ArtifactTable] = (
            {} if truth != "rubick-artifact" else builtin_artifact_tables() if artifact is None else artifact
        )
        self.times: IterationTimeModel = builtin_crius() if times is None else times
        self.measured = builtin_rubick_measured() if measured is None else measured
        self.nodes = nodes
        self.reference_share = reference_share
        self.interference = PairInterference(profiles, fixed=interference)
        self.colocation = self.interference.colocation
        self.iteration = IterationModels()
        self.scaling = ScalingModel(profiles)
        self._memo: dict[tuple[object, ...], float] = {}

    def speed(self, job: TraceJob, assignment: Assignment, partners: Sequence[Partner] = ()) -> float:
        node = self.nodes[assignment.gpus[0][0]]
        shape = tuple(
            (
                self.nodes[name].gpu_type,
                self.nodes[name].gpus,
                self.nodes[name].cpus,
                self.nodes[name].mem_gb,
                count,
            )
            for name, count in assignment.per_node
        )
        partner_kinds = tuple((p.model, p.batch_size, p.num_gpus, plan_key(a.plan)) for p, a in partners)
        # On the artifact's truth the speed is the job's own time per iteration (its trace
        # row's) over the artifact's, which differs between jobs of one model and shape.
        own = job.duration_s / job.iterations if job.model in self.artifact and job.iterations else None
        key = (job.model, job.batch_size, job.gpu_type, job.num_gpus, node.gpu_type, shape, assignment.cpus,
               assignment.mem_gb, plan_key(assignment.plan), partner_kinds, plan_key(job.plan),
               own)  # fmt: skip
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        profile = self.profiles.resolve(job.model)
        g = assignment.num_gpus
        ref_cpus: float
        ref_mem: float
        if self.reference_share is None:
            ref_cpus, ref_mem = proportional_share(self.nodes, assignment, 1 + len(partners))
        else:  # durations measured at a fixed share per GPU (e.g. Synergy's 3 CPUs, 62.5 GB)
            ref_cpus = self.reference_share[0] * g / (1 + len(partners))
            ref_mem = self.reference_share[1] * g / (1 + len(partners))
        # Synchronous data-parallel workers wait for the slowest: every node's type counts.
        types = sorted({self.nodes[name].gpu_type for name, _ in assignment.per_node})
        measured = self._measured_factor(job, types, assignment)
        placement = measured
        if placement is None:
            placement = self._table_factor(profile, job, types, g, len(assignment.per_node), assignment)
        if placement is None:
            type_factor = min(
                gpu_type_factor(
                    profile, gpu_type=t, reference_type=job.gpu_type, num_gpus=g, batch_size=job.batch_size
                )
                for t in types
            )
            placement = type_factor * self._count_factor(job, node.gpu_type, g, len(assignment.per_node))
        factor = placement * cpu_mem_factor(
            profile,
            cpus_per_gpu=assignment.cpus / g,
            mem_gb_per_gpu=assignment.mem_gb / g,
            reference_cpus_per_gpu=ref_cpus / g,
            reference_mem_gb_per_gpu=ref_mem / g,
        )
        ga = accumulation_of(assignment.plan) if measured is None else None
        if ga is not None:
            factor /= self.iteration.accumulation_slowdown(
                profile, node.gpu_type, ga[0] * ga[1], g, len(assignment.per_node), ga[1]
            )
        mine = Sharer(job.model, job.batch_size, g, assignment.plan)
        if partners:
            factor *= min(
                self.interference.speed_of(
                    mine, Sharer(p.model, p.batch_size, p.num_gpus, pa.plan), node.gpu_type
                )
                for p, pa in partners
            )
        if not factor > 0:
            raise SimulationError(
                f"profile of {job.model!r} gives speed {factor} for {assignment.cpus} CPUs and "
                f"{assignment.mem_gb:g} GB on {node.gpu_type}"
                + (f" shared with {', '.join(p.model for p, _ in partners)}" if partners else "")
                + ": a job there would never finish"
            )
        self._memo[key] = factor
        return factor

    def _measured_factor(self, job: TraceJob, types: Sequence[str], assignment: Assignment) -> float | None:
        """Rubick's A800 measurements for one of its models on A800s only, else ``None``; the
        artifact's rule instead where the truth is ``rubick-artifact`` and it answers."""
        if [t.lower() for t in types] != [GPU_TYPE] or (job.gpu_type or GPU_TYPE).lower() != GPU_TYPE:
            return None
        mine = measured_factor(
            self.measured,
            model=job.model,
            batch_size=job.batch_size,
            reference_gpus=job.num_gpus,
            reference_plan=job.plan,
            placement=[count for _, count in assignment.per_node],
            plan=job.plan if assignment.plan is None else assignment.plan,
            cpus_per_gpu=assignment.cpus / assignment.num_gpus,
        )
        if mine is None or job.model not in self.artifact or not job.iterations:
            return mine
        theirs = self.artifact_time_s(job, assignment)
        return mine if theirs is None else job.duration_s / job.iterations / theirs

    def artifact_time_s(self, job: TraceJob, assignment: Assignment) -> float | None:
        """The Rubick artifact's seconds per iteration of ``job`` under ``assignment`` (its
        placement in node order, its plan or else the submitted one), ``None`` where the
        artifact has no time (NaN), the plan does not resolve, or the truth's tables do not
        have the model."""
        table = self.artifact.get(job.model)
        if table is None:
            return None
        try:
            plan = resolve(
                plan_from_mapping(job.plan if assignment.plan is None else assignment.plan),
                assignment.num_gpus,
                job.batch_size,
            )
        except PlanError:
            return None
        theirs, _ = artifact_time(table, [count for _, count in assignment.per_node], artifact_label(plan))
        return theirs if math.isfinite(theirs) else None

    def _table_factor(
        self,
        profile: Profile,
        job: TraceJob,
        types: Sequence[str],
        gpus: int,
        nodes: int,
        assignment: Assignment,
    ) -> float | None:
        """Type x count x plan from the iteration-time model, for a model whose profile has no
        measured throughputs (the other factors have no data for it); ``None`` otherwise or
        when the model does not know every type involved. Without a ``gpu_type`` in the trace
        row, each node type is its own reference (only count and plan change)."""
        if profile.throughput:
            return None
        ratios = [
            table_factor(
                self.times,
                model=job.model,
                batch_size=job.batch_size,
                reference_type=job.gpu_type or t,
                reference_gpus=job.num_gpus,
                reference_plan=job.plan,
                gpu_type=t,
                gpus=gpus,
                nodes=nodes,
                plan=assignment.plan,
            )
            for t in types
        ]
        known = [r for r in ratios if r is not None]
        return min(known) if known and len(known) == len(ratios) else None

    def _count_factor(self, job: TraceJob, gpu_type: str, gpus: int, nodes: int) -> float:
        """An elastic job on another GPU count than its trace row's: the throughput ratio at its
        global batch (:class:`profiles.scaling.ScalingModel`; linear without measurements).
        1.0 at the row's own count, so a rigid job runs exactly as its duration says."""
        if gpus == job.num_gpus:
            return 1.0
        here = self.scaling.throughput(job.model, gpu_type, job.batch_size, gpus, nodes)
        there = self.scaling.throughput(job.model, gpu_type, job.batch_size, job.num_gpus, nodes)
        return here / there if there > 0 else 1.0
