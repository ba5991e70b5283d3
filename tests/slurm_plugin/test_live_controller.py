"""The controller on the real test cluster: what CI proves about the live Slurm path.

Jobs are emulated (``mosaic emulate``): their first heartbeat of every run records what
Slurm gave them (``CUDA_VISIBLE_DEVICES``, ``SLURM_CPUS_ON_NODE``, ``SLURM_MEM_PER_NODE``,
the node), so the assertions check resources from inside the job.
"""

from __future__ import annotations

import json
import time

import pytest

from planner.core.codec import assignment_from_json
from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.observe import OUTSIDE_PREFIX
from slurm_plugin.controller.rounddiff import Kind, diff, mem_mb_per_node
from slurm_plugin.directives import decode_comment
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
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


class ControllerCrash(Exception):
    """Stands for the controller process dying (nothing in the controller catches it)."""


class DiesAfterReleases:
    """The real client until ``n`` releases are done; then the controller 'dies'."""

    def __init__(self, client, n):
        self.client, self.left = client, n

    def __getattr__(self, name):
        if self.left <= 0:
            raise ControllerCrash(f"died before {name}")
        return getattr(self.client, name)

    def release(self, job_ids):
        self.client.release(job_ids)
        self.left -= 1


def _check_env_matches(record, assignment):
    env = record["env"]
    ((node, gpus),) = assignment.per_node
    assert env["SLURMD_NODENAME"] == node
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == gpus
    assert int(env["SLURM_CPUS_ON_NODE"]) == assignment.cpus
    assert int(env["SLURM_MEM_PER_NODE"]) == mem_mb_per_node(assignment)


def test_submit_holds_the_job_and_records_its_directives(live, tmp_path, capsys):
    script = write_script(tmp_path, "held", 1, directives="--tenant vision --global-batch-size 64")
    conf = str(live.layout.conf)
    assert main(["submit", "--slurm-conf", conf, "--spool", str(tmp_path / "spool"), str(script)]) == 0
    job_id = capsys.readouterr().out.strip()
    time.sleep(0.5)
    job = jobs(config_for(live, tmp_path / "spool"))[job_id]
    assert job.state == "PENDING" and job.held
    meta = decode_comment(job.comment)
    assert meta is not None and len(meta.pop("submission")) == 16  # this submission's token
    assert meta == {"model": "resnet50", "duration_s": 600.0, "tenant": "vision", "batch_size": 64}


def test_plain_sbatch_to_the_managed_partition_is_held_by_job_submit_lua(live, tmp_path):
    from slurm_plugin.slurm.runner import run

    out = run(["sbatch", "--parsable", "--gres=gpu:1", "--mem=1G", "--wrap", "sleep 60"], env=live.env)
    job = jobs(config_for(live, tmp_path))[out.stdout.strip()]
    assert job.state == "PENDING" and job.held


def test_once_starts_the_planned_jobs_with_exactly_the_planned_resources(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    a = submit_job(config, write_script(tmp_path, "a", 2))
    b = submit_job(config, write_script(tmp_path, "b", 1))
    report = controller(config).tick()
    assert report.ok and report.result is not None and not report.result.failed
    planned = {x["job"]: x for x in report.actions}
    assert set(planned) == {a, b} and all(x["kind"] == "start" for x in planned.values())
    store = Store(config.store_path)
    plan = store.last_round().plan  # type: ignore[union-attr]
    for job_id in (a, b):
        assignment = assignment_from_json(plan["assignments"][job_id], job_id)
        _check_env_matches(wait_started(config, job_id), assignment)
        document = planfile.read_plan(config.spool_dir, job_id)
        assert document is not None and document["assignment"]["cpus"] == assignment.cpus
        assert "mosaic r" in wait_state(config, job_id, "RUNNING").admin_comment
    metrics = (config.spool_dir / "metrics.prom").read_text()
    assert "mosaic_last_tick_ok 1" in metrics and 'mosaic_round_actions{outcome="done"} 2' in metrics


def test_planned_preemption_checkpoints_and_requeues_then_resumes(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    # Four 4-GPU jobs fill the 16 GPUs; a fifth arrives. LAS (preemptive) runs the job with
    # the least attained service: the newcomer replaces one of the four.
    first = [submit_job(config, write_script(tmp_path, f"j{k}", 4)) for k in range(4)]
    ctl = controller(config, "las")
    ctl.tick()
    for job_id in first:
        wait_started(config, job_id)
    time.sleep(2.0)  # attained service and progress accrue
    late = submit_job(config, write_script(tmp_path, "late", 4))
    report = ctl.tick()
    kinds = {(x["kind"], x["job"]) for x in report.actions}
    stopped = [j for k, j in kinds if k == "stop"]
    assert len(stopped) == 1 and ("start", late) in kinds, report.actions
    victim = stopped[0]
    assert report.result is not None and not report.result.failed
    # The victim checkpointed (marker after the signal) and was requeued held.
    marker = planfile.read_checkpoint_marker(config.spool_dir, victim)
    assert marker is not None and marker["progress"] > 0
    job = jobs(config)[victim]
    assert job.state == "PENDING" and job.held and job.requeues == 1
    wait_started(config, late)
    # Once capacity frees up the victim resumes from its checkpoint, not from zero.
    from slurm_plugin.slurm.runner import run

    run(["scancel", late], env=live.env)
    wait_for("late job gone", lambda: late not in {j for j, s in jobs(config).items() if s.holds_resources})
    ctl.tick()
    resumed = wait_started(config, victim, runs=2)
    assert resumed["progress"] >= marker["progress"] > 0
    assert resumed["env"]["SLURM_RESTART_COUNT"] == "1"


def test_resize_relaunches_the_job_with_its_new_resources(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    # This job exits once its checkpoint is saved (as mosaic-run does): the finished job is
    # requeued all the same, because it wrote its marker for the controller's signal.
    job_id = submit_job(config, write_script(tmp_path, "grow", 1, exit_on_checkpoint=True))
    ctl = controller(config)
    ctl.tick()
    first = wait_started(config, job_id)
    time.sleep(1.5)
    obs = ctl.observe()
    current = obs.snapshot.jobs[0].assignment
    assert current is not None
    target_node = next(n for n in ("n1", "n2", "n3", "n4") if n not in current.nodes)
    bigger = assignment_from_json(
        {"gpus": [[target_node, 0], [target_node, 1]], "cpus": 6, "mem_gb": 10.0}, "resize"
    )
    store = Store(config.store_path)
    round_id = store.begin_round(time.time(), {"assignments": {}})
    actions = diff(obs, {job_id: bigger}, round_id)
    assert [(a.kind, a.reason) for a in actions] == [(Kind.STOP, "moved"), (Kind.START, "moved")]
    result = Actuator(CliSlurm(config.slurm_env), store, config).apply(obs, actions, round_id)
    assert len(result.done) == 2, (result.skipped, result.failed)
    second = wait_started(config, job_id, runs=2)
    _check_env_matches(second, bigger)
    assert second["progress"] > first["progress"]  # resumed from its checkpoint


def test_a_job_outside_mosaic_is_left_alone(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    outside = submit_job(config, write_script(tmp_path, "outside", 2, partition="other"))
    # Mosaic's own submission holds it, as any; an admin releasing it runs it outside Mosaic.
    from slurm_plugin.slurm.runner import run

    run(["scontrol", "release", outside], env=live.env)
    before = wait_state(config, outside, "RUNNING")
    managed = submit_job(config, write_script(tmp_path, "managed", 4))
    ctl = controller(config, "las")
    obs = ctl.observe()
    ghost = next(j for j in obs.snapshot.jobs if j.id == OUTSIDE_PREFIX + outside)
    assert ghost.is_running and not ghost.preemptible and ghost.assignment.num_gpus == 2
    report = ctl.tick()
    assert {x["job"] for x in report.actions} == {managed}
    wait_started(config, managed)
    after = jobs(config)[outside]
    assert after.state == "RUNNING" and after.start_time == before.start_time and after.requeues == 0
    assert after.admin_comment == ""
    # The planner kept the outside job's GPUs free of Mosaic's job.
    plan = Store(config.store_path).last_round().plan  # type: ignore[union-attr]
    outside_gpus = {tuple(g) for g in plan["assignments"][OUTSIDE_PREFIX + outside]["gpus"]}
    assert not outside_gpus & {tuple(g) for g in plan["assignments"][managed]["gpus"]}


def test_a_half_applied_round_is_completed_after_a_restart(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    ids = [submit_job(config, write_script(tmp_path, f"h{k}", 1)) for k in range(2)]
    crashing = controller(config)
    crashing.actuator.client = DiesAfterReleases(crashing.actuator.client, 1)  # dies after one start
    with pytest.raises(ControllerCrash):
        crashing.tick()
    unfinished = Store(config.store_path).unfinished_round()
    assert unfinished is not None
    held = [j for j in ids if jobs(config)[j].held]
    assert len(held) == 1
    restarted = controller(config)  # a new process: fresh store connection, same database
    second = restarted.tick()
    assert second.ok and second.completed_round == unfinished.round_id
    for job_id in ids:
        wait_started(config, job_id)
    assert Store(config.store_path).unfinished_round() is None
    statuses = {(a[2], a[3]): a[4] for a in Store(config.store_path).actions(unfinished.round_id)}
    assert statuses == {(ids[0], "start"): "done", (ids[1], "start"): "done"}
    assert len(starts(config, ids[0])) == 1 and len(starts(config, ids[1])) == 1  # nothing ran twice


def test_slurm_down_for_a_tick_means_no_actions(live, tmp_path):
    config = config_for(live, tmp_path / "spool")
    job_id = submit_job(config, write_script(tmp_path, "steady", 1))
    controller(config).tick()
    before = wait_state(config, job_id, "RUNNING")
    blind_config = config_for(live, tmp_path / "spool", slurm_conf=str(tmp_path / "missing.conf"))
    blind = controller(blind_config, "las")
    rounds_before = len(Store(config.store_path).rounds(100))
    report = blind.tick()
    assert not report.ok and report.round_id is None and report.actions == []
    assert len(Store(config.store_path).rounds(100)) == rounds_before
    after = jobs(config)[job_id]
    assert after.state == "RUNNING" and after.start_time == before.start_time
    assert "mosaic_last_tick_ok 0" in (config.spool_dir / "metrics.prom").read_text()
    # Slurm back: the next tick works, and keeps the running job where it is.
    again = controller(config, "las").tick()
    assert again.ok and again.actions == []
    assert json.loads(json.dumps(again.to_json()))["ok"] is True


def test_status_and_snapshot_commands_read_the_live_state(live, tmp_path, capsys):
    config = config_for(live, tmp_path / "spool")
    job_id = submit_job(config, write_script(tmp_path, "seen", 2))
    common = ["--slurm-conf", str(live.layout.conf), "--spool", str(config.spool_dir)]
    assert main(["controller", "--once", "--scheduler", "fifo", *common]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["done"] == [f"r{report['round']}-start-{job_id}"]
    assert main(["status", "--json", *common]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["rounds"][0]["actions"][0]["job"] == job_id and status["jobs"][job_id]["num_gpus"] == 2
    wait_state(config, job_id, "RUNNING")
    snapshot = tmp_path / "snap.json"
    assert main(["snapshot", *common, "--out", str(snapshot)]) == 0
    document = json.loads(snapshot.read_text())
    (job,) = [j for j in document["jobs"] if j["id"] == job_id]
    assert job["state"] == "running" and len(job["assignment"]["gpus"]) == 2
    capsys.readouterr()
    # The captured live snapshot replays offline: the same plan keeps the job where it is.
    assert main(["plan", str(snapshot), "--scheduler", "fifo"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["assignments"][job_id]["gpus"] == job["assignment"]["gpus"]
