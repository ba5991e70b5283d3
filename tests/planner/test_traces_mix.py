"""``mosaic trace mix``: the mixed workload and its cluster."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.config import tenants_from_list
from planner.core.errors import ConfigError
from planner.traces import format_trace
from planner.traces.crius import elastic, iteration_time, random_types, split_model
from planner.traces.csvio import parse_trace
from planner.traces.generators import synergy_trace
from planner.traces.mix import MixOptions, _in_cluster, mix_cluster, mix_tenants, mix_trace, parse_mix
from profiles.perfmodel.crius import builtin_crius

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


@pytest.mark.parametrize("gpus", [64, 128])
def test_every_job_fits_the_matching_cluster(gpus):
    nodes = cluster_from_toml(mix_cluster(gpus), source="mix")
    assert sum(n.gpus for n in nodes) == gpus
    per_type = Counter[str]()
    for n in nodes:
        per_type[n.gpu_type] += n.gpus
    assert len(per_type) >= 3
    for job in _mix(jobs=400, seed=1, gpus=gpus):
        named = {job.gpu_type, *job.gpu_types} - {None}
        assert named <= set(per_type), job  # no type the cluster lacks (Crius's A10 is retyped)
        accepted = job.gpu_types or ((job.gpu_type,) if job.gpu_type else tuple(per_type))
        low = job.min_gpus or job.num_gpus
        assert any(per_type[t] >= low for t in accepted), job  # its smallest demand on one type


def test_a_crius_job_on_an_a10_runs_its_iterations_on_an_a40():
    table = builtin_crius()
    jobs = random_types(synergy_trace(60, jobs_per_hour=1.0, seed=1, multi_gpu=False), seed=2, table=table)
    a10 = next(j for j in elastic(jobs) if j.gpu_type == "a10")
    moved = _in_cluster(a10, table)
    found = iteration_time(table, *split_model(a10.model), a10.batch_size, "a40", a10.num_gpus)
    assert found is not None
    assert (moved.gpu_type, moved.gpu_types) == ("a40", ("a100", "v100", "a40"))
    assert moved.iterations == a10.iterations and moved.num_gpus == a10.num_gpus
    assert moved.duration_s == round(a10.iterations * found.time_s, 3)


def test_each_class_comes_from_its_source():
    jobs = _mix(jobs=300, seed=6)
    by_class: dict[str, list] = {}
    for j in jobs:
        by_class.setdefault(j.job_id.split("-")[0], []).append(j)
    assert all(j.gpu_types and j.min_gpus is not None and j.max_gpus is not None for j in by_class["elastic"])
    assert all(j.num_gpus == 1 and not j.gpu_types for j in by_class["cpu"])
    assert all(j.num_gpus in (1, 2) and j.min_gpus is None for j in by_class["small"])
    assert all(j.gpu_type == "a800" and j.plan is not None for j in by_class["plan"])
    for j in jobs:  # times to the millisecond, time limits to the minute
        assert round(j.submit_time_s, 3) == j.submit_time_s and round(j.duration_s, 3) == j.duration_s
        assert j.time_limit_s is not None and j.time_limit_s % 60 == 0
        assert j.time_limit_s <= 3 * j.duration_s + 60


def test_tenants_guarantees_time_limits_and_the_cap():
    jobs = _mix(jobs=400, seed=2, max_duration_s=3600.0)
    assert {j.tenant for j in jobs} == {"prod", "research", "dev"}
    guaranteed = [j for j in jobs if j.guaranteed]
    assert guaranteed and all(j.tenant == "prod" for j in guaranteed)
    assert all(j.duration_s <= 3600.0 for j in jobs)
    uncapped = {j.job_id: j for j in _mix(jobs=400, seed=2, max_duration_s=None)}
    capped = [j for j in jobs if uncapped[j.job_id].duration_s > 3600.0]
    assert capped and all(j.duration_s == 3600.0 for j in capped)
    for j in capped:
        before = uncapped[j.job_id]
        if before.iterations is not None:
            assert j.iterations == max(1, int(before.iterations * 3600.0 / before.duration_s))
    assert all(j.time_limit_s is not None and j.duration_s * 1.2 <= j.time_limit_s for j in jobs)
    assert all(j.time_limit_s is None for j in _mix(jobs=20, time_limits=False))
    quotas = {t.name: t.gpu_quota for t in tenants_from_list(_tenant_tables(mix_tenants(64)))}
    assert quotas == {"prod": 16, "research": 0, "dev": 0}
    assert not any(j.guaranteed for j in _mix(jobs=100, guaranteed_fraction=0.0))


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
    return tomllib.loads(text)["tenants"]
