"""A user's path on the real test cluster: the README job script, submitted, started by the
controller, resized by an admin with ``mosaic resize``, resumed, COMPLETED.

``contrib/examples/job.sh`` is the script README.md shows; it runs
``contrib/examples/train_torch.py`` (torch DDP on gloo) under ``mosaic-run`` and ends with
``rt.done()``. The test submits it with ``mosaic submit -- SBATCH_OPTIONS SCRIPT`` (the form
that failed with "no such file"), lets one controller tick of the default scheduler
(``mosaic``) start it on 2 GPUs, resizes it
to 4 with ``mosaic resize``, and checks: the job resumed at the step after its checkpoint
with 4 ranks, every loss equals an uninterrupted run's (1e-4 relative), it ended COMPLETED,
``mosaic snapshot`` shows a 4-GPU request next to its 4-GPU assignment, and the next tick
keeps it as it is.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.resize import relaunch_timeline
from tests.slurm_plugin.live_helpers import config_for, controller, jobs, wait_for
from tests.wrapper.jobs import losses, uninterrupted_losses

pytest.importorskip("torch", reason="torch is not installed (extra 'torch')")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "contrib" / "examples" / "job.sh"
BIN = Path(sys.executable).parent
STEPS = 24
TOLERANCE = 1e-4


def _job_env(monkeypatch):
    # As a user whose shell has Mosaic's environment active: sbatch exports it to the job.
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("STEPS", str(STEPS))
    monkeypatch.setenv("STEP_SLEEP", "0.4")
    monkeypatch.chdir(ROOT)  # the script finds its training script under $SLURM_SUBMIT_DIR


def test_the_readme_job_is_submitted_started_resized_to_4_gpus_and_completes(
    live, tmp_path, monkeypatch, capsys
):
    _job_env(monkeypatch)
    spool, work = tmp_path / "spool", tmp_path / "work"
    work.mkdir()
    config = config_for(live, spool)
    common = ["--slurm-conf", str(live.layout.conf), "--spool", str(spool)]
    out = work / "job.out"
    assert main(["submit", *common, "--", "-D", str(work), "-o", str(out), str(JOB)]) == 0
    job_id = capsys.readouterr().out.strip()
    try:
        _run(live, config, common, job_id, work, out, spool, capsys)
    finally:
        subprocess.run(["scancel", job_id], env={**os.environ, **live.env}, capture_output=True)


def _explain(config, job_id, out):
    sj = jobs(config).get(job_id)
    tail = out.read_text()[-3000:] if out.exists() else "(no output)"
    return f"\njob {job_id}: {sj}\n--- output ---\n{tail}"


def _run(live, config, common, job_id, work, out, spool, capsys):
    tick = controller(config, "mosaic").tick()
    assert tick.ok and tick.result is not None and tick.result.done, tick.to_json()
    log = work / f"mosaic-example-{job_id}.loss.jsonl"
    wait_for("4 steps on 2 GPUs", lambda: len(losses(log)) >= 4, 120)

    asked = __import__("time").time()
    assert main(["resize", *common, job_id, "--gpus", "4"]) == 0, _explain(config, job_id, out)
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and len(report["to"]["gpus"]) == 4 and report["to"]["plan"]["dp"] == 4, report

    # The request and the allocation agree in every output, and the controller keeps the shape.
    assert main(["snapshot", *common]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    (job,) = [j for j in snapshot["jobs"] if j["id"] == job_id]
    assert job["num_gpus"] == 4 and len(job["assignment"]["gpus"]) == 4, job
    again = controller(config, "mosaic").tick()
    assert again.ok and again.actions == [], again.to_json()

    ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}

    def finished():
        sj = jobs(config).get(job_id)
        return sj is None or sj.state in ended

    wait_for("the resized job to end" + _explain(config, job_id, out), finished, 300)

    def accounted() -> list[str]:
        return subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"],
            env={**os.environ, **live.env}, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip

    # slurmctld sends the job's end to slurmdbd on its own time: on a loaded machine sacct
    # still said RUNNING when squeue already showed COMPLETED.
    wait_for("sacct to record the end", lambda: bool(accounted()) and accounted()[-1] in ended, 60)
    state = accounted()
    assert state and state[-1] == "COMPLETED", f"{state}{_explain(config, job_id, out)}"

    records = losses(log)
    stopped = next(k for k, r in enumerate(records) if r["world_size"] == 4)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), records
    assert {r["world_size"] for r in records[:stopped]} == {2} and {
        r["world_size"] for r in records[stopped:]
    } == {4}
    text = out.read_text()
    assert "plan version 1, 2 ranks" in text and f"resuming from step-{stopped:08d}" in text

    timeline = relaunch_timeline(
        asked, planfile.read_checkpoint_marker(spool, job_id), planfile.read_heartbeats(spool, job_id)
    )
    assert timeline is not None and timeline.world_size == 4 and timeline.total_s < 120, timeline

    reference = uninterrupted_losses(work, STEPS)
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])


def test_a_stale_plan_file_loses_to_what_slurm_gave_the_job(live, tmp_path, monkeypatch):
    # Slurm runs the job on 2 GPUs of n2; the plan file left in the spool says 1 GPU on n1.
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    spool, out = tmp_path / "spool", tmp_path / "job.out"
    config = config_for(live, spool)
    script = tmp_path / "stale.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -w n2 --gres=gpu:2 -c 2 --mem=2G -o {out}\n"
        f"exec mosaic-run --framework torch --checkpoint-dir {tmp_path / 'ckpt'} -- "
        f"{sys.executable} -c \"import os; e=os.environ; print('rank', e['RANK'], 'of', e['WORLD_SIZE'])\"\n"
    )
    env = {**os.environ, **live.env, "MOSAIC_SPOOL": str(spool)}
    job_id = subprocess.run(
        ["sbatch", "--parsable", "-H", str(script)], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    from planner.core.model import Assignment

    planfile.write_plan(spool, job_id, None, Assignment((("n1", 0),), 1, 1.0, None))
    subprocess.run(["scontrol", "release", job_id], env=env, check=True)
    wait_for(
        "the job to end", lambda: job_id not in jobs(config) or jobs(config)[job_id].state == "COMPLETED", 120
    )
    text = wait_for("its output", lambda: out.exists() and "of 2" in out.read_text() and out.read_text())
    assert "does not match what Slurm gave the job" in text and "nodes n1 planned, Slurm gave n2" in text
    assert sorted(line for line in text.splitlines() if line.startswith("rank ")) == [
        "rank 0 of 2",
        "rank 1 of 2",
    ]
