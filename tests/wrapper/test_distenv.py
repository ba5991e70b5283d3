"""torch.distributed's environment from srun's variables."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.errors import InputError
from wrapper.distenv import first_host, master_port, task_environment

SRUN = {
    "SLURM_JOB_ID": "1234",
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS_PER_NODE": "2(x2)",
    "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.5",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}


def test_a_task_gets_its_rank_world_and_master():
    assert task_environment(SRUN) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": str(20000 + 1234),
    }


def test_the_master_is_the_override_then_the_launch_node_then_the_first_host():
    assert task_environment({**SRUN, "MOSAIC_MASTER_ADDR": "127.0.0.1"})["MASTER_ADDR"] == "127.0.0.1"
    without_launch = {k: v for k, v in SRUN.items() if k != "SLURM_LAUNCH_NODE_IPADDR"}
    assert task_environment(without_launch)["MASTER_ADDR"] == "gpu07"


@pytest.mark.parametrize(
    ("nodelist", "first"), [("n1", "n1"), ("n[3-5,7],m1", "n3"), ("gpu[07-08]", "gpu07"), ("a,b", "a")]
)
def test_first_host_reads_slurm_node_lists(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SLURM_PROCID": None}, "SLURM_PROCID is not set"),
        ({"SLURM_NTASKS": "four"}, "SLURM_NTASKS: expected a non-negative integer, got 'four'"),
        ({"SLURM_PROCID": "4"}, "SLURM_PROCID 4 is not below SLURM_NTASKS 4"),
    ],
)
def test_missing_or_bad_srun_variables_are_named(change, message):
    env = {k: v for k, v in {**SRUN, **change}.items() if v is not None}
    with pytest.raises(InputError, match=message):
        task_environment(env)


@given(st.text(alphabet="0123456789_abc", max_size=12))
def test_the_master_port_is_always_in_the_private_range(job_id):
    assert 20000 <= master_port(job_id) < 40000
