"""``mosaic profile`` under ``srun`` on the real test cluster: a short CPU search of a real job.

Each run is ``srun --ntasks=1 --cpus-per-task=C --mem=...`` on the cluster's ``other``
partition (the managed ``gpu`` partition holds jobs not submitted with ``mosaic submit``);
the test cluster binds no CPUs (``TaskPlugin=task/none``), so the profiler's task shim pins
the step to its ``C`` CPUs, which the job reports in its heartbeats. Every run's job is
gone from the queue afterwards.
"""

from __future__ import annotations

import json

from profiles.document import profiles_from_document
from slurm_plugin.slurm.runner import run
from tests.slurm_plugin.live_helpers import wait_for
from tests.slurm_plugin.test_profile_cmd import job, profile, records


def test_srun_profile_pins_each_run_and_writes_the_cpu_curve(live, tmp_path, capsys):
    out = tmp_path / "live.json"
    code = profile(
        str(job(tmp_path)), "--slurm-conf", str(live.layout.conf), "--partition", "other",
        "--cpus", "1,2", "--run-s", "1", "--heartbeat-s", "0.25", "--start-timeout-s", "60",
        "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["launcher"] == "srun" and summary["complete"] and summary["runs"] == 2
    for c in (1, 2):
        run_dir = tmp_path / "live.json.runs" / f"cpu-{c}"
        beats = [b for b in records(run_dir) if b.get("event") == "heartbeat"]
        assert beats and {b["cpus"] for b in beats} == {c}
        (slurm_job,) = {b["slurm_job"] for b in beats}
        assert slurm_job is not None and slurm_job.isdigit()  # it ran as a Slurm job
    document = json.loads(out.read_text())
    assert set(document["models"]["burn"]["optimistic"]["cpu_samples_per_s"]) == {"1", "2"}
    assert profiles_from_document(document)["burn"].sensitivity is not None
    # Cancelled by the profiler, each run's job leaves the queue (after Slurm's KillWait).
    wait_for(
        "the profile's jobs to leave the queue",
        lambda: "mosaic-profile" not in run(["squeue", "-h", "-o", "%j"], env=live.env).stdout,
        timeout_s=30.0,
    )


def test_srun_plan_samples_start_their_ranks_inside_one_step(live, tmp_path, capsys):
    out = tmp_path / "plans.json"
    code = profile(
        str(job(tmp_path)), "--slurm-conf", str(live.layout.conf), "--partition", "other",
        "--cpus", "2", "--plans", "--model-shape", "10,128,256,4",
        "--run-s", "0.6", "--heartbeat-s", "0.2", "--start-timeout-s", "60", "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["plan_samples"] == 7 and (tmp_path / "plans.perfmodel.json").exists()
    for run_dir in (tmp_path / "plans.json.runs").glob("plan-r2t1*"):
        beat = [b for b in records(run_dir) if b.get("event") == "heartbeat"][-1]
        # Two ranks started by mosaic-run inside the one-task step, under the sampled plan.
        assert beat["ranks"] == 2 and json.loads(str(beat["plan_seen"]))["dp"] == 2
