"""``mosaic explain``'s core: a job's rounds in words."""

from __future__ import annotations

from planner.core.model import Assignment, Outcome, RoundPlan
from planner.explain import JobFacts, Round, explain

NODES = {"n1": ("a100", 4), "n2": ("v100", 4)}
ELASTIC = JobFacts("7", 4, gpu_types=("a100", "v100"), min_gpus=2, max_gpus=4, tenant="research")
GUEST = JobFacts("8", 2, tenant="prod", guaranteed=True)
OTHER = JobFacts("9", 4, tenant="research")
FACTS = {j.job_id: j for j in (ELASTIC, GUEST, OTHER)}


def on(node: str, *gpus: int, cpus: int = 8, plan: dict | None = None) -> Assignment:
    return Assignment(tuple((node, k) for k in gpus), cpus, 16.0 * len(gpus), plan)


def rounds() -> list[Round]:
    plans = [
        RoundPlan({"7": on("n1", 0, 1, 2, 3, plan={"dp": 4})}, order=("7",)),
        # A guaranteed job arrives: the elastic job gives it half its node, with a new plan.
        RoundPlan(
            {"7": on("n1", 0, 1, plan={"dp": 2, "grad_accum": 2}), "8": on("n1", 2, 3)},
            order=("8", "7"),
            policy_state={"8": {"privileged": True}},
        ),
        # It moves to the v100 node, at 4 GPUs again.
        RoundPlan(
            {"7": on("n2", 0, 1, 2, 3, plan={"dp": 4}), "8": on("n1", 2, 3)},
            order=("8", "7"),
            policy_state={"8": {"privileged": True}},
        ),
        # The same GPUs renumbered: nothing happens to it.
        RoundPlan(
            {"7": on("n2", 3, 2, 1, 0, plan={"dp": 4}), "8": on("n1", 2, 3)},
            order=("8", "7"),
            policy_state={"8": {"privileged": True}},
        ),
        # Stopped for job 9.
        RoundPlan(
            {"8": on("n1", 2, 3), "9": on("n2", 0, 1, 2, 3)},
            order=("8", "9", "7"),
            reasons={"7": Outcome.NO_CAPACITY, "8": Outcome.KEPT, "9": Outcome.PLACED},
            policy_state={"8": {"privileged": True}},
        ),
    ]
    return [Round(k + 1, 360.0 * k, p) for k, p in enumerate(plans)]


def test_a_jobs_history_says_what_changed_and_for_whom() -> None:
    got = explain(ELASTIC, rounds(), FACTS, NODES, {"prod": 2})
    events = [e for _, _, e in got.history]
    assert events[0].startswith("started on 4 a100 GPUs (n1:4), plan dp=4")
    assert events[1] == (
        "shrunk 4 -> 2 GPUs; plan dp=4 -> dp=2,grad_accum=2; memory 64 -> 32 GB, "
        "for job 8 (tenant prod, guaranteed)"
    )
    assert events[2].startswith("grown 2 -> 4 GPUs; moved a100 -> v100; plan dp=2,grad_accum=2 -> dp=4")
    assert events[3] == "stopped (preempted): no-capacity, for job 9 (tenant research)"
    assert [r for r, _, _ in got.history] == [1, 2, 3, 5]  # round 4 only renumbered its GPUs
    assert got.restarts == 2  # the resize and the move; a stop is not a restart until it resumes
    assert got.given is None


def test_a_waiting_job_is_told_what_it_waits_for() -> None:
    got = explain(ELASTIC, rounds(), FACTS, NODES, {"prod": 2})
    assert got.waiting == [
        "no-capacity: not enough free GPUs after the jobs ahead of it",
        "it needs 2-4 GPUs of a100 or v100; free after the last round: a100 2, v100 0",
        "its place: 1 of 1 waiting jobs in the round's priority order",
    ]
    text = "\n".join(got.lines)
    assert "job 7 (tenant research, best-effort): state unknown" in text
    assert "requested: 4 GPUs (2-4 accepted) of type a100 or v100, plan as submitted" in text


def test_a_guaranteed_job_beyond_its_tenants_quota_is_told_so() -> None:
    late = JobFacts("10", 2, tenant="prod", guaranteed=True, state="PENDING")
    plan = RoundPlan(
        {"8": on("n1", 2, 3), "9": on("n2", 0, 1, 2, 3)},
        order=("8", "9", "10"),
        reasons={"10": Outcome.NO_CAPACITY},
        policy_state={"8": {"privileged": True}},
    )
    got = explain(late, [Round(1, 0.0, plan)], {**FACTS, "10": late}, NODES, {"prod": 2})
    assert got.waiting[-1] == (
        "tenant prod: its guaranteed jobs hold 2 of its 2-GPU quota; "
        "this job's guarantee does not fit what is left, so it waits as best-effort"
    )
    assert got.history == [] and "no round has decided anything for it yet" in got.lines[-1]


def test_a_job_no_round_has_seen_and_a_resumed_job() -> None:
    fresh = JobFacts("11", 1)
    assert explain(fresh, [], {}, NODES).waiting == [
        "no round has planned it yet (the controller plans at its next tick)"
    ]
    resumed = [*rounds(), Round(6, 1800.0, RoundPlan({"7": on("n1", 0, 1)}, order=("7",)))]
    got = explain(ELASTIC, resumed, FACTS, NODES)
    assert got.history[-1][2].startswith("resumed on 2 a100 GPUs (n1:2)")
    assert got.restarts == 3 and got.waiting == []
    assert got.to_json()["given"] == got.given
