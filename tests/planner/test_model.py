from dataclasses import replace

import pytest

from planner.core.errors import InputError
from planner.core.model import Assignment, Job, JobState, demand_problem
from tests.builders import make_job


def test_assignment_sorts_gpus_so_equal_sets_compare_equal():
    a = Assignment((("n2", 1), ("n1", 3), ("n1", 0)), 8, 32.0)
    b = Assignment((("n1", 0), ("n1", 3), ("n2", 1)), 8, 32.0)
    assert a == b
    assert a.gpus == (("n1", 0), ("n1", 3), ("n2", 1))
    assert a.per_node == (("n1", 2), ("n2", 1))
    assert a.nodes == ("n1", "n2")


def test_node_shares_split_by_gpus_and_add_up():
    # 3 GPUs on n1 and 1 on n2; 10 CPUs: 10*3//4 = 7 and 10*1//4 = 2, remainder 1 to n1.
    a = Assignment((("n1", 0), ("n1", 1), ("n1", 2), ("n2", 0)), 10, 40.0)
    assert a.node_shares() == (("n1", 8, 30.0), ("n2", 2, 10.0))
    assert sum(c for _, c, _ in a.node_shares()) == a.cpus
    assert a.share_on("n2") == (2, 10.0)
    assert a.share_on("n9") == (0, 0.0)


def test_single_node_share_is_the_total():
    a = Assignment((("n1", 0),), 3, 62.5)
    assert a.node_shares() == (("n1", 3, 62.5),)


def test_same_resources_ignores_float_noise_but_not_plan_changes():
    a = Assignment((("n1", 0),), 3, 62.5)
    assert a.same_resources(Assignment((("n1", 0),), 3, 62.5 + 1e-9))
    assert not a.same_resources(Assignment((("n1", 0),), 4, 62.5))
    assert not a.same_resources(Assignment((("n1", 0),), 3, 62.5, plan={"zero": 2}))


def test_a_job_without_elastic_fields_is_rigid():
    job = make_job(1, 4, gpu_type="a100")
    assert job.gpu_range == (4, 4) and not job.elastic
    assert job.accepts_gpus(4) and not job.accepts_gpus(3) and not job.accepts_gpus(5)
    assert job.accepted_types == ("a100",)
    assert job.accepts_type("a100") and not job.accepts_type("v100")
    assert make_job(2, 1).accepted_types == () and make_job(2, 1).accepts_type("t4")


def test_an_elastic_job_accepts_its_range_and_types():
    job = make_job(1, 4, min_gpus=2, max_gpus=8, gpu_types=("a100", "v100"))
    assert job.gpu_range == (2, 8) and job.elastic
    assert [n for n in range(10) if job.accepts_gpus(n)] == [2, 3, 4, 5, 6, 7, 8]
    assert job.accepted_types == ("a100", "v100")
    assert job.accepts_type("v100") and not job.accepts_type("t4")
    # One bound alone: the other is num_gpus. One accepted type is a constraint, not elasticity.
    assert make_job(2, 4, max_gpus=6).gpu_range == (4, 6)
    assert not make_job(3, 4, min_gpus=4, max_gpus=4, gpu_types=("a100",)).elastic
    # gpu_types overrides gpu_type for placement; gpu_type stays the type duration_s refers to.
    both = make_job(4, 1, gpu_type="v100", gpu_types=("v100", "a100"))
    assert both.accepted_types == ("v100", "a100") and both.accepts_type("a100")
    assert hash(job) == hash(make_job(1, 4, min_gpus=2, max_gpus=8, gpu_types=("a100", "v100")))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_gpus": 5}, r"job '1': key 'min_gpus': expected an integer in \[1, num_gpus 4\], got 5"),
        ({"min_gpus": 0}, r"key 'min_gpus': expected an integer in \[1, num_gpus 4\], got 0"),
        ({"max_gpus": 3}, r"key 'max_gpus': expected an integer >= num_gpus 4, got 3"),
        ({"gpu_types": ("a100", "a100")}, r"key 'gpu_types': lists 'a100' twice"),
        ({"gpu_types": ("a100", " ")}, r"key 'gpu_types': a GPU type name must not be empty"),
        (
            {"gpu_type": "t4", "gpu_types": ("a100", "v100")},
            r"key 'gpu_types': gpu_type 't4' is not among the accepted types a100, v100",
        ),
    ],
)
def test_an_inconsistent_demand_cannot_be_built(fields, message):
    with pytest.raises(InputError, match=message):
        make_job(1, 4, **fields)
    key = message.split("key '")[1].split("'")[0]
    args = (
        fields.get("min_gpus"),
        fields.get("max_gpus"),
        fields.get("gpu_type"),
        fields.get("gpu_types", ()),
    )
    assert demand_problem(4, *args)[0] == key


def test_with_policy_state_equals_replace_and_leaves_the_job_alone() -> None:
    a = Assignment((("n0", 0), ("n0", 1)), 8, 64.0, {"dp": 2})
    job = Job("7", 2, "bert", 3.0, state=JobState.RUNNING, attained_gpu_s=10.0, assignment=a,
              min_gpus=1, max_gpus=4, gpu_types=("a100", "v100"), policy_state={"q": 0})  # fmt: skip
    moved = job.with_policy_state({"q": 1, "since": 5.0})
    assert moved == replace(job, policy_state={"q": 1, "since": 5.0})
    assert moved.assignment is a and job.policy_state == {"q": 0}
    assert job.with_policy_state(None).policy_state is None
