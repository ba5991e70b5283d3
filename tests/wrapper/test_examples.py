"""The CPU training examples (contrib/examples/image_cnn.py, text_transformer.py) and their
registry (wrapper/examples.py): real torch and Pillow, run under mosaic-run on 1 CPU,
heartbeats read back, stopped at a checkpoint and resumed to the losses of an unbroken run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.core.errors import InputError
from tests.wrapper.jobs import run_mosaic_run
from wrapper import examples, status

# Small shapes, so that each example's three runs take seconds (the defaults are for profiling).
SMALL = {
    "image-cnn": ["--images", "48", "--size", "64", "--crop", "32"],
    "text-transformer": ["--sequences", "64", "--length", "16", "--dim", "32", "--layers", "1"],
}


BATCH = 8


# -- the registry ------------------------------------------------------------------------------
def test_registry_names_and_scripts_exist():
    assert examples.example_names() == ["image-cnn", "text-transformer"]
    for name in examples.example_names():
        assert examples.example_script(name).is_file()
    assert examples.get_example("image-cnn").cpu_sensitive
    assert not examples.get_example("text-transformer").cpu_sensitive


def test_unknown_example_lists_the_known_ones():
    with pytest.raises(InputError, match=r"unknown example 'resnet'.*image-cnn, text-transformer"):
        examples.example_command("resnet", 1, 10)


@pytest.mark.parametrize(
    ("cpus", "steps", "batch", "what"),
    [(0, 10, None, "cpus"), (1, 0, None, "steps"), (True, 10, None, "cpus"), (1.5, 10, None, "cpus"),
     (1, 10, 0, "batch")],
)  # fmt: skip
def test_bad_cpus_steps_or_batch_are_refused(cpus, steps, batch, what):
    with pytest.raises(InputError, match=f"'image-cnn': {what} must be a positive integer"):
        examples.example_command("image-cnn", cpus, steps, batch=batch)


def test_plain_command_carries_cpus_batch_seed_and_data_dir(tmp_path):
    argv = examples.example_command(
        "image-cnn", 3, 40, data_dir=tmp_path, seed=5, extra_args=["--crop", "64"]
    )
    script = str(examples.example_script("image-cnn"))
    assert argv[:2] == [sys.executable, script]
    assert argv[2:] == ["--cpus", "3", "--steps", "40", "--batch", "32", "--seed", "5",
                        "--data", str(tmp_path), "--crop", "64"]  # fmt: skip


def test_mosaic_run_command_declares_the_global_batch():
    argv = examples.example_command("text-transformer", 2, 10, local=False)
    cut = argv.index("--")
    assert Path(argv[0]).name == "mosaic-run"
    assert argv[1:cut] == ["--framework", "torch", "--global-batch", "16"]
    argv = examples.example_command("text-transformer", 2, 10, local=False, batch=24)
    assert argv[1 : argv.index("--")] == ["--framework", "torch", "--global-batch", "24"]
    assert argv[argv.index("--batch") + 1] == "24"
    assert argv[cut + 1 : cut + 3] == [sys.executable, str(examples.example_script("text-transformer"))]
    assert "--data" not in argv  # only the image example has data
    assert examples.example_command("text-transformer", 2, 10, data_dir="/x") == examples.example_command(
        "text-transformer", 2, 10
    )


def test_deepspeed_is_offered_where_the_example_has_a_deepspeed_path():
    argv = examples.example_command("text-transformer", 2, 10, local=False, framework="deepspeed")
    assert argv[1 : argv.index("--")] == ["--framework", "deepspeed", "--global-batch", "16"]
    with pytest.raises(InputError, match=r"'image-cnn' trains with torch, not 'deepspeed'"):
        examples.example_command("image-cnn", 2, 10, local=False, framework="deepspeed")


def test_prepare_command():
    assert examples.prepare_command("text-transformer") is None
    argv = examples.prepare_command("image-cnn", "/data")
    assert argv is not None and argv[-3:] == ["--prepare-only", "--data", "/data"]


# -- real runs ---------------------------------------------------------------------------------
def _env(tmp_path: Path, tag: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MOSAIC_"))}
    env.update(
        MOSAIC_SPOOL=str(tmp_path / f"spool-{tag}"),
        MOSAIC_CHECKPOINT_DIR=str(tmp_path / f"ckpt-{tag}"),
        MOSAIC_HEARTBEAT_S="0",  # a heartbeat every step
    )
    return env


def _run(name, tmp_path, tag, steps, *extra, local=False):
    log = tmp_path / f"loss-{tag}.jsonl"
    argv = examples.example_command(
        name, 1, steps, local=local, batch=BATCH, data_dir=tmp_path / "data",
        extra_args=[*SMALL[name], "--loss-log", str(log), *extra],
    )  # fmt: skip
    done = subprocess.run(argv, env=_env(tmp_path, tag), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = {r["step"]: r["loss"] for r in map(json.loads, log.read_text().splitlines())}
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return losses, summary


def _records(tmp_path, tag):
    return list(
        status.read_records(status.status_dir(tmp_path / f"spool-{tag}", "local") / status.HEARTBEATS)
    )


@pytest.mark.jobs
@pytest.mark.parametrize("name", ["image-cnn", "text-transformer"])
def test_example_heartbeats_checkpoints_and_resumes_exactly(name, tmp_path):
    # Unbroken: 5 steps. Broken: 3 steps with a checkpoint at 3, then the same job asked for 5.
    reference, _ = _run(name, tmp_path, "ref", 5)
    first, _ = _run(name, tmp_path, "job", 3, "--checkpoint-every", "3")
    assert sorted(first) == [1, 2, 3]
    second, summary = _run(name, tmp_path, "job", 5)
    assert sorted(second) == [1, 2, 3, 4, 5]  # the log is appended to: steps 4 and 5 are the resumed run's
    assert summary["start_step"] == 3 and summary["end_step"] == 5 and summary["cpus"] == 1
    for step in (1, 2, 3, 4, 5):
        assert second[step] == pytest.approx(reference[step], rel=1e-6, abs=1e-9), step
    assert reference[5] < reference[1]  # it learns

    records = _records(tmp_path, "job")
    starts = [r for r in records if r["event"] == "start"]
    beats = [r for r in records if r["event"] == "heartbeat"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert len(starts) == 2 and [c["step"] for c in checkpoints] == [3]
    assert [b["step"] for b in beats] == [1, 2, 3, 4, 5]
    assert all(b["samples"] == b["step"] * BATCH and b["cpus"] == 1 for b in beats)
    # A rate needs two heartbeats of one launch: every step but the first of each launch has one.
    rated = [b["step"] for b in beats if b["samples_per_s"] is not None]
    assert rated == [2, 3, 5] and all(b["samples_per_s"] > 0 for b in beats if b["step"] in rated)
    workers = 1 if name == "image-cnn" else 0
    assert all(b["loader_workers"] == workers for b in beats)


@pytest.mark.jobs
def test_plain_run_reports_heartbeats_where_told_and_refuses_too_many_cpus(tmp_path):
    name = "text-transformer"
    env = _env(tmp_path, "plain")
    env["MOSAIC_STATUS_DIR"] = str(tmp_path / "status")
    argv = examples.example_command(name, 1, 3, extra_args=SMALL[name])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    beats = [r for r in status.read_records(tmp_path / "status" / status.HEARTBEATS)]
    assert [b["step"] for b in beats] == [1, 2, 3] and beats[-1]["samples_per_s"] > 0
    assert json.loads(done.stdout.splitlines()[-1])["samples_per_s"] > 0

    too_many = len(os.sched_getaffinity(0)) + 1
    argv = examples.example_command(name, too_many, 3, extra_args=SMALL[name])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert (
        done.returncode == 2
        and f"text_transformer.py: error: --cpus {too_many}: this process may use only" in done.stderr
    )


@pytest.mark.jobs
def test_image_example_stops_at_a_checkpoint_signal_with_its_loader_workers_running(tmp_path):
    # mosaic-run signals the rank's whole process group: the loader worker must not die of
    # USR1 (the step would fail); the trainer saves at the end of its step and exits 0.
    name = "image-cnn"
    log = tmp_path / "loss.jsonl"
    argv = examples.example_command(
        name, 1, 1000, local=False, batch=BATCH, data_dir=tmp_path / "data",
        extra_args=[*SMALL[name], "--loss-log", str(log)],
    )  # fmt: skip
    env = _env(tmp_path, "sig")
    code, err, marker = run_mosaic_run(argv, env, log, tmp_path / "spool-sig", "local", signal_after=2)
    assert code == 0, err[-3000:]
    assert marker is not None and marker["signal"] == "SIGUSR1" and marker["step"] >= 2
    beats = [r for r in _records(tmp_path, "sig") if r["event"] == "heartbeat"]
    assert beats[-1]["step"] == marker["step"] and beats[-1]["loader_workers"] == 1


def _deepspeed_or_torch(tmp_path, tag, framework, workers, plan, steps, *extra):
    """text-transformer under mosaic-run on ``workers`` local ranks of one thread with ``plan``."""
    log = tmp_path / f"loss-{tag}.jsonl"
    argv = examples.example_command(
        "text-transformer", 1, steps, local=False, batch=BATCH, framework=framework,
        extra_args=[*SMALL["text-transformer"], "--loss-log", str(log), *extra],
    )  # fmt: skip
    argv[1:1] = ["--launcher", "local", "--workers", str(workers), "--plan", json.dumps(plan)]
    done = subprocess.run(argv, env=_env(tmp_path, tag), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = {r["step"]: r["loss"] for r in map(json.loads, log.read_text().splitlines())}
    return losses, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.jobs
def test_text_example_under_deepspeed_trains_as_torch_does_and_resumes_at_another_size(tmp_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed')")
    # The profiler's DeepSpeed samples run this path: ZeRO-2 with the optimizer offloaded and
    # accumulation, on 2 ranks, must follow the torch DDP run's loss curve.
    reference, _, _ = _deepspeed_or_torch(tmp_path, "torch", "torch", 2, {"grad_accum": 2}, 5)
    offload = {"grad_accum": 2, "zero_stage": 2, "offload_optimizer": True}
    first, summary, _ = _deepspeed_or_torch(
        tmp_path, "ds", "deepspeed", 2, offload, 3, "--checkpoint-every", "3", "--threads", "2"
    )
    assert summary["framework"] == "deepspeed" and summary["threads"] == 2 and summary["world_size"] == 2
    assert sorted(first) == [1, 2, 3]
    # Resumed on one rank: mosaic-run converts the ZeRO checkpoint to a universal one.
    second, summary, err = _deepspeed_or_torch(tmp_path, "ds", "deepspeed", 1, {"zero_stage": 2}, 5)
    assert "converting step-00000003 to a universal checkpoint" in err
    assert summary["start_step"] == 3 and summary["world_size"] == 1
    assert sorted(second) == [1, 2, 3, 4, 5]
    for step in (1, 2, 3, 4, 5):
        assert second[step] == pytest.approx(reference[step], rel=1e-4), step
        if step <= 3:
            assert first[step] == pytest.approx(reference[step], rel=1e-4), step
