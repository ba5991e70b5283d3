"""Each ordering policy on small hand-made queues; the expected order is spelled out."""

import math
from dataclasses import replace

import pytest

from planner.policies.basic import Fifo, LeastAttainedService, ShortestJobFirst, ShortestRemainingTimeFirst
from planner.policies.ftf import FinishTimeFairness, estimated_rho
from planner.policies.tiresias import Tiresias
from tests.builders import make_job, make_nodes, make_snapshot, running


def ids(jobs):
    return [j.id for j in jobs]


def order(policy, jobs, time_s=0.0, nodes=None):
    return ids(policy.order(make_snapshot(nodes or make_nodes(2), jobs, time_s)))


def test_fifo_by_submit_time_then_numeric_id():
    jobs = [make_job(10, submit=5), make_job(9, submit=5), make_job("b", submit=1), make_job(2, submit=7)]
    assert order(Fifo(), jobs) == ["b", "9", "10", "2"]


def test_sjf_sizes():
    a = make_job("a", 4, duration_s=100)  # gpu_time 400
    b = make_job("b", 1, duration_s=300)  # gpu_time 300
    c = make_job("c", 2)  # unknown duration: last for time-based sizes
    assert order(ShortestJobFirst("duration"), [a, b, c]) == ["a", "b", "c"]
    assert order(ShortestJobFirst("gpu_time"), [a, b, c]) == ["b", "a", "c"]
    assert order(ShortestJobFirst("gpus"), [a, b, c]) == ["b", "c", "a"]


def test_srtf_uses_remaining_then_progress_then_duration():
    a = make_job("a", remaining_s=50)
    b = make_job("b", duration_s=1000, progress=0.9, attained_gpu_s=900)  # 100 left
    c = make_job("c", duration_s=80)  # never ran: 80 left
    d = make_job("d", attained_gpu_s=10)  # nothing known: +inf
    assert order(ShortestRemainingTimeFirst(), [d, b, c, a]) == ["a", "c", "b", "d"]
    e = make_job("e", 4, remaining_s=30)  # 120 GPU-seconds left
    assert order(ShortestRemainingTimeFirst("gpu_time"), [a, e]) == ["a", "e"]


def test_las_by_attained_gpu_service():
    jobs = [make_job("a", attained_gpu_s=50), make_job("b", attained_gpu_s=5), make_job("c", submit=1)]
    assert order(LeastAttainedService(), jobs) == ["c", "b", "a"]


class TestTiresias:
    policy = Tiresias(thresholds_gpu_s=(100.0, 1000.0), promote_knob=2.0)

    def test_first_sight_queue_follows_service(self):
        assert self.policy.transition(make_job(attained_gpu_s=0), 50) == (0, 0.0)
        assert self.policy.transition(make_job(attained_gpu_s=100), 50) == (1, 50)
        assert self.policy.transition(make_job(attained_gpu_s=5000), 50) == (2, 50)

    def test_fifo_by_queue_entry_not_by_service(self):
        # Both in queue 1; b entered it first, so b goes first although it has more service.
        a = make_job("a", attained_gpu_s=150, policy_state={"q": 1, "since": 40})
        b = make_job("b", attained_gpu_s=900, submit=9, policy_state={"q": 1, "since": 30})
        c = make_job("c", attained_gpu_s=99, submit=20, policy_state={"q": 0, "since": 20})
        assert order(self.policy, [a, b, c], time_s=60) == ["c", "b", "a"]

    def test_running_job_is_demoted_to_the_back_of_the_next_queue(self):
        job = running(make_job("a", attained_gpu_s=120, policy_state={"q": 0, "since": 0}), [("n1", 0)])
        assert self.policy.transition(job, 500) == (1, 500)

    def test_pending_job_keeps_its_queue_even_above_the_threshold(self):
        # A promoted job waits in queue 0 until it has run there.
        job = make_job("a", attained_gpu_s=5000, policy_state={"q": 0, "since": 10}, pending_since_s=0)
        assert self.policy.transition(job, 20) == (0, 10)

    def test_raised_thresholds_bring_a_job_back_to_the_queue_its_service_earns(self):
        # Demoted at 100 GPU-s (state q=1, entered at 40 and 30); with the split raised to
        # 1,000 (a site's new configuration) their 150 GPU-s earn queue 0, in entry order.
        raised = Tiresias((1000.0,), promote_knob=2.0)
        waiting = make_job("a", attained_gpu_s=150, pending_since_s=0, policy_state={"q": 1, "since": 40})
        ran = running(make_job("b", attained_gpu_s=150, policy_state={"q": 1, "since": 30}), [("n1", 0)])
        assert raised.transition(waiting, 60) == (0, 40)
        assert raised.transition(ran, 60) == (0, 30)
        assert order(raised, [waiting, ran, make_job("c", submit=35)], time_s=60) == ["b", "c", "a"]

    def test_starving_job_is_promoted(self):
        # 2 GPUs x 50 s executed = 100 GPU-s; knob 2 -> promoted after waiting 100 s.
        job = make_job("a", 2, attained_gpu_s=100, pending_since_s=1000, policy_state={"q": 1, "since": 400})
        assert self.policy.transition(job, 1099) == (1, 400)
        assert self.policy.transition(job, 1100) == (0, 1100)

    def test_promotion_can_be_disabled(self):
        job = make_job("a", attained_gpu_s=100, pending_since_s=0, policy_state={"q": 1, "since": 0})
        assert Tiresias((100.0,), promote_knob=0).transition(job, 1e9) == (1, 0)

    def test_order_returns_jobs_carrying_their_new_state(self):
        jobs = [make_job("a", attained_gpu_s=500), make_job("b")]
        ordered = self.policy.order(make_snapshot(make_nodes(1), jobs, 7))
        assert [(j.id, dict(j.policy_state)) for j in ordered] == [
            ("b", {"q": 0, "since": 0.0}),
            ("a", {"q": 1, "since": 7}),
        ]


class TestFinishTimeFairness:
    def test_rho_arithmetic(self):
        # 4 jobs, 8 GPUs: a 4-GPU job's fair share is 2 GPUs -> T_ideal = 100 * 4*4/8 = 200.
        # Age 50 + remaining 100 = 150 -> rho = 0.75.
        job = make_job("a", 4, submit=0, duration_s=100)
        assert estimated_rho(job, 50, active_jobs=4, cluster_gpus=8) == pytest.approx(0.75)
        # 1-GPU job: share 8/4 = 2 GPUs >= 1 -> T_ideal = duration.
        small = make_job("b", 1, submit=0, duration_s=100, remaining_s=40)
        assert estimated_rho(small, 50, 4, 8) == pytest.approx(0.9)

    def test_unknown_duration_uses_slowdown_so_far(self):
        assert estimated_rho(make_job("a", 2, submit=0, attained_gpu_s=100), 200, 1, 8) == pytest.approx(4.0)
        assert math.isinf(estimated_rho(make_job("a"), 10, 1, 8))

    def test_worst_rho_first(self):
        nodes = make_nodes(2)  # 8 GPUs
        old_short = make_job("short", 1, submit=0, duration_s=100)
        young_long = make_job("long", 1, submit=90, duration_s=10000)
        assert order(FinishTimeFairness(), [young_long, old_short], time_s=100, nodes=nodes) == [
            "short",
            "long",
        ]

    def test_requested_gpu_type_uses_that_types_capacity(self):
        nodes = make_nodes(1, gpu_type="a100") + make_nodes(1, gpu_type="v100", prefix="m")
        job = make_job("a", 4, duration_s=100, gpu_type="a100")
        plain = replace(job, gpu_type=None)
        # 2 jobs; a100 capacity 4 -> share 2 GPUs -> T_ideal 200; whole cluster 8 -> T_ideal 100.
        ordered = FinishTimeFairness().order(make_snapshot(nodes, [job, replace(plain, id="b")], 0))
        assert ids(ordered) == ["b", "a"]


@pytest.mark.parametrize(
    "policy",
    [
        Fifo(),
        ShortestJobFirst(),
        ShortestRemainingTimeFirst(),
        LeastAttainedService(),
        Tiresias(),
        FinishTimeFairness(),
    ],
)
def test_every_policy_returns_every_job_once_deterministically(policy):
    jobs = [
        make_job(i, 1 + i % 3, submit=i % 4, duration_s=100.0 * (i % 5 + 1), attained_gpu_s=float(i % 7))
        for i in range(30)
    ]
    snap = make_snapshot(make_nodes(2), jobs, 10)
    first = ids(policy.order(snap))
    assert sorted(first) == sorted(j.id for j in jobs)
    assert ids(policy.order(make_snapshot(make_nodes(2), list(reversed(jobs)), 10))) == first
