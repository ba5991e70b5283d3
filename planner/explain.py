"""Why a job is where it is: its rounds, in words (pure; ``mosaic explain``).

The planner records every decision in its round plans (:class:`planner.core.model.RoundPlan`):
what each job was given, the priority order, each job's outcome (:class:`Outcome`) and the
policy's flags (``privileged``: a guaranteed job within its tenant's quota). From the rounds
of a job, oldest first, :func:`explain` works out:

* its shape: requested (GPUs, accepted types and range, plan) against given in the last
  round (GPUs per node and their type, plan, CPUs, memory);
* why it waits, when the last round left it out: its outcome in words, with what it
  waits for (GPUs of which types, against the free GPUs per type the round left), its
  place among the waiting jobs in the round's order, and its tenant's quota;
* its history: each round in which its assignment changed, as started / resumed / stopped /
  shrunk / grown / moved (to other nodes or another GPU type) / re-planned / given other
  CPUs or memory, and for a stop, shrink or move away, the jobs that took the GPUs it gave
  up (with their tenant and guarantee): the reason a scheduler takes GPUs from a job.

Everything comes from the round plans themselves, so the live controller (its state store's
rounds) and the simulator (``mosaic sim --record-rounds``) are explained the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.config import SchedulerConfig
from planner.core.codec import round_plan_from_json
from planner.core.errors import InputError
from planner.core.fields import Fields, json_document
from planner.core.model import Assignment, Node, Outcome, RoundPlan
from planner.relaunch import Change, classify
from planner.slots import free_by_type, free_gpus
from planner.traces.records import TraceJob

PRIVILEGED = "privileged"  # the Rubick and mosaic orderings' policy-state flag
ENDED = frozenset({"finished", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})
"""States (the first word of :attr:`JobFacts.state`) of a job that no longer waits for anything."""


@dataclass(frozen=True)
class JobFacts:
    """What a job asked for, and what Slurm says of it now (``state``; ``None``: not known)."""

    job_id: str
    num_gpus: int
    gpu_types: tuple[str, ...] = ()
    min_gpus: int | None = None
    max_gpus: int | None = None
    plan: Mapping[str, Any] | None = None
    tenant: str | None = None
    guaranteed: bool = False
    state: str | None = None
    user: str | None = None
    requeues: int | None = None


@dataclass(frozen=True)
class Round:
    """One round as the planner decided it."""

    round_id: int
    time_s: float
    plan: RoundPlan


@dataclass(frozen=True)
class Explanation:
    """:func:`explain`'s answer: ``lines`` for people, :meth:`to_json` for tools."""

    job: JobFacts
    requested: str
    given: str | None
    waiting: list[str] = field(default_factory=list)
    history: list[tuple[int, float, str]] = field(default_factory=list)  # (round, time, event)
    restarts: int = 0

    @property
    def lines(self) -> list[str]:
        j = self.job
        who = ", ".join(
            x
            for x in (
                f"user {j.user}" if j.user else "",
                f"tenant {j.tenant}" if j.tenant else "",
                "guaranteed" if j.guaranteed else "best-effort",
            )
            if x
        )
        out = [f"job {j.job_id} ({who}): {j.state or 'state unknown'}"]
        out.append(f"  requested: {self.requested}")
        out.append(f"  given:     {self.given or 'nothing (not running now)'}")
        for k, line in enumerate(self.waiting):
            out.append(("  why it waits: " if k == 0 else "                ") + line)
        restarts = f"restarts: {self.restarts}"
        if j.requeues is not None:
            restarts += f" (Slurm's requeue count: {j.requeues})"
        out.append(f"  {restarts}")
        if self.history:
            out.append("  history:")
            out.extend(f"    round {r} at t={t:.0f}s: {event}" for r, t, event in self.history)
        else:
            out.append("  history: no round has decided anything for it yet")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job.job_id,
            "state": self.job.state,
            "tenant": self.job.tenant,
            "guaranteed": self.job.guaranteed,
            "requested": self.requested,
            "given": self.given,
            "waiting": list(self.waiting),
            "restarts": self.restarts,
            "history": [{"round": r, "time_s": t, "event": e} for r, t, e in self.history],
        }


def explain(
    job: JobFacts,
    rounds: Sequence[Round],
    others: Mapping[str, JobFacts],
    nodes: Mapping[str, tuple[str, int]],
    quotas: Mapping[str, float] | None = None,
) -> Explanation:
    """``job`` explained from ``rounds`` (oldest first). ``others``: every job's facts by id
    (for the jobs that took its GPUs and its tenant's quota use); ``nodes``: node name ->
    (GPU type, GPUs); ``quotas``: tenant -> GPU quota."""
    history: list[tuple[int, float, str]] = []
    restarts = 0
    before: Assignment | None = None
    previous: RoundPlan | None = None
    ran = False
    for r in rounds:
        now = r.plan.assignments.get(job.job_id)
        change = classify(before, now, ran_before=ran)
        restarts += change.restart  # the one definition (planner.relaunch), as the simulator counts
        event = _change(job.job_id, change, before, now, r.plan, previous, others, nodes)
        if event is not None:
            history.append((r.round_id, r.time_s, event))
        ran = ran or now is not None
        before = now
        previous = r.plan
    last = rounds[-1].plan if rounds else None
    given = _shape(before, nodes) if before is not None else None
    ended = job.state is not None and job.state.split()[0] in ENDED
    waiting = [] if before is not None or ended else _waiting(job, last, others, nodes, quotas or {})
    return Explanation(job, _requested(job), given, waiting, history, restarts)


# -- shapes --------------------------------------------------------------------------------


def _types_of(a: Assignment, nodes: Mapping[str, tuple[str, int]]) -> list[str]:
    return sorted({nodes[n][0] for n in a.nodes if n in nodes})


def _plan_text(plan: Mapping[str, Any] | None) -> str:
    if not plan:
        return "as submitted"
    return ",".join(f"{k}={v}" for k, v in sorted(plan.items()) if v not in (None, False))


def _requested(job: JobFacts) -> str:
    count = f"{job.num_gpus} GPUs"
    if job.min_gpus is not None or job.max_gpus is not None:
        count += f" ({job.min_gpus or 1}-{job.max_gpus or job.num_gpus} accepted)"
    types = f" of type {' or '.join(job.gpu_types)}" if job.gpu_types else ""
    return f"{count}{types}, plan {_plan_text(job.plan)}"


def _shape(a: Assignment, nodes: Mapping[str, tuple[str, int]]) -> str:
    per_node = ", ".join(f"{n}:{g}" for n, g in a.per_node)
    types = "/".join(_types_of(a, nodes)) or "?"
    shared = f", sharing with {', '.join(a.shares_with)}" if a.shares_with else ""
    return (
        f"{a.num_gpus} {types} GPUs ({per_node}), plan {_plan_text(a.plan)}, "
        f"{a.cpus} CPUs, {a.mem_gb:g} GB{shared}"
    )


# -- history ---------------------------------------------------------------------------------


def _change(
    job_id: str,
    change: Change,
    before: Assignment | None,
    now: Assignment | None,
    plan: RoundPlan,
    previous: RoundPlan | None,
    others: Mapping[str, JobFacts],
    nodes: Mapping[str, tuple[str, int]],
) -> str | None:
    if change is Change.NONE:
        return None  # not running either round, or the same shape (GPUs renumbered at most)
    if before is None:
        assert now is not None
        verb = "resumed" if change is Change.RESUMED else "started"
        return f"{verb} on {_shape(now, nodes)}"
    if now is None:
        why = plan.reasons.get(job_id)
        takers = _takers(job_id, before.gpus, plan, previous, others)
        text = "stopped (preempted)"
        if why is not None:
            text += f": {why.value}"
        return text + takers
    parts = []
    if now.num_gpus < before.num_gpus:
        parts.append(f"shrunk {before.num_gpus} -> {now.num_gpus} GPUs")
    elif now.num_gpus > before.num_gpus:
        parts.append(f"grown {before.num_gpus} -> {now.num_gpus} GPUs")
    old_types, new_types = _types_of(before, nodes), _types_of(now, nodes)
    if old_types != new_types:
        parts.append(f"moved {'/'.join(old_types)} -> {'/'.join(new_types)}")
    elif set(before.nodes) != set(now.nodes):
        parts.append(f"moved {','.join(before.nodes)} -> {','.join(now.nodes)}")
    if (before.plan or {}) != (now.plan or {}):
        parts.append(f"plan {_plan_text(before.plan)} -> {_plan_text(now.plan)}")
    if before.cpus != now.cpus:
        parts.append(f"CPUs {before.cpus} -> {now.cpus}")
    if abs(before.mem_gb - now.mem_gb) > 1e-6:
        parts.append(f"memory {before.mem_gb:g} -> {now.mem_gb:g} GB")
    if before.shares_with != now.shares_with:
        parts.append(
            f"now sharing its GPUs with {', '.join(now.shares_with)}"
            if now.shares_with
            else "no longer sharing its GPUs"
        )
    if not parts:
        parts.append(change.value)  # e.g. GPUs moved between its nodes
    gave_up = tuple(slot for slot in before.gpus if slot not in set(now.gpus))
    return "; ".join(parts) + (_takers(job_id, gave_up, plan, previous, others) if gave_up else "")


def _takers(
    job_id: str,
    slots: Sequence[tuple[str, int]],
    plan: RoundPlan,
    previous: RoundPlan | None,
    others: Mapping[str, JobFacts],
) -> str:
    """``, for job 7 (tenant prod, guaranteed), job 9``: the jobs that got these GPUs."""
    wanted = set(slots)
    takers = []
    for other, a in plan.assignments.items():
        if other == job_id or not wanted & set(a.gpus):
            continue
        had = previous.assignments.get(other) if previous is not None else None
        if had is not None and wanted & set(had.gpus):
            continue  # it already shared them
        takers.append(other)
    if not takers:
        return ""
    return ", for " + ", ".join(_who(t, others) for t in sorted(takers))


def _who(job_id: str, others: Mapping[str, JobFacts]) -> str:
    facts = others.get(job_id)
    if facts is None:
        return f"job {job_id}"
    tags = [f"tenant {facts.tenant}"] if facts.tenant else []
    if facts.guaranteed:
        tags.append("guaranteed")
    return f"job {job_id}" + (f" ({', '.join(tags)})" if tags else "")


# -- waiting ---------------------------------------------------------------------------------

_OUTCOME_TEXT = {
    Outcome.NO_CAPACITY: "not enough free GPUs after the jobs ahead of it",
    Outcome.NO_CONSOLIDATED_SLOT: "enough GPUs are free, but not on as few nodes as it needs",
    Outcome.NO_GPU_TYPE: "no node has a GPU type it accepts",
    Outcome.INFEASIBLE: "it can never fit this cluster as described",
    Outcome.BLOCKED: "a job ahead of it waits, and this scheduler did not backfill in that round",
    Outcome.NO_RESOURCES: "GPUs are free, but not the CPUs or memory it needs",
}


def _waiting(
    job: JobFacts,
    last: RoundPlan | None,
    others: Mapping[str, JobFacts],
    nodes: Mapping[str, tuple[str, int]],
    quotas: Mapping[str, float],
) -> list[str]:
    if last is None:
        return ["no round has planned it yet (the controller plans at its next tick)"]
    out = []
    outcome = last.reasons.get(job.job_id)
    if outcome is None:
        out.append("the last round did not see it (submitted since, or not in a managed partition)")
    else:
        out.append(f"{outcome.value}: {_OUTCOME_TEXT.get(outcome, outcome.value)}")
    free = _free_by_type(last, nodes)
    accepted = [t for t in free if not job.gpu_types or t in job.gpu_types]
    least = job.min_gpus if job.min_gpus is not None else job.num_gpus
    need = f"{least}" if least == job.num_gpus else f"{least}-{job.num_gpus}"
    kinds = " or ".join(job.gpu_types) if job.gpu_types else "any type"
    free_text = ", ".join(f"{t} {free[t]}" for t in accepted) or "none of its types"
    out.append(f"it needs {need} GPUs of {kinds}; free after the last round: {free_text}")
    waiting = [j for j in last.order if j not in last.assignments]
    if job.job_id in waiting:
        ahead = waiting.index(job.job_id)
        out.append(f"its place: {ahead + 1} of {len(waiting)} waiting jobs in the round's priority order")
    if job.tenant is not None and job.tenant in quotas and (quotas[job.tenant] > 0 or job.guaranteed):
        used = sum(
            a.num_gpus
            for j, a in last.assignments.items()
            if (f := others.get(j)) is not None and f.tenant == job.tenant and f.guaranteed
        )
        quota = quotas[job.tenant]
        line = f"tenant {job.tenant}: its guaranteed jobs hold {used} of its {quota:g}-GPU quota"
        if job.guaranteed and not (last.policy_state.get(job.job_id) or {}).get(PRIVILEGED):
            line += "; this job's guarantee does not fit what is left, so it waits as best-effort"
        out.append(line)
    return out


def _free_by_type(plan: RoundPlan, nodes: Mapping[str, tuple[str, int]]) -> dict[str, int]:
    cluster = [Node(name, gpus, gpu_type, 0, 0.0) for name, (gpu_type, gpus) in sorted(nodes.items())]
    taken = [slot for a in plan.assignments.values() for slot in a.gpus]
    return dict(sorted(free_by_type(cluster, free_gpus(cluster, taken)).items()))


# -- a simulation's recorded rounds (mosaic sim --record-rounds) --------------------------------

ROUNDS_FILE = "rounds.jsonl"
"""The file ``mosaic sim --record-rounds`` writes: a header line (the cluster's nodes, every
job's request, the tenants' quotas), then one line per round (its time and plan document)."""


def rounds_header(
    nodes: Sequence[Node], trace: Sequence[TraceJob], config: SchedulerConfig
) -> dict[str, Any]:
    """The first line of :data:`ROUNDS_FILE`."""
    return {
        "nodes": {n.name: [n.gpu_type, n.gpus] for n in nodes},
        "jobs": {
            t.job_id: {
                "num_gpus": t.num_gpus,
                "gpu_types": list(t.gpu_types or ((t.gpu_type,) if t.gpu_type else ())),
                "min_gpus": t.min_gpus,
                "max_gpus": t.max_gpus,
                "plan": dict(t.plan) if t.plan is not None else None,
                "tenant": t.tenant,
                "guaranteed": t.guaranteed,
            }
            for t in trace
        },
        "quotas": {t.name: t.gpu_quota for t in config.tenants},
    }


@dataclass(frozen=True)
class Recorded:
    """A simulation's :data:`ROUNDS_FILE`, read back."""

    nodes: Mapping[str, tuple[str, int]]
    jobs: Mapping[str, JobFacts]
    quotas: Mapping[str, float]
    rounds: tuple[Round, ...]


def read_recorded(text: str, source: str) -> Recorded:
    """Parse :data:`ROUNDS_FILE` (errors name the line)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError(f"{source}: empty (run mosaic sim with --record-rounds)")
    try:
        head = Fields(json_document(lines[0], f"{source}:1", InputError), f"{source}:1", InputError)
        raw_nodes = head.opt_object("nodes") or {}
        nodes = {str(n): (str(v[0]), int(v[1])) for n, v in raw_nodes.items()}
        jobs = {}
        for job_id, raw in (head.opt_object("jobs") or {}).items():
            f = Fields(raw, f"{source}:1: jobs['{job_id}']", InputError)
            jobs[str(job_id)] = JobFacts(
                str(job_id),
                f.req_int("num_gpus", minimum=0),
                tuple(str(t) for t in (f.req_list("gpu_types") if f.has("gpu_types") else ())),
                f.opt_int("min_gpus"),
                f.opt_int("max_gpus"),
                f.opt_object("plan"),
                f.opt_str("tenant"),
                f.flag("guaranteed", False),
            )
        quotas = {str(k): float(v) for k, v in (head.opt_object("quotas") or {}).items()}
    except (ValueError, TypeError, IndexError) as e:
        raise InputError(f"{source}:1: not a rounds header ({e})") from None
    rounds = []
    for k, line in enumerate(lines[1:], start=2):
        where = f"{source}:{k}"
        f = Fields(json_document(line, where, InputError), where, InputError)
        raw_plan = f.opt_object("plan")
        if raw_plan is None:
            f.fail("missing required key 'plan'")
        plan = round_plan_from_json(raw_plan, f"{where}: plan")
        rounds.append(Round(f.req_int("round"), f.req_float("time_s"), plan))
    return Recorded(nodes, jobs, quotas, tuple(rounds))
