"""mosaic trace mix, and mosaic sim on the mix with its cluster and tenants."""

from __future__ import annotations

import json

import pytest

from planner.cluster import cluster_from_toml
from planner.traces import parse_trace
from slurm_plugin.cli.main import main


def _sim(tmp_path, trace, cluster, *extra: str) -> dict:
    out = tmp_path / "run"
    args = ["sim", "--cluster", str(cluster), "--trace", str(trace), "--out", str(out), *extra]
    assert main([*args, "--no-plot", "--no-progress"]) == 0
    return json.loads((out / "summary.json").read_text())


def test_trace_mix_then_sim_with_tiresias(tmp_path):
    trace, cluster, config = tmp_path / "t.csv", tmp_path / "c.toml", tmp_path / "f.toml"
    args = ["trace", "mix", "--jobs", "40", "--rate", "30", "--max-duration-s", "1800", "--seed", "2"]
    outs = ["--out", str(trace), "--cluster-out", str(cluster), "--config-out", str(config)]
    assert main([*args, *outs]) == 0
    jobs = parse_trace(trace.read_text(), str(trace))
    types = {n.gpu_type for n in cluster_from_toml(cluster.read_text(), source=str(cluster))}
    assert len(jobs) == 40 and all(j.duration_s <= 1800 and j.time_limit_s for j in jobs)
    assert {j.gpu_type for j in jobs} - {None} <= types
    again = tmp_path / "again.csv"
    assert main([*args, "--out", str(again)]) == 0
    assert again.read_text() == trace.read_text()  # seeded
    s = _sim(tmp_path, trace, cluster, "--scheduler", "tiresias", "--config", str(config))
    assert s["finished"] == s["jobs"] == 40 and s["gpus"] == 64


def test_trace_mix_then_sim_with_the_default_scheduler(tmp_path):
    trace, cluster, config = tmp_path / "t.csv", tmp_path / "c.toml", tmp_path / "f.toml"
    args = ["trace", "mix", "--jobs", "30", "--rate", "30", "--max-duration-s", "1800", "--out", str(trace)]
    assert main([*args, "--cluster-out", str(cluster), "--config-out", str(config)]) == 0
    s = _sim(tmp_path, trace, cluster, "--config", str(config))
    assert s["finished"] == s["jobs"] == 30
    assert s["guaranteed_jobs"] > 0


def test_trace_mix_without_time_limits(tmp_path):
    trace = tmp_path / "t.csv"
    assert main(["trace", "mix", "--jobs", "10", "--no-time-limits", "--out", str(trace)]) == 0
    assert all(j.time_limit_s is None for j in parse_trace(trace.read_text(), str(trace)))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--mix", "gpu=3"], "mix: expected CLASS=WEIGHT"),
        (["--mix", "cpu=0"], "not all 0"),
        (["--gpus", "48"], "gpus must be a multiple of 32"),
        (["--rate", "0"], "rate must be > 0"),
        (["--guaranteed-fraction", "1.5"], "guaranteed fraction must be in [0, 1]"),
        (["--max-duration-s", "-1"], "max duration must be > 0"),
    ],
)
def test_trace_mix_names_a_bad_option(tmp_path, capsys, option, message):
    out = tmp_path / "t.csv"
    assert main(["trace", "mix", *option, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
