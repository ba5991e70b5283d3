"""``mosaic report`` on the real cluster's accounting: runs of requeued jobs, same summary keys as sim."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from datetime import datetime

from planner.core.codec import assignment_from_json
from planner.metrics import SUMMARY_KEYS
from slurm_plugin.cli.main import main
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.rounddiff import diff
from slurm_plugin.report import build_report
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from slurm_plugin.testcluster.shapes import OTHER_PARTITION
from tests.slurm_plugin.live_helpers import (
    config_for,
    controller,
    jobs,
    submit_job,
    wait_for,
    wait_started,
    write_script,
)


def reported(live, config, since: str, out, capsys, finished: int) -> Callable[[], dict | None]:
    """`mosaic report --format json --out OUT` since ``since``: its document once it counts
    ``finished`` jobs finished (sacct records a job's end a moment after it), else ``None``."""

    def report() -> dict | None:
        capsys.readouterr()
        args = ["report", "--slurm-conf", str(live.layout.conf), "--spool", str(config.spool_dir)]
        assert main([*args, "--since", since, "--format", "json", "--out", str(out)]) == 0
        doc = json.loads(capsys.readouterr().out)
        return doc if doc["summary"]["finished"] == finished else None

    return report


def test_report_counts_runs_restarts_and_finishes(live, tmp_path, capsys):
    time.sleep(1.1)  # earlier tests' jobs ended before this second
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    config = config_for(live, tmp_path / "spool")
    short = submit_job(config, write_script(tmp_path, "short", 1, duration_s=20, time_scale=10))
    stopped = submit_job(config, write_script(tmp_path, "stopped", 2, duration_s=30, time_scale=10))
    ctl = controller(config)
    ctl.tick()
    wait_started(config, stopped)
    time.sleep(1.0)
    # Preempt one job by hand (an empty plan for it), then let the controller restart it.
    obs = ctl.observe()
    store = Store(config.store_path)
    round_id = store.begin_round(time.time(), {"assignments": {}})
    actions = [a for a in diff(obs, {}, round_id) if a.job_id == stopped]
    assert len(Actuator(CliSlurm(config.slurm_env), store, config).apply(obs, actions, round_id).done) == 1
    store.finish_round(round_id, 1)
    last_tick = [0.0]

    def done() -> bool:
        # The controller ticks on, once a second, as the daemon would: a requeued job still
        # completing is skipped for a tick and restarted at a later one.
        now = jobs(config)
        if all(j in now and now[j].state == "COMPLETED" for j in (short, stopped)):
            return True
        if time.monotonic() - last_tick[0] >= 1.0:
            ctl.tick()
            last_tick[0] = time.monotonic()
        return False

    wait_for("both jobs done", done, timeout_s=60)

    doc = wait_for("sacct to record both jobs", reported(live, config, since, tmp_path / "out", capsys, 2))
    summary = doc["summary"]
    assert set(SUMMARY_KEYS) <= set(summary) and summary["jobs"] == 2 and summary["gpus"] == 16
    assert summary["restarts"] == 1 and summary["preemptions"] == 1
    rows = {r["job_id"]: r for r in csv.DictReader((tmp_path / "out" / "jobs.csv").open())}
    assert rows[short]["restarts"] == "0" and rows[stopped]["restarts"] == "1"
    assert rows[stopped]["num_gpus"] == "2" and rows[stopped]["model"] == "resnet50"
    assert float(rows[short]["jct_s"]) >= 2.0  # 20 emulated seconds at 10x
    assert (tmp_path / "out" / "plot.png").stat().st_size > 1000
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["source"] == "sacct"
    assert summary["rounds"] >= 2 and summary["decision_time_s_max"] is not None


def test_report_tells_a_move_from_a_resume_elsewhere_by_the_runs_audit_lines(live, tmp_path):
    # One job is relaunched on another node while it runs (a migration); the other is
    # preempted and resumes on another node a round later (a restart, not a migration):
    # planner/relaunch.py's definition, read back from sacct's AdminComment of each run.
    time.sleep(1.1)
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    config = config_for(live, tmp_path / "spool")
    moved = submit_job(config, write_script(tmp_path, "moved", 1))
    resumed = submit_job(config, write_script(tmp_path, "resumed", 1))
    ctl = controller(config)
    client = CliSlurm(config.slurm_env)
    store = Store(config.store_path)
    actuator = Actuator(client, store, config)

    def one_gpu(node):
        return assignment_from_json({"gpus": [[node, 0]], "cpus": 2, "mem_gb": 4.0}, "test")

    def apply(plan, expected):
        obs = ctl.observe()
        round_id = store.begin_round(time.time(), {"assignments": {}})
        actions = diff(obs, plan, round_id)
        assert sorted((a.kind.value, a.job_id, a.reason) for a in actions) == sorted(expected)
        result = actuator.apply(obs, actions, round_id)
        store.finish_round(round_id, result.count)
        assert not result.failed and not result.skipped, (result.failed, result.skipped)

    apply(
        {moved: one_gpu("n1"), resumed: one_gpu("n2")},
        [("start", moved, "placed"), ("start", resumed, "placed")],
    )
    wait_started(config, moved)
    wait_started(config, resumed)
    apply(
        {moved: one_gpu("n3")},
        [("stop", moved, "moved"), ("start", moved, "moved"), ("stop", resumed, "preempted")],
    )
    wait_started(config, moved, runs=2)
    apply({moved: one_gpu("n3"), resumed: one_gpu("n4")}, [("start", resumed, "placed")])
    wait_started(config, resumed, runs=2)
    run(["scancel", moved, resumed], env=live.env)

    def counts():
        rows = client.sacct_runs(since, None)
        records = {r.job_id: r for r in build_report(rows, config.partitions, time.time()).records}
        if not all(j in records and records[j].state == "cancelled" for j in (moved, resumed)):
            return None
        return {j: (records[j].restarts, records[j].migrations, records[j].preemptions) for j in records}

    by_job = wait_for("sacct to record both jobs' runs", counts, timeout_s=30)
    assert by_job == {moved: (1, 1, 0), resumed: (1, 0, 1)}


def test_a_job_name_or_comment_holding_the_pipe_does_not_break_the_report(live, tmp_path, capsys):
    # sacct -a lists every user's jobs, in every partition: one whose name and comment hold
    # "|" (sacct's default separator) and a line break made every `mosaic report` fail.
    # Now sacct separates fields by a random token, and a comment's line break continues
    # its row.
    time.sleep(1.1)
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    config = config_for(live, tmp_path / "spool")
    managed = submit_job(
        config, write_script(tmp_path, "plain", 1, duration_s=10, time_scale=10), "-J", "a|b"
    )
    odd = tmp_path / "odd.sh"
    odd.write_text("#!/bin/bash\nsleep 1\n")
    argv = ["sbatch", "--parsable", "-p", OTHER_PARTITION, "-J", "odd|name", "--comment", "x|y\nz"]
    other = run([*argv, "-o", "/dev/null", str(odd)], env=live.env).stdout.strip().split(";")[0]
    controller(config).tick()
    wait_started(config, managed)

    def done() -> bool:
        now = jobs(config)
        return all(j in now and now[j].state == "COMPLETED" for j in (managed, other))

    wait_for("both jobs done", done, timeout_s=60)
    wait_for("sacct to record the job", reported(live, config, since, tmp_path / "out", capsys, 1))
    rows = CliSlurm(config.slurm_env).sacct_runs(since, None)
    names = {r["JobID"]: (r["JobName"], r["Comment"]) for r in rows}
    assert names[other] == ("odd|name", "x|y\nz")
    assert names[managed][0] == "a|b"
    jobs_csv = {r["job_id"] for r in csv.DictReader((tmp_path / "out" / "jobs.csv").open())}
    assert managed in jobs_csv
