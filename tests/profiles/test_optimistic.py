"""Optimistic profiling (Synergy §3.1): the CPU search and the cache model."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.errors import ProfileError
from profiles.document import profiles_from_document
from profiles.optimistic import CacheModel, cpu_curve, cpu_points_to_measure, optimistic_matrix
from tests.builders import profiles


def synergy_cpu_curve(model: str) -> Callable[[int], float]:
    """The real full-memory CPU curve of a model, as Synergy measured it."""
    m = profiles().resolve(model).sensitivity
    assert m is not None
    return lambda c: m.at(float(c), m.mem_gb_per_gpu[-1])


@pytest.mark.parametrize("model", ["resnet18", "alexnet", "mobilenet", "resnet50", "m5"])
def test_search_measures_few_points_and_reconstructs_the_curve(model: str) -> None:
    truth = synergy_cpu_curve(model)
    measured = cpu_points_to_measure(24, truth, threshold=0.10)
    assert len(measured) < 24  # Figure 5b: 8 points instead of 24 for ResNet-18
    curve = cpu_curve(measured)
    for c in range(1, 25):
        assert abs(curve(c) - truth(c)) <= 0.10 * truth(c) + 1e-9, (model, c)


def test_flat_model_is_measured_at_its_two_ends_only() -> None:
    assert cpu_points_to_measure(24, synergy_cpu_curve("lstm")) == {1: 1.0, 24: 1.0}


@given(st.lists(st.floats(0.1, 10), min_size=2, max_size=32), st.floats(0, 0.5))
def test_search_error_is_bounded_by_the_threshold_on_monotone_curves(
    steps: list[float], threshold: float
) -> None:
    values = [sum(steps[: k + 1]) for k in range(len(steps))]  # increasing in CPUs
    truth = cpu_curve({c + 1: v for c, v in enumerate(values)})
    curve = cpu_curve(cpu_points_to_measure(len(values), truth, threshold))
    for c in range(1, len(values) + 1):
        assert curve(c) <= truth(c) * (1 + threshold) + 1e-9
        assert curve(c) >= truth(c) / (1 + threshold) - 1e-9


def test_cache_model_hit_fraction_and_io_bound() -> None:
    cache = CacheModel(
        dataset_gb=140.0, sample_kb=110.0, storage_mb_per_s_per_gpu=62.5, working_set_gb_per_gpu=5.0
    )
    assert cache.hit_fraction(75.0) == pytest.approx(0.5)
    assert cache.io_samples_per_s(75.0) == pytest.approx(62.5 * 1024 / (0.5 * 110.0))
    assert cache.io_samples_per_s(200.0) == float("inf")  # whole dataset cached


def test_matrix_is_cpu_bound_with_enough_memory_and_io_bound_without() -> None:
    cache = CacheModel(dataset_gb=100.0, sample_kb=100.0, storage_mb_per_s_per_gpu=10.0)
    matrix = optimistic_matrix({1: 100.0, 4: 400.0}, cache, [1, 4], [10, 50, 100], reference=(1, 100))
    assert matrix.values[0] == (pytest.approx(1.0), 1.0, 1.0)  # 1 CPU: CPU-bound everywhere
    assert matrix.values[1][2] == pytest.approx(4.0)  # dataset cached: 4 CPUs, 4x
    assert matrix.values[1][1] == pytest.approx(10 * 1024 / (0.5 * 100) / 100)  # half cached
    assert matrix.values[1][0] < matrix.values[1][1] < matrix.values[1][2]


def test_profile_document_builds_the_matrix_from_an_optimistic_profile() -> None:
    doc = {
        "format": "mosaic-profiles/1",
        "models": {
            "mynet": {
                "optimistic": {
                    "cpu_samples_per_s": {"1": 300, "3": 800, "6": 1200, "12": 1250},
                    "dataset_gb": 140,
                    "sample_kb": 110,
                    "storage_mb_per_s_per_gpu": 50,
                }
            }
        },
    }
    matrix = profiles_from_document(json.dumps(doc))["mynet"].sensitivity
    assert matrix is not None
    assert matrix.at(3, 62.5) == pytest.approx(1.0)  # the default reference
    assert matrix.at(6, 250) == pytest.approx(1.5)
    assert matrix.at(6, 20.83) < matrix.at(6, 250)


@pytest.mark.parametrize(
    ("optimistic", "message"),
    [
        ({"dataset_gb": 1, "sample_kb": 1, "storage_mb_per_s_per_gpu": 1}, "cpu_samples_per_s"),
        (
            {"cpu_samples_per_s": {"x": 1}, "dataset_gb": 1, "sample_kb": 1, "storage_mb_per_s_per_gpu": 1},
            "CPU",
        ),
        ({"cpu_samples_per_s": {"1": 1}, "sample_kb": 1, "storage_mb_per_s_per_gpu": 1}, "dataset_gb"),
        (
            {"cpu_samples_per_s": {"1": 1}, "dataset_gb": 0, "sample_kb": 1, "storage_mb_per_s_per_gpu": 1},
            "positive",
        ),
    ],
)
def test_bad_optimistic_profiles_name_the_problem(optimistic: dict[str, object], message: str) -> None:
    doc = {"format": "mosaic-profiles/1", "models": {"m": {"optimistic": optimistic}}}
    with pytest.raises(ProfileError, match=message) as err:
        profiles_from_document(doc)
    assert "model 'm'" in str(err.value) or "cache model" in str(err.value)


def test_search_rejects_bad_measurements() -> None:
    with pytest.raises(ProfileError, match="positive"):
        cpu_points_to_measure(4, lambda c: 0.0)
