"""A site's history replayed: jobs run on the accounting test cluster (several GPU counts, one
requeued, an array, one cancelled while pending, one failed), then ``mosaic trace from-sacct``
and ``mosaic cluster from-slurm``, and ``mosaic sim --scheduler fifo`` on what they wrote."""

from __future__ import annotations

import csv
import time
from datetime import datetime
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.traces.csvio import parse_trace
from slurm_plugin.cli.main import main
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster.shapes import OTHER_PARTITION
from tests.slurm_plugin.live_helpers import wait_for


def _sbatch(env: dict[str, str], *args: str) -> str:
    out = run(["sbatch", "--parsable", "-o", "/dev/null", *args], env=env).stdout
    return out.strip().split(";")[0]


def _states(env: dict[str, str]) -> dict[str, str]:
    out = run(["squeue", "-h", "-o", "%i %T"], env=env).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def test_a_sites_history_replays_in_the_simulator(live, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    env = live.env
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    time.sleep(1)  # sacct's window starts at a whole second: nothing of an earlier test in it
    comment = 'mosaic:{"batch_size":32,"model":"resnet50","submission":"feedface"}'
    small = ["-c", "1", "--mem=1G"]
    ran = {
        "one": _sbatch(env, "-J", "one", "--gres=gpu:1", "-c", "1", "--mem=1G", "--wrap", "sleep 2"),
        "two": _sbatch(env, "-J", "two", "--gres=gpu:2", "-c", "2", "--mem=1G", f"--comment={comment}",
                       "--wrap", "sleep 3"),
        "four": _sbatch(env, "-J", "four", "-N", "2", "--gres=gpu:2", *small, "--wrap", "sleep 2"),
        "requeued": _sbatch(env, "-J", "rq", "--gres=gpu:1", "-c", "1", "--mem=1G", "--wrap", "sleep 4"),
        "failed": _sbatch(env, "-J", "failed", "--gres=gpu:1", *small, "--wrap", "sleep 1; exit 3"),
    }  # fmt: skip
    array = _sbatch(env, "-J", "arr", "--array=0-1", "--gres=gpu:1", *small, "--wrap", "sleep 2")
    ids = ",".join([*ran.values(), array])
    # job_submit.lua holds every job of the managed partition: start them now.
    run(["scontrol", "update", f"JobId={ids}", "StartTime=now"], env=env, check=False)
    run(["scontrol", "release", ids], env=env, check=False)
    wait_for("the requeued job to run", lambda: _states(env).get(ran["requeued"]) == "RUNNING")
    # Eligible but waiting for every GPU, then cancelled before it starts.
    pending = _sbatch(
        env, "-p", OTHER_PARTITION, "-J", "cancelled", "-N", "4", "--gres=gpu:4", "--wrap", "true"
    )
    time.sleep(1.5)
    run(["scontrol", "requeue", ran["requeued"]], env=env)
    run(["scancel", pending], env=env)
    time.sleep(0.5)
    run(["scontrol", "update", f"JobId={ran['requeued']}", "StartTime=now"], env=env, check=False)
    run(["scontrol", "release", ran["requeued"]], env=env, check=False)
    wait_for("every job to end", lambda: not _states(env), timeout_s=90)
    expected = {*ran.values(), f"{array}_0", f"{array}_1"}

    trace_path, cluster_path = tmp_path / "site.csv", tmp_path / "site.toml"
    conf = ["--slurm-conf", str(live.layout.conf)]

    def traced() -> bool:
        capsys.readouterr()
        args = ["trace", "from-sacct", *conf, "--since", since, "--out", str(trace_path)]
        if main(args) != 0:
            return False
        written = {j.job_id for j in parse_trace(trace_path.read_text(), "t")}
        return expected <= written  # sacct records a job's end a moment after it

    wait_for("sacct to record every job", traced, timeout_s=30)
    assert "1 never started" in capsys.readouterr().err
    rows = {r["job_id"]: r for r in csv.DictReader(trace_path.open())}
    jobs = {j.job_id: j for j in parse_trace(trace_path.read_text(), "t")}
    assert pending not in jobs
    assert {jobs[ran[k]].num_gpus for k in ("one", "two", "four")} == {1, 2, 4}
    assert jobs[ran["two"]].model == "resnet50" and jobs[ran["two"]].batch_size == 32
    assert rows[ran["requeued"]]["runs"] == "2" and rows[ran["failed"]]["state"] == "FAILED"
    # A requeued job's time is the sum of its runs' ElapsedRaw, as sacct prints them. (How long
    # the first run lasts before the requeue lands is up to Slurm under load: no bound on it.)
    records = run(
        ["sacct", "-n", "-P", "-X", "--duplicates", "-j", ran["requeued"], "-o", "ElapsedRaw,State"], env=env
    ).stdout.split()
    assert len(records) == 2, records
    assert jobs[ran["requeued"]].duration_s == max(1.0, sum(float(r.split("|")[0]) for r in records)), records
    # Each other job's time, as sacct measured it (whole seconds; slurmd's start and end a
    # second apart at most from the job's sleep).
    for key, sleep_s in (("one", 2), ("two", 3), ("four", 2), ("failed", 1)):
        assert sleep_s <= jobs[ran[key]].duration_s <= sleep_s + 2, key

    everything = tmp_path / "all.csv"  # the default --since: the whole history
    assert main(["trace", "from-sacct", *conf, "--out", str(everything)]) == 0
    assert expected <= {j.job_id for j in parse_trace(everything.read_text(), "all")}

    assert main(["cluster", "from-slurm", *conf, "--out", str(cluster_path)]) == 0
    nodes = cluster_from_toml(cluster_path.read_text(), "c")
    assert [(n.gpus, n.gpu_type) for n in nodes] == [(4, "a100")] * 4  # the feature names the type

    out = tmp_path / "sim"
    args = ["sim", "--cluster", str(cluster_path), "--trace", str(trace_path), "--scheduler", "fifo"]
    assert main([*args, "--out", str(out), "--no-plot"]) == 0
    simulated = {r["job_id"]: r for r in csv.DictReader((out / "jobs.csv").open())}
    assert set(simulated) == set(jobs)
    for job_id in expected:
        r = simulated[job_id]
        assert r["state"] == "finished", job_id
        run_s = float(r["finish_time_s"]) - float(r["start_time_s"])
        assert run_s == pytest.approx(jobs[job_id].duration_s), job_id


def test_a_queue_replays_with_each_jobs_jct(live, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Jobs that queue on the partition Slurm schedules itself, replayed by ``mosaic sim
    --scheduler fifo --trigger event -o placement.backfill_interval_s=30 --launch-s 1`` (Slurm's
    main scheduler: FIFO at every submission and completion, and its backfill pass every 30 s;
    a job starts a second after it is submitted to free GPUs, or after the job it waited for
    ended): each job's JCT, queueing included, as sacct recorded it (End - Submit), within 2 s
    (sacct's times are whole seconds; the first job on a fresh cluster takes 2 s to start; -1
    to +1 s measured otherwise). Every job takes a whole node, so Slurm's backfill pass could
    start nothing its FIFO would not, and placement cannot differ
    (benchmarks/soak/replay_fidelity.py measures mixed jobs)."""
    env = live.env
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    time.sleep(1)
    sleeps = [3, 5, 2, 4, 3, 2, 4, 3, 2, 3]
    ids = []
    for k, sleep_s in enumerate(sleeps):
        ids.append(
            _sbatch(env, "-p", OTHER_PARTITION, "-J", f"q{k}", "--gres=gpu:4", "-c", "1", "--mem=1G",
                    "--wrap", f"sleep {sleep_s}")
        )  # fmt: skip
        time.sleep(0.3)
    wait_for("every job to end", lambda: not _states(env), timeout_s=90)

    def recorded() -> dict[str, float] | None:
        out = run(
            ["sacct", "-n", "-P", "-X", "-S", since, "-o", "JobID,Submit,End,State"],
            env={**env, "SLURM_TIME_FORMAT": "%s"},
        ).stdout
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        jct = {r[0]: float(r[2]) - float(r[1]) for r in rows if r[3] == "COMPLETED" and r[2].isdigit()}
        return jct if set(ids) <= set(jct) else None

    wait_for("sacct to record every job", recorded, timeout_s=30)
    sacct_jct = recorded()
    assert sacct_jct is not None
    conf = ["--slurm-conf", str(live.layout.conf)]
    trace_path, cluster_path, out = tmp_path / "site.csv", tmp_path / "site.toml", tmp_path / "sim"
    assert main(["trace", "from-sacct", *conf, "--since", since, "--out", str(trace_path)]) == 0
    assert main(["cluster", "from-slurm", *conf, "--out", str(cluster_path)]) == 0
    args = ["sim", "--cluster", str(cluster_path), "--trace", str(trace_path), "--scheduler", "fifo"]
    args += ["--trigger", "event", "-o", "placement.backfill_interval_s=30", "--launch-s", "1"]
    args += ["--out", str(out), "--no-plot"]
    assert main(args) == 0
    capsys.readouterr()
    replayed = {
        r["job_id"]: float(r["finish_time_s"]) - float(r["submit_time_s"])
        for r in csv.DictReader((out / "jobs.csv").open())
    }
    errors = {job_id: replayed[job_id] - sacct_jct[job_id] for job_id in ids}
    print("replay JCT - sacct JCT (s):", errors)
    assert all(abs(e) <= 2 for e in errors.values()), sorted(errors.items())
