"""Rubick's live plan change: the controller, not a hand-made update, shrinks a running DeepSpeed job.

Under the ``rubick`` preset on the test cluster (4 nodes x 4 GPUs), with tenants ``prod``
(a 2-GPU quota) and ``other`` (12): three rigid 4-GPU guaranteed jobs of ``other`` fill three
nodes; a best-effort DeepSpeed job (CPU, gloo) of one of Rubick's models (``#MOSAIC --model
... --min-gpus 2 --max-gpus 4 --plans ...``) starts on the free node's 4 GPUs with ZeRO-2. A
guaranteed 2-GPU job of ``prod`` arrives: it is privileged (within its tenant's quota) and
nothing is free, so the controller shrinks the DeepSpeed job on its node to 2 GPUs with the
best plan there, and places the guaranteed job on the 2 GPUs it gave up:

* ``accumulation``: ``bert``, global batch 16: ZeRO-2 micro-batch 4 on 4 GPUs -> ZeRO-2
  micro-batch 4 x accumulation 2 on 2 GPUs (or micro-batch 8, which the model prices the same);
* ``offload``: ``llama7``, global batch 8: ZeRO-2 micro-batch 2 on 4 GPUs -> ZeRO-Offload
  micro-batch 4 on 2 GPUs (ZeRO-2 at that micro-batch does not fit 2 GPUs' memory).

``mosaic-run`` converts the ZeRO-2 checkpoint taken at 4 ranks into DeepSpeed's universal
checkpoint and resumes it on 2 ranks at the next step with the new plan; the job completes, and
every step's loss equals an uninterrupted DeepSpeed run's (1e-4 relative). The jobs run the
small model of ``contrib/examples/train_deepspeed.py``; the model name is what Rubick prices.
Under ``mosaic``, ``mosaic explain`` says the job was shrunk for the guaranteed job, and that a
second guaranteed job of ``prod`` waits as best-effort beyond its tenant's quota.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from planner.config import Tenant, build_scheduler, preset
from planner.core.execplan import ExecPlan, plan_from_mapping
from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller import observe
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


@dataclass(frozen=True)
class Case:
    """One shrink: the model Rubick prices, the global batch, the submitted plan and the others
    the job lets Rubick choose, and the plan expected at 4 GPUs and after the shrink to 2
    (dp, ZeRO stage, optimizer offload, micro-batch, accumulation)."""

    model: str
    batch: int
    plan: str
    plans: str
    first: tuple[int, int, bool, int, int]
    second: tuple[int, int, bool, int, int]
    tied: tuple[int, int, bool, int, int] | None = None  # a plan the model prices the same as second


CASES = {
    # bert at 16: ZeRO-2 at 2 GPUs with the micro-batch kept and 2 accumulation steps, or
    # micro-batch 8 without accumulation: the fitted model prices the two the same (iteration
    # times equal to 1e-11), so which one wins depends on the CPU's floating-point rounding.
    "accumulation": Case(
        "bert",
        16,
        '{"zero_stage": 2, "micro_batch": 4}',
        '[{"zero_stage": 2}]',
        (4, 2, False, 4, 1),
        (2, 2, False, 4, 2),
        (2, 2, False, 8, 1),
    ),
    # llama7 at 8: ZeRO-2 with micro-batch 4 does not fit 2 GPUs' memory; ZeRO-Offload does.
    "offload": Case(
        "llama7",
        8,
        '{"zero_stage": 2}',
        '[{"zero_stage": 2, "offload_optimizer": true}]',
        (4, 2, False, 2, 1),
        (2, 2, True, 4, 1),
    ),
}


def _deepspeed_job(directory: Path, case: Case, log: Path, out: Path) -> Path:
    path = directory / "ds.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J ds --gres=gpu:4 -c 8 --mem=8G -o {out} --open-mode=append\n"
        f"#MOSAIC --model {case.model} --global-batch-size {case.batch} --min-gpus 2 --max-gpus 4 "
        "--framework deepspeed\n"
        f"#MOSAIC --plan '{case.plan}'\n"
        f"#MOSAIC --plans '{case.plans}'\n"
        f"exec {BIN / 'mosaic-run'} --framework deepspeed --grace-s {GRACE_S} "
        f"--checkpoint-dir {directory / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 1\n"
    )
    return path


def _shape(plan: ExecPlan) -> tuple[int, int, bool, int, int]:
    assert plan.dp is not None and plan.micro_batch is not None and plan.grad_accum is not None
    return (plan.dp, plan.zero_stage, plan.offload_optimizer, plan.micro_batch, plan.grad_accum)


@pytest.mark.parametrize(
    ("scheduler_name", "name"),
    # ``mosaic`` (the default, everything composed) must do the same: its ordering puts the
    # privileged jobs first, and Rubick's joint allocation owns the elastic job's GPUs and plan.
    [*(("rubick", name) for name in sorted(CASES)), ("mosaic", "accumulation")],
)
def test_the_controller_shrinks_a_running_deepspeed_job_for_a_guaranteed_job_with_a_new_plan(
    scheduler_name, name, live, tmp_path, monkeypatch, capsys
):
    case = CASES[name]
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # The test cluster's fake GPUs stand for Rubick's testbed, 80 GB A800s: its GRES names them
    # a100, which the GPU catalog prices at 40 GB, where ZeRO-2 would not fit llama7 on 4 GPUs.
    monkeypatch.setattr(observe, "named_gpu_mem_gb", lambda node: 80.0)
    config = config_for(live, tmp_path / "spool", checkpoint_grace_s=float(GRACE_S), stop_timeout_s=600.0)
    tenants = (Tenant("prod", 2), Tenant("other", 12))
    scheduler = build_scheduler(replace(preset(scheduler_name), tenants=tenants))
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    ctl = Controller(client, Store(config.store_path), config, scheduler)
    # Guaranteed within their tenant's quota: Rubick keeps them and shrinks the best-effort job.
    fillers = [
        submit_job(
            config,
            write_script(tmp_path, f"fill{k}", 4, duration_s=36000, directives="--tenant other --guaranteed"),
        )
        for k in range(3)
    ]
    assert ctl.tick().ok
    wait_for("the fillers", lambda: all(jobs(config)[f].state == "RUNNING" for f in fillers))

    log, out = tmp_path / "loss.jsonl", tmp_path / "ds.out"
    job = submit_job(config, _deepspeed_job(tmp_path, case, log, out))

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
    assert _shape(first) == case.first, first
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
    assert _shape(second) in {case.second, case.tied}, second
    assert second.global_batch == first.global_batch == case.batch
    sj = jobs(config)
    assert len(set(sj[job].nodes)) == 1 and set(sj[guest].nodes) == set(sj[job].nodes), (sj[guest], sj[job])
    if scheduler_name == "mosaic":
        _explained(config, tmp_path, job, guest, ctl, capsys)

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
    assert config_2["gradient_accumulation_steps"] == second.grad_accum
    assert config_2["train_micro_batch_size_per_gpu"] == second.micro_batch
    assert ("offload_optimizer" in config_2["zero_optimization"]) == second.offload_optimizer

    # ZeRO-2 without offload: moving the optimizer step to the host changes no number.
    reference = uninterrupted_deepspeed_losses(
        tmp_path, STEPS, 2, f'{{"zero_stage": 2, "micro_batch": {second.micro_batch}}}', case.batch
    )
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])


def _explained(config, tmp_path: Path, job: str, guest: str, ctl: Controller, capsys) -> None:
    """``mosaic explain`` on the shrunk job, and on a second guaranteed job of ``prod`` that its
    tenant's quota (2 GPUs, held by the first) cannot take: it waits as best-effort."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "prod"\ngpu_quota = 2\n\n[[tenants]]\nname = "other"\ngpu_quota = 12\n'
    )
    live = [
        "--config",
        str(tenants),
        "--spool",
        str(config.spool_dir),
        "--slurm-conf",
        str(config.slurm_conf),
    ]

    def explain(job_id: str) -> str:
        assert main(["explain", job_id, *live]) == 0
        return capsys.readouterr().out

    shrunk = explain(job)
    assert "shrunk 4 -> 2 GPUs" in shrunk and f"for job {guest} (tenant prod, guaranteed)" in shrunk, shrunk
    late = submit_job(
        config, write_script(tmp_path, "late", 2, duration_s=36000, directives="--tenant prod --guaranteed")
    )
    tick = ctl.tick()
    assert tick.ok and tick.actions == [], tick.to_json()
    waits = explain(late)
    assert "why it waits: no-capacity" in waits, waits
    assert (
        "tenant prod: its guaranteed jobs hold 2 of its 2-GPU quota; "
        "this job's guarantee does not fit what is left, so it waits as best-effort"
    ) in waits, waits
    subprocess.run(["scancel", late], env={**os.environ, **config.slurm_env}, check=True)


def _finished(config, job: str, log: Path) -> bool:
    sj = jobs(config).get(job)
    state = None if sj is None else sj.state
    if state in {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
        raise AssertionError(f"job {job} ended {state}")
    return len(losses(log)) >= STEPS and state not in {"RUNNING", "PENDING", "COMPLETING"}
