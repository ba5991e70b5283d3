"""Running a job under mosaic-run from a test: launch, signal after N logged steps, collect."""

import json
import signal
import subprocess
import time
from pathlib import Path

from wrapper import status


def losses(log: Path) -> list[dict]:
    """The loss log's records (rank 0 appends one JSON line per step)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def run_mosaic_run(argv, env, log, spool, job_id, signal_after=None, progress_s=120, timeout_s=300):
    """Run ``argv``; once ``log`` has ``signal_after`` steps send SIGUSR1. Returns the exit code,
    stderr and the job's checkpoint marker (None if none was written)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if signal_after is not None:
        deadline = time.monotonic() + progress_s
        while len(losses(log)) < signal_after:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training made no progress"
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # its ranks die with it (PR_SET_PDEATHSIG): nothing is left running
        proc.communicate()
        raise
    marker = status.read_marker(status.status_dir(spool, job_id) / status.CHECKPOINT_MARKER)
    return proc.returncode, err, marker


def uninterrupted_losses(
    directory: Path, steps: int, global_batch: int = 16, plan: str = '{"micro_batch": 4}'
) -> dict[int, float]:
    """Loss per step of the example (``contrib/examples/train_torch.py``) run once, never
    stopped, on 1 local rank under mosaic-run: the curve a resharded run must reproduce."""
    import os
    import sys

    train = Path(__file__).resolve().parents[2] / "contrib" / "examples" / "train_torch.py"
    log = directory / "reference.jsonl"
    argv = [str(Path(sys.executable).parent / "mosaic-run"), "--framework", "torch", "--launcher", "local",
            "--workers", "1", "--global-batch", str(global_batch), "--plan", plan,
            "--checkpoint-dir", str(directory / "ref"),
            "--", sys.executable, str(train), "--steps", str(steps), "--loss-log", str(log)]  # fmt: skip
    env = {**os.environ, "MOSAIC_SPOOL": str(directory / "refspool")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {r["step"]: r["loss"] for r in losses(log)}


def uninterrupted_deepspeed_losses(
    directory: Path, steps: int, workers: int, plan: str, global_batch: int = 16
) -> dict[int, float]:
    """Loss per step of ``contrib/examples/train_deepspeed.py`` run once, never stopped, on
    ``workers`` local ranks (gloo) under mosaic-run with ``plan``: the curve a DeepSpeed job
    resumed at another size or plan must reproduce."""
    import os
    import sys

    train = Path(__file__).resolve().parents[2] / "contrib" / "examples" / "train_deepspeed.py"
    log = directory / "reference-deepspeed.jsonl"
    argv = [str(Path(sys.executable).parent / "mosaic-run"), "--framework", "deepspeed",
            "--launcher", "local", "--workers", str(workers), "--global-batch", str(global_batch),
            "--plan", plan,
            "--checkpoint-dir", str(directory / "ref-deepspeed"),
            "--", sys.executable, str(train), "--steps", str(steps), "--loss-log", str(log)]  # fmt: skip
    env = {**os.environ, "MOSAIC_SPOOL": str(directory / "refspool-deepspeed")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["step"]: r["loss"] for r in losses(log)}
