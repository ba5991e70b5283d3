"""Where the torch example trains (contrib/examples/train_torch.py ``pick_device``): the GPU of
its local rank where every local rank has one, else the CPU. The CUDA branch is exercised here
with torch's device queries patched (this machine has no GPU); the runs on a real GPU are
``benchmarks/tools/gpu_wrapper.py``'s."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.wrapper.jobs import losses

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"
sys.path.insert(0, str(EXAMPLES))
import train_torch  # noqa: E402 - a script directory, not a package


def gpus(monkeypatch, count):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_is_the_cpu_without_a_gpu(monkeypatch):
    gpus(monkeypatch, 0)
    assert train_torch.pick_device("auto", 0, 1) == torch.device("cpu")


def test_auto_is_the_local_ranks_gpu_where_every_local_rank_has_one(monkeypatch):
    gpus(monkeypatch, 4)
    assert [train_torch.pick_device("auto", r, 4) for r in range(4)] == [
        torch.device("cuda", r) for r in range(4)
    ]


def test_auto_stays_on_the_cpu_with_more_local_ranks_than_gpus(monkeypatch):
    # NCCL refuses two ranks on one GPU: 4 local ranks on a 1-GPU machine train on the CPU.
    gpus(monkeypatch, 1)
    assert train_torch.pick_device("auto", 0, 4) == torch.device("cpu")


def test_cpu_when_asked_even_with_gpus(monkeypatch):
    gpus(monkeypatch, 2)
    assert train_torch.pick_device("cpu", 1, 2) == torch.device("cpu")


def test_a_task_slurm_bound_to_one_gpu_trains_on_it(monkeypatch):
    # srun --gpu-bind / --gpus-per-task: each of 4 tasks sees one GPU, a different one.
    gpus(monkeypatch, 1)
    assert train_torch.pick_device("auto", 3, 4, visible="3") == torch.device("cuda", 0)
    assert train_torch.pick_device("auto", 3, 4, visible="0,1,2,3") == torch.device("cpu")


def test_cuda_without_a_gpu_for_the_rank_is_an_error_naming_it(monkeypatch):
    gpus(monkeypatch, 1)
    with pytest.raises(SystemExit, match="local rank 1 of 2, but torch sees 1 GPU"):
        train_torch.pick_device("cuda", 1, 2)


def test_the_loss_log_says_where_each_step_trained(tmp_path):
    log = tmp_path / "loss.jsonl"
    argv = [str(Path(sys.executable).parent / "mosaic-run"), "--framework", "torch", "--launcher", "local",
            "--workers", "1", "--global-batch", "8", "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--", sys.executable, str(EXAMPLES / "train_torch.py"), "--steps", "3", "--loss-log", str(log),
            "--device", "cpu"]  # fmt: skip
    env = {**os.environ, "MOSAIC_SPOOL": str(tmp_path / "spool")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(r["step"], r["world_size"], r["device"]) for r in losses(log)] == [
        (1, 1, "cpu"),
        (2, 1, "cpu"),
        (3, 1, "cpu"),
    ]
