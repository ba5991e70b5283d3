import subprocess
import sys
from pathlib import Path

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
