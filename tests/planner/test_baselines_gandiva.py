"""gandiva: heterogeneity-unaware per-type FIFO, grow/shrink and locality migration."""

from __future__ import annotations

from planner import plan_round
from tests.builders import make_job, make_node, make_snapshot, running, scheduler

A100 = dict(model="bert_760M", batch_size=128, gpu_type="a100")


def test_jobs_wait_for_the_type_they_asked_for_in_order():
    # The a10 node is full; an a100 node is idle. Gandiva ignores heterogeneity: the a10 job
    # waits (even though it would accept an a100), and a later a10 job queues behind it.
    nodes = [make_node("a10-1", gpus=2, gpu_type="a10"), make_node("a100-1", gpus=4, gpu_type="a100")]
    busy = running(make_job("busy", 2, gpu_type="a10"), [("a10-1", 0), ("a10-1", 1)])
    first = make_job("first", 1, submit=1.0, gpu_type="a10", gpu_types=("a10", "a100"))
    second = make_job("second", 1, submit=2.0, gpu_type="a10")
    other = make_job("other", 1, submit=3.0, gpu_type="a100")
    plan = plan_round(make_snapshot(nodes, [busy, first, second, other]), scheduler("gandiva"))
    assert set(plan.assignments) == {"busy", "other"}
    assert plan.reasons["first"] == "no-capacity"
    assert plan.reasons["second"] == "blocked"


def test_an_elastic_job_grows_into_its_idle_node_and_gives_back_for_a_waiting_job():
    # bert_760M at batch 128 on a100: 6.58 s per iteration on 1 GPU, 3.44 s on 2, faster on 4
    # (Crius's table), and its data-parallel replica fits: alone it doubles to 4.
    nodes = [make_node("a100-1", gpus=4, gpu_type="a100")]
    grower = make_job("g", 1, max_gpus=4, **A100)
    alone = plan_round(make_snapshot(nodes, [grower]), scheduler("gandiva"))
    assert alone.assignments["g"].num_gpus == 4
    # A 2-GPU job arrives: g shrinks back to its 1 GPU, the newcomer runs, g regrows into
    # the one GPU left (1 -> 2).
    g = running(grower, [("a100-1", k) for k in range(4)])
    newcomer = make_job("w", 2, submit=10.0, **A100)
    plan = plan_round(make_snapshot(nodes, [g, newcomer], 360.0), scheduler("gandiva"))
    assert plan.assignments["w"].num_gpus == 2
    assert plan.assignments["g"].num_gpus == 2
    assert not set(plan.assignments["w"].gpus) & set(plan.assignments["g"].gpus)


def test_a_rigid_job_is_never_resized_or_moved():
    nodes = [make_node("a100-1", gpus=4, gpu_type="a100"), make_node("a100-2", gpus=4, gpu_type="a100")]
    rigid = running(make_job("r", 4, **A100), [("a100-1", 0), ("a100-1", 1), ("a100-2", 0), ("a100-2", 1)])
    plan = plan_round(make_snapshot(nodes, [rigid]), scheduler("gandiva"))
    assert plan.assignments["r"].gpus == rigid.assignment.gpus and plan.migrated == ()


def test_a_spread_elastic_job_moves_onto_one_node():
    # Gandiva migrates for locality: 2 + 2 GPUs over two nodes, one node free: 4 on one node.
    nodes = [make_node("a100-1", gpus=4, gpu_type="a100"), make_node("a100-2", gpus=4, gpu_type="a100")]
    job = make_job("e", 4, min_gpus=2, max_gpus=4, **A100)
    spread = running(job, [("a100-1", 0), ("a100-1", 1), ("a100-2", 0), ("a100-2", 1)])
    plan = plan_round(make_snapshot(nodes, [spread]), scheduler("gandiva"))
    assert len(plan.assignments["e"].per_node) == 1
    assert plan.assignments["e"].num_gpus == 4
    still = plan_round(
        make_snapshot(nodes, [spread]), scheduler("gandiva", options={"placement": {"migrate": False}})
    )
    assert len(still.assignments["e"].per_node) == 2
