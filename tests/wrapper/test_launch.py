"""mosaic-run's launcher with real processes: plan to environment, signal forwarding, grace, failures."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.core.model import Assignment
from slurm_plugin import planfile
from wrapper import status

BIN = Path(sys.executable).parent
PROBE = Path(__file__).resolve().parent / "rank_probe.py"


def start(tmp_path, mode, workers=3, grace="30", extra=(), env=None):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    argv = [str(BIN / "mosaic-run"), "--framework", "torch", "--launcher", "local", "--grace-s", grace]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt"), *extra]
    if "--workers" not in extra and env is None:
        argv += ["--workers", str(workers)]
    argv += ["--", sys.executable, str(PROBE), str(out), mode]
    full_env = {**os.environ, "MOSAIC_SPOOL": str(tmp_path / "spool"), "SLURM_JOB_ID": "501", **(env or {})}
    proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def wait_ready(out, workers, proc):
    deadline = time.monotonic() + 30
    while len(list(out.glob("ready-*"))) < workers:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.05)


def marker(tmp_path):
    return status.read_marker(status.status_dir(tmp_path / "spool", "501") / status.CHECKPOINT_MARKER)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_the_checkpoint_signal_reaches_every_rank(tmp_path, sig):
    proc, out = start(tmp_path, "normal")
    wait_ready(out, 3, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert sorted(p.name for p in out.glob("got-*")) == [f"got-{r}-{sig.name}" for r in range(3)]
    record = marker(tmp_path)
    assert record["signal"] == sig.name and record["killed_ranks"] == [] and record["step"] is None


def test_a_rank_that_ignores_the_signal_is_killed_after_the_grace(tmp_path):
    proc, out = start(tmp_path, "ignore1", grace="1.5")
    wait_ready(out, 3, proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    waited = time.monotonic() - sent
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert 1.5 <= waited < 15, waited
    assert sorted(p.name for p in out.glob("got-*")) == ["got-0-SIGUSR1", "got-2-SIGUSR1"]
    assert marker(tmp_path)["killed_ranks"] == [1] and "killing it" in err


def test_when_one_rank_fails_the_others_are_stopped_and_its_status_is_the_jobs(tmp_path):
    proc, _ = start(tmp_path, "fail1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "rank 1 exited with 3" in err
    assert marker(tmp_path) is None  # no checkpoint signal, no marker


def test_a_rank_that_dies_after_its_work_is_done_does_not_fail_the_job(tmp_path):
    # gloo's threads can abort interpreter teardown (SIGABRT) after training finished; a
    # script that said Runtime.done() succeeded, and mosaic-run says what it saw.
    proc, _ = start(tmp_path, "done-abort1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "rank 1 exited with -6 after its work was done and flushed: counted as success" in err
    assert not list((tmp_path / "ckpt" / ".mosaic").glob("done-*"))  # per-launch markers removed


def test_a_rank_that_dies_before_saying_its_work_is_done_fails_the_job(tmp_path):
    proc, _ = start(tmp_path, "abort1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGABRT, err


def test_each_rank_gets_the_plan_and_the_torch_distributed_environment(tmp_path):
    spool = tmp_path / "spool"
    planfile.write_plan(spool, "501", None, Assignment((("n1", 0), ("n1", 1)), 4, 8.0, {"zero_stage": 1}))
    proc, out = start(tmp_path, "normal", extra=("--global-batch", "8"), env={})
    wait_ready(out, 2, proc)
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=30)
    envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(2)]
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0
    plan = json.loads(envs[0]["MOSAIC_EXEC_PLAN"])
    assert plan == {"dp": 2, "zero_stage": 1, "micro_batch": 4, "grad_accum": 1, "global_batch": 8}
    assert envs[0]["MOSAIC_PLAN_VERSION"] == "1"
    assert envs[0]["MOSAIC_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")
    (begun,) = planfile.read_heartbeats(spool, "501")  # mosaic-run's own record; the probe reports nothing
    assert begun["event"] == "start" and begun["plan_version"] == 1 and begun["world_size"] == 2
    assert begun["step"] == 0 and begun["plan"]["zero_stage"] == 1


def test_a_stale_plan_file_is_detected_and_the_job_runs_on_what_slurm_gave(tmp_path):
    # The plan file says 2 GPUs; Slurm's environment says this node holds 4.
    spool = tmp_path / "spool"
    planfile.write_plan(spool, "501", None, Assignment((("n1", 0), ("n1", 1)), 4, 8.0, {"zero_stage": 1}))
    slurm = {"SLURM_JOB_NODELIST": "n1", "SLURMD_NODENAME": "n1", "SLURM_JOB_GPUS": "0,1,2,3"}
    proc, out = start(tmp_path, "normal", extra=("--global-batch", "8"), env=slurm)
    wait_ready(out, 4, proc)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    assert "plan file version 1 does not match what Slurm gave the job" in err, err
    assert "2 GPU(s) planned on n1, Slurm gave 4" in err
    envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(4)]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert json.loads(envs[0]["MOSAIC_EXEC_PLAN"])["dp"] == 4
    (begun,) = planfile.read_heartbeats(spool, "501")
    assert begun["world_size"] == 4 and "Slurm gave 4" in begun["plan_mismatch"]


def test_no_rank_outlives_a_killed_mosaic_run(tmp_path):
    proc, out = start(tmp_path, "ignore1")
    wait_ready(out, 3, proc)
    pids = [int(json.loads((out / f"env-{r}.json").read_text())["MOSAIC_PROBE_PID"]) for r in range(3)]
    proc.kill()  # no chance to forward anything: the ranks must still go
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "a rank outlived mosaic-run"
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_output_is_appended_across_restarts(tmp_path):
    log = tmp_path / "job.out"
    for run in range(2):
        proc, out = start(tmp_path, "normal", workers=1, extra=("--output", str(log)))
        wait_ready(out, 1, proc)
        proc.send_signal(signal.SIGUSR1)
        proc.communicate(timeout=30)
        for ready in out.glob("ready-*"):
            ready.unlink()
        assert log.read_text().count("rank 0 ready") == run + 1


def test_a_bad_plan_file_stops_the_job_with_a_clear_error(tmp_path):
    path = tmp_path / "spool" / "plans" / "501.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "mosaic-plan/1", "job_id": "501", "version": 1}')
    proc, _ = start(tmp_path, "normal", env={})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and f"{path}: missing required key 'assignment'" in err
