"""``mosaic`` live: one round moves a running torch job to another GPU type and gives a waiting
CPU-sensitive job more CPUs than its GPU share, on the heterogeneous test cluster.

The cluster: n1, n2 with 4 a100 each, n3, n4 with 4 v100 each, 16 CPUs per node (the GPU type is a
node feature). The scheduler is the default preset, ``mosaic``, with restarts charged at 0.5 s in
its ordering: a relaunch here takes seconds and the job trains for about two minutes, while at the
default 30 s a job must have trained 1,000 s before a move may pay (Rubick §5.3's rule).

1. rigid fillers (a model no paper prices) hold both a100 nodes and n3; a rigid 2-GPU job holds half
   of n4;
2. a torch job, best-effort, priced as ``wide_resnet_1B`` at a global batch of 256 (Crius's measured
   best-plan table: 22.15 s per iteration on 2 v100, 10.27 s on 4 a100), accepting a100 or v100 and
   2-4 GPUs, with a 60-minute time limit (``mosaic`` reads the limit, never a duration): Crius
   decides it (it accepts several GPU types) and starts it on the one Cell there is, 2 v100, with
   that Cell's plan (dp 2 x micro-batch 64 x accumulation 2);
3. a 1-GPU ``resnet18`` job (its built-in profile trains 1.85x as fast at 9 CPUs per GPU as at 4)
   waits: no GPU is free.

Then the a100 fillers leave, and one tick does both: the consolidated placement starts the resnet18
job on an a100 node and Synergy-Tune gives it more CPUs than the node's GPU-proportional 4 (the
node's other GPUs are idle); Crius's Cell search moves the torch job to the other a100 node and
grows it to 4 GPUs with the 4-a100 Cell's plan (dp 4 x micro-batch 64). ``mosaic-run`` resumes the
torch job at the step after its checkpoint and every loss equals an uninterrupted 1-rank run's
(1e-4 relative). The next tick changes nothing. ``mosaic explain`` says why the resnet18 job
waited (no capacity, no free GPU of any type) and that the torch job grew and moved to a100.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from planner.core.execplan import plan_from_mapping
from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.loop import Controller, TickReport
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.store import Store
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import config_for, jobs, submit_job, wait_for, write_script
from tests.wrapper.jobs import losses, uninterrupted_losses

pytest.importorskip("torch", reason="torch is not installed (extra 'torch')")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "contrib" / "examples" / "train_torch.py"
BIN = Path(sys.executable).parent
STEPS = 80
GLOBAL_BATCH = 256  # a batch Crius's table measured wide_resnet_1B at
TOLERANCE = 1e-4
RESTART_COST_S = 0.5


def _torch_job(directory: Path, log: Path, out: Path) -> Path:
    path = directory / "torch.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J torch --gres=gpu:2 -c 2 --mem=2G -t 60 -o {out} --open-mode=append\n"
        f"#MOSAIC --model wide_resnet_1B --global-batch-size {GLOBAL_BATCH}\n"
        "#MOSAIC --gpu-types a100,v100 --min-gpus 2 --max-gpus 4\n"
        f"exec {BIN / 'mosaic-run'} --framework torch --grace-s 30 --checkpoint-dir {directory / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 1\n"
    )
    return path


def _cpu_job(directory: Path) -> Path:
    """An emulated single-GPU resnet18 job asking for 4 CPUs (the GPU-proportional share)."""
    path = directory / "cpu.sh"
    path.write_text(
        "#!/bin/bash\n"
        "#SBATCH -J cpu --gres=gpu:1 -c 4 --mem=8G -o /dev/null\n"
        "#MOSAIC --model resnet18\n"
        "trap '' USR1\n"
        f"exec {sys.executable} -m slurm_plugin.emulate --duration-s 36000 --time-scale 1\n"
    )
    return path


def test_one_mosaic_round_moves_a_job_to_another_gpu_type_and_gives_a_cpu_sensitive_job_more_cpus(
    hetero: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    config = config_for(hetero, tmp_path / "spool")
    base = preset("mosaic")
    options = {k: dict(v) for k, v in base.options.items()}
    options.setdefault("policy", {})["restart_cost_s"] = RESTART_COST_S
    scheduler = build_scheduler(replace(base, options=options))
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    ctl = Controller(client, Store(config.store_path), config, scheduler)

    def mosaic_explain(job_id: str) -> str:
        """``mosaic explain JOB`` on the live cluster, as an operator runs it."""
        live = ["--spool", str(config.spool_dir), "--slurm-conf", str(config.slurm_conf)]
        assert main(["explain", job_id, *live]) == 0
        return capsys.readouterr().out

    def running(job_id: str) -> SlurmJob | None:
        sj = jobs(config).get(job_id)
        return sj if sj is not None and sj.state == "RUNNING" else None

    def actions(tick: TickReport) -> set[tuple[str, str]]:
        assert tick.ok and tick.result is not None and not tick.result.failed, tick.to_json()
        return {(a["kind"], a["job"]) for a in tick.to_json()["actions"]}

    a100 = [
        submit_job(config, write_script(tmp_path, f"a100-{k}", 4, duration_s=36000), "-C", "a100")
        for k in range(2)
    ]
    v100 = submit_job(config, write_script(tmp_path, "v100", 4, duration_s=36000), "-C", "v100")
    assert ctl.tick().ok
    wait_for("the fillers", lambda: all(running(f) for f in [*a100, v100]))
    half = submit_job(config, write_script(tmp_path, "half", 2, duration_s=36000), "-C", "v100")
    assert actions(ctl.tick()) == {("start", half)}
    wait_for("the half-node job", lambda: running(half))

    log, out = tmp_path / "loss.jsonl", tmp_path / "torch.out"
    job = submit_job(config, _torch_job(tmp_path, log, out), "-C", "v100")

    def explain() -> str:
        return f"\n{jobs(config).get(job)}\n--- output ---\n{out.read_text()[-3000:] if out.exists() else ''}"

    def world_sizes() -> list[int]:
        return [r["world_size"] for r in losses(log)]

    def plan() -> tuple[int | None, int | None, int | None, int | None]:
        doc = planfile.read_plan(config.spool_dir, job)
        assert doc is not None, "no plan file"
        p = plan_from_mapping(doc["assignment"]["plan"])
        return p.dp, p.micro_batch, p.grad_accum, p.global_batch

    assert actions(ctl.tick()) == {("start", job)}
    assert plan() == (2, 64, 2, GLOBAL_BATCH)  # the 2-v100 Cell's plan
    sj = wait_for("the job running", lambda: running(job))
    assert sj.nodes == jobs(config)[half].nodes and "v100" in sj.features, sj
    assert sj.time_limit_s == 3600
    wait_for("3 steps on 2 v100" + explain(), lambda: world_sizes().count(2) >= 3, 120)

    cpu = submit_job(config, _cpu_job(tmp_path))
    assert actions(ctl.tick()) == set()  # nothing is free
    assert jobs(config)[cpu].state == "PENDING"
    why = mosaic_explain(cpu)
    assert "why it waits: no-capacity: not enough free GPUs after the jobs ahead of it" in why, why
    assert "it needs 1 GPUs of any type; free after the last round: a100 0, v100 0" in why, why

    # Rubick §5.3's rule in the ordering: a running job may restart once it has trained
    # 1 / 0.03 = 33x the charged cost (17 s here); make sure before the a100s free up.
    started = sj.start_time
    assert started is not None
    time.sleep(max(0.0, started + 1.5 * RESTART_COST_S / 0.03 - time.time()))

    freed = {n for f in a100 for n in jobs(config)[f].nodes}
    subprocess.run(["scancel", *a100], env={**os.environ, **hetero.env}, check=True)
    wait_for(
        "the a100 fillers' GPUs free",
        lambda: not any((s := jobs(config).get(f)) and s.holds_resources for f in a100),
    )
    assert actions(ctl.tick()) == {("stop", job), ("start", job), ("start", cpu)}, explain()
    assert plan() == (4, 64, 1, GLOBAL_BATCH)  # the 4-a100 Cell's plan, the global batch kept
    sj = wait_for("the job running again", lambda: running(job))
    assert set(sj.nodes) <= freed and len(sj.nodes) == 1 and sj.gpus_per_node == 4, sj
    assert "a100" in sj.features and "v100" not in sj.features, sj
    cj = wait_for("the cpu job running", lambda: running(cpu))
    assert set(cj.nodes) <= freed and set(cj.nodes) != set(sj.nodes), (cj, sj)
    assert cj.cpus > 4, cj  # Synergy-Tune: more than the node's 16 CPUs / 4 GPUs
    wait_for("3 steps on 4 a100" + explain(), lambda: world_sizes()[-3:] == [4, 4, 4], 120)

    assert actions(ctl.tick()) == set()  # re-planning the applied round changes nothing
    history = mosaic_explain(job)
    assert "grown 2 -> 4 GPUs; moved v100 -> a100" in history, history
    assert f"given:     4 a100 GPUs ({sj.nodes[0]}:4)" in history, history

    wait_for("the job to finish" + explain(), lambda: len(losses(log)) >= STEPS and not running(job), 180)
    records = losses(log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), explain()
    sizes = [r["world_size"] for r in records]
    assert [s for k, s in enumerate(sizes) if k == 0 or sizes[k - 1] != s] == [2, 4], sizes
    reference = uninterrupted_losses(tmp_path, STEPS, GLOBAL_BATCH, '{"micro_batch": 64}')
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])
    assert running(half) is not None and running(v100) is not None
