"""Argv builders (pure) and the one runner (timeouts, process groups, errors)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from planner.core.errors import InputError
from slurm_plugin.slurm import commands
from slurm_plugin.slurm.runner import SlurmCommandError, run


def test_update_builds_one_call_for_many_jobs():
    argv = commands.update_job(["1", "2"], {"Gres": "gpu:2", "MinMemoryNode": "8192", "StartTime": "now"})
    assert argv == ["scontrol", "update", "JobId=1,2", "Gres=gpu:2", "MinMemoryNode=8192", "StartTime=now"]


def test_signal_reaches_every_process_of_the_job():
    assert commands.signal("7", "USR1") == ["scancel", "--signal=USR1", "--full", "7"]


def test_sbatch_submits_held_with_the_comment_before_user_args():
    argv = commands.sbatch("job.sh", ["-p", "gpu"], comment='mosaic:{"model":"x"}')
    assert argv == ["sbatch", "--parsable", "--hold", '--comment=mosaic:{"model":"x"}', "-p", "gpu", "job.sh"]


def test_sacct_asks_for_every_run():
    argv = commands.sacct_runs("2026-01-01T00:00:00", "now", delimiter="~x~")
    assert argv[:5] == ["sacct", "-D", "-X", "-P", "--delimiter=~x~"] and "-a" in argv
    assert argv[-2:] == ["-E", "now"]


@pytest.mark.parametrize("bad", ["1;rm -rf /", "", "abc", "1 2"])
def test_bad_job_ids_are_refused(bad):
    with pytest.raises(InputError):
        commands.requeue_hold([bad])


def test_bad_update_fields_are_refused():
    with pytest.raises(InputError):
        commands.update_job(["1"], {"Gres": "gpu:1\nX=1"})
    with pytest.raises(InputError):
        commands.update_job(["1"], {})
    with pytest.raises(InputError):
        commands.signal("1", "USR1;")


def test_run_returns_output():
    result = run([sys.executable, "-c", "print('hi')"])
    assert result.returncode == 0 and result.stdout == "hi\n"


def test_run_error_carries_argv_code_and_stderr():
    with pytest.raises(SlurmCommandError) as info:
        run([sys.executable, "-c", "import sys; sys.stderr.write('no such job\\n'); sys.exit(3)"])
    e = info.value
    assert e.returncode == 3 and "no such job" in e.stderr and e.argv[0] == sys.executable
    assert "exited 3: no such job" in str(e)


def test_run_check_false_returns_the_failure():
    assert run([sys.executable, "-c", "raise SystemExit(2)"], check=False).returncode == 2


def test_missing_program_is_a_command_error():
    with pytest.raises(SlurmCommandError, match="cannot start"):
        run(["/nonexistent/squeue"])


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    # The command starts a grandchild that would outlive a plain kill of the child.
    code = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
        f"open('{pidfile}', 'w').write(str(p.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    with pytest.raises(SlurmCommandError, match="timed out") as info:
        run([sys.executable, "-c", code], timeout_s=1.0)
    assert info.value.returncode is None
    assert time.monotonic() - started < 10
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False
