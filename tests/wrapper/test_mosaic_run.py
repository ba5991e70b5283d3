import os
import subprocess
import sys
from pathlib import Path

from wrapper import status

BIN = Path(sys.executable).parent


def run(*argv):
    return subprocess.run([str(BIN / "mosaic-run"), *argv], capture_output=True, text=True)


def test_without_a_plan_the_command_runs_as_submitted():
    done = run("--", sys.executable, "-c", "import sys; print('hello'); sys.exit(3)")
    assert done.stdout == "hello\n" and done.returncode == 3


def test_no_command_is_an_error():
    done = run()
    assert done.returncode == 2 and "no command given" in done.stderr


def test_unknown_command_is_127():
    done = run("--", "definitely-not-a-command-xyz")
    assert done.returncode == 127 and "command not found" in done.stderr


def test_a_status_directory_owned_by_someone_else_is_named_in_a_warning(tmp_path):
    squatted = status.status_dir(tmp_path / "spool", "777")
    squatted.mkdir(parents=True)
    os.chown(squatted, 65534, 65534)  # another user created it first (status/ is world-writable)
    assert status.foreign_owner(squatted) == 65534
    assert status.foreign_owner(tmp_path) is None and status.foreign_owner(tmp_path / "absent") is None
    env = {**os.environ, "MOSAIC_SPOOL": str(tmp_path / "spool"), "SLURM_JOB_ID": "777"}
    argv = [str(BIN / "mosaic-run"), "--framework", "torch", "--launcher", "local", "--workers", "1"]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt"), "--", sys.executable, "-c", "pass"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert f"status directory {squatted} belongs to uid 65534" in done.stderr, done.stderr
    assert "will ignore this job's heartbeats" in done.stderr
