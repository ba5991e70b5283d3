"""Rubick's live plan change: the controller, not a hand-made update, shrinks a running DeepSpeed job.

Under the ``rubick`` preset on the test cluster (4 nodes x 4 GPUs), with a tenant ``prod``
holding a 2-GPU quota: three rigid 4-GPU best-effort jobs fill three nodes; a best-effort
DeepSpeed job (CPU, gloo) of Rubick's ``bert`` (``#MOSAIC --model bert --min-gpus 2
--max-gpus 4``, its plans ZeRO-2 at any micro-batch and accumulation) starts on the free node's 4 GPUs
with ZeRO-2, micro-batch 4, no accumulation. A guaranteed 2-GPU job of ``prod`` arrives: it is
privileged (within its tenant's quota) and nothing is free, so the controller shrinks the
DeepSpeed job on its node to 2 GPUs with a new plan, ZeRO-2 with micro-batch 4 x accumulation
2 (the global batch of 16 kept), and places the guaranteed job on the 2 GPUs it gave up.
``mosaic-run`` converts the ZeRO-2 checkpoint taken at 4 ranks into DeepSpeed's universal
checkpoint and resumes it on 2 ranks at the next step; the job completes, and every step's
loss equals an uninterrupted DeepSpeed run's (1e-4 relative).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.config import Tenant, build_scheduler, preset
from planner.execplan import plan_from_mapping
from slurm_plugin import planfile
from slurm_plugin.controller.loop import Controller
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
from tests.slurm_plugin.live_helpers import config_for, jobs, submit_job, wait_for, write_script
from tests.wrapper.jobs import losses, uninterrupted_deepspeed_losses

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed')")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "contrib" / "examples" / "train_deepspeed.py"
BIN = Path(sys.executable).parent
STEPS = 16
TOLERANCE = 1e-4
# DeepSpeed on CPU starts slowly (each rank imports it, builds its engine, and a resume at
# another data-parallel size converts the checkpoint first): generous waits.
START_S = 900
GRACE_S = 300


def _deepspeed_job(directory: Path, log: Path, out: Path) -> Path:
    path = directory / "bert.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J bert --gres=gpu:4 -c 8 --mem=8G -o {out} --open-mode=append\n"
        "#MOSAIC --model bert --global-batch-size 16 --min-gpus 2 --max-gpus 4 --framework deepspeed\n"
        '#MOSAIC --plan \'{"zero_stage": 2, "micro_batch": 4}\'\n'
        "#MOSAIC --plans '[{\"zero_stage\": 2}]'\n"
        f"exec {BIN / 'mosaic-run'} --framework deepspeed --grace-s {GRACE_S} "
        f"--checkpoint-dir {directory / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 1\n"
    )
    return path


def test_the_controller_shrinks_a_running_deepspeed_job_for_a_guaranteed_job_with_a_new_plan(
    live, tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    config = config_for(live, tmp_path / "spool", checkpoint_grace_s=float(GRACE_S), stop_timeout_s=600.0)
    scheduler = build_scheduler(replace(preset("rubick"), tenants=(Tenant("prod", 2),)))
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    ctl = Controller(client, Store(config.store_path), config, scheduler)
    fillers = [submit_job(config, write_script(tmp_path, f"fill{k}", 4, duration_s=36000)) for k in range(3)]
    assert ctl.tick().ok
    wait_for("the fillers", lambda: all(jobs(config)[f].state == "RUNNING" for f in fillers))

    log, out = tmp_path / "loss.jsonl", tmp_path / "bert.out"
    job = submit_job(config, _deepspeed_job(tmp_path, log, out))

    def explain() -> str:
        return f"\n{jobs(config).get(job)}\n--- output ---\n{out.read_text()[-4000:] if out.exists() else ''}"

    def plan() -> dict:
        doc = planfile.read_plan(config.spool_dir, job)
        assert doc is not None
        return dict(doc["assignment"]["plan"])

    tick = ctl.tick()
    assert tick.ok and [(a["kind"], a["job"]) for a in tick.to_json()["actions"]] == [("start", job)], (
        tick.to_json()
    )
    first = plan_from_mapping(plan())
    assert (first.dp, first.zero_stage, first.micro_batch, first.grad_accum) == (4, 2, 4, 1), first
    wait_for("2 steps on 4 ranks" + explain(), lambda: len(losses(log)) >= 2, START_S)

    guest = submit_job(
        config,
        write_script(tmp_path, "guaranteed", 2, duration_s=36000, directives="--tenant prod --guaranteed"),
    )
    tick = ctl.tick()
    kinds = {(a["kind"], a["job"], a["reason"]) for a in tick.to_json()["actions"]}
    assert kinds == {("start", guest, "placed"), ("stop", job, "resized"), ("start", job, "resized")}, (
        tick.to_json(),
        explain(),
    )
    second = plan_from_mapping(plan())
    assert (second.dp, second.zero_stage, second.micro_batch, second.grad_accum) == (2, 2, 4, 2), second
    assert second.global_batch == first.global_batch == 16
    sj = jobs(config)
    assert len(set(sj[job].nodes)) == 1 and set(sj[guest].nodes) == set(sj[job].nodes), (sj[guest], sj[job])

    wait_for("the job to finish" + explain(), lambda: _finished(config, job, log), START_S)
    records = losses(log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), explain()
    sizes = [r["world_size"] for r in records]
    assert sizes[0] == 4 and sizes[-1] == 2 and sizes == sorted(sizes, reverse=True), sizes
    text = out.read_text()
    assert "to a universal checkpoint" in text, explain()
    rendered = sorted(
        (tmp_path / "ckpt" / ".mosaic").glob("deepspeed-config.*.json"), key=lambda p: p.stat().st_mtime
    )
    config_2 = json.loads(rendered[-1].read_text())
    assert config_2["zero_optimization"]["stage"] == 2 and config_2["checkpoint"] == {"load_universal": True}
    assert config_2["gradient_accumulation_steps"] == 2 and config_2["train_micro_batch_size_per_gpu"] == 4

    reference = uninterrupted_deepspeed_losses(tmp_path, STEPS, 2, '{"zero_stage": 2, "micro_batch": 4}')
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])


def _finished(config, job: str, log: Path) -> bool:
    sj = jobs(config).get(job)
    state = None if sj is None else sj.state
    if state in {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
        raise AssertionError(f"job {job} ended {state}")
    return len(losses(log)) >= STEPS and state not in {"RUNNING", "PENDING", "COMPLETING"}
