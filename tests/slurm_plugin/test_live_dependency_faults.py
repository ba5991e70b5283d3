"""The controller when what it depends on fails, on the real test cluster (issue 15, item 2).

slurmctld stopped mid-round and restarted (by its PID, through the test cluster's API; it
recovers its jobs from ``StateSaveLocation``), slurmdbd or MariaDB down during ``mosaic
report``, a job whose wrapper ignores the checkpoint signal, a node drained or set down
under a Mosaic job, and the controller's clock skewed against slurmctld's. Each test ends
with nothing lost (no job FAILED or gone) and nothing left held by Mosaic.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.rounddiff import diff
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import (
    config_for,
    controller,
    jobs,
    starts,
    submit_job,
    wait_for,
    wait_started,
    wait_state,
    write_script,
)

SETTLED = {"RUNNING", "COMPLETED"}


def _nothing_lost_or_held(config: ControllerConfig, job_ids: list[str]) -> None:
    now = jobs(config)
    for job_id in job_ids:
        assert job_id in now, f"job {job_id} lost"
        assert now[job_id].state in SETTLED and not now[job_id].held, (job_id, now[job_id])


def _tick_until(ctl: Any, done: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Tick (as the daemon would, about once a second) until ``done()``."""

    def step() -> bool:
        if done():
            return True
        ctl.tick()
        time.sleep(1.0)
        return done()

    wait_for("the controller to converge", step, timeout_s)


class Hooked:
    """The real client; after ``method`` has run ``after`` times, ``hook()`` runs once."""

    def __init__(self, client: CliSlurm, method: str, hook: Callable[[], None], after: int = 1) -> None:
        self.client, self.method, self.hook, self.left = client, method, hook, after

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.client, name)
        if name != self.method:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            self.left -= 1
            if self.left == 0:
                self.hook()
            return out

        return call


# -- 1. slurmctld stopped mid-round ----------------------------------------------------------


@pytest.mark.parametrize("step", ["requeue_hold", "update"])
def test_slurmctld_stopped_mid_round_and_restarted_loses_nothing(live, tmp_path, step):
    config = config_for(live, tmp_path / "spool")
    first = [submit_job(config, write_script(tmp_path, f"j{k}", 4)) for k in range(4)]
    ctl = controller(config, "las")
    ctl.tick()
    for job_id in first:
        wait_started(config, job_id)
    time.sleep(2.0)  # attained service accrues: the newcomer preempts one of the four
    late = submit_job(config, write_script(tmp_path, "late", 4))
    stopped_at: list[float] = []

    def stop_slurmctld() -> None:
        stopped_at.append(time.monotonic())
        lifecycle.stop_daemon(live, "slurmctld")

    ctl.actuator.client = Hooked(ctl.actuator.client, step, stop_slurmctld)  # type: ignore[assignment]
    try:
        report = ctl.tick()
        assert stopped_at, "the hook never ran"
        # The tick reports the failure (no crash); the round is left to be completed.
        failed = [why for _, why in report.result.failed] if report.result is not None else []
        assert not report.ok or failed, report.to_json()
        round_id = report.round_id
        assert round_id is not None
    finally:
        if lifecycle.daemon_pids(live)["slurmctld"] is None:
            lifecycle.start_daemon(live, "slurmctld")
    ctl.actuator.client = ctl.actuator.client.client  # type: ignore[attr-defined]
    again = ctl.tick()
    assert again.ok, again.to_json()
    store = Store(config.store_path)
    assert store.unfinished_round() is None
    # A restarted slurmctld refuses updates to a job until slurmdbd has given it the job's
    # accounting index ("the DB index is being set"), which can take minutes on a loaded
    # machine: the start then fails and the next tick plans it again, as the daemon would.
    _tick_until(ctl, lambda: bool(starts(config, late)), timeout_s=300.0)
    held = [j for j, s in jobs(config).items() if j in first and s.held]
    assert len(held) <= 1  # the preempted job waits, held, for GPUs
    # The late job ends: the preempted one resumes; nothing stays held, nothing FAILED.
    run(["scancel", late], env=live.env)
    wait_for("late job gone", lambda: not jobs(config)[late].holds_resources)
    _tick_until(ctl, lambda: all(jobs(config)[j].state == "RUNNING" for j in first))
    _nothing_lost_or_held(config, first)
    for job_id in held:
        resumed = starts(config, job_id)[-1]
        assert resumed["env"]["SLURM_RESTART_COUNT"] == "1" and resumed["progress"] > 0


# -- 2. slurmdbd / MariaDB down during mosaic report --------------------------------------------


@pytest.mark.parametrize(
    ("daemon", "says"),
    [
        ("slurmdbd", "slurmdbd at localhost:{dbd_port} refused the connection"),
        ("mariadb", "cannot reach its database (MariaDB/MySQL"),
    ],
)
def test_report_with_accounting_down_is_a_clear_error_and_writes_nothing(
    live, tmp_path, capsys, daemon, says
):
    out = tmp_path / "out"
    out.mkdir()
    old = b'{"old": "report"}\n'
    (out / "summary.json").write_bytes(old)
    args = ["report", "--slurm-conf", str(live.layout.conf), "--spool", str(tmp_path / "spool")]
    args += ["--since", "now-1hours", "--format", "json", "--out", str(out)]
    lifecycle.stop_daemon(live, daemon)
    try:
        capsys.readouterr()
        code = main(args)
        captured = capsys.readouterr()
    finally:
        lifecycle.start_daemon(live, daemon)
    expected = says.format(dbd_port=live.layout.dbd_port)
    assert code != 0 and expected in captured.err, captured.err
    assert (
        captured.err.startswith("mosaic: error: Slurm accounting is down") and "Traceback" not in captured.err
    )
    assert captured.out == ""
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # no partial, no temporary file
    assert (out / "summary.json").read_bytes() == old

    # Back up: the same command works (slurmdbd reconnects to its database by itself).
    def works() -> bool:
        capsys.readouterr()
        return main(args) == 0

    wait_for("mosaic report to work again", works, timeout_s=60)
    assert json.loads((out / "summary.json").read_text())["source"] == "sacct"


# -- 3. a wrapper that ignores the checkpoint signal -------------------------------------------

IGNORER = """
import json, os, signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the checkpoint signal is never answered
status = os.path.join(os.environ["MOSAIC_SPOOL"], "status", os.environ["SLURM_JOB_ID"])
os.makedirs(status, exist_ok=True)
state = os.path.join(status, "periodic.json")
try:
    progress = json.load(open(state))["progress"]
except (OSError, ValueError):
    progress = 0.0
def beat(event):
    env = {k: os.environ.get(k) for k in ("SLURM_RESTART_COUNT", "SLURMD_NODENAME")}
    with open(os.path.join(status, "heartbeat.jsonl"), "a") as f:
        f.write(json.dumps({"event": event, "time": time.time(), "progress": progress, "env": env}) + "\\n")
beat("start")
last = time.monotonic()
while progress < 1.0:
    time.sleep(0.2)
    now = time.monotonic()
    progress = min(1.0, progress + (now - last) / 600.0)
    last = now
    tmp = state + ".tmp"  # its own periodic checkpoint, every 0.2 s
    with open(tmp, "w") as f:
        json.dump({"progress": progress}, f)
    os.replace(tmp, state)
beat("done")
"""


def test_a_job_ignoring_the_checkpoint_signal_is_requeued_after_the_grace_and_resumes(live, tmp_path):
    config = config_for(live, tmp_path / "spool", checkpoint_grace_s=3.0)
    program = tmp_path / "ignorer.py"
    program.write_text(IGNORER)
    script = tmp_path / "ignorer.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J ignorer --gres=gpu:1 -c 2 --mem=4G -o /dev/null\n"
        "#MOSAIC --model resnet50 --duration-s 600\n"
        f"exec {sys.executable} {program}\n"
    )
    job_id = submit_job(config, script)
    ctl = controller(config)
    ctl.tick()
    wait_started(config, job_id)
    time.sleep(2.0)  # some progress, checkpointed periodically by the job itself
    obs = ctl.observe()
    store = Store(config.store_path)
    round_id = store.begin_round(time.time(), {"assignments": {}})
    actions = [a for a in diff(obs, {}, round_id) if a.job_id == job_id]
    began = time.monotonic()
    result = Actuator(CliSlurm(config.slurm_env), store, config).apply(obs, actions, round_id)
    took = time.monotonic() - began
    store.finish_round(round_id, len(result.done))
    assert result.done == [actions[0].request_id] and not result.failed, result
    assert took >= config.checkpoint_grace_s  # it waited out the grace, then stopped the job
    assert planfile.read_checkpoint_marker(config.spool_dir, job_id) is None  # never answered
    stopped = jobs(config)[job_id]
    assert stopped.state == "PENDING" and stopped.held and stopped.requeues == 1
    periodic = json.loads((config.spool_dir / "status" / job_id / "periodic.json").read_text())["progress"]
    assert periodic > 0
    # The next round resumes it from its own last checkpoint: progress kept, nothing lost.
    _tick_until(ctl, lambda: len(starts(config, job_id)) >= 2)
    resumed = starts(config, job_id)[1]
    assert resumed["env"]["SLURM_RESTART_COUNT"] == "1"
    assert resumed["progress"] >= periodic > 0
    _nothing_lost_or_held(config, [job_id])


# -- 4. a node drained or set down under a Mosaic job -------------------------------------------


def _scontrol_node(cluster: Cluster, node: str, *fields: str) -> None:
    run(["scontrol", "update", f"nodename={node}", *fields], env=cluster.env)


@pytest.mark.parametrize("state", ["drain", "down"])
def test_a_node_drained_or_down_under_a_job_is_not_planned_on_and_nothing_stays_held(live, tmp_path, state):
    config = config_for(live, tmp_path / "spool")
    job_id = submit_job(config, write_script(tmp_path, "victim", 2))
    ctl = controller(config, "las")
    ctl.tick()
    node = wait_state(config, job_id, "RUNNING").nodes[0]
    _scontrol_node(live, node, f"state={state}", "reason=mosaic-fault-test")
    try:
        # New jobs that would fit the node are placed elsewhere; the job on it is not stopped
        # by Mosaic (a drained node's jobs finish there; Slurm requeues a down node's).
        others = [submit_job(config, write_script(tmp_path, f"o{k}", 4)) for k in range(3)]
        report = ctl.tick()
        assert report.ok, report.to_json()
        assert not [a for a in report.actions if a["job"] == job_id and a["kind"] == "stop"]
        plan = Store(config.store_path).last_round().plan  # type: ignore[union-attr]
        placed = {j: a for j, a in plan["assignments"].items() if j in [job_id, *others]}
        if state == "drain":
            placed.pop(job_id, None)  # the drained node's job runs on where it is (not managed)
        assert placed and all(g[0] != node for a in placed.values() for g in a["gpus"]), placed
        # Three usable nodes: at least two of the 4-GPU jobs (all three on a drain) are placed.
        assert len(set(placed) & set(others)) >= (3 if state == "drain" else 2), sorted(placed)
        victim = jobs(config)[job_id]
        if state == "drain":
            assert victim.state == "RUNNING" and victim.nodes == (node,)
        else:
            # Slurm requeued it (JobRequeue=1): the controller holds or places it, never loses it.
            assert victim.requeues >= 1 and victim.state in {"PENDING", "RUNNING"}, victim
    finally:
        _scontrol_node(live, node, "state=resume")
    # Node back: every job runs, none stays held.
    _tick_until(ctl, lambda: all(jobs(config)[j].state == "RUNNING" for j in [job_id, *others]))
    _nothing_lost_or_held(config, [job_id, *others])


# -- 5. the controller's clock skewed against slurmctld's ---------------------------------------


def _at_the_start_of_a_second() -> None:
    while time.time() % 1.0 > 0.05:
        time.sleep(0.01)


@pytest.mark.parametrize("skew_s", [3.6, -3.6])
def test_relaunch_under_clock_skew_gets_a_valid_credential(live, tmp_path, skew_s):
    """A job requeued (by an earlier controller process) and started at once by a controller
    whose clock is ``skew_s`` off slurmctld's: the credential rule must hold on slurmctld's
    clock, else slurmd kills the relaunch ("Job credential revoked") and the job FAILs."""
    config = config_for(live, tmp_path / "spool")
    skewed = controller(config, "fifo", clock=lambda: time.time() + skew_s)
    job_ids = [submit_job(config, write_script(tmp_path, f"s{k}", 1)) for k in range(3)]
    skewed.tick()
    for job_id in job_ids:
        wait_started(config, job_id)
    for attempt in range(3):
        job_id = job_ids[attempt]
        _at_the_start_of_a_second()
        run(["scontrol", "requeuehold", job_id], env=live.env)
        wait_for("job off its node", lambda j=job_id: jobs(config)[j].state == "PENDING", 30)
        fresh = controller(config, "fifo", clock=lambda: time.time() + skew_s)  # no memory of the stop
        report = fresh.tick()
        assert report.ok and not (report.result and report.result.failed), report.to_json()
        wait_for(
            f"job {job_id} relaunched",
            lambda j=job_id: jobs(config)[j].state in {"RUNNING", "FAILED", "COMPLETED"},
            30,
        )
        time.sleep(1.0)
        after = jobs(config)[job_id]
        assert after.state == "RUNNING", (attempt, after.state, after.reason)
        wait_started(config, job_id, runs=2)
    _nothing_lost_or_held(config, job_ids)
