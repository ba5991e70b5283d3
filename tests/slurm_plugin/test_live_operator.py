"""The controller as an ordinary account that Slurm knows as an Operator, not root (issue 15).

On the real test cluster with accounting: a system account ``mosaic`` (created with
``useradd`` when absent) is made an Operator (``sacctmgr ... AdminLevel=Operator``), and the
``mosaic`` CLI runs as that account (its own uid and gid, no supplementary groups) over jobs
of another user (``mosaic-job``, who submits them with ``mosaic submit``): the controller
starts them, preempts one (checkpoint signal, requeue-hold, release when it is planned
again) and resizes one (``mosaic resize``). The spool is the operator's: plan files are
readable by the jobs and not writable by them. Without the AdminLevel the same controller
acts on nothing: every action fails naming Slurm's permission error and what the account
needs, every job is as it was (none held, none requeued).

Slurm 22.05 lets an Operator signal, requeue-hold, release and update (GRES, node count,
CPUs, memory, features, nodes, start time) other users' jobs, but not set ``AdminComment``
(an Administrator's): the controller then leaves its audit line in the state store only.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from planner.core.errors import ConfigError
from slurm_plugin.cli.controller_cmd import spool_ready
from slurm_plugin.controller.actuate import Actuator, access_denied, explain
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.slurm.runner import SlurmCommandError, run
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import (
    config_for,
    jobs,
    system_user,
    wait_for,
    wait_started,
    wait_state,
    write_script,
)
from tests.slurm_plugin.test_live_status_owner import job_user

OPERATOR = "mosaic"
REPO = Path(__file__).resolve().parents[2]
MOSAIC = Path(sys.executable).with_name("mosaic")  # the virtual environment's entry point
GRACE_S = 10.0


# -- without Slurm: the AdminComment fallback and the explained refusal ---------------------


class _Client:
    """Refuses what Slurm 22.05 refuses an Operator (``AdminComment``) or a plain user (all)."""

    def __init__(self, operator: bool) -> None:
        self.operator = operator
        self.updates: list[dict[str, str]] = []

    def update(self, job_ids: list[str], fields: dict[str, str]) -> None:
        if not self.operator:
            raise SlurmCommandError(["scontrol", "update"], 1, f"Invalid user id for job {job_ids[0]}\n")
        if "AdminComment" in fields:
            raise SlurmCommandError(
                ["scontrol", "update"], 1, f"Access/permission denied for job {job_ids[0]}\n"
            )
        self.updates.append(dict(fields))


def test_an_operators_start_goes_again_without_the_admin_comment_once_and_for_all() -> None:
    client = _Client(operator=True)
    actuator = Actuator(client, None, ControllerConfig())  # type: ignore[arg-type]
    actuator._update_start("7", {"Gres": "gpu:2", "AdminComment": "mosaic r1-start-7 placed"})
    actuator._update_start("8", {"Gres": "gpu:1", "AdminComment": "mosaic r1-start-8 placed"})
    assert client.updates == [{"Gres": "gpu:2"}, {"Gres": "gpu:1"}]


def test_a_plain_user_is_refused_and_told_what_the_account_needs() -> None:
    actuator = Actuator(_Client(operator=False), None, ControllerConfig())  # type: ignore[arg-type]
    with pytest.raises(SlurmCommandError) as refused:
        actuator._update_start("7", {"Gres": "gpu:2", "AdminComment": "x"})
    assert access_denied(refused.value)
    message = explain(refused.value)
    assert "Invalid user id for job 7" in message and "AdminLevel=Operator" in message
    assert not actuator._no_admin_comment  # the refusal was not the comment's
    other = SlurmCommandError(["scontrol", "release", "7"], 1, "Invalid job id specified\n")
    assert not access_denied(other) and explain(other) == str(other)


def test_the_systemd_unit_and_the_cron_line_run_as_the_operator_account() -> None:
    etc = REPO / "etc"
    unit = (etc / "mosaic-controller.service").read_text().splitlines()
    assert "User=mosaic" in unit and "Group=mosaic" in unit and "UMask=0022" in unit
    assert "AdminLevel=Operator" in "\n".join(unit)
    assert "crontab -u mosaic" in (etc / "mosaic-controller.cron").read_text()


def test_a_spool_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(
        ConfigError, match=r"file/spool: cannot create the spool directory as \S+: .*install -d"
    ):
        spool_ready(blocker / "spool")
    spool_ready(tmp_path / "new" / "spool")
    assert (tmp_path / "new" / "spool").is_dir()


# -- live -------------------------------------------------------------------------------------


def operator_user() -> pwd.struct_passwd:
    """The controller's account."""
    return system_user(OPERATOR, own_group=True)


def as_user(
    user: pwd.struct_passwd, argv: list[str], cluster: Cluster, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``argv`` run as ``user`` (uid, gid, no other groups), pointed at the cluster."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
        **cluster.env,
    }
    done = subprocess.run(
        argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd=REPO,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} as {user.pw_name} exited {done.returncode}:\n{done.stderr}")
    return done


def set_admin_level(cluster: Cluster, level: str) -> None:
    """The operator's AdminLevel in accounting, waited for until slurmctld has it."""
    run(["sacctmgr", "-i", "modify", "user", OPERATOR, "set", f"AdminLevel={level}"], env=cluster.env)

    def applied() -> bool:
        shown = run(
            ["scontrol", "show", "assoc_mgr", f"users={OPERATOR}", "flags=users"], env=cluster.env
        ).stdout
        return f"AdminLevel={level}" in shown

    wait_for(f"slurmctld to see AdminLevel={level}", applied, timeout_s=60.0)


@pytest.fixture(scope="module")
def operator_cluster() -> Iterator[Cluster]:
    """A test cluster of its own, with accounting, in a directory under /tmp that other
    users can reach (not pytest's: pytest makes its base directory 0700 again whenever a
    session starts, which would cut the operator off mid-test), the Python interpreter made
    reachable too (search permission added where missing, put back after: it may live in a
    0700 home), the operator in accounting."""
    from slurm_plugin.testcluster import lifecycle
    from slurm_plugin.testcluster.shapes import shape_named
    from tests.conftest import why_no_slurm

    why = why_no_slurm()
    if why:
        pytest.skip(why)
    # The accounts exist before slurmctld loads the operator's user record: it resolves the
    # name to a uid then, and a record of a name without an account keeps no uid, so the
    # AdminLevel shows in `scontrol show assoc_mgr` but grants nothing (a fresh machine's CI).
    operator_user()
    job_user()
    changed: list[tuple[Path, int]] = []
    for directory in [REPO, *REPO.parents, *Path(os.path.realpath(sys.executable)).parents]:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if not mode & stat.S_IXOTH and directory not in {d for d, _ in changed}:
            os.chmod(directory, mode | stat.S_IXOTH)
            changed.append((directory, mode))
    base = Path(tempfile.mkdtemp(prefix="mosaic-operator-"))
    base.chmod(0o755)
    try:
        cluster = lifecycle.up(shape_named("homogeneous", accounting=True), base / "cluster")
        try:
            run(["sacctmgr", "-i", "add", "user", OPERATOR, "Account=root"], env=cluster.env, check=False)
            yield cluster
        finally:
            lifecycle.down(base / "cluster")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for directory, mode in changed:
            os.chmod(directory, mode)


@pytest.fixture
def work_dir(operator_cluster: Cluster) -> Iterator[Path]:
    """A directory every user can reach, under the cluster's (not pytest's tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="work-", dir=operator_cluster.layout.root.parent))
    path.chmod(0o755)
    try:
        yield path
    finally:
        run(["scancel", f"--user={job_user().pw_name}"], env=operator_cluster.env, check=False)
        wait_for("the job user's jobs gone", lambda: not _running(operator_cluster, job_user().pw_name), 60.0)


def _running(cluster: Cluster, user: str) -> str:
    return run(["squeue", "-h", "-u", user, "-t", "R,CG"], env=cluster.env).stdout.strip()


def _tick(operator: pwd.struct_passwd, toml: Path, cluster: Cluster) -> tuple[dict[str, Any], str]:
    done = as_user(
        operator, [str(MOSAIC), "controller", "--once", "--config", str(toml), "--scheduler", "las"], cluster,
        check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report, done.stderr


@pytest.mark.live
def test_the_controller_runs_as_an_operator_and_without_the_admin_level_touches_nothing(
    operator_cluster: Cluster, work_dir: Path
) -> None:
    live = operator_cluster
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    operator, owner = operator_user(), job_user()
    assert operator.pw_uid != 0 and owner.pw_uid not in {0, operator.pw_uid}
    set_admin_level(live, "Operator")
    spool = work_dir / "spool"
    spool.mkdir(mode=0o755)
    os.chown(spool, operator.pw_uid, operator.pw_gid)  # a site: install -d -o mosaic /var/spool/mosaic
    config = config_for(live, spool, checkpoint_grace_s=GRACE_S, stop_timeout_s=30.0)
    toml = work_dir / "mosaic.toml"
    toml.write_text(
        f'[controller]\nspool_dir = "{spool}"\nslurm_conf = "{live.layout.conf}"\n'
        f"checkpoint_grace_s = {GRACE_S}\nstop_timeout_s = 30.0\n"
    )
    # A spool the account may not write is refused up front, naming it, the account and the fix.
    root_spool = work_dir / "root-spool"
    root_spool.mkdir(mode=0o755)
    command = [str(MOSAIC), "controller", "--once", "--config", str(toml), "--spool", str(root_spool)]
    refused = as_user(operator, command, live, check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    assert f"{root_spool}: the spool directory is not writable by {OPERATOR}" in refused.stderr
    assert f"install -d -o {OPERATOR}" in refused.stderr and not list(root_spool.iterdir())
    scripts = work_dir / "scripts"
    scripts.mkdir(mode=0o755)

    def submit(name: str) -> str:
        script = write_script(scripts, name, 4, duration_s=3600.0)
        return as_user(
            owner, [str(MOSAIC), "submit", "--config", str(toml), str(script)], live
        ).stdout.strip()

    # Four 4-GPU jobs of another user fill the 16 GPUs; the operator's controller starts them.
    first = [submit(f"op{k}") for k in range(4)]
    report, stderr = _tick(operator, toml, live)
    assert report["ok"] and not report["failed"], report
    assert sorted(report["done"]) == sorted(f"r{report['round']}-start-{j}" for j in first)
    for job_id in first:
        wait_started(config, job_id)
        assert jobs(config)[job_id].user_id == owner.pw_uid
    # The AdminComment is an Administrator's: refused once, warned, the audit line in the store.
    assert "needs AdminLevel=Administrator" in stderr
    assert all(jobs(config)[j].admin_comment in {"", "(null)"} for j in first)

    # Plan files and the store are the operator's; the jobs' user reads plans, writes none.
    plan = spool / "plans" / f"{first[0]}.json"
    assert plan.stat().st_uid == operator.pw_uid and stat.S_IMODE(plan.stat().st_mode) == 0o644
    assert stat.S_IMODE(plan.parent.stat().st_mode) == 0o755 and plan.parent.stat().st_uid == operator.pw_uid
    assert not stat.S_IMODE((spool / "mosaic.db").stat().st_mode) & 0o022
    probe = (
        "import sys; p = sys.argv[1]; open(p).read()\n"
        "for how in (lambda: open(p, 'a'), lambda: open(p + '.x', 'w')):\n"
        "    try:\n        how()\n    except PermissionError:\n        continue\n    sys.exit('writable')\n"
    )
    as_user(owner, [sys.executable, "-c", probe, str(plan)], live)

    # Preemption: a fifth job arrives; LAS stops the job with the most service (checkpoint
    # signal, requeue-hold) and starts the newcomer.
    time.sleep(2.0)
    late = submit("late")
    report, _ = _tick(operator, toml, live)
    assert report["ok"] and not report["failed"], report
    stopped = [a["job"] for a in report["actions"] if a["kind"] == "stop"]
    assert len(stopped) == 1 and any(a["kind"] == "start" and a["job"] == late for a in report["actions"])
    victim = stopped[0]
    marker = json.loads((spool / "status" / victim / "checkpoint.json").read_text())
    assert marker["job_id"] == victim
    held = jobs(config)[victim]
    assert held.state == "PENDING" and held.held and held.requeues == 1
    wait_started(config, late)
    # ... and releases it when it is planned again (capacity freed by root cancelling `late`).
    run(["scancel", late], env=live.env)
    wait_for("late gone", lambda: late not in {j for j, s in jobs(config).items() if s.holds_resources})
    report, _ = _tick(operator, toml, live)
    assert report["ok"] and not report["failed"], report
    wait_started(config, victim, runs=2)

    # Resize, as the operator: checkpoint, requeue-hold, update, new plan file, release.
    resized = as_user(operator, [str(MOSAIC), "resize", victim, "--gpus", "2", "--config", str(toml)], live)
    assert json.loads(resized.stdout)["ok"], resized.stdout
    running = wait_state(config, victim, "RUNNING", timeout_s=60.0)
    assert running.gpus_per_node == 2 and len(running.nodes) == 1
    assert json.loads(plan.with_name(f"{victim}.json").read_text())["version"] >= 3

    # `mosaic report` as the operator: Slurm kept no AdminComment, so why each run started
    # comes from the store's action log. The victim's resume is a restart after its
    # preemption, its resize a restart; neither a migration, whatever nodes the runs had.
    def victim_counts() -> tuple[int, int, int] | None:
        argv = [str(MOSAIC), "report", "--config", str(toml), "--since", since, "--format", "json"]
        doc = json.loads(as_user(operator, argv, live).stdout)
        row = next((r for r in csv.DictReader(doc["jobs"]) if r["job_id"] == victim), None)
        if row is None:
            return None
        counts = (int(row["restarts"]), int(row["migrations"]), int(row["preemptions"]))
        return counts if counts[0] == 2 else None

    assert wait_for("sacct to record the victim's three runs", victim_counts, timeout_s=30) == (2, 0, 1)

    # Without the AdminLevel: the same controller, a job to start and one to preempt for it.
    set_admin_level(live, "None")
    late2 = submit("late2")
    before = jobs(config)
    report, _ = _tick(operator, toml, live)
    assert report["failed"] and not report["done"], report
    for failure in report["failed"]:
        assert "Invalid user id" in failure["why"] or "Access/permission denied" in failure["why"], failure
        assert "AdminLevel=Operator" in failure["why"], failure
    after = jobs(config)
    for job_id, job in before.items():
        if job.user_id != owner.pw_uid or job.state not in {"RUNNING", "PENDING"}:
            continue
        now = after[job_id]
        assert (now.state, now.held, now.requeues) == (job.state, job.held, job.requeues), (job_id, job, now)
    assert [j for j, s in after.items() if s.held and s.state == "PENDING"] == [late2]
    assert after[late2].reason == "JobHeldUser" and after[late2].requeues == 0  # as its user submitted it


SWEEP = """
import dataclasses, json, sys, time
from slurm_plugin.controller.spoolsweep import sweep_spool
result = sweep_spool(sys.argv[1], set(), time.time(), 86400.0)
print(json.dumps(dataclasses.asdict(result)))
"""


@pytest.mark.live
def test_as_an_operator_the_spool_sweep_removes_its_plan_files_and_puts_a_users_status_aside(
    operator_cluster: Cluster, work_dir: Path
) -> None:
    """An ended job's plan file is the operator's and goes; its status directory is the job
    user's, which the operator (not root) can rename out of the way in the sticky ``status/``
    it owns, but not empty: it stays renamed, no longer read, and is counted."""
    operator, owner = operator_user(), job_user()
    spool = work_dir / "sweep-spool"
    spool.mkdir(mode=0o755)
    os.chown(spool, operator.pw_uid, operator.pw_gid)
    write = (
        "import sys\nfrom planner.core.model import Assignment\nfrom slurm_plugin import planfile\n"
        "planfile.ensure_spool(sys.argv[1])\n"
        "planfile.write_plan(sys.argv[1], '7', None, Assignment((('n1', 0),), 4, 8.0))\n"
    )
    as_user(operator, [sys.executable, "-c", write, str(spool)], operator_cluster)
    status_dir = spool / "status" / "7"
    beats = (
        "import os, sys\nos.mkdir(sys.argv[1])\nopen(sys.argv[1] + '/heartbeat.jsonl', 'w').write('{}\\n')\n"
    )
    as_user(owner, [sys.executable, "-c", beats, str(status_dir)], operator_cluster)  # as mosaic-run
    two_days_ago = time.time() - 2 * 86400
    for path in (*(spool / "plans").iterdir(), status_dir / "heartbeat.jsonl", status_dir):
        os.utime(path, (two_days_ago, two_days_ago))

    done = as_user(operator, [sys.executable, "-c", SWEEP, str(spool)], operator_cluster)

    result = json.loads(done.stdout)
    assert (result["jobs_removed"], result["leftovers"], result["errors"]) == (1, 1, 0), result
    assert not list((spool / "plans").iterdir()) and not status_dir.exists()
    (aside,) = (spool / "status").iterdir()
    assert aside.name.startswith(".retired-7-") and aside.stat().st_uid == owner.pw_uid
    assert (aside / "heartbeat.jsonl").exists()
