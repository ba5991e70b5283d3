"""The shortcuts that keep a round's cost bounded give exactly the full computation's answers.

Placement answers a job that cannot fit from per-type bounds and reuses a failed
search's answer until a GPU is taken; Tiresias remembers pending jobs' sort keys. Both
are checked here against the full computation on random cases.
"""

import gc
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from planner.core.model import Job, JobState, Outcome
from planner.policies.mosaic.ordering import DeclaredLas
from planner.policies.placement import ConsolidatedPlacement, _Board, _Demand
from planner.policies.tiresias import Tiresias
from tests.builders import make_job, make_node, make_snapshot, running


def _reference_find(board: _Board, job: Job) -> tuple[Outcome, tuple | None]:
    """The full search for every job: no bound, no reuse (the placement before the shortcuts)."""
    g = job.num_gpus
    demand = _Demand.of(board, g, job.accepted_types)
    if demand.outcome is not None:
        return demand.outcome, None
    fits_one = demand.fits_one
    candidates = [t for t in (fits_one or demand.types) if board.free_by_type[t] >= g]
    if not candidates:
        free = sum(board.free_by_type[t] for t in demand.types)
        return (Outcome.NO_CONSOLIDATED_SLOT if fits_one and free >= g else Outcome.NO_CAPACITY), None
    if fits_one:
        coords = board.single_node([i for t in candidates for i in board.groups[t]], g)
        if coords is None:
            return Outcome.NO_CONSOLIDATED_SLOT, None
        return Outcome.PLACED, board.claim(coords)
    best = None
    for t in candidates:
        found = board.spanning(board.groups[t], g)
        if found is not None and (best is None or (found[0], t) < best[:2]):
            best = (found[0], t, found[1])
    if best is None:
        return Outcome.NO_CAPACITY, None
    return Outcome.PLACED, board.claim(best[2])


class _FullSearch(ConsolidatedPlacement):
    _find = staticmethod(_reference_find)  # type: ignore[assignment]


def _random_case(rng: random.Random) -> tuple[list, list[Job]]:
    nodes = [
        make_node(f"a{i}", gpus=rng.choice([2, 4, 8]), gpu_type="a100") for i in range(rng.randint(1, 4))
    ]
    nodes += [make_node(f"v{i}", gpus=rng.choice([4, 8]), gpu_type="v100") for i in range(rng.randint(0, 3))]
    free = [(n.name, k) for n in nodes for k in range(n.gpus)]
    rng.shuffle(free)
    jobs: list[Job] = []
    for j in range(rng.randint(5, 40)):
        g = rng.choice([1, 1, 2, 3, 4, 8, 12, 40])
        typed = rng.random()
        fields = {}
        if typed < 0.15:
            fields["gpu_type"] = rng.choice(["a100", "v100", "h100"])
        elif typed < 0.25:
            fields["gpu_types"] = ("v100", "a100")
        job = make_job(str(j), g, submit=rng.random() * 100, **fields)
        if rng.random() < 0.4 and len(free) >= g and "gpu_type" not in fields and "gpu_types" not in fields:
            job = running(job, sorted(free[:g]))
            del free[:g]
        jobs.append(job)
    rng.shuffle(jobs)  # any priority order
    return nodes, jobs


def test_placement_outcomes_and_gpus_equal_the_full_search():
    rng = random.Random(7)
    for _ in range(400):
        nodes, jobs = _random_case(rng)
        snapshot = make_snapshot(nodes, jobs)
        for options in ({}, {"reserve": False}, {"backfill": False}, {"sticky": False}):
            fast = ConsolidatedPlacement(**options).place(snapshot, jobs)
            full = _FullSearch(**options).place(snapshot, jobs)
            assert dict(fast.outcomes) == dict(full.outcomes)
            assert list(fast.assignments) == list(full.assignments)
            assert {k: a.gpus for k, a in fast.assignments.items()} == {
                k: a.gpus for k, a in full.assignments.items()
            }


def test_a_nodes_displacement_candidate_is_pick_and_victims():
    # single_node ranks each node by the GPUs pick() takes and the victims() they displace;
    # _displacement computes both in one pass. Random holders (rank 0 included), taken flags.
    from planner.policies.placement import _OPEN

    rng = random.Random(17)
    for _ in range(2000):
        node = make_node("n0", gpus=rng.choice([1, 2, 4, 8]))
        board = _Board([node])
        for k in range(node.gpus):
            board.taken[0][k] = rng.random() < 0.3
            board.holder[0][k] = rng.choice([_OPEN, 0, 0, 1, 2, 5])
        board.n_free[0] = board.taken[0].count(False)
        for g in range(1, board.n_free[0] + 1):
            coords = board.pick(0, g)
            ranks = board.victims(coords)
            want = ((-ranks[0] if ranks else -_OPEN, len(ranks), board.n_free[0], 0), coords)
            assert board._displacement(0, g) == want


def test_a_full_cluster_tells_each_waiting_job_why_as_the_full_search_does():
    # Two 4-GPU nodes, one with 3 GPUs busy: a 2-GPU job has no consolidated slot, a
    # 1-GPU job fits, and the answers for later jobs follow every GPU taken.
    nodes = [make_node("n1"), make_node("n2")]
    busy = running(make_job("busy", 3), [("n1", 0), ("n1", 1), ("n1", 2)])
    queue = [make_job(str(k), g, submit=k) for k, g in enumerate([4, 2, 1, 2, 4, 1, 2, 8, 1])]
    snapshot = make_snapshot(nodes, [busy, *queue])
    fast = ConsolidatedPlacement().place(snapshot, [busy, *queue])
    full = _FullSearch().place(snapshot, [busy, *queue])
    assert dict(fast.outcomes) == dict(full.outcomes)
    assert fast.outcomes["3"] is Outcome.NO_CAPACITY  # 4 GPUs, none free any more
    assert fast.outcomes["6"] is Outcome.NO_CAPACITY


def test_tiresias_order_with_its_memo_equals_a_fresh_policy_each_round():
    rng = random.Random(3)
    policy = Tiresias(thresholds_gpu_s=(100.0, 1000.0), promote_knob=2.0)
    jobs = [
        make_job(
            str(k),
            rng.choice([1, 2, 4]),
            submit=rng.random() * 50,
            attained_gpu_s=rng.choice([0.0, 50.0, 150.0, 500.0, 1500.0]),  # some start in lower queues
            pending_since_s=50.0 + rng.random() * 10,
        )
        for k in range(30)
    ]
    promoted = 0
    now = 60.0
    for _ in range(40):
        snapshot = make_snapshot([make_node()], jobs, time_s=now)
        got = policy.order(snapshot)
        want = Tiresias(thresholds_gpu_s=(100.0, 1000.0), promote_knob=2.0).order(snapshot)
        assert [(j.id, j.policy_state) for j in got] == [(j.id, j.policy_state) for j in want]
        promoted += sum(1 for j in got if j.policy_state == {"q": 0, "since": now})
        # The world applies the states; a few jobs run a while, the rest keep their objects.
        by_id = {j.id: j for j in got}
        nxt = []
        for job in jobs:
            job = by_id[job.id] if by_id[job.id].policy_state != job.policy_state else job  # noqa: PLW2901
            if rng.random() < 0.2:
                job = Job(  # noqa: PLW2901
                    id=job.id,
                    num_gpus=job.num_gpus,
                    model=job.model,
                    submit_time_s=job.submit_time_s,
                    state=JobState.PENDING,
                    attained_gpu_s=job.attained_gpu_s + rng.random() * 300,
                    pending_since_s=now,
                    policy_state=job.policy_state,
                )
            nxt.append(job)
        jobs = nxt
        now += rng.choice([30.0, 200.0, 900.0])
    assert promoted > 0  # the case the memo must not miss


_TIRESIAS_POLICIES: dict[str, Callable[[], Tiresias]] = {
    "tiresias": lambda: Tiresias(thresholds_gpu_s=(100.0, 1000.0), promote_knob=2.0),
    # mosaic's: jobs that declare a time limit on their own thresholds, below the others'
    # (a running job's memo kept to the other jobs' threshold would hold past its demotion).
    "declared-las": lambda: DeclaredLas((100.0, 1000.0), 2.0, (50.0,)),
}


@pytest.mark.parametrize("kind", sorted(_TIRESIAS_POLICIES))
def test_tiresias_kept_order_equals_a_fresh_policy_as_jobs_come_run_and_go(kind: str) -> None:
    # One policy over rounds in which jobs arrive and leave, start and stop, run past their
    # queue's threshold (demotion), wait past their promotion wait, and keep their objects
    # while nothing about them changes (as the simulator hands them in); the clock may also
    # step back, as a caller replaying snapshots may. Each round's order and states must be
    # those of a fresh policy.
    rng = random.Random(13)
    fresh = _TIRESIAS_POLICIES[kind]
    policy = fresh()
    slots = [(f"n{i}", k) for i in range(4) for k in range(8)]
    jobs: dict[str, Job] = {}
    next_id = 0
    now = 100.0
    seen = {"promoted": 0, "demoted": 0, "left": 0, "reused": 0}
    for _ in range(120):
        for _ in range(rng.randint(0, 4)):  # arrivals
            limit = rng.choice([None, None, 3600.0])
            jobs[str(next_id)] = make_job(
                next_id, rng.choice([1, 2]), submit=now - rng.random() * 10, time_limit_s=limit
            )
            next_id += 1
        for job_id in rng.sample(sorted(jobs), k=min(len(jobs), rng.randint(0, 2))):  # completions
            del jobs[job_id]
            seen["left"] += 1
        snapshot = make_snapshot([make_node()], jobs.values(), time_s=now)
        got = policy.order(snapshot)
        want = fresh().order(snapshot)
        assert [(j.id, j.policy_state) for j in got] == [(j.id, j.policy_state) for j in want]
        before = {j.id: j for j in snapshot.jobs}
        seen["reused"] += sum(1 for j in got if j is before[j.id])
        for j in got:
            old = (before[j.id].policy_state or {}).get("q")
            new = j.policy_state["q"]
            seen["promoted"] += old is not None and new < old
            seen["demoted"] += old is not None and new > old
        # The world: states applied, some jobs run a round (service grows; a few stop), the
        # rest keep their objects unless their state changed.
        free = list(slots)
        rng.shuffle(free)
        step = rng.choice([30.0, 200.0, 900.0, -50.0])
        nxt: dict[str, Job] = {}
        for job in got:
            src = before[job.id]
            job = job if job.policy_state != src.policy_state else src  # noqa: PLW2901
            if job.is_running and rng.random() < 0.2:  # preempted
                job = replace(job, state=JobState.PENDING, assignment=None, pending_since_s=now)  # noqa: PLW2901
            elif job.is_running:
                job = replace(job, attained_gpu_s=job.attained_gpu_s + job.num_gpus * max(step, 0.0))  # noqa: PLW2901
            elif rng.random() < 0.15 and len(free) >= job.num_gpus:  # starts
                job = running(job, [free.pop() for _ in range(job.num_gpus)])  # noqa: PLW2901
                job = replace(job, pending_since_s=None)  # noqa: PLW2901
            nxt[job.id] = job
        jobs = nxt
        now += step
    assert all(count > 0 for count in seen.values()), seen  # every case the kept state must not miss


def test_tiresias_keeps_no_job_object_a_caller_has_replaced():
    # The live controller hands in a new (equal) object whenever a job's store record
    # changes. Each one a demoted waiting job is held as gets a promotion-heap entry; the
    # entries left behind must not keep the replaced objects alive (at 10,000 queued jobs
    # they kept thousands, a slow rise of the controller's memory).
    policy = Tiresias(thresholds_gpu_s=(100.0,), promote_knob=8.0)
    waiting = [
        make_job(
            i, 1, submit=0.0, attained_gpu_s=500.0, pending_since_s=0.0, policy_state={"q": 1, "since": 0.0}
        )
        for i in range(10)
    ]
    gc.collect()
    before = sum(type(o) is Job for o in gc.get_objects())  # type(): no attribute lookups
    for k in range(600):  # 600 rounds within the 4,000 s promotion wait
        jobs = [replace(j, policy_state=dict(j.policy_state)) for j in waiting]
        snapshot = make_snapshot([make_node()], jobs, time_s=100.0 + k)
        got = policy.order(snapshot)
        assert [j.policy_state["q"] for j in got] == [1] * 10  # none promoted yet
        del jobs, snapshot, got
    gc.collect()
    alive = sum(type(o) is Job for o in gc.get_objects()) - before
    assert alive <= 3 * len(waiting), alive  # this round's objects, not 600 rounds' worth


class _EagerReservations(ConsolidatedPlacement):
    _defer = False  # every running job's GPUs reserved up front, GPU by GPU


def _shared_case(rng: random.Random) -> tuple[list, list[Job]]:
    """A random case where two running jobs may hold the same GPU (a sharing preset's snapshot)."""
    nodes, jobs = _random_case(rng)
    if rng.random() < 0.3:
        holders = [j for j in jobs if j.assignment is not None]
        if holders:
            slot = holders[0].assignment.gpus[0]
            jobs.append(running(make_job("twin", 1, submit=rng.random() * 100), [slot]))
    return nodes, jobs


def test_deferred_reservations_give_exactly_the_eager_walk():
    # Reservations written only when a search first needs them (none while every running
    # job is kept), against writing them all first: same outcomes, same GPUs, same order.
    rng = random.Random(11)
    for _ in range(500):
        nodes, jobs = _shared_case(rng)
        snapshot = make_snapshot(nodes, jobs)
        for options in ({}, {"backfill": False}):
            fast = ConsolidatedPlacement(**options).place(snapshot, jobs)
            eager = _EagerReservations(**options).place(snapshot, jobs)
            assert dict(fast.outcomes) == dict(eager.outcomes)
            assert list(fast.assignments) == list(eager.assignments)
            assert {k: a.gpus for k, a in fast.assignments.items()} == {
                k: a.gpus for k, a in eager.assignments.items()
            }


def test_placement_and_shaping_memos_across_rounds_equal_fresh_stages():
    # One placement and one shaping instance over a sequence of rounds (running jobs keep
    # their assignment objects, some stop, some start, one moves to another cluster shape)
    # give what fresh instances give each round.
    from planner.policies.shaping import ProportionalShaping

    rng = random.Random(5)
    placement, shaping = ConsolidatedPlacement(), ProportionalShaping()
    for _ in range(60):
        node_list, jobs = _random_case(rng)
        nodes = tuple(node_list)  # one tuple from round to round, as the simulator's
        for _ in range(6):
            snapshot = make_snapshot(nodes, jobs)
            order = list(jobs)
            rng.shuffle(order)
            got = placement.place(snapshot, order)
            want = ConsolidatedPlacement().place(snapshot, order)
            assert dict(got.outcomes) == dict(want.outcomes)
            assert {k: a.gpus for k, a in got.assignments.items()} == {
                k: a.gpus for k, a in want.assignments.items()
            }
            shaped = shaping.shape(snapshot, got)
            fresh = ProportionalShaping().shape(snapshot, got)
            assert {k: (a.gpus, a.cpus, a.mem_gb) for k, a in shaped.assignments.items()} == {
                k: (a.gpus, a.cpus, a.mem_gb) for k, a in fresh.assignments.items()
            }
            # The world applies the plan: most assigned jobs run with the shaped objects (the
            # same objects next round), the others wait.
            jobs = [
                _with(j, shaped.assignments[j.id])
                if j.id in shaped.assignments and rng.random() < 0.9
                else replace(j, state=JobState.PENDING, assignment=None)
                for j in jobs
            ]
            if rng.random() < 0.2:  # the same jobs on other nodes: nothing remembered may apply
                nodes = tuple(
                    make_node(n.name, gpus=n.gpus, gpu_type=n.gpu_type, cpus=n.cpus + 8) for n in nodes
                )


def _with(job: Job, assignment) -> Job:
    return replace(job, state=JobState.RUNNING, assignment=assignment)


def test_tiresias_memo_for_running_jobs_equals_a_fresh_policy_each_round():
    # Running jobs are new objects every round (their service grows); their remembered keys
    # must give way exactly when a job reaches its queue's threshold, is preempted, or its
    # state is replaced.
    rng = random.Random(9)
    thresholds = (100.0, 1000.0)
    policy = Tiresias(thresholds_gpu_s=thresholds, promote_knob=2.0)
    jobs = [
        make_job(str(k), rng.choice([1, 2, 4]), submit=rng.random() * 50, attained_gpu_s=rng.random() * 200)
        for k in range(30)
    ]
    now, demoted = 60.0, 0
    for _ in range(60):
        snapshot = make_snapshot([make_node()], jobs, time_s=now)
        got = policy.order(snapshot)
        want = Tiresias(thresholds_gpu_s=thresholds, promote_knob=2.0).order(snapshot)
        assert [(j.id, j.policy_state) for j in got] == [(j.id, j.policy_state) for j in want]
        by_id = {j.id: j for j in got}
        step = rng.choice([10.0, 60.0, 400.0])
        nxt = []
        for job in jobs:
            state = (
                by_id[job.id].policy_state
                if by_id[job.id].policy_state != job.policy_state
                else job.policy_state
            )
            if state is not job.policy_state and job.policy_state is not None and job.is_running:
                demoted += 1
            r = rng.random()
            if r < 0.5:  # runs: a new object with more service, same state object
                job = replace(  # noqa: PLW2901
                    job,
                    state=JobState.RUNNING,
                    assignment=job.assignment or running(job, [("n1", 0)]).assignment,
                    attained_gpu_s=job.attained_gpu_s + step * job.num_gpus,
                    pending_since_s=None,
                    policy_state=state,
                )
            elif r < 0.6:  # preempted
                job = replace(  # noqa: PLW2901
                    job, state=JobState.PENDING, assignment=None, pending_since_s=now, policy_state=state
                )
            elif r < 0.65:  # its state replaced by an equal but new mapping
                job = replace(job, policy_state=None if state is None else dict(state))  # noqa: PLW2901
            else:
                job = replace(job, policy_state=state) if state is not job.policy_state else job  # noqa: PLW2901
            nxt.append(job)
        jobs = nxt
        now += step
    assert demoted > 0  # the case the running memo must not miss


def test_plan_checker_finds_what_plan_violations_finds_over_a_sequence_of_plans():
    # Plans that keep some of the last plan's assignment objects, drop others and add new
    # ones, some of them broken (a GPU twice, a wrong count, too many CPUs or GB on a node).
    from planner.core.model import Assignment, RoundPlan
    from planner.validate import PlanChecker, plan_violations

    rng = random.Random(13)
    nodes = tuple(make_node(f"n{i}", gpus=4, cpus=16, mem_gb=64.0) for i in range(4))
    slots = [(n.name, k) for n in nodes for k in range(n.gpus)]
    jobs = [make_job(str(k), rng.choice([1, 2, 4])) for k in range(12)]
    snapshot = make_snapshot(nodes, jobs)
    checker, last = PlanChecker(), {}
    found = 0
    for _ in range(400):
        kept = {j: a for j, a in last.items() if rng.random() < 0.7}
        used = {s for a in kept.values() for s in a.gpus}
        assignments = dict(kept)
        for job in rng.sample(jobs, 4):
            if job.id in assignments:
                continue
            free = [s for s in slots if s not in used]
            count = job.num_gpus if rng.random() < 0.95 else job.num_gpus + 1
            if rng.random() < 0.05:
                free = slots  # may land on a GPU another job holds
            if len(free) < count:
                continue
            gpus = tuple(sorted(rng.sample(free, count)))
            used.update(gpus)
            cpus = 4 * count if rng.random() < 0.95 else 40
            assignments[job.id] = Assignment(gpus, cpus, 16.0 * count)
        plan = RoundPlan(assignments=assignments)
        want = plan_violations(snapshot, plan, 1, last)
        got = checker.violations(snapshot, plan, 1)
        assert sorted(got) == sorted(want)
        if want:  # a failing plan stops a simulation: start over
            found += 1
            checker, last = PlanChecker(), {}
        else:
            last = assignments
    assert found > 10
