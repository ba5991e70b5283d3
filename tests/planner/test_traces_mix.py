"""``mosaic trace mix``: the mixed workload and its cluster."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.config import tenants_from_list
from planner.errors import ConfigError
from planner.traces import format_trace
from planner.traces.csvio import parse_trace
from planner.traces.mix import MixOptions, mix_cluster, mix_tenants, mix_trace, parse_mix

BUNDLED = Path(__file__).resolve().parents[2] / "planner" / "sim" / "bundled"
PLAN_JOBS = parse_trace((BUNDLED / "rubick_base.csv").read_text())


def _mix(**changes) -> list:
    return mix_trace(MixOptions(**changes), PLAN_JOBS)


def test_a_mix_is_deterministic_for_a_seed_and_differs_across_seeds():
    assert _mix(seed=3) == _mix(seed=3)
    assert _mix(seed=3) != _mix(seed=4)


def test_the_classes_come_in_their_proportions():
    jobs = _mix(jobs=1000, mix={"elastic": 50, "cpu": 25, "small": 25})
    classes = Counter(j.job_id.split("-")[0] for j in jobs)
    assert set(classes) == {"elastic", "cpu", "small"}
    assert abs(classes["elastic"] / 1000 - 0.5) < 0.05
    assert abs(classes["cpu"] / 1000 - 0.25) < 0.05


def test_every_job_fits_the_matching_cluster():
    nodes = cluster_from_toml(mix_cluster(64), source="mix")
    assert sum(n.gpus for n in nodes) == 64
    for job in _mix(jobs=400, seed=1):
        types = job.gpu_types or ((job.gpu_type,) if job.gpu_type else tuple({n.gpu_type for n in nodes}))
        low = job.min_gpus or job.num_gpus
        fits = [n for n in nodes if n.gpu_type in types]
        assert sum(n.gpus for n in fits) >= low, job


def test_tenants_guarantees_time_limits_and_the_cap():
    jobs = _mix(jobs=400, seed=2, max_duration_s=3600.0)
    assert {j.tenant for j in jobs} == {"prod", "research", "dev"}
    guaranteed = [j for j in jobs if j.guaranteed]
    assert guaranteed and all(j.tenant == "prod" for j in guaranteed)
    assert all(j.duration_s <= 3600.0 for j in jobs)
    assert all(j.time_limit_s is not None and j.duration_s * 1.2 <= j.time_limit_s for j in jobs)
    assert all(j.time_limit_s is None for j in _mix(jobs=20, time_limits=False))
    quotas = {t.name: t.gpu_quota for t in tenants_from_list(_tenant_tables(mix_tenants(64)))}
    assert quotas == {"prod": 16, "research": 0, "dev": 0}


def test_the_csv_reads_back_identically():
    jobs = _mix(jobs=100, seed=5)
    assert list(parse_trace(format_trace(jobs))) == jobs


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"jobs": 0}, "jobs"),
        ({"mix": {"gpu": 1}}, "unknown class"),
        ({"mix": {"cpu": 0}}, "not all 0"),
        ({"gpus": 48}, "multiple of 32"),
        ({"guaranteed_fraction": 2.0}, "guaranteed fraction"),
    ],
)
def test_bad_options_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        _mix(**changes)


def test_parse_mix():
    assert parse_mix("elastic=1, cpu=2") == {"elastic": 1.0, "cpu": 2.0}
    with pytest.raises(ConfigError, match="CLASS=WEIGHT"):
        parse_mix("gpus=3")
    with pytest.raises(ConfigError, match="must be a number"):
        parse_mix("cpu=lots")


def _tenant_tables(text: str) -> list:
    import tomllib

    return tomllib.loads(text)["tenants"]


def test_mosaic_trace_mix_then_mosaic_sim(tmp_path):
    import json

    from slurm_plugin.cli.main import main

    trace, cluster, config = tmp_path / "t.csv", tmp_path / "c.toml", tmp_path / "f.toml"
    args = ["trace", "mix", "--jobs", "30", "--rate", "30", "--max-duration-s", "1800", "--out", str(trace)]
    assert main([*args, "--cluster-out", str(cluster), "--config-out", str(config)]) == 0
    out = tmp_path / "run"
    argv = [
        "sim",
        "--cluster",
        str(cluster),
        "--trace",
        str(trace),
        "--config",
        str(config),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == summary["jobs"] == 30
    assert summary["guaranteed_jobs"] > 0
