"""Security checks over the source and the files the controller and the jobs share.

* No shell: no ``shell=True``, ``os.system``, ``os.popen`` or string-built command line
  anywhere outside ``tests/`` (an AST scan of every ``.py`` file): argv is always a list.
* Paths built from a job id stay in their directory (plan files, status directories,
  checkpoint directories): ``..``, ``/``, a new line are refused; symbolic links a job plants
  in the directories it owns are never followed by the controller, nor by the checkpoint
  loader.
* Plan files are written 0644 in a 0755 directory (the job reads, cannot write), and a
  link planted in their place is replaced, not written through.
* ``etc/job_submit.lua`` holds every job of the managed partition whatever its fields say
  (run with ``lua`` when it is installed: ``apt-get install lua5.4``).
* Metadata cannot name another job: there is no job-id directive, and a comment that names
  one changes nothing for that job.
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from planner.core.errors import InputError
from planner.core.model import Assignment
from planner.core.plandoc import plan_file_path
from slurm_plugin import planfile
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.directives import DirectiveError, parse_directives
from tests.slurm_plugin.test_controller_loop import FakeSlurm
from wrapper import checkpoint, status

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"tests", ".venv", "venv", "build", "dist", "out", ".git", "node_modules", "__pycache__"}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
NO_SHELL_AT_ALL = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
    ("asyncio", "create_subprocess_shell"),
}


# -- no shell ------------------------------------------------------------------------------


def _sources() -> list[Path]:
    out = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if not SKIP_DIRS.intersection(parts) and not any(p.endswith(".egg-info") for p in parts):
            out.append(path)
    return sorted(out)


def _dotted(node: ast.AST) -> tuple[str, ...]:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        return (*_dotted(node.value), node.attr)
    return ()


def _string_built(node: ast.AST) -> bool:
    """A command line built as a string: a literal, an f-string, ``+``/``%`` of strings,
    ``"...".format()`` or ``" ".join()``."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | bytes)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _string_built(node.left) or _string_built(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in {"format", "join"} and isinstance(node.func.value, ast.Constant)
    return False


def shell_problems(source: str, name: str) -> list[str]:
    """Every shell use in ``source`` (``name:line: what``)."""
    tree = ast.parse(source, name)
    # Names bound to a string-built value anywhere in the module (argv passed by name).
    stringy = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _string_built(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        where = f"{name}:{node.lineno}"
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                problems.append(f"{where}: shell={ast.unparse(kw.value)}")
        dotted = _dotted(node.func)
        if dotted[-2:] in NO_SHELL_AT_ALL:
            problems.append(f"{where}: {'.'.join(dotted)}() runs a shell")
        is_subprocess = len(dotted) >= 2 and dotted[-2] == "subprocess" and dotted[-1] in SUBPROCESS_CALLS
        is_exec = len(dotted) == 2 and dotted[0] == "os" and dotted[1].startswith(("exec", "spawn"))
        if is_subprocess or is_exec:
            args = [kw.value for kw in node.keywords if kw.arg == "args"] + list(node.args[:1])
            if is_exec:
                args = list(node.args[1:2])  # os.execvp(file, argv)
            for arg in args:
                if _string_built(arg) or (isinstance(arg, ast.Name) and arg.id in stringy):
                    problems.append(
                        f"{where}: {'.'.join(dotted)}() gets a command line string, not an argv list"
                    )
    return problems


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scanner's positive control: every kind of shell use is found."""
    bad = (
        "import os, subprocess\n"
        "subprocess.run('ls -l', check=True)\n"
        "subprocess.Popen(['ls'], shell=True)\n"
        "os.system('ls')\n"
        "os.popen('ls')\n"
        "cmd = 'scontrol ' + job\n"
        "subprocess.check_output(cmd)\n"
        "subprocess.run(f'scancel {job}')\n"
        "subprocess.call(' '.join(argv))\n"
        "subprocess.run(args='ls')\n"
    )
    assert len(shell_problems(bad, "bad.py")) == 8  # one per line but the assignment
    good = "import subprocess\nsubprocess.run(['scontrol', 'show', job], check=False, shell=False)\n"
    assert shell_problems(good, "good.py") == []


def test_no_shell_anywhere_outside_the_tests() -> None:
    sources = _sources()
    assert len(sources) > 100 and any(p.name == "runner.py" for p in sources)
    problems = [p for path in sources for p in shell_problems(path.read_text(encoding="utf-8"), str(path))]
    assert problems == []


# -- paths built from job ids ---------------------------------------------------------------

BAD_IDS = [
    "..",
    ".",
    "../x",
    "../../etc/passwd",
    "a/b",
    "/etc/passwd",
    "x\n",
    "42\n",
    "",
    "a\x00b",
    " 42",
    "4 2",
]


@pytest.mark.parametrize("job_id", BAD_IDS)
def test_a_job_id_that_is_not_one_file_name_names_no_path(job_id: str, tmp_path: Path) -> None:
    for build in (
        lambda: plan_file_path(tmp_path, job_id),
        lambda: planfile.plan_path(tmp_path, job_id),
        lambda: planfile.status_dir(tmp_path, job_id),
        lambda: status.status_dir(tmp_path, job_id),
        lambda: checkpoint.default_root(job_id, tmp_path),
    ):
        with pytest.raises(InputError, match="job id"):
            build()


@pytest.mark.parametrize("job_id", ["42", "42_7", "1234.batch", "a+b-c"])
def test_a_plain_job_id_names_a_path_inside_its_directory(job_id: str, tmp_path: Path) -> None:
    assert plan_file_path(tmp_path, job_id).parent == tmp_path / "plans"
    assert status.status_dir(tmp_path, job_id).parent == tmp_path / "status"
    assert checkpoint.default_root(job_id, tmp_path).parent == tmp_path


def _assignment() -> Assignment:
    return Assignment(gpus=(("n1", 0),), cpus=4, mem_gb=8.0)


def test_a_link_planted_as_a_plan_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    spool = tmp_path / "spool"
    planfile.ensure_spool(spool)
    (spool / "plans" / "42.json").symlink_to(victim)
    path = planfile.write_plan(spool, "42", None, _assignment())
    assert victim.read_text() == "precious\n"
    assert not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) == 0o644
    modes = {stat.S_IMODE((spool / d).stat().st_mode) for d in ("plans",)}
    assert modes == {0o755}  # the job can read its plan, and can neither change nor replace it


def _job_status(spool: Path) -> Path:
    directory = status.status_dir(spool, "42")
    directory.mkdir(parents=True)
    return directory


def test_the_controller_follows_no_link_a_job_plants_in_its_status_directory(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"progress": 0.5, "time": 123.0}\n')
    directory = _job_status(tmp_path / "spool")
    (directory / status.HEARTBEATS).symlink_to(secret)
    (directory / status.CHECKPOINT_MARKER).symlink_to(secret)
    assert status.read_marker(secret) is not None  # the same file, read directly, is a record
    assert planfile.read_heartbeats(tmp_path / "spool", "42") == []
    assert planfile.last_progress(tmp_path / "spool", "42") is None
    assert planfile.read_checkpoint_marker(tmp_path / "spool", "42") is None
    assert planfile.checkpoint_time(tmp_path / "spool", "42") is None


def test_a_status_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / status.HEARTBEATS).write_text('{"progress": 0.5}\n')
    (tmp_path / "spool" / "status").mkdir(parents=True)
    (tmp_path / "spool" / "status" / "42").symlink_to(elsewhere)
    with pytest.raises(InputError, match="not a directory"):
        planfile.read_heartbeats(tmp_path / "spool", "42")


def test_a_status_directory_that_is_a_link_is_ignored_by_the_tick(tmp_path: Path) -> None:
    """What the controller's tick reads (progress, checkpoint time) never raises."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / status.HEARTBEATS).write_text('{"progress": 0.5}\n')
    (elsewhere / status.CHECKPOINT_MARKER).write_text('{"time": 5.0}\n')
    (tmp_path / "spool" / "status").mkdir(parents=True)
    (tmp_path / "spool" / "status" / "42").symlink_to(elsewhere)
    assert planfile.last_progress(tmp_path / "spool", "42") is None
    assert planfile.checkpoint_time(tmp_path / "spool", "42") is None


def test_another_users_status_directory_tells_the_controller_nothing(tmp_path: Path) -> None:
    """``status/`` is world-writable: a user may create the directory of a job id that is not
    theirs (before that job starts) to fake its progress or its checkpoint. Given the job's
    uid, the controller ignores a directory somebody else owns."""
    directory = _job_status(tmp_path / "spool")
    (directory / status.HEARTBEATS).write_text('{"progress": 0.9}\n')
    (directory / status.CHECKPOINT_MARKER).write_text('{"time": 5.0}\n')
    mine, other = os.getuid(), os.getuid() + 1
    assert planfile.last_progress(tmp_path / "spool", "42", mine) == 0.9
    assert planfile.checkpoint_time(tmp_path / "spool", "42", mine) == 5.0
    assert planfile.last_progress(tmp_path / "spool", "42", other) is None
    assert planfile.checkpoint_time(tmp_path / "spool", "42", other) is None
    assert planfile.read_checkpoint_marker(tmp_path / "spool", "42", mine) is not None
    with pytest.raises(InputError, match="not the job's user"):
        planfile.read_heartbeats(tmp_path / "spool", "42", other)


def test_a_fifo_as_heartbeat_file_does_not_block_the_controller(tmp_path: Path) -> None:
    directory = _job_status(tmp_path / "spool")
    os.mkfifo(directory / status.HEARTBEATS)
    os.mkfifo(directory / status.CHECKPOINT_MARKER)
    result: list[object] = []
    reader = threading.Thread(
        target=lambda: result.extend(
            [
                planfile.last_progress(tmp_path / "spool", "42"),
                planfile.checkpoint_time(tmp_path / "spool", "42"),
            ]
        ),
        daemon=True,
    )
    reader.start()
    reader.join(5.0)
    assert not reader.is_alive(), "the controller blocked on a FIFO"
    assert result == [None, None]


def test_a_huge_heartbeat_file_is_read_from_its_end_only(tmp_path: Path) -> None:
    directory = _job_status(tmp_path / "spool")
    line = b'{"progress": 0.1, "pad": "' + b"x" * 1000 + b'"}\n'
    with open(directory / status.HEARTBEATS, "wb") as f:
        f.write(line * (2 * status.MAX_READ_BYTES // len(line)))
        f.write(b'{"progress": 0.75}\n')
    assert planfile.last_progress(tmp_path / "spool", "42") == 0.75
    assert len(planfile.read_heartbeats(tmp_path / "spool", "42")) < status.MAX_READ_BYTES // len(line) + 2


def test_a_checkpoint_outside_the_checkpoint_directory_is_never_loaded(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "step-00000900"
    outside.mkdir(parents=True)
    checkpoint.write_complete_marker(outside, {"step": 900, "world_size": 1})
    root = tmp_path / "ckpt"
    inside = checkpoint.step_dir(root, 100)
    inside.mkdir(parents=True)
    checkpoint.write_complete_marker(inside, {"step": 100, "world_size": 1})
    (root / "step-00000900").symlink_to(outside)  # a newer "checkpoint", by a link
    newest = checkpoint.step_dir(root, 200)
    newest.mkdir()
    (newest / checkpoint.COMPLETE_MARKER).symlink_to(outside / checkpoint.COMPLETE_MARKER)
    latest = checkpoint.latest_complete(root)
    assert latest is not None and latest.step == 100 and latest.path == inside


# -- job_submit.lua --------------------------------------------------------------------------

LUA = shutil.which("lua") or shutil.which("lua5.4") or shutil.which("lua5.3")
LUA_DRIVER = r"""
slurm = { SUCCESS = 0, ERROR = -1, log_info = function(fmt, ...) local _ = string.format(fmt, ...) end }
dofile(arg[1])
local odd = { "", ",", ",,gpu,,", "gpu", "GPU", "other", "other,gpu", "gpu,other", "%s%s%n", "[", "gpu]",
              "gpu\0x", string.rep("a", 100000), "debug%" }
local names = { "job", "", "%s%s%s", string.rep("n", 10000) }
local comments = { "mosaic:{", "mosaic:" .. string.rep("[", 5000), "'; os.exit(1) --", "%n%n" }
local function show(p) if p == nil then return "nil" end return string.format("%q", p) end
for _, part in ipairs(odd) do
  for k = 1, #names do
    local desc = { partition = part, name = names[k], comment = comments[(k % #comments) + 1] }
    local rc = slurm_job_submit(desc, {}, 1000)
    io.write(show(part):sub(1, 40), "\t", tostring(rc), "\t", tostring(desc.priority), "\n")
  end
end
local desc = { partition = nil, name = nil, comment = nil }
io.write("nil\t", tostring(slurm_job_submit(desc, {}, 1000)), "\t", tostring(desc.priority), "\n")
io.write("modify\t", tostring(slurm_job_modify({}, {}, {}, 1000)), "\n")
"""


@pytest.mark.skipif(LUA is None, reason="no lua interpreter (apt-get install lua5.4)")
def test_job_submit_lua_holds_managed_jobs_whatever_their_fields_say(tmp_path: Path) -> None:
    driver = tmp_path / "driver.lua"
    driver.write_text(LUA_DRIVER)
    assert LUA is not None
    done = subprocess.run(
        [LUA, str(driver), str(ROOT / "etc" / "job_submit.lua")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    verdicts = {}
    for row in rows:
        if row[0] == "modify":
            assert row[1] == "0"
            continue
        part, rc, priority = row
        assert rc == "0", row  # every job is accepted...
        verdicts.setdefault(part, set()).add(priority)
    # ... and held exactly when one of its partitions is the managed one (a job without -p too).
    held = {p for p, v in verdicts.items() if v == {"0"}}
    free = {p for p, v in verdicts.items() if v == {"nil"}}
    assert held | free == set(verdicts)
    assert held == {'",,gpu,,"', '"gpu"', '"other,gpu"', '"gpu,other"', "nil"}


# -- no metadata names another job -----------------------------------------------------------


def test_there_is_no_directive_naming_a_job() -> None:
    for line in ("#MOSAIC --job-id 1", "#MOSAIC --id=1", "#MOSAIC --jobid 1", "#MOSAIC --user root"):
        with pytest.raises(DirectiveError, match="unknown directive"):
            parse_directives(f"#!/bin/bash\n{line}\n", "job.sh")


def test_a_comment_naming_another_job_changes_nothing_for_that_job() -> None:
    from slurm_plugin.controller.config import ControllerConfig

    slurm = FakeSlurm()
    config = ControllerConfig()
    clean = build_observation(1.0e9, slurm.jobs(), slurm.nodes(), {}, config)
    hostile = '{"id": "1", "job_id": "1", "model": "bert", "guaranteed": true, "plan": {"tp": 2}}'
    jobs = [replace(j, comment="mosaic:" + hostile) if j.id == "2" else j for j in slurm.jobs()]
    seen = build_observation(1.0e9, jobs, slurm.nodes(), {}, config)
    by_id = {j.id: j for j in seen.snapshot.jobs}
    assert by_id["1"] == {j.id: j for j in clean.snapshot.jobs}["1"]
    assert by_id["2"].model == "bert" and by_id["2"].guaranteed  # its own metadata, for itself only
    assert [j.id for j in seen.snapshot.jobs] == [j.id for j in clean.snapshot.jobs]
