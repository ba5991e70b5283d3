"""Rendering plans for DeepSpeed, Megatron-LM and srun, against golden files in tests/data/wrapper/.

``MOSAIC_UPDATE_GOLDEN=1 pytest tests/wrapper/test_render.py`` rewrites the golden files;
review the diff before committing it.
"""

import json
import os
from pathlib import Path

import pytest

from planner.core.execplan import PlanError, plan_from_mapping, resolve
from planner.core.model import Assignment
from wrapper import render

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "wrapper"
BASE_DS = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "bf16": {"enabled": False}}

DEEPSPEED_CASES = {
    "ds_zero1": ({"zero_stage": 1}, 2, 16, False),
    "ds_zero2_offload_accum": ({"zero_stage": 2, "offload_optimizer": True, "micro_batch": 2}, 4, 32, False),
    "ds_zero3_offload_param_ckpt": (
        {"zero_stage": 3, "offload_optimizer": True, "offload_param": True, "activation_checkpointing": True},
        8,
        64,
        False,
    ),
    "ds_zero2_universal_resume": ({"zero_stage": 2}, 4, 16, True),
}


def golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("MOSAIC_UPDATE_GOLDEN"):
        path.write_text(actual)
    assert actual == path.read_text(), f"{name} differs from its golden file"


def _ds(name):
    mapping, workers, global_batch, universal = DEEPSPEED_CASES[name]
    plan = resolve(plan_from_mapping(mapping), workers, global_batch)
    return render.deepspeed_config(plan, BASE_DS, load_universal=universal)


@pytest.mark.parametrize("name", sorted(DEEPSPEED_CASES))
def test_deepspeed_configs_match_their_golden_files(name):
    golden(f"{name}.json", json.dumps(_ds(name), indent=2, sort_keys=True) + "\n")


# DeepSpeedConfig takes the data-parallel size from an initialised process group (and an
# ``mpu``), so the configs are parsed in one child process that sets up a 1-rank gloo group.
_PARSE = """
import json, sys
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig

class Mpu:  # DeepSpeed asks the model-parallel unit for the data-parallel size
    def __init__(self, dp): self.dp = dp
    def get_data_parallel_world_size(self): return self.dp

deepspeed.init_distributed("gloo", auto_mpi_discovery=False, init_method="tcp://127.0.0.1:" + sys.argv[1],
                           rank=0, world_size=1)
out = {}
for name, (config, dp) in json.load(sys.stdin).items():
    try:
        c = DeepSpeedConfig(config, mpu=Mpu(dp))
        out[name] = {"train_batch_size": c.train_batch_size, "micro": c.train_micro_batch_size_per_gpu,
                     "accum": c.gradient_accumulation_steps, "stage": c.zero_optimization_stage,
                     "offload_optimizer": c.zero_config.offload_optimizer is not None,
                     "offload_param": c.zero_config.offload_param is not None,
                     "load_universal": c.load_universal_checkpoint}
    except AssertionError as e:
        out[name] = {"error": str(e)}
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def parsed_by_deepspeed():
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed')")
    import socket
    import subprocess
    import sys

    configs = {name: (_ds(name), DEEPSPEED_CASES[name][1]) for name in DEEPSPEED_CASES}
    broken = dict(_ds("ds_zero1"), train_batch_size=17)  # the parser can fail: an inconsistent split
    configs["broken"] = (broken, 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", _PARSE, str(port)], input=json.dumps(configs), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@pytest.mark.parametrize("name", sorted(DEEPSPEED_CASES))
def test_rendered_deepspeed_configs_pass_deepspeeds_own_parser(name, parsed_by_deepspeed):
    mapping, workers, global_batch, universal = DEEPSPEED_CASES[name]
    plan = resolve(plan_from_mapping(mapping), workers, global_batch)
    assert parsed_by_deepspeed[name] == {
        "train_batch_size": global_batch,
        "micro": plan.micro_batch,
        "accum": plan.grad_accum,
        "stage": mapping["zero_stage"],
        "offload_optimizer": plan.offload_optimizer,
        "offload_param": plan.offload_param,
        "load_universal": universal,
    }


def test_deepspeeds_parser_rejects_a_config_that_breaks_the_global_batch(parsed_by_deepspeed):
    assert "Check batch related parameters" in parsed_by_deepspeed["broken"]["error"]


def test_the_plan_overrides_the_jobs_own_deepspeed_settings_and_keeps_the_rest():
    base = {**BASE_DS, "zero_optimization": {"stage": 0, "overlap_comm": True}, "train_batch_size": 999}
    plan = resolve(plan_from_mapping({"zero_stage": 2}), 2, 16)
    config = render.deepspeed_config(plan, base)
    assert config["zero_optimization"] == {"stage": 2, "overlap_comm": True}
    assert config["train_batch_size"] == 16 and config["optimizer"] == BASE_DS["optimizer"]
    assert base["train_batch_size"] == 999  # the job's config is not modified


@pytest.mark.parametrize(
    ("name", "mapping", "workers", "global_batch"),
    [
        (
            "megatron_tp2_pp2_recompute",
            {"tp": 2, "pp": 2, "micro_batch": 1, "activation_checkpointing": True},
            8,
            64,
        ),
        ("megatron_zero1_distributed_optimizer", {"zero_stage": 1}, 4, 32),
    ],
)
def test_megatron_arguments_match_their_golden_files(name, mapping, workers, global_batch):
    args = render.megatron_args(resolve(plan_from_mapping(mapping), workers, global_batch))
    golden(f"{name}.txt", " ".join(args) + "\n")


def test_megatron_refuses_zero_stages_it_does_not_have():
    with pytest.raises(PlanError, match="zero_stage 2 has no Megatron-LM equivalent"):
        render.megatron_args(resolve(plan_from_mapping({"zero_stage": 2}), 2, 16))


def test_a_framework_needs_the_global_batch():
    with pytest.raises(PlanError, match="the global batch is unknown"):
        render.deepspeed_config(resolve(plan_from_mapping({"zero_stage": 1}), 2))


@pytest.mark.parametrize(
    ("name", "gpus", "cpus"),
    [
        ("srun_even_two_nodes", [("n1", 0), ("n1", 1), ("n2", 2), ("n2", 3)], 16),
        ("srun_uneven", [("n1", 0), ("n1", 1), ("n1", 2), ("n2", 0)], 8),
    ],
)
def test_srun_argv_match_their_golden_files(name, gpus, cpus):
    argv, hostfile = render.srun_argv(
        Assignment(tuple(gpus), cpus, 64.0),
        ["python", "-m", "wrapper.task", "--", "train.py"],
        output="job.out",
    )
    golden(f"{name}.txt", " ".join(argv) + "\n" + (f"--- hostfile\n{hostfile}" if hostfile else ""))


def test_torch_environment_carries_the_plan_for_the_runtime():
    env = render.torch_plan_environment(resolve(plan_from_mapping({"micro_batch": 2}), 2, 8), 5)
    assert json.loads(env["MOSAIC_EXEC_PLAN"]) == {
        "dp": 2,
        "micro_batch": 2,
        "grad_accum": 2,
        "global_batch": 8,
    }
    assert env["MOSAIC_PLAN_VERSION"] == "5"


def test_an_offload_plan_lets_deepspeed_run_the_jobs_own_optimizer_unless_the_job_says_otherwise():
    # DeepSpeed raises ZeRORuntimeException for a client-built optimizer under ZeRO-Offload
    # without this; a plan the scheduler chose must not fail the job at start.
    offload = resolve(plan_from_mapping({"zero_stage": 2, "offload_optimizer": True}), 2, 16)
    assert render.deepspeed_config(offload)["zero_force_ds_cpu_optimizer"] is False
    own = render.deepspeed_config(offload, {"zero_force_ds_cpu_optimizer": True})
    assert own["zero_force_ds_cpu_optimizer"] is True
    plain = resolve(plan_from_mapping({"zero_stage": 2}), 2, 16)
    assert "zero_force_ds_cpu_optimizer" not in render.deepspeed_config(plain)
