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


def test_a_new_job_with_an_earlier_jobs_id_does_not_resume_its_checkpoints(tmp_path):
    """A Slurm controller started on fresh state numbers jobs from 1 again (the test cluster after
    down/up): the new job 1 starts from nothing, a requeue of it resumes its own checkpoint."""
    from wrapper import checkpoint

    old, new = "0123456789abcdef", "fedcba9876543210"
    old_root = tmp_path / "mosaic-ckpt" / "1"
    old_root.mkdir(parents=True)
    checkpoint.claim(old_root, "1", old)
    step = checkpoint.step_dir(old_root, 50)
    step.mkdir()
    checkpoint.write_complete_marker(step, {"step": 50, "world_size": 1, "submission": old})
    show = "import os; print(os.environ['MOSAIC_CHECKPOINT_DIR'], os.environ.get('MOSAIC_RESUME_STEP'))"

    def launch(submission):
        env = {**os.environ, "MOSAIC_SPOOL": str(tmp_path / "spool"), "SLURM_JOB_ID": "1"}
        env["MOSAIC_SUBMISSION"] = submission
        argv = [str(BIN / "mosaic-run"), "--framework", "torch", "--launcher", "local", "--workers", "1"]
        argv += ["--", sys.executable, "-c", show]
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    new_root = tmp_path / "mosaic-ckpt" / f"1-{new}"
    assert launch(new) == [str(new_root), "None"]
    assert checkpoint.read_owner(new_root) == {"job_id": "1", "submission": new}
    mine = checkpoint.step_dir(new_root, 20)
    mine.mkdir()
    checkpoint.write_complete_marker(mine, {"step": 20, "world_size": 1, "submission": new})
    assert launch(new) == [str(new_root), "20"]  # requeued: its own checkpoint
    assert launch(old) == [str(old_root), "50"]  # the earlier job (a requeue of it) still finds its own
