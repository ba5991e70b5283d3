"""DeepSpeed under mosaic-run on CPU: ZeRO-1 on 2 ranks, signalled, resumed as ZeRO-2 on 4 ranks.

DeepSpeed cannot load ZeRO optimizer partitions at another data-parallel size (it raises
``ZeRORuntimeException``); mosaic-run converts the checkpoint with DeepSpeed's own
``ds_to_universal`` and renders ``checkpoint.load_universal`` (see
``wrapper/deepspeed_resume.py``). The resumed loss curve must equal an uninterrupted
ZeRO-1 run's within 1e-5 relative (float32 summation order differs; observed ~1e-7).
A checkpoint saved without the universal-checkpoint information cannot be converted: then
mosaic-run refuses the plan change, naming DeepSpeed's reason, and starts no rank.
"""

import json
import math
import os
import sys
from pathlib import Path

import pytest

from planner.core.model import Assignment
from slurm_plugin import planfile
from tests.wrapper.jobs import losses, run_mosaic_run
from wrapper import checkpoint

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed')")

ROOT = Path(__file__).resolve().parent.parent.parent
TRAIN = ROOT / "contrib" / "examples" / "train_deepspeed.py"
BIN = Path(sys.executable).parent
STEPS = 10
TOLERANCE = 1e-5


def run_job(tmp_path, job_id, workers, zero_stage, *train_args, signal_after=None, offload=False):
    spool = tmp_path / "spool"
    plan = {"global_batch": 16, "micro_batch": 4, "zero_stage": zero_stage, "offload_optimizer": offload}
    planfile.write_plan(
        spool, job_id, None, Assignment(tuple(("n1", k) for k in range(workers)), 4, 8.0, plan)
    )
    log = tmp_path / f"{job_id}.loss.jsonl"
    argv = [str(BIN / "mosaic-run"), "--framework", "deepspeed", "--launcher", "local"]
    argv += ["--checkpoint-dir", str(tmp_path / f"ckpt-{job_id}"), "--", sys.executable, str(TRAIN)]
    argv += ["--steps", str(STEPS), "--loss-log", str(log), *train_args]
    env = {**os.environ, "SLURM_JOB_ID": job_id, "MOSAIC_SPOOL": str(spool), "PYTHONPATH": str(ROOT)}
    return run_mosaic_run(argv, env, log, spool, job_id, signal_after, progress_s=300, timeout_s=600)


def test_zero1_on_2_ranks_resumes_as_zero2_on_4_ranks_through_a_universal_checkpoint(tmp_path):
    code, err, _ = run_job(tmp_path, "1000", 2, 1)
    assert code == 0, err[-3000:]
    reference = {r["step"]: r["loss"] for r in losses(tmp_path / "1000.loss.jsonl")}

    code, err, marker = run_job(tmp_path, "900", 2, 1, "--step-sleep", "0.3", signal_after=3)
    assert code == 0, err[-3000:]
    stopped = marker["step"]
    assert marker["signal"] == "SIGUSR1" and 3 <= stopped < STEPS

    code, err, _ = run_job(tmp_path, "900", 4, 2)
    assert code == 0, err[-3000:]
    assert f"DP size 2 -> 4 under ZeRO: converting step-{stopped:08d} to a universal checkpoint" in err
    universal = tmp_path / "ckpt-900" / f"step-{stopped:08d}-universal"
    assert checkpoint.read_complete_marker(universal)["universal"] is True
    config = json.loads((tmp_path / "ckpt-900" / ".mosaic" / "deepspeed-config.2.json").read_text())
    assert config["zero_optimization"]["stage"] == 2 and config["checkpoint"] == {"load_universal": True}
    assert config["gradient_accumulation_steps"] == 1 and config["train_micro_batch_size_per_gpu"] == 4
    records = losses(tmp_path / "900.loss.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert {r["world_size"] for r in records if r["step"] > stopped} == {4}
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])


def test_a_checkpoint_deepspeed_cannot_reshard_is_refused_not_loaded(tmp_path):
    code, err, _ = run_job(tmp_path, "901", 2, 1, "--no-universal-info", "--checkpoint-every", "2")
    assert code == 0, err[-3000:]
    before = losses(tmp_path / "901.loss.jsonl")

    code, err, _ = run_job(tmp_path, "901", 4, 2)
    assert code == 2
    assert "DeepSpeed could not convert it to a universal checkpoint" in err
    assert "universal_checkpoint_info state is missing in checkpoint" in err
    assert "refusing to resume at DP 4 from DP 2" in err
    assert losses(tmp_path / "901.loss.jsonl") == before  # no rank started


def test_zero2_resumes_as_zero_offload_with_the_jobs_own_optimizer(tmp_path):
    # The plan change Rubick makes when it gives a job CPUs for ZeRO-Offload: the same ranks,
    # the optimizer state and step moved to the host. The example builds torch.optim.Adam,
    # which DeepSpeed refuses under offload unless the rendered config allows it.
    code, err, _ = run_job(tmp_path, "1100", 2, 2)
    assert code == 0, err[-3000:]
    reference = {r["step"]: r["loss"] for r in losses(tmp_path / "1100.loss.jsonl")}

    code, err, marker = run_job(tmp_path, "910", 2, 2, "--step-sleep", "0.3", signal_after=3)
    assert code == 0, err[-3000:]
    stopped = marker["step"]
    assert 3 <= stopped < STEPS

    code, err, _ = run_job(tmp_path, "910", 2, 2, offload=True)
    assert code == 0, err[-3000:]
    rendered = sorted((tmp_path / "ckpt-910" / ".mosaic").glob("deepspeed-config.*.json"))
    config = json.loads(max(rendered, key=lambda p: p.stat().st_mtime).read_text())
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu"}
    assert config["zero_force_ds_cpu_optimizer"] is False
    records = losses(tmp_path / "910.loss.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])
