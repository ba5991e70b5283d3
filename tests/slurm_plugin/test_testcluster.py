"""The local test cluster: rendered configuration (pure) and a real bring-up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planner.core.errors import ConfigError
from slurm_plugin.cli.main import main
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import (
    CRED_EXPIRE_S,
    SHAPES,
    Layout,
    render_gres_conf,
    render_slurm_conf,
    shape_named,
)

LAYOUT = Layout(root=Path("/srv/tc"), ctld_port=7000, node_ports=(7001, 7002, 7003, 7004))


def test_homogeneous_conf_has_private_paths_ports_and_fast_relaunch():
    conf = render_slurm_conf(SHAPES["homogeneous"], LAYOUT)
    lines = conf.splitlines()
    assert "SlurmctldPort=7000" in lines
    assert f"AuthInfo=socket=/srv/tc/munge/munge.socket,cred_expire={CRED_EXPIRE_S}" in lines
    assert "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0" in lines
    assert "StateSaveLocation=/srv/tc/state" in lines
    node_lines = [line for line in lines if line.startswith("NodeName=")]
    assert len(node_lines) == 4
    assert node_lines[0].startswith("NodeName=n1 NodeHostname=localhost Port=7001 CPUs=16 RealMemory=65536")
    assert "Gres=gpu:4 Features=a100" in node_lines[0]
    assert any(line.startswith("PartitionName=gpu ") and "Default=YES" in line for line in lines)
    assert any(line.startswith("PartitionName=other ") for line in lines)


def test_hetero_nodes_carry_their_gpu_type_as_a_feature():
    conf = render_slurm_conf(SHAPES["hetero"], LAYOUT)
    features = [p for line in conf.splitlines() for p in line.split() if p.startswith("Features=")]
    assert features == ["Features=a100", "Features=a100", "Features=v100", "Features=v100"]


def test_shard_shape_declares_shards_per_gpu():
    shape = SHAPES["shard"]
    layout = Layout(Path("/srv/tc"), 7000, (7001, 7002))
    assert "GresTypes=gpu,shard" in render_slurm_conf(shape, layout)
    gres = render_gres_conf(shape, layout).splitlines()
    assert gres[0] == "AutoDetect=off"
    assert "NodeName=n1 Name=gpu File=/srv/tc/dev/n1/nvidia0" in gres
    assert "NodeName=n1 Name=shard Count=2 File=/srv/tc/dev/n1/nvidia0" in gres


def test_cluster_names_differ_between_directories_and_are_stable():
    a = render_slurm_conf(SHAPES["homogeneous"], LAYOUT).splitlines()[1]
    b = render_slurm_conf(SHAPES["homogeneous"], Layout(Path("/srv/other"), 7000, LAYOUT.node_ports))
    assert a.startswith("ClusterName=") and a != b.splitlines()[1]
    assert a == render_slurm_conf(SHAPES["homogeneous"], LAYOUT).splitlines()[1]


def test_ports_must_match_nodes():
    with pytest.raises(ConfigError, match="4 nodes but 2 ports"):
        render_slurm_conf(SHAPES["homogeneous"], Layout(Path("/x"), 1, (2, 3)))


def test_unknown_shape_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: homogeneous, hetero, shard"):
        shape_named("huge")


def test_live_cluster_is_up_with_idle_gpu_nodes(slurm_cluster):
    doc = lifecycle.status(slurm_cluster.layout.root)
    assert doc["running"] and set(doc["nodes"]) == {"n1", "n2", "n3", "n4"}
    out = run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %G %c %m"], env=slurm_cluster.env).stdout
    assert sorted(set(out.split("\n")) - {""}) == [f"n{k} gpu:4 16 65536" for k in range(1, 5)]
    # Its daemons are its own: each names the cluster's directory.
    for pid in doc["daemons"].values():
        assert lifecycle._ours(pid, slurm_cluster.layout.root)


def test_second_cluster_coexists_and_goes_down_cleanly(slurm_cluster, tmp_path, capsys):
    root = tmp_path / "second"
    assert main(["testcluster", "up", "--shape", "hetero", "--dir", str(root)]) == 0
    try:
        second = lifecycle.load(root)
        assert second.layout.ctld_port != slurm_cluster.layout.ctld_port
        assert not set(second.layout.node_ports) & set(slurm_cluster.layout.node_ports)
        assert main(["testcluster", "status", "--dir", str(root)]) == 0
        status = json.loads(capsys.readouterr().out.split("\n", 2)[-1])
        assert status["shape"] == "hetero" and status["running"]
        pids = [p for p in lifecycle.daemon_pids(second).values() if p is not None]
    finally:
        assert main(["testcluster", "down", "--dir", str(root)]) == 0
    assert all(not lifecycle._ours(p, root) for p in pids)
    # The session's cluster did not notice.
    assert lifecycle.status(slurm_cluster.layout.root)["running"]


def test_up_twice_in_one_directory_is_refused(slurm_cluster):
    with pytest.raises(lifecycle.ClusterError, match="already running"):
        lifecycle.up(shape_named("homogeneous"), slurm_cluster.layout.root)


def test_status_of_an_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(lifecycle.ClusterError, match="no test cluster here"):
        lifecycle.status(tmp_path)
    assert os.listdir(tmp_path) == []


def test_shard_cluster_offers_shards_of_its_gpus(slurm_cluster_of):
    cluster = slurm_cluster_of("shard")
    out = run(["sinfo", "-h", "-N", "-o", "%N %G"], env=cluster.env).stdout
    assert sorted(set(out.split("\n")) - {""}) == ["n1 gpu:4,shard:8", "n2 gpu:4,shard:8"]


def test_a_foreign_directory_is_never_wiped(slurm_cluster, tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(lifecycle.ClusterError, match="not a test cluster's directory"):
        lifecycle.up(shape_named("homogeneous"), tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
