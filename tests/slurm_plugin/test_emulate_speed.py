"""The emulated job's speed: the simulator's speed model on the resources Slurm gave it (no Slurm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.core.model import Assignment
from planner.sim.progress import SpeedModel
from slurm_plugin import emulate_speed, planfile
from slurm_plugin.emulate import EmulatedJob
from slurm_plugin.emulate_speed import EmulationError, assignment_from_env, expand_hostlist, job_speed
from tests.builders import make_nodes, profiles, trace_job

ROOT = Path(__file__).resolve().parents[2]
NODES = {n.name: n for n in make_nodes(2, gpus=4, gpu_type="v100", cpus=16, mem_gb=64.0)}
CLUSTER_TOML = '[[nodes]]\ncount = 2\ngpus = 4\ngpu_type = "v100"\ncpus = 16\nmem_gb = 64\n'


def slurm_env(job_id: str = "7", nodes: str = "n1", gpus: str = "0,1", cpus: int = 8, mem_mb: int = 32768):
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_JOB_GPUS": gpus,
        "CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in range(len(gpus.split(",")))),
        "SLURM_CPUS_ON_NODE": str(cpus),
        "SLURM_MEM_PER_NODE": str(mem_mb),
    }


def simulator_speed(job, assignment, partners=()):
    return SpeedModel(profiles(), NODES).speed(job, assignment, partners)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1,3-4],gpu7", ["n1", "n3", "n4", "gpu7"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
    ],
)
def test_hostlists_expand_as_slurm_writes_them(text, names):
    assert expand_hostlist(text) == names


def test_a_hostlist_it_cannot_read_is_named():
    with pytest.raises(EmulationError, match=r"n\[1-x\]"):
        expand_hostlist("n[1-x]")


def test_the_assignment_is_what_slurm_gave_the_job():
    a = assignment_from_env(slurm_env(gpus="1,3", cpus=6, mem_mb=12288), None)
    assert a.gpus == (("n1", 1), ("n1", 3))
    assert (a.cpus, a.mem_gb, a.plan) == (6, 12.0, None)


def test_a_multi_node_job_holds_its_resources_on_every_node():
    a = assignment_from_env(slurm_env(nodes="n[1-2]", gpus="0,1", cpus=4, mem_mb=8192), None)
    assert a.per_node == (("n1", 2), ("n2", 2))
    assert (a.cpus, a.mem_gb) == (8, 16.0)


def test_memory_per_cpu_counts_when_memory_per_node_is_not_set():
    env = slurm_env(cpus=4)
    del env["SLURM_MEM_PER_NODE"]
    env["SLURM_MEM_PER_CPU"] = "2048"
    assert assignment_from_env(env, None).mem_gb == 8.0


@pytest.mark.parametrize("missing", ["SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE"])
def test_a_missing_slurm_variable_is_named(missing):
    env = slurm_env()
    del env[missing]
    with pytest.raises(EmulationError, match=missing.replace("NODE", "")):
        assignment_from_env(env, None)


def test_a_job_without_gpus_is_an_error():
    env = slurm_env()
    env["SLURM_JOB_GPUS"] = env["CUDA_VISIBLE_DEVICES"] = ""
    with pytest.raises(EmulationError, match="holds none"):
        assignment_from_env(env, None)


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.integers(1, 4),
    cpus=st.integers(1, 16),
    mem_gb=st.integers(1, 64),
    model=st.sampled_from(["resnet50", "resnet18", "transformer", "lstm", "vgg19"]),
)
def test_the_emulated_speed_is_the_simulators_for_the_same_resources(
    tmp_path_factory, gpus, cpus, mem_gb, model
):
    spool = tmp_path_factory.mktemp("spool")
    env = slurm_env(gpus=",".join(str(k) for k in range(gpus)), cpus=cpus, mem_mb=mem_gb * 1024)
    job = trace_job("7", gpus=gpus, model=model)
    speed, assignment = job_speed(env, spool, job, NODES, profiles())
    expected = Assignment(tuple(("n1", k) for k in range(gpus)), cpus, float(mem_gb))
    assert assignment == expected
    assert speed == simulator_speed(job, expected)


def test_at_its_proportional_share_a_job_runs_at_its_trace_speed(tmp_path):
    job = trace_job("7", gpus=2, model="resnet50")
    speed, _ = job_speed(slurm_env(cpus=8, mem_mb=32 * 1024), tmp_path, job, NODES, profiles())
    assert speed == pytest.approx(1.0)


def test_a_cpu_starved_job_runs_slower_than_at_its_share(tmp_path):
    # Synergy §3.1: image models need CPUs for data loading.
    job = trace_job("7", gpus=2, model="resnet18")
    # (at 16 GB per GPU the measured matrix is at its floor whatever the CPUs: give it the node's memory)
    starved, _ = job_speed(slurm_env(cpus=2, mem_mb=64 * 1024), tmp_path, job, NODES, profiles())
    share, _ = job_speed(slurm_env(cpus=8, mem_mb=64 * 1024), tmp_path, job, NODES, profiles())
    assert starved < share


def test_the_plan_files_gradient_accumulation_slows_the_job_as_in_the_simulator(tmp_path):
    job = trace_job("7", gpus=2, model="resnet50", batch_size=256)
    plan = {"dp": 2, "micro_batch": 32, "grad_accum": 4, "global_batch": 256}
    planned = Assignment((("n1", 0), ("n1", 1)), 8, 32.0, plan)
    planfile.write_plan(tmp_path, "7", None, planned)
    speed, assignment = job_speed(slurm_env(cpus=8, mem_mb=32 * 1024), tmp_path, job, NODES, profiles())
    assert assignment.plan == plan
    alone, _ = job_speed(slurm_env(job_id="8", cpus=8, mem_mb=32 * 1024), tmp_path, job, NODES, profiles())
    assert speed == simulator_speed(job, planned) < alone


def test_a_gpu_partner_slows_the_job_as_in_the_simulator(tmp_path):
    me = trace_job("7", gpus=2, model="resnet18")
    partner = trace_job("9", gpus=2, model="lstm")
    mine = Assignment((("n1", 0), ("n1", 1)), 4, 16.0, shares_with=("9",))
    theirs = Assignment((("n1", 0), ("n1", 1)), 4, 16.0, shares_with=("7",))
    planfile.write_plan(tmp_path, "7", None, mine)
    env = slurm_env(cpus=4, mem_mb=16 * 1024)
    unknown_partner, _ = job_speed(env, tmp_path, me, NODES, profiles())  # the partner has not started
    planfile.write_plan(tmp_path, "9", None, theirs)
    emulate_speed.write_identity(tmp_path / "status" / "9", partner)
    shared, _ = job_speed(env, tmp_path, me, NODES, profiles())
    assert shared == simulator_speed(me, mine, [(partner, theirs)])
    assert shared != unknown_partner


def test_a_node_outside_the_cluster_file_is_named(tmp_path):
    with pytest.raises(EmulationError, match="n9"):
        job_speed(slurm_env(nodes="n9"), tmp_path, trace_job("7"), NODES, profiles())


def test_an_emulated_job_advances_at_its_speed(tmp_path):
    ticks = iter(range(10**6))
    job = EmulatedJob(
        "7", tmp_path, duration_s=10.0, time_scale=1.0, requested_gpus=1, clock=lambda: next(ticks)
    )
    assert job.run({}, gpus=1, tick_s=0.0, speed=0.5, started=0.0) == 0
    assert 20 <= next(ticks) <= 22  # 10 s of work at half speed: 20 clock seconds (+ the final reads)
    start = json.loads((tmp_path / "status" / "7" / "heartbeat.jsonl").read_text().splitlines()[0])
    assert start["speed"] == 0.5


def test_the_job_program_reports_the_simulators_speed(tmp_path: Path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER_TOML)
    env = {**slurm_env(cpus=2, mem_mb=64 * 1024), "MOSAIC_SPOOL": str(tmp_path)}
    command = [sys.executable, "-m", "slurm_plugin.emulate", "--duration-s", "1", "--time-scale", "100"]
    command += ["--model", "resnet18", "--cluster", str(cluster)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    records = [
        json.loads(line) for line in (tmp_path / "status" / "7" / "heartbeat.jsonl").read_text().splitlines()
    ]
    expected = simulator_speed(trace_job("7", gpus=2, model="resnet18"), assignment_from_env(env, None))
    assert records[0]["speed"] == pytest.approx(expected) and expected != 1.0
    assert records[-1]["event"] == "done" and records[-1]["progress"] == 1.0


def test_model_without_cluster_is_refused(tmp_path: Path):
    command = [sys.executable, "-m", "slurm_plugin.emulate", "--duration-s", "1", "--model", "resnet18"]
    env = {**slurm_env(), "MOSAIC_SPOOL": str(tmp_path)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode != 0 and "--cluster" in done.stderr


def test_an_elastic_job_on_more_gpus_than_it_asked_runs_at_the_scaling_models_ratio(tmp_path):
    # No measurements for the model: each GPU adds the same, as in the simulator.
    job = trace_job("7", gpus=2, model="no-such-model")
    env = slurm_env(gpus="0,1,2,3", cpus=16, mem_mb=64 * 1024)
    speed, assignment = job_speed(env, tmp_path, job, NODES, profiles(), requested_gpus=2)
    assert speed == pytest.approx(2.0) and assignment.num_gpus == 4
    assert speed == simulator_speed(job, assignment)
    as_given, _ = job_speed(env, tmp_path, job, NODES, profiles())  # no request: what Slurm gave
    assert as_given == pytest.approx(1.0)
