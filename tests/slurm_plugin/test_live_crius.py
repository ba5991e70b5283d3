"""Crius live: the controller moves a running torch job to another GPU type and count.

On the heterogeneous test cluster (n1, n2: 4 a100 each; n3, n4: 4 v100 each; the type is
a node feature) under the ``crius`` preset. The torch job is priced as ``wide_resnet_1B``
at a global batch of 256 (Crius's measured best-plan table: 22.15 s per iteration on 2
v100, 14.82 s on 2 a100, 10.27 s on 4 a100; the job only has to follow the plan, the model
name drives the controller's pricing). It is submitted on v100 (``-C v100``, 2 GPUs,
``#MOSAIC --gpu-types a100,v100 --min-gpus 2 --max-gpus 4``) while rigid fillers hold
every a100 and a v100 node, and a short elastic job half of the other: Crius starts it on
its only Cell there, 2 v100, with that Cell's plan (dp 2 x micro-batch 64 x accumulation
2: no data-parallel replica of the model fits a v100 by the measured memory). Then the
a100 fillers leave. Nobody waits, so Crius's extra scheduling (Algorithm 1 line 12) moves
the torch job to a100 at its count and grows it there (2 -> 4 GPUs), restarts charged; the
controller stops it at a checkpoint and restarts it on an a100 node with ``Features=a100``
and the 4-a100 Cell's plan (dp 4 x micro-batch 64, no accumulation), the global batch
kept. ``mosaic-run`` resumes at the step after its checkpoint and every loss equals an
uninterrupted 1-rank run's (1e-4 relative). The short job, with a minute of work left,
stays on v100 although a whole a100 node is idle: its move would gain less than the 30 s
restart it is charged.
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
from slurm_plugin.controller.loop import TickReport
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import config_for, controller, jobs, submit_job, wait_for, write_script
from tests.wrapper.jobs import losses, uninterrupted_losses

pytest.importorskip("torch", reason="torch is not installed (extra 'torch')")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "contrib" / "examples" / "train_torch.py"
BIN = Path(sys.executable).parent
STEPS = 24
GLOBAL_BATCH = 256  # a batch Crius's table measured wide_resnet_1B at
TOLERANCE = 1e-4


def _torch_job(directory: Path, log: Path, out: Path) -> Path:
    path = directory / "crius.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J crius --gres=gpu:2 -c 2 --mem=2G -o {out} --open-mode=append\n"
        # The duration makes the restart charge real: remaining = duration x (1 - progress),
        # the progress from the job's heartbeats.
        f"#MOSAIC --model wide_resnet_1B --global-batch-size {GLOBAL_BATCH} --duration-s 3600\n"
        "#MOSAIC --gpu-types a100,v100 --min-gpus 2 --max-gpus 4\n"
        f"exec {BIN / 'mosaic-run'} --framework torch --grace-s 30 --checkpoint-dir {directory / 'ckpt'} "
        f"-- {sys.executable} {TRAIN} --steps {STEPS} --loss-log {log} --step-sleep 0.3\n"
    )
    return path


def _short_job(directory: Path) -> Path:
    """An emulated job priced like the torch job, elastic in type only, whose user says it
    has a minute of work (``--duration-s 60``): a restart (30 s charged) cannot pay there."""
    path = directory / "short.sh"
    path.write_text(
        "#!/bin/bash\n"
        "#SBATCH -J short --gres=gpu:2 -c 4 --mem=8G -o /dev/null\n"
        f"#MOSAIC --model wide_resnet_1B --global-batch-size {GLOBAL_BATCH} --duration-s 60\n"
        "#MOSAIC --gpu-types a100,v100 --min-gpus 2 --max-gpus 2\n"
        "trap '' USR1\n"
        f"exec {sys.executable} -m slurm_plugin.emulate --duration-s 36000 --time-scale 1\n"
    )
    return path


def test_crius_moves_a_running_job_to_another_gpu_type_and_count(
    hetero: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    config = config_for(hetero, tmp_path / "spool")
    ctl = controller(config, "crius")

    def running(job_id: str) -> SlurmJob | None:
        sj = jobs(config).get(job_id)
        return sj if sj is not None and sj.state == "RUNNING" else None

    def only_action(tick: TickReport, kinds: list[tuple[str, str]]) -> None:
        assert tick.ok and tick.result is not None and not tick.result.failed, tick.to_json()
        assert [(a["kind"], a["job"]) for a in tick.to_json()["actions"]] == kinds, tick.to_json()

    # Rigid fillers (a model Crius does not price) hold both a100 nodes and one v100 node.
    a100 = [
        submit_job(config, write_script(tmp_path, f"a100-{k}", 4, duration_s=36000), "-C", "a100")
        for k in range(2)
    ]
    v100 = submit_job(config, write_script(tmp_path, "v100", 4, duration_s=36000), "-C", "v100")
    assert ctl.tick().ok
    wait_for("the fillers", lambda: all(running(f) for f in [*a100, v100]))

    # The short job takes half of the last v100 node (its one count, 2), then the torch job
    # the other half: 2 v100 GPUs are all it can have, on its only Cell there.
    short = submit_job(config, _short_job(tmp_path), "-C", "v100")
    only_action(ctl.tick(), [("start", short)])
    wait_for("the short job", lambda: running(short))
    log, out = tmp_path / "loss.jsonl", tmp_path / "crius.out"
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

    only_action(ctl.tick(), [("start", job)])
    assert plan() == (2, 64, 2, GLOBAL_BATCH)  # the 2-v100 Cell's plan
    sj = wait_for("the job running", lambda: running(job))
    v100_node = jobs(config)[short].nodes
    assert sj.nodes == v100_node and "v100" in sj.features, (sj, v100_node)
    wait_for("3 steps on 2 v100" + explain(), lambda: world_sizes().count(2) >= 3, 120)

    # Both a100 nodes free up and nobody waits: Crius's extra scheduling moves the torch job
    # to a100 and grows it to 4 GPUs there; the short job stays on v100 (its move would gain
    # less than the restart costs), though the other a100 node is idle.
    freed = {n for f in a100 for n in jobs(config)[f].nodes}
    subprocess.run(["scancel", *a100], env={**os.environ, **hetero.env}, check=True)
    wait_for(
        "the a100 fillers' GPUs free",
        lambda: not any((sj := jobs(config).get(f)) and sj.holds_resources for f in a100),
    )
    only_action(ctl.tick(), [("stop", job), ("start", job)])
    assert plan() == (4, 64, 1, GLOBAL_BATCH)  # the 4-a100 Cell's plan, the global batch kept
    sj = wait_for("the job running again", lambda: running(job))
    assert set(sj.nodes) <= freed and len(sj.nodes) == 1 and sj.gpus_per_node == 4, sj
    assert "a100" in sj.features and "v100" not in sj.features, sj
    wait_for("3 steps on 4 a100" + explain(), lambda: world_sizes()[-3:] == [4, 4, 4], 120)

    # The next tick changes nothing: the job stays where Crius put it.
    only_action(ctl.tick(), [])

    wait_for("the job to finish" + explain(), lambda: len(losses(log)) >= STEPS and not running(job), 180)
    records = losses(log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), explain()
    sizes = [r["world_size"] for r in records]
    assert [s for k, s in enumerate(sizes) if k == 0 or sizes[k - 1] != s] == [2, 4], sizes
    reference = uninterrupted_losses(tmp_path, STEPS, GLOBAL_BATCH, '{"micro_batch": 64}')
    for r in records:
        assert math.isclose(r["loss"], reference[r["step"]], rel_tol=TOLERANCE), (r, reference[r["step"]])
    sj = running(short)
    assert sj is not None and sj.nodes == v100_node and sj.requeues == 0, sj
    assert running(v100) is not None
