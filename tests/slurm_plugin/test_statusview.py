"""``mosaic status``: a table like squeue's by default, today's JSON with ``--json``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurm_plugin.cli import controller_cmd
from slurm_plugin.cli.main import main
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.directives import encode_comment
from slurm_plugin.statusview import COLUMNS, plan_text
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, _controller


@pytest.fixture
def ticked(tmp_path, monkeypatch):
    """A controller tick (fifo) over the captured queue; job 1 is tenant t1's, guaranteed."""
    config = ControllerConfig(spool_dir=tmp_path / "spool", checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    config.spool_dir.mkdir()
    slurm = FakeSlurm()
    comment = encode_comment({"tenant": "t1", "guaranteed": True, "model": "resnet18"})
    slurm._jobs = [replace(j, comment=comment) if j.id == "1" else j for j in slurm._jobs]
    store = Store(config.store_path)
    try:
        assert _controller(config, slurm, store, "fifo").tick().ok
    finally:
        store.close()
    monkeypatch.setattr(controller_cmd, "_client", lambda config: slurm)
    cfg = tmp_path / "mosaic.toml"
    tenants = '[[tenants]]\nname = "t1"\ngpu_quota = 4\n'
    cfg.write_text(f'[controller]\nspool_dir = "{config.spool_dir}"\n\n{tenants}')
    return cfg, slurm


def test_status_prints_a_table_of_the_jobs_tenants_and_cluster(ticked, capsys):
    cfg, slurm = ticked
    assert main(["-q", "status", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == list(COLUMNS)
    rows = {line.split()[0]: line.split() for line in out[1:] if line and line.split()[0].isdigit()}
    assert set(rows) == {"1", "2", "3", "4", "6", "7"}  # job 5 is in another partition
    assert rows["1"][:5] == ["1", "root", "t1", "RUNNING", "2/2"]
    assert rows["4"][3:5] == ["PENDING", "5/0"]  # asks 5 GPUs on 4-GPU nodes
    tenant = next(line for line in out if line.startswith("tenant t1:"))
    assert tenant == (
        "tenant t1: 1 job(s), 1 running on 2 GPU(s); quota 4 GPUs, 2 used by guaranteed jobs (50%)"
    )
    cluster = next(line for line in out if line.startswith("cluster:"))
    used = sum(n.gpus_used for n in slurm._nodes)
    assert cluster.startswith(f"cluster: {used} of 16 GPUs in use")
    assert out[-1].startswith("controller: round 1 at ") and "1 tick(s), 0 failed" in out[-1]


def test_status_without_slurm_shows_the_last_rounds_view(ticked, capsys):
    cfg, slurm = ticked
    slurm.down = True
    assert main(["-q", "status", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("slurm did not answer (") and out[1].split() == list(COLUMNS)
    assert any(line.split()[:5] == ["1", "-", "t1", "running", "2/2"] for line in out[2:] if line)
    # Job 7 runs partly on a draining node: the round held its GPUs on usable nodes as occupied.
    assert any(line.split()[:5] == ["7", "-", "-", "running", "2/1"] for line in out[2:] if line)
    assert any(line.startswith("cluster: GPUs unknown") for line in out)


def test_status_json_is_the_rounds_actions_and_jobs(ticked, capsys):
    cfg, slurm = ticked
    slurm.down = True  # --json reads the state store only
    assert main(["-q", "status", "--config", str(cfg), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"ticks", "failed_ticks", "rounds", "jobs"}
    assert set(document["jobs"]["1"]) == {"num_gpus", "attained_gpu_s", "progress", "finished"}
    assert document["jobs"]["1"]["num_gpus"] == 2 and not document["jobs"]["1"]["finished"]
    assert document["rounds"][0]["round"] == 1 and "1" in document["rounds"][0]["running"]


def test_plan_text_is_short():
    assert plan_text(None) == "-" and plan_text({}) == "-"
    assert plan_text({"dp": 2, "zero_stage": 2, "offload_optimizer": True, "offload_param": False}) == (
        "dp=2,zero=2,offload-opt"
    )
