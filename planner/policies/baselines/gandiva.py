"""Gandiva (OSDI'18) as Crius's simulator models it: introspective, heterogeneity-unaware.

Crius §8.1: "Gandiva utilizes domain-specific knowledge to introspectively refine scheduling
decisions based on runtime profiling. While it could adjust the GPU quota and topology, it
ignores the GPU heterogeneity." Crius's artifact keeps of Gandiva what matters for large
models (no GPU sharing: "the GPU utilization of LM is high enough"), and so does the
``gandiva`` placement here, each round:

1. **Running jobs keep their GPUs** (Gandiva's jobs are not preempted here; its
   suspend-resume time slicing is not part of the artifact's model).
2. **Migration for locality**: an elastic running job spread over more nodes than it needs
   moves onto fewer nodes of its type where free GPUs allow (Gandiva §3.3 migrates to
   de-fragment and to improve locality).
3. **Admission**, first come first served: each waiting job on its *home* type (the type it
   asked for; heterogeneity-unaware, it never changes) at the GPU count it asked for,
   consolidated. Where it does not fit, jobs that grew beyond their request give the GPUs they
   grew into back (Gandiva's "shrink": the grown share is lent, not owned). A job that still
   does not fit blocks the later jobs of its type (the artifact's per-type FIFO queue).
   Feasibility as the artifact checks it for Gandiva: the job's best plan fits there.
4. **Grow**: a single-node elastic job doubles its GPUs into idle GPUs of its own node while
   the data-parallel throughput it would see (:class:`~.view.DpView`: data-parallel replica
   fits, measured time better) rises, up to its ``max_gpus`` (Gandiva §3.3 "grow-shrink").

Changes to running jobs (steps 2-4) apply to elastic jobs only, the pipeline's rule for moving
or resizing a running job (:class:`planner.stages.Reconfiguration`); a rigid job is placed once.
Options: ``grow`` (true), ``migrate`` (true).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from planner.core.model import Assignment, GpuSlot, Job, Outcome, Snapshot
from planner.policies.baselines.common import FreeGpus, assignment_for, home_type, runs_on, slots_on_type
from planner.policies.baselines.view import DpView
from planner.policies.common import options_reader
from planner.registry import StageContext
from planner.stages import PLACEMENTS, Draft


@PLACEMENTS.register("gandiva")
@dataclass(frozen=True)
class GandivaPlacement:
    """Gandiva's round (module docstring). Options: ``grow``, ``migrate`` (both true)."""

    view: DpView
    grow: bool = True
    migrate: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "gandiva placement", ["grow", "migrate"])
        return cls(DpView(context.profiles), f.flag("grow", True), f.flag("migrate", True))

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft:
        free = FreeGpus(snapshot)
        assignments: dict[str, Assignment] = {}
        outcomes: dict[str, Outcome] = {}
        for job in ordered:
            a = job.assignment
            if job.is_running and a is not None and free.has(a.gpus):
                free.take(a.gpus)
                assignments[job.id] = a
                outcomes[job.id] = Outcome.KEPT
        if self.migrate:
            self._migrate(snapshot, ordered, assignments, outcomes, free)
        blocked: set[str] = set()
        for job in ordered:
            if job.id in assignments:
                continue
            gpu_type = home_type(snapshot, job)
            if gpu_type is None:
                outcomes[job.id] = Outcome.NO_GPU_TYPE
                continue
            if not self.view.feasible(job, gpu_type, job.num_gpus, dp_check=False):
                outcomes[job.id] = Outcome.INFEASIBLE
                continue
            if gpu_type in blocked:
                outcomes[job.id] = Outcome.BLOCKED
                continue
            slots = slots_on_type(snapshot, job, job.num_gpus, free, gpu_type)
            if slots is None:
                slots = self._shrink_for(snapshot, job, gpu_type, ordered, assignments, outcomes, free)
            if slots is None:
                blocked.add(gpu_type)
                outcomes[job.id] = Outcome.NO_CAPACITY
                continue
            free.take(slots)
            assignments[job.id] = assignment_for(job, slots)
            outcomes[job.id] = Outcome.PLACED
        if self.grow:
            for job in ordered:
                if job.id in assignments and job.elastic:
                    grown = self._grow(snapshot, job, assignments[job.id], free)
                    if grown is not None:
                        assignments[job.id] = grown
        return Draft({j.id: assignments[j.id] for j in ordered if j.id in assignments}, outcomes)

    # -- migration ------------------------------------------------------------------------
    def _migrate(
        self,
        snapshot: Snapshot,
        ordered: Sequence[Job],
        assignments: dict[str, Assignment],
        outcomes: dict[str, Outcome],
        free: FreeGpus,
    ) -> None:
        for job in ordered:
            a = assignments.get(job.id)
            if a is None or not job.elastic or len(a.per_node) < 2:
                continue
            gpu_type = snapshot.nodes_by_name[a.nodes[0]].gpu_type
            free.give(a.gpus)
            slots = slots_on_type(snapshot, job, a.num_gpus, free, gpu_type)
            if slots is not None and len({n for n, _ in slots}) < len(a.per_node):
                free.take(slots)
                assignments[job.id] = assignment_for(job, slots)
                outcomes[job.id] = Outcome.MOVED
            else:
                free.take(a.gpus)

    # -- shrink ---------------------------------------------------------------------------
    def _shrink_for(
        self,
        snapshot: Snapshot,
        job: Job,
        gpu_type: str,
        ordered: Sequence[Job],
        assignments: dict[str, Assignment],
        outcomes: dict[str, Outcome],
        free: FreeGpus,
    ) -> tuple[GpuSlot, ...] | None:
        """Slots for ``job`` after grown jobs of ``gpu_type`` give back what they grew into
        (latest-arrived first); ``None`` (and nothing shrunk) if even that is not enough."""
        donors = [
            (d, assignments[d.id])
            for d in reversed(ordered)
            if d.id in assignments
            and assignments[d.id].num_gpus > d.num_gpus
            and snapshot.nodes_by_name[assignments[d.id].nodes[0]].gpu_type == gpu_type
        ]
        if not donors:
            return None
        trial = FreeGpus(snapshot, ())
        trial.gpus = {name: list(ks) for name, ks in free.gpus.items()}
        cut: list[Job] = []
        for donor, a in donors:
            if not runs_on(donor, donor.num_gpus):
                continue
            trial.give(a.gpus[donor.num_gpus :])
            cut.append(donor)
            slots = slots_on_type(snapshot, job, job.num_gpus, trial, gpu_type)
            if slots is not None:
                for d in cut:
                    old = assignments[d.id]
                    free.give(old.gpus[d.num_gpus :])
                    assignments[d.id] = assignment_for(d, old.gpus[: d.num_gpus])
                return slots
        return None

    # -- grow -----------------------------------------------------------------------------
    def _grow(self, snapshot: Snapshot, job: Job, a: Assignment, free: FreeGpus) -> Assignment | None:
        """Double on the job's own node while the data-parallel throughput it sees rises."""
        if len(a.per_node) != 1:
            return None
        (node, _), high = a.per_node[0], job.gpu_range[1]
        gpu_type = snapshot.nodes_by_name[node].gpu_type
        count = a.num_gpus
        while (
            2 * count <= high
            and len(free.gpus[node]) >= count
            and runs_on(job, 2 * count)
            and self.view.throughput(job, gpu_type, 2 * count) > self.view.throughput(job, gpu_type, count)
        ):
            count *= 2
        if count == a.num_gpus:
            return None
        added = tuple((node, k) for k in free.gpus[node][: count - a.num_gpus])
        free.take(added)
        return assignment_for(job, tuple(sorted(a.gpus + added)))
