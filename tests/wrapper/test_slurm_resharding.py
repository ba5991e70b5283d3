"""The same resharding, under real Slurm: sbatch, srun, a Slurm-delivered signal, a requeue.

The local test cluster (``slurm_plugin/testcluster``: four fake 4-GPU nodes on this host)
runs a batch job whose script is ``exec mosaic-run ...``. Its plan file says 2 GPUs on n1;
``scancel --batch --signal=USR1`` reaches mosaic-run, which forwards it through srun to both
ranks; they checkpoint and the job ends. Then the controller's relaunch sequence
(the fast relaunch, docs/admin-guide.md "A tick"): ``requeuehold``, ``update StartTime=now Gres=gpu:4
NumCPUs=8``, a new plan file version for 4 GPUs, ``release`` (not within the second the
first run ended in: ``actuate.CREDENTIAL_MARGIN_S``). The job comes back, mosaic-run
starts 4 ranks with srun and resumes at the next step, the output file keeps both runs
(``--open-mode=append``), and the loss curve equals an uninterrupted run's (1e-4 relative,
as in ``test_resharding.py``).

Skipped, with the reason, where the test cluster cannot run (not root, Slurm not installed).
"""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.core.model import Assignment
from slurm_plugin import planfile
from slurm_plugin.controller.actuate import credential_wait_s
from tests.wrapper.jobs import losses, uninterrupted_losses
from wrapper import status

pytest.importorskip("torch", reason="torch is not installed (extra 'torch')")

ROOT = Path(__file__).resolve().parent.parent.parent
TRAIN = ROOT / "contrib" / "examples" / "train_torch.py"
BIN = Path(sys.executable).parent
STEPS = 14
TOLERANCE = 1e-4
PLAN = {"global_batch": 16, "micro_batch": 4}


@pytest.fixture
def cluster(live):
    """The run's test cluster (tests/conftest.py), emptied of jobs afterwards."""
    return live


def slurm(cluster, *argv):
    done = subprocess.run(
        list(argv), env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout.strip()


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}


def job_fields(cluster, job_id):
    line = slurm(cluster, "scontrol", "show", "job", "-o", job_id)
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


def job_state(cluster, job_id):
    return job_fields(cluster, job_id)["JobState"]


def wait(what, predicate, timeout_s=240.0, explain=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}{explain()}"
        time.sleep(0.2)


def wait_until_ended(cluster, job, out, what, timeout_s):
    """Wait for a final state, then insist it is COMPLETED; either way say what the job did."""

    def explain():
        fields = job_fields(cluster, job)
        tail = out.read_text()[-4000:] if out.exists() else "(no output file)"
        return (
            f": JobState={fields.get('JobState')} Reason={fields.get('Reason')} "
            f"ExitCode={fields.get('ExitCode')} Restarts={fields.get('Restarts')}\n"
            f"--- job output (tail) ---\n{tail}"
        )

    wait(what, lambda: job_state(cluster, job) in ENDED, timeout_s, explain)
    assert job_state(cluster, job) == "COMPLETED", f"{what} did not complete{explain()}"


def test_a_slurm_job_is_signalled_requeued_with_4_gpus_and_resumes(cluster, tmp_path):
    spool, log, out = tmp_path / "spool", tmp_path / "loss.jsonl", tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J reshard -p other -N1 -w n1 --gres=gpu:2 -c 4 --mem=4G -o {out} --open-mode=append\n"
        f"exec {BIN / 'mosaic-run'} --framework torch --grace-s 30 --checkpoint-dir {tmp_path / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 0.3\n"
    )
    env = {**os.environ, **cluster.env, "MOSAIC_SPOOL": str(spool), "PYTHONPATH": str(ROOT)}
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-H", str(script)], env=env, capture_output=True, text=True
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        _run_and_check(cluster, job, tmp_path, spool, log, out)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)  # a failed test leaves no job behind


def _run_and_check(cluster, job, tmp_path, spool, log, out):
    planfile.write_plan(spool, job, None, Assignment((("n1", 0), ("n1", 1)), 4, 4.0, PLAN))
    slurm(cluster, "scontrol", "release", job)

    wait("3 training steps", lambda: len(losses(log)) >= 3)
    slurm(cluster, "scancel", "--batch", "--signal=USR1", job)
    marker_path = status.status_dir(spool, job) / status.CHECKPOINT_MARKER
    wait("the checkpoint marker", marker_path.exists)
    marker = status.read_marker(marker_path)
    assert marker["signal"] == "SIGUSR1" and marker["killed_ranks"] == [] and marker["returncode"] == 0
    stopped = marker["step"]
    wait_until_ended(cluster, job, out, "the signalled job", 240)

    slurm(cluster, "scontrol", "requeuehold", job)
    wait("the requeued job to be pending", lambda: job_state(cluster, job) == "PENDING")
    pending_seen = time.time()
    slurm(
        cluster,
        "scontrol",
        "update",
        f"JobId={job}",
        "StartTime=now",
        "Gres=gpu:4",
        "NumCPUs=8",
        "MinMemoryNode=8192",
    )
    planfile.write_plan(spool, job, None, Assignment(tuple(("n1", k) for k in range(4)), 8, 8.0, PLAN))
    # As the controller does: released in the second the run ended in, the job would get a
    # credential slurmd has revoked, and end FAILED instead of running.
    time.sleep(credential_wait_s(pending_seen, time.time()))
    slurm(cluster, "scontrol", "release", job)
    wait_until_ended(cluster, job, out, "the resumed job", 400)

    text = out.read_text()
    assert (
        "(restart 0): plan version 1, 2 ranks, torch, no checkpoint" in text
    )  # kept: appended, not truncated
    assert f"(restart 1): plan version 2, 4 ranks, torch, resuming from step-{stopped:08d}" in text
    records = losses(log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["world_size"] for r in records] == [2] * stopped + [4] * (STEPS - stopped)

    reference = uninterrupted_losses(tmp_path, STEPS)
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])
