"""One controller round that reaches every crash point, killed there and recovered (real Slurm).

Shared by ``test_live_crash_points.py`` and ``benchmarks/soak/crash_points.py``. On the test
cluster (4 nodes x 4 GPUs) three jobs outside Mosaic's partitions hold n2-n4, so Mosaic
plans n1's 4 GPUs; the scheduler is ``elastic`` with LAS ordering (preemptive). Prepared
by in-process ticks:

* ``victim``: 1 GPU, running, exits once its checkpoint is saved (as ``mosaic-run``
  does); given a large attained service, so LAS preempts it;
* ``steady``: 1 GPU, running; the round leaves it alone;
* ``elastic``: ``--min-gpus 1 --max-gpus 2``, asked 1, grown into 2 GPUs;
* ``newcomer``: 2 GPUs, submitted (held by ``mosaic submit``), never run;
* ``waiter``: 2 nodes x 4 GPUs, released by hand (an admin's ``scontrol release``): it
  cannot fit, and Slurm could start it on its own once nodes free up.

The round (``mosaic controller --once`` in a subprocess) then stops the victim
(checkpoint signal, requeuehold: preempted), stops and restarts the elastic job on 1 GPU
(resized: plan file, ``scontrol update``, release), starts the newcomer on 2 GPUs and
holds the waiter. :func:`crash_and_recover` runs it with ``MOSAIC_CRASH_AT``, expects
``SIGKILL``, runs the controller again without it, and :func:`check` reports what a
restarted controller left: the outcome's lists are all empty when nothing went wrong.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from planner.config import build_scheduler, preset
from planner.core.codec import assignment_from_json
from planner.relaunch import mem_mb_per_node
from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.faults import CRASH_ENV, LOG_ENV
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.observe import OUTSIDE_PREFIX
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import (
    config_for,
    jobs,
    starts,
    submit_job,
    wait_for,
    write_script,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEDULER = ("--scheduler", "elastic", "--policy", "las")
LONG_S = 36000.0  # no job ends by itself during a case
WAIT_S = 120.0  # generous: other test suites share the machine's two cores
OUTSIDE_NODES = ("n2", "n3", "n4")
# An outside job holding a node's 4 GPUs (-w NODE goes after "-w").
SLEEPER = ("sbatch", "--parsable", "-p", "other", "-w", "--gres=gpu:4", "-c", "1", "--mem=1G")
SLEEPER = (*SLEEPER, "-o", "/dev/null", "--wrap", "sleep 36000")

# What every case ends with, whatever the crash point: the round's decisions, applied once.
EXPECTED_RUNS = {"victim": 1, "steady": 1, "elastic": 2, "newcomer": 1, "waiter": 0}
EXPECTED_STATE = {
    "victim": ("PENDING", True),
    "steady": ("RUNNING", False),
    "elastic": ("RUNNING", False),
    "newcomer": ("RUNNING", False),
    "waiter": ("PENDING", True),
}
EXPECTED_GPUS = {"steady": 1, "elastic": 1, "newcomer": 2}
ENDED_BADLY = {"FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "DEADLINE"}
_AUDIT = re.compile(r"mosaic (r\d+-(?:stop|start|hold)-[A-Za-z0-9_.+-]+)")


def scheduler() -> Any:
    return build_scheduler(preset("elastic").with_overrides(policy="las"))


def _controller(config: ControllerConfig) -> Controller:
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    return Controller(client, Store(config.store_path), config, scheduler())


@dataclass
class Scenario:
    cluster: Cluster
    config: ControllerConfig
    work: Path
    toml: Path
    ids: dict[str, str]  # role -> Slurm job id
    outside: list[str]

    @property
    def roles(self) -> dict[str, str]:
        return {job_id: role for role, job_id in self.ids.items()}


def prepare(cluster: Cluster, work: Path) -> Scenario:
    """Submit the scenario's jobs and bring them to the state the crashed round starts from."""
    work.mkdir(parents=True, exist_ok=True)
    config = config_for(cluster, work / "spool")
    toml = work / "mosaic.toml"
    toml.write_text(
        "[controller]\n"
        f'spool_dir = "{config.spool_dir}"\n'
        f'slurm_conf = "{config.slurm_conf}"\n'
        f"checkpoint_grace_s = {config.checkpoint_grace_s:g}\n"
        f"stop_timeout_s = {config.stop_timeout_s:g}\n"
        f'metrics_file = "{config.metrics_file}"\n'
    )
    outside = [
        run(
            [*SLEEPER[:5], node, *SLEEPER[5:]],
            env=cluster.env,
        ).stdout.strip()
        for node in OUTSIDE_NODES
    ]
    wait_for(
        "the outside jobs running",
        lambda: all(jobs(config).get(j) and jobs(config)[j].state == "RUNNING" for j in outside),
        WAIT_S,
    )
    ids: dict[str, str] = {}
    ids["victim"] = submit_job(
        config, write_script(work, "victim", 1, duration_s=LONG_S, exit_on_checkpoint=True)
    )
    _tick(config, [ids["victim"]])
    ids["steady"] = submit_job(config, write_script(work, "steady", 1, duration_s=LONG_S))
    ids["elastic"] = submit_job(
        config, write_script(work, "elastic", 1, duration_s=LONG_S, directives="--min-gpus 1 --max-gpus 2")
    )
    _tick(config, [ids["steady"], ids["elastic"]])
    elastic = jobs(config)[ids["elastic"]]
    assert elastic.gpus_held_per_node == 2, f"the elastic job did not grow into 2 GPUs: {elastic}"
    store = Store(config.store_path)
    record = store.jobs()[ids["victim"]]
    # A long-running job by now: LAS (least attained service first) preempts it.
    store.account({ids["victim"]: (1e6, record.progress, time.time(), None)})
    store.close()
    ids["newcomer"] = submit_job(config, write_script(work, "newcomer", 2, duration_s=LONG_S))
    ids["waiter"] = submit_job(config, write_script(work, "waiter", 4, duration_s=LONG_S), "-N", "2")
    run(["scontrol", "release", ids["waiter"]], env=cluster.env)
    wait_for(
        "the waiter released",
        lambda: (j := jobs(config).get(ids["waiter"])) is not None and j.is_pending and not j.held,
        WAIT_S,
    )
    return Scenario(cluster, config, work, toml, ids, outside)


def _tick(config: ControllerConfig, started: list[str]) -> None:
    report = _controller(config).tick()
    assert report.ok and report.result is not None and not report.result.failed, report.to_json()
    for job_id in started:
        wait_for(f"job {job_id} started", _runs_reach(config, job_id, 1), WAIT_S)


def controller_cmd(s: Scenario) -> list[str]:
    return [
        sys.executable,
        "-m",
        "slurm_plugin.cli.main",
        "controller",
        "--once",
        "--config",
        str(s.toml),
        *SCHEDULER,
    ]


def run_controller(
    s: Scenario, name: str, crash_at: str | None = None, timeout_s: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """One ``mosaic controller --once`` in its own process (stdout/stderr kept in ``work``)."""
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    env.pop(LOG_ENV, None)
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
        env[LOG_ENV] = str(s.work / f"{name}.points")
    done = subprocess.run(
        controller_cmd(s), env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
    )
    (s.work / f"{name}.out").write_text(done.stdout)
    (s.work / f"{name}.err").write_text(done.stderr)
    return done


def points_reached(s: Scenario, name: str) -> Counter[str]:
    path = s.work / f"{name}.points"
    return Counter(path.read_text().split()) if path.exists() else Counter()


@dataclass
class Outcome:
    """What a restarted controller left after a crash; every list is empty when all is well."""

    crash_at: str
    returncode: int
    points_before: int  # crash points passed before the kill (the last one killed it)
    round_after_crash: str  # the crashed round in the store right after the kill
    round_outcome: str  # completed | rolled back | unfinished
    then: str | None = None  # the first restart killed too, at this point
    then_returncode: int | None = None
    lost: list[str] = field(default_factory=list)  # not pending or running any more
    ended_badly: list[str] = field(default_factory=list)  # a run FAILED, CANCELLED, ... (sacct)
    held_but_planned: list[str] = field(default_factory=list)
    running_unplanned: list[str] = field(default_factory=list)
    wrong_state: list[str] = field(default_factory=list)  # vs EXPECTED_STATE / EXPECTED_GPUS
    wrong_runs: list[str] = field(default_factory=list)  # ran more (or fewer) times than once
    unfinished_rounds: list[int] = field(default_factory=list)
    planned_actions_left: list[str] = field(default_factory=list)
    audit_mismatch: list[str] = field(default_factory=list)
    bad_plan_files: list[str] = field(default_factory=list)
    stray_temp_files: list[str] = field(default_factory=list)
    recovery_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def problems(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if isinstance(v, list) and v}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def crash_and_recover(cluster: Cluster, work: Path, crash_at: str, then: str | None = None) -> Outcome:
    """Prepare, run the round killed at ``crash_at``, recover with two plain ticks, check.

    ``then``: the first restart is killed too, at that point (while it completes the round).
    """
    started = time.monotonic()
    s = prepare(cluster, work)
    before = _last_round_id(s)
    crashed = run_controller(s, "crash", crash_at)
    outcome = Outcome(
        crash_at=crash_at,
        returncode=crashed.returncode,
        points_before=sum(points_reached(s, "crash").values()),
        round_after_crash=_round_after_crash(s, before),
        round_outcome="",
    )
    if then is not None:
        again = run_controller(s, "crash2", then)
        outcome.then = then
        outcome.then_returncode = again.returncode
    first = run_controller(s, "recover1")
    if first.returncode != 0:
        outcome.recovery_errors.append(f"recovery tick exit {first.returncode}: {first.stderr[-2000:]}")
    _wait_planned_running(s)
    second = run_controller(s, "recover2")
    if second.returncode != 0:
        outcome.recovery_errors.append(f"second tick exit {second.returncode}: {second.stderr[-2000:]}")
    elif '"actions": []' not in second.stdout:
        outcome.recovery_errors.append(f"the tick after recovery still acts: {second.stdout[-2000:]}")
    check(s, before, outcome)
    outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def _last_round_id(s: Scenario) -> int:
    store = Store(s.config.store_path)
    try:
        last = store.last_round()
        return last.round_id if last is not None else 0
    finally:
        store.close()


def _round_after_crash(s: Scenario, before: int) -> str:
    store = Store(s.config.store_path)
    try:
        rounds = [r for r in store.rounds(10) if r.round_id > before]
        if not rounds:
            return "none"
        r = rounds[-1]
        statuses = Counter(a[4] for a in store.actions(r.round_id))
        return f"{r.status} ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items())) or 'no actions'})"
    finally:
        store.close()


def _planned(s: Scenario) -> dict[str, Any]:
    store = Store(s.config.store_path)
    try:
        last = store.last_round()
        raw = last.plan.get("assignments", {}) if last is not None else {}
        return {
            j: assignment_from_json(a, f"round plan: {j}")
            for j, a in raw.items()
            if not j.startswith(OUTSIDE_PREFIX)
        }
    finally:
        store.close()


def _wait_planned_running(s: Scenario) -> None:
    planned = _planned(s)

    def running() -> bool:
        now = jobs(s.config)
        return all(j in now and now[j].state == "RUNNING" for j in planned)

    with contextlib.suppress(AssertionError):  # reported by check()
        wait_for("the planned jobs running", running, WAIT_S)


def _sacct_states(s: Scenario) -> dict[str, list[str]]:
    out = run(
        ["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(s.ids.values()), "--format=JobID,State"],
        env=s.cluster.env,
        check=False,
    )
    states: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        job_id, _, state = line.partition("|")
        states.setdefault(job_id.strip(), []).append(state.split()[0] if state.strip() else "")
    return states


def check(s: Scenario, before: int, o: Outcome) -> Outcome:
    """Fill ``o``'s lists from Slurm (squeue, sacct), the store and the spool."""
    roles = s.roles
    now = jobs(s.config)
    for role, job_id in s.ids.items():
        sj = now.get(job_id)
        if sj is None or not (sj.is_pending or sj.state == "RUNNING"):
            o.lost.append(f"{role} {job_id}: {sj.state if sj else 'gone'}")
    for job_id, states in _sacct_states(s).items():
        bad = [x for x in states if x in ENDED_BADLY]
        if bad:
            o.ended_badly.append(f"{roles.get(job_id, job_id)} {job_id}: {', '.join(states)}")
    planned = _planned(s)
    for job_id in planned:
        sj = now.get(job_id)
        if sj is None or sj.state != "RUNNING":
            state = "gone" if sj is None else f"{sj.state}{' held' if sj.held else ''}"
            o.held_but_planned.append(f"{roles.get(job_id, job_id)} {job_id}: {state}")
    for job_id, sj in now.items():
        if job_id in roles and sj.state == "RUNNING" and job_id not in planned:
            o.running_unplanned.append(f"{roles[job_id]} {job_id}")
    for role, (state, held) in EXPECTED_STATE.items():
        sj = now.get(s.ids[role])
        got = (sj.state, sj.held) if sj is not None else ("gone", False)
        if got != (state, held):
            o.wrong_state.append(f"{role}: {got}, expected {(state, held)}")
    for role, gpus in EXPECTED_GPUS.items():
        sj = now.get(s.ids[role])
        if sj is not None and sj.state == "RUNNING" and sj.gpus_held_per_node * len(sj.nodes) != gpus:
            o.wrong_state.append(
                f"{role}: runs on {sj.gpus_held_per_node * len(sj.nodes)} GPUs, planned {gpus}"
            )
    for role, n in EXPECTED_RUNS.items():
        job_id = s.ids[role]
        if n:
            with contextlib.suppress(AssertionError):  # reported just below
                wait_for(f"{role} run {n}", _runs_reach(s.config, job_id, n), 30.0)
        runs = len(starts(s.config, job_id))
        if runs != n:
            o.wrong_runs.append(f"{role} {job_id}: {runs} runs, expected {n}")
    store = Store(s.config.store_path)
    try:
        crashed = [r for r in store.rounds(50) if r.round_id > before]
        o.unfinished_rounds = [r.round_id for r in crashed if r.status == "applying"]
        if o.unfinished_rounds:
            o.round_outcome = "unfinished"
        elif o.round_after_crash == "none":
            o.round_outcome = "rolled back"  # never recorded: the next tick planned afresh
        elif o.round_after_crash.startswith("applying"):
            o.round_outcome = "completed"  # by the restarted controller
        else:
            o.round_outcome = "done before the kill"
        actions = list(store.actions())
        o.planned_actions_left = [
            f"{a[0]} (round {a[1]})" for a in actions if a[4] == "planned" and a[1] > before
        ]
        _check_audit(s, now, actions, o)
        for role, job_id in s.ids.items():
            _check_plan_file(s, role, job_id, now.get(job_id), store, o)
    finally:
        store.close()
    plans = s.config.spool_dir / "plans"
    o.stray_temp_files = (
        sorted(p.name for p in plans.glob(".*") if not p.name.endswith(".lock")) if plans.is_dir() else []
    )
    return o


def _runs_reach(config: ControllerConfig, job_id: str, n: int) -> Callable[[], bool]:
    return lambda: len(starts(config, job_id)) >= n


def _check_audit(s: Scenario, now: dict[str, SlurmJob], actions: list[tuple[Any, ...]], o: Outcome) -> None:
    """Each touched job's AdminComment names the last stop/start the store records as applied to it."""
    roles = s.roles
    last: dict[str, tuple[float, str]] = {}
    by_id = {a[0]: a for a in actions}
    for rid, _round, job_id, kind, status, _detail, t in actions:
        applied = kind in {"stop", "start"} and status in {"done", "failed"}
        if applied and (job_id not in last or t >= last[job_id][0]):
            last[job_id] = (t, rid)
    for job_id, role in roles.items():
        sj = now.get(job_id)
        comment = sj.admin_comment if sj is not None else ""
        named = _AUDIT.findall(comment)
        rid = named[-1] if named else None
        if rid is not None:
            action = by_id.get(rid)
            if action is None or action[2] != job_id:
                o.audit_mismatch.append(f"{role} {job_id}: AdminComment names {rid}, not in the store")
                continue
        expected = last.get(job_id, (0.0, None))[1]
        if rid != expected:
            o.audit_mismatch.append(
                f"{role} {job_id}: AdminComment names {rid}, the store's last is {expected}"
            )


def _check_plan_file(
    s: Scenario, role: str, job_id: str, sj: SlurmJob | None, store: Store, o: Outcome
) -> None:
    path = planfile.plan_path(s.config.spool_dir, job_id)
    if not path.exists():
        if sj is not None and sj.state == "RUNNING":
            o.bad_plan_files.append(f"{role} {job_id}: running without a plan file")
        return
    document = planfile.read_plan(s.config.spool_dir, job_id)
    try:
        from planner.core.plandoc import parse_plan_document

        parsed = parse_plan_document(document, str(path))
    except Exception as e:  # any failure to read it back is what this check reports
        o.bad_plan_files.append(f"{role} {job_id}: {e}")
        return
    record = store.job(job_id)
    if record is not None and parsed.version > record.plan_version:
        o.bad_plan_files.append(
            f"{role} {job_id}: version {parsed.version} > the store's {record.plan_version}"
        )
    if sj is not None and sj.state == "RUNNING":
        a = parsed.assignment
        per_node = dict(a.per_node)
        if set(per_node) != set(sj.nodes) or any(g != sj.gpus_held_per_node for g in per_node.values()):
            o.bad_plan_files.append(f"{role} {job_id}: plan file {per_node}, Slurm runs {sj.nodes}")
        elif (sj.memory_mb_per_node() or 0) != mem_mb_per_node(a):
            o.bad_plan_files.append(f"{role} {job_id}: plan file memory differs from Slurm's")
