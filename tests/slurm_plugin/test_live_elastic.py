"""The controller, not a hand-made update, resizes a running torch job (real Slurm, real torch).

Under the ``elastic`` preset on the test cluster (4 nodes x 4 GPUs): three rigid 4-GPU
jobs fill n2-n4; an elastic torch job (``#MOSAIC --min-gpus 2 --max-gpus 4``, asked 2 GPUs)
starts and grows into n1's 4 GPUs; a rigid 2-GPU job arrives and the controller shrinks
the torch job to 2 GPUs with a new plan (dp 2, micro-batch 4 x accumulation 2) to make
room; the rigid job leaves and the controller grows the torch job back to 4. Each resume
is at the step after its checkpoint, and every loss equals an uninterrupted 1-rank run's
(1e-4 relative).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.core.execplan import plan_from_mapping
from slurm_plugin import planfile
from tests.slurm_plugin.live_helpers import config_for, controller, jobs, submit_job, wait_for, write_script
from tests.wrapper.jobs import losses, uninterrupted_losses

pytest.importorskip("torch", reason="torch is not installed (extra 'torch')")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "contrib" / "examples" / "train_torch.py"
BIN = Path(sys.executable).parent
STEPS = 36
TOLERANCE = 1e-4


def _torch_job(directory: Path, log: Path, out: Path) -> Path:
    path = directory / "elastic.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J elastic --gres=gpu:2 -c 2 --mem=2G -o {out} --open-mode=append\n"
        # No measured profile: every GPU counts the same (linear scaling), so it grows.
        "#MOSAIC --model toy-regression --global-batch-size 16 --min-gpus 2 --max-gpus 4\n"
        "#MOSAIC --plan '{\"micro_batch\": 4}'\n"
        f"exec {BIN / 'mosaic-run'} --framework torch --grace-s 30 --checkpoint-dir {directory / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 0.3\n"
    )
    return path


def test_the_controller_shrinks_a_running_torch_job_and_grows_it_back(live, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    config = config_for(live, tmp_path / "spool")
    ctl = controller(config, "elastic")
    fillers = [submit_job(config, write_script(tmp_path, f"fill{k}", 4, duration_s=36000)) for k in range(3)]
    assert ctl.tick().ok
    wait_for("the fillers", lambda: all(jobs(config)[f].state == "RUNNING" for f in fillers))

    log, out = tmp_path / "loss.jsonl", tmp_path / "elastic.out"
    job = submit_job(config, _torch_job(tmp_path, log, out))

    def explain() -> str:
        return f"\n{jobs(config).get(job)}\n--- output ---\n{out.read_text()[-3000:] if out.exists() else ''}"

    def world_sizes() -> list[int]:
        return [r["world_size"] for r in losses(log)]

    def plan_dp() -> int | None:
        doc = planfile.read_plan(config.spool_dir, job)
        return None if doc is None else plan_from_mapping(doc["assignment"]["plan"]).dp

    tick = ctl.tick()
    assert tick.ok and plan_dp() == 4, (tick.to_json(), explain())  # asked 2, grew into n1's 4
    wait_for("3 steps on 4 GPUs" + explain(), lambda: world_sizes().count(4) >= 3, 180)

    guest = submit_job(config, write_script(tmp_path, "guest", 2, duration_s=36000))
    tick = ctl.tick()
    kinds = {(a["kind"], a["job"], a["reason"]) for a in tick.to_json()["actions"]}
    assert kinds == {("start", guest, "placed"), ("start", job, "resized"), ("stop", job, "resized")}, kinds
    assert plan_dp() == 2
    wait_for("3 steps on 2 GPUs" + explain(), lambda: world_sizes()[-3:] == [2, 2, 2], 180)

    subprocess.run(["scancel", guest], env={**os.environ, **live.env}, check=True)
    wait_for(
        "the guest to leave", lambda: guest not in jobs(config) or jobs(config)[guest].state != "RUNNING"
    )
    wait_for(
        "its GPUs free", lambda: guest not in jobs(config) or not jobs(config)[guest].holds_resources, 30
    )
    tick = ctl.tick()
    assert [(a["kind"], a["reason"]) for a in tick.to_json()["actions"]] == [
        ("stop", "resized"),
        ("start", "resized"),
    ], tick.to_json()
    assert plan_dp() == 4
    wait_for(
        "the job to finish" + explain(),
        lambda: len(losses(log)) >= STEPS and job not in _running(config),
        300,
    )

    records = losses(log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), explain()
    sizes = [r["world_size"] for r in records]
    runs = [s for k, s in enumerate(sizes) if k == 0 or sizes[k - 1] != s]
    assert runs == [4, 2, 4], sizes
    reference = uninterrupted_losses(tmp_path, STEPS)
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])


def _running(config) -> set[str]:
    return {j for j, sj in jobs(config).items() if sj.state in {"RUNNING", "PENDING", "COMPLETING"}}


def test_a_job_asked_on_one_gpu_type_runs_on_another_it_accepts(hetero, tmp_path):
    config = config_for(hetero, tmp_path / "spool")
    ctl = controller(config, "elastic")
    fillers = [
        submit_job(config, write_script(tmp_path, f"a100-{k}", 4, duration_s=36000), "-C", "a100")
        for k in range(2)
    ]
    job = submit_job(
        config,
        write_script(tmp_path, "either", 2, duration_s=36000, directives="--gpu-types a100,v100"),
        "-C",
        "a100",
    )
    try:
        tick = ctl.tick()
        assert tick.ok and not tick.result.failed and not tick.result.skipped, tick.to_json()
        sj = wait_for(
            "the job on v100", lambda: (j := jobs(config).get(job)) and j.state == "RUNNING" and j, 30
        )
        assert set(sj.nodes) <= {"n3", "n4"} and "v100" in sj.features and "a100" not in sj.features
        assert all(jobs(config)[f].state == "RUNNING" for f in fillers)
    finally:
        subprocess.run(["scancel", "--user=root"], env={**os.environ, **hetero.env}, check=False)
