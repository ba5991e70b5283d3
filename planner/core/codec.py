"""JSON form of snapshots, assignments and round plans.

The contract is docs/reference.md's "Snapshot and RoundPlan JSON".

``snapshot_from_json`` validates untrusted input: unknown keys are ignored (so a newer
controller can add fields), missing required keys and wrong types are errors naming
the job (or node) and the key. ``*_to_json`` produce plain ``dict``/``list`` values
ready for :func:`json.dumps`; parsing their output gives back equal objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.core.errors import SnapshotError
from planner.core.fields import Fields, json_document
from planner.core.model import Assignment, Job, JobState, Node, Outcome, RoundPlan, Snapshot, demand_problem

# -- snapshot --------------------------------------------------------------------------


def snapshot_from_json(document: Any, source: str = "snapshot") -> Snapshot:
    """Build a :class:`Snapshot` from a parsed JSON document (or JSON text)."""
    top = Fields(json_document(document, source, SnapshotError), source, SnapshotError)
    time_s = top.req_float("time_s")
    raw_nodes = top.req_list("nodes")
    nodes: list[Node] = []
    seen_nodes: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        node = node_from_json(raw, f"{source}: nodes[{i}]")
        if node.name in seen_nodes:
            raise SnapshotError(f"{source}: nodes[{i}]: duplicate node name '{node.name}'")
        seen_nodes.add(node.name)
        nodes.append(node)
    by_name = {n.name: n for n in nodes}
    jobs: list[Job] = []
    seen_jobs: set[str] = set()
    for i, raw in enumerate(top.req_list("jobs")):
        job = job_from_json(raw, f"{source}: jobs[{i}]", by_name)
        if job.id in seen_jobs:
            raise SnapshotError(f"{source}: jobs[{i}]: duplicate job id '{job.id}'")
        seen_jobs.add(job.id)
        jobs.append(job)
    _check_gpu_holders(jobs, source)
    return Snapshot(time_s=time_s, nodes=tuple(nodes), jobs=tuple(jobs))


def _check_gpu_holders(jobs: list[Job], source: str) -> None:
    """Running jobs on the same GPU must share it: one of each pair lists the other in
    ``shares_with``; else the snapshot is wrong (Slurm gives a GPU to one job only)."""
    holders: dict[tuple[str, int], list[Job]] = {}
    for job in jobs:
        if job.assignment is None:
            continue
        for gpu in job.assignment.gpus:
            for other in holders.get(gpu, ()):
                assert other.assignment is not None  # for mypy: holders hold assigned jobs
                if other.id not in job.assignment.shares_with and job.id not in other.assignment.shares_with:
                    raise SnapshotError(
                        f"{source}: running jobs '{other.id}' and '{job.id}' both hold GPU {gpu[1]} of "
                        f"node '{gpu[0]}' without sharing it (neither lists the other in shares_with)"
                    )
            holders.setdefault(gpu, []).append(job)


def node_from_json(raw: Any, where: str) -> Node:
    f = Fields(raw, where, SnapshotError)
    name = f.req_str("name")
    f = Fields(raw, f"{where} (node '{name}')", SnapshotError)
    return Node(
        name=name,
        gpus=f.req_int("gpus", minimum=0),
        gpu_type=f.req_str("gpu_type"),
        cpus=f.req_int("cpus", minimum=0),
        mem_gb=f.req_float("mem_gb", minimum=0.0),
        intra_gbps=f.opt_float("intra_gbps", minimum=0.0),
        inter_gbps=f.opt_float("inter_gbps", minimum=0.0),
        gpu_mem_gb=_positive(f, "gpu_mem_gb"),
    )


def _positive(f: Fields, key: str) -> float | None:
    value = f.opt_float(key, minimum=0.0)
    if value is not None and value <= 0:
        f.fail_key(key, f"expected a positive number, got {value}")
    return value


def job_from_json(raw: Any, where: str, nodes: Mapping[str, Node]) -> Job:
    f = Fields(raw, where, SnapshotError)
    job_id = f.req_str("id")
    f = Fields(raw, f"{where} (job '{job_id}')", SnapshotError)
    state_text = f.req_str("state")
    try:
        state = JobState(state_text)
    except ValueError:
        f.fail_key("state", f"expected 'pending' or 'running', got {state_text!r}")
    assignment = None
    if state is JobState.RUNNING:
        assignment = assignment_from_json(f.data.get("assignment"), f"{f.where}.assignment", nodes)
    plan = f.opt_object("plan")
    num_gpus = f.req_int("num_gpus", minimum=1)
    gpu_type = f.opt_str("gpu_type")
    min_gpus = f.opt_int("min_gpus", minimum=1)
    max_gpus = f.opt_int("max_gpus", minimum=1)
    gpu_types = _gpu_types(f)
    problem = demand_problem(num_gpus, min_gpus, max_gpus, gpu_type, gpu_types)
    if problem is not None:
        f.fail_key(*problem)
    return Job(
        id=job_id,
        num_gpus=num_gpus,
        model=f.req_str("model"),
        submit_time_s=f.req_float("submit_time_s"),
        state=state,
        attained_gpu_s=f.req_float("attained_gpu_s", minimum=0.0),
        progress=f.opt_float("progress", minimum=0.0, maximum=1.0),
        remaining_s=f.opt_float("remaining_s", minimum=0.0),
        duration_s=f.opt_float("duration_s", minimum=0.0),
        batch_size=f.opt_int("batch_size", minimum=1),
        tenant=f.opt_str("tenant"),
        guaranteed=f.flag("guaranteed", False),
        deadline_s=f.opt_float("deadline_s"),
        time_limit_s=_time_limit(f),
        gpu_type=gpu_type,
        plan=dict(plan) if plan is not None else None,
        candidate_plans=_plans(f),
        preemptible=f.flag("preemptible", True),
        restarts=f.opt_int("restarts", minimum=0) or 0,
        pending_since_s=f.opt_float("pending_since_s"),
        assignment=assignment,
        policy_state=_opt_dict(f, "policy_state"),
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        gpu_types=gpu_types,
    )


def _time_limit(f: Fields) -> float | None:
    """``time_limit_s``: a positive number of seconds (absent or null: no limit declared)."""
    value = f.opt_float("time_limit_s")
    if value is not None and value <= 0:
        f.fail_key("time_limit_s", f"expected a number > 0, got {value}")
    return value


def _gpu_types(f: Fields) -> tuple[str, ...]:
    raw = f.data.get("gpu_types") or []
    if not isinstance(raw, list) or not all(isinstance(t, str) and t.strip() for t in raw):
        f.fail_key("gpu_types", f"expected a list of GPU type names, got {raw!r}")
    return tuple(raw)


def _plans(f: Fields) -> tuple[dict[str, Any], ...]:
    raw = f.data.get("plans") or []
    if not isinstance(raw, list) or not all(isinstance(p, Mapping) for p in raw):
        f.fail_key("plans", f"expected a list of plan objects, got {raw!r}")
    return tuple(dict(p) for p in raw)


def _opt_dict(f: Fields, key: str) -> dict[str, Any] | None:
    value = f.opt_object(key)
    return None if value is None else dict(value)


def assignment_from_json(raw: Any, where: str, nodes: Mapping[str, Node] | None = None) -> Assignment:
    """Parse an assignment; with ``nodes``, check every GPU slot exists."""
    if raw is None:
        raise SnapshotError(f"{where}: a running job needs its current assignment")
    f = Fields(raw, where, SnapshotError)
    slots: list[tuple[str, int]] = []
    for k, slot in enumerate(f.req_list("gpus")):
        if (
            not isinstance(slot, list | tuple)
            or len(slot) != 2
            or not isinstance(slot[0], str)
            or isinstance(slot[1], bool)
            or not isinstance(slot[1], int)
        ):
            f.fail_key("gpus", f"entry {k} must be [node name, GPU index], got {slot!r}")
        node_name, index = slot[0], slot[1]
        if nodes is not None:
            node = nodes.get(node_name)
            if node is None:
                f.fail_key("gpus", f"entry {k} names unknown node '{node_name}'")
            if not 0 <= index < node.gpus:
                f.fail_key("gpus", f"entry {k}: node '{node_name}' has no GPU {index} (it has {node.gpus})")
        slots.append((node_name, index))
    if not slots:
        f.fail_key("gpus", "an assignment needs at least one GPU")
    if len(set(slots)) != len(slots):
        f.fail_key("gpus", "lists the same GPU twice")
    shares = f.data.get("shares_with") or []
    if not isinstance(shares, list) or not all(isinstance(s, str | int) for s in shares):
        f.fail_key("shares_with", f"expected a list of job ids, got {shares!r}")
    plan = f.opt_object("plan")
    return Assignment(
        gpus=tuple(slots),
        cpus=f.req_int("cpus", minimum=0),
        mem_gb=f.req_float("mem_gb", minimum=0.0),
        plan=dict(plan) if plan is not None else None,
        shares_with=tuple(str(s) for s in shares),
    )


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "time_s": snapshot.time_s,
        "nodes": [node_to_json(n) for n in snapshot.nodes],
        "jobs": [job_to_json(j) for j in snapshot.jobs],
    }


def node_to_json(node: Node) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": node.name,
        "gpus": node.gpus,
        "gpu_type": node.gpu_type,
        "cpus": node.cpus,
        "mem_gb": node.mem_gb,
    }
    if node.intra_gbps is not None:
        out["intra_gbps"] = node.intra_gbps
    if node.inter_gbps is not None:
        out["inter_gbps"] = node.inter_gbps
    if node.gpu_mem_gb is not None:
        out["gpu_mem_gb"] = node.gpu_mem_gb
    return out


_JOB_OPTIONAL = (
    "progress",
    "remaining_s",
    "duration_s",
    "batch_size",
    "tenant",
    "deadline_s",
    "time_limit_s",
    "gpu_type",
    "pending_since_s",
    "min_gpus",
    "max_gpus",
)


def job_to_json(job: Job) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.id,
        "num_gpus": job.num_gpus,
        "model": job.model,
        "submit_time_s": job.submit_time_s,
        "state": job.state.value,
        "attained_gpu_s": job.attained_gpu_s,
    }
    for key in _JOB_OPTIONAL:
        value = getattr(job, key)
        if value is not None:
            out[key] = value
    if job.guaranteed:
        out["guaranteed"] = True
    if not job.preemptible:
        out["preemptible"] = False
    if job.plan is not None:
        out["plan"] = dict(job.plan)
    if job.candidate_plans:
        out["plans"] = [dict(p) for p in job.candidate_plans]
    if job.gpu_types:
        out["gpu_types"] = list(job.gpu_types)
    if job.restarts:
        out["restarts"] = job.restarts
    if job.assignment is not None:
        out["assignment"] = assignment_to_json(job.assignment)
    if job.policy_state is not None:
        out["policy_state"] = dict(job.policy_state)
    return out


def assignment_to_json(assignment: Assignment) -> dict[str, Any]:
    return {
        "gpus": [[node, index] for node, index in assignment.gpus],
        "cpus": assignment.cpus,
        "mem_gb": assignment.mem_gb,
        "plan": dict(assignment.plan) if assignment.plan is not None else None,
        "shares_with": list(assignment.shares_with),
    }


# -- round plan ------------------------------------------------------------------------


def round_plan_to_json(plan: RoundPlan) -> dict[str, Any]:
    """The RoundPlan document.

    Each assignment also states the shape the round chose for its job: ``num_gpus`` and,
    where the plan knows it, ``gpu_type`` (``null`` for GPUs of several types); its
    ``plan`` is already there. Both are derived: :func:`assignment_from_json` ignores them.
    """
    return {
        "assignments": {job_id: _chosen_shape(plan, job_id, a) for job_id, a in plan.assignments.items()},
        "preempted": list(plan.preempted),
        "migrated": list(plan.migrated),
        "started": list(plan.started),
        "reshaped": list(plan.reshaped),
        "order": list(plan.order),
        "reasons": {job_id: outcome.value for job_id, outcome in plan.reasons.items()},
        "decision_time_s": plan.decision_time_s,
        "stage_times_s": dict(plan.stage_times_s),
        "policy_state": {job_id: dict(state) for job_id, state in plan.policy_state.items()},
    }


def _chosen_shape(plan: RoundPlan, job_id: str, assignment: Assignment) -> dict[str, Any]:
    out = assignment_to_json(assignment)
    shape: dict[str, Any] = {"gpus": out.pop("gpus"), "num_gpus": assignment.num_gpus}
    if job_id in plan.gpu_type_of:
        shape["gpu_type"] = plan.gpu_type_of[job_id]
    return shape | out


def round_plan_from_json(document: Any, source: str = "round plan") -> RoundPlan:
    """Parse a RoundPlan document (e.g. the controller's last plan, read back)."""
    top = Fields(json_document(document, source, SnapshotError), source, SnapshotError)
    raw_assignments = top.opt_object("assignments")
    if raw_assignments is None:
        top.fail("missing required key 'assignments'")
    assignments = {
        str(job_id): assignment_from_json(raw, f"{source}: assignments['{job_id}']")
        for job_id, raw in raw_assignments.items()
    }
    gpu_type_of: dict[str, str | None] = {}
    for job_id, raw in raw_assignments.items():
        if "gpu_type" in raw:  # derived, but kept so a plan read back compares equal
            f = Fields(raw, f"{source}: assignments['{job_id}']", SnapshotError)
            gpu_type_of[str(job_id)] = f.opt_str("gpu_type")

    def ids(key: str) -> tuple[str, ...]:
        value = top.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
            top.fail_key(key, f"expected a list of job ids, got {value!r}")
        return tuple(str(v) for v in value)

    raw_reasons = top.opt_object("reasons") or {}
    reasons: dict[str, Outcome] = {}
    for job_id, text in raw_reasons.items():
        try:
            reasons[str(job_id)] = Outcome(text)
        except ValueError:
            top.fail_key("reasons", f"job '{job_id}': unknown outcome {text!r}")
    raw_times = top.opt_object("stage_times_s") or {}
    times = Fields(raw_times, f"{source}: stage_times_s", SnapshotError)
    stage_times = {str(stage): times.req_float(stage, minimum=0.0) for stage in raw_times}
    raw_state = top.opt_object("policy_state") or {}
    policy_state = {}
    for job_id, state in raw_state.items():
        if not isinstance(state, Mapping):
            top.fail_key("policy_state", f"job '{job_id}': expected an object, got {state!r}")
        policy_state[str(job_id)] = dict(state)
    return RoundPlan(
        assignments=assignments,
        preempted=ids("preempted"),
        migrated=ids("migrated"),
        started=ids("started"),
        reshaped=ids("reshaped"),
        order=ids("order"),
        reasons=reasons,
        decision_time_s=top.opt_float("decision_time_s", minimum=0.0) or 0.0,
        stage_times_s=stage_times,
        policy_state=policy_state,
        gpu_type_of=gpu_type_of,
    )
