"""Observed points refine a profile's CPU curve; provenance says where each block came from."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.core.errors import ProfileError
from planner.policies.synergy.demand import best_case_per_gpu
from profiles.document import profiles_from_document
from profiles.observed import (
    ObservedPoint,
    Shape,
    corrected_cpu_values,
    curves,
    merge_absolute,
    refine_profile,
    refine_store,
)
from profiles.schema import Profile, SensitivityMatrix
from profiles.store import ProfileStore

V100 = Shape("v100", 1)


def point(
    cpus: float, rate: float, shape: Shape = V100, t: float = 0.0, model: str = "resnet18"
) -> ObservedPoint:
    return ObservedPoint(model, shape, cpus, 62.5, rate, t, job_id=f"j{cpus}-{t}")


# -- the curve correction ----------------------------------------------------------------


def test_a_flat_observation_flattens_the_curve_from_the_anchor_on() -> None:
    # Prior: 1 -> 0.5, 3 -> 1.0, 9 -> 2.0, 12 -> 2.2. Observed: 100 samples/s at 3 and at 9.
    # Below the anchor (3) the prior stands; 9 is the anchor's value; beyond 9 the prior's
    # gain (0.2) times the share the stretch 3..9 confirmed (0 / 1.0 = 0): flat.
    assert corrected_cpu_values([0.5, 1.0, 2.0, 2.2], [1, 3, 9, 12], {3: 100.0, 9: 100.0}) == [
        0.5,
        1.0,
        1.0,
        1.0,
    ]


def test_a_partial_gain_scales_the_prior_between_and_beyond() -> None:
    # Observed 3 -> 9: +50 % where the prior says +100 %: the share is 0.5. At 6 (prior 1.5,
    # halfway): 1.0 + 0.5 x 0.5 = 1.25; at 12: 1.5 + 0.2 x 0.5 = 1.6.
    got = corrected_cpu_values([0.5, 1.0, 1.5, 2.0, 2.2], [1, 3, 6, 9, 12], {3: 100.0, 9: 150.0})
    assert got == pytest.approx([0.5, 1.0, 1.25, 1.5, 1.6])


def test_more_gain_than_the_prior_is_never_extrapolated() -> None:
    # Observed 3 -> 9 doubles where the prior said +10 %: 9 takes the observed 2.0, and beyond
    # it the prior's further gain counts at most once (share clamped to 1).
    got = corrected_cpu_values([1.0, 1.1, 1.2], [3, 9, 12], {3: 50.0, 9: 100.0})
    assert got == pytest.approx([1.0, 2.0, 2.1])


def test_a_flat_prior_is_interpolated_linearly_between_observations() -> None:
    got = corrected_cpu_values([1.0, 1.0, 1.0, 1.0], [2, 4, 6, 8], {2: 10.0, 6: 20.0})
    # 4 lies halfway between the observations; beyond 6 the prior has no gain to scale.
    assert got == pytest.approx([1.0, 1.5, 2.0, 2.0])


prior_curves = st.lists(st.floats(0.1, 5.0), min_size=3, max_size=8).map(sorted)


@settings(max_examples=60, deadline=None)
@given(prior_curves, st.floats(0.01, 1e4), st.data())
def test_observations_that_agree_with_the_prior_change_nothing(prior, scale, data) -> None:
    """Rates proportional to the prior at the observed CPU counts (any hardware, any unit)
    give the prior back, wherever they are observed."""
    cpus = [float(c) for c in range(1, len(prior) + 1)]
    chosen = data.draw(st.lists(st.sampled_from(cpus), min_size=2, unique=True))
    observed = {c: scale * prior[int(c) - 1] for c in chosen}
    assert corrected_cpu_values(prior, cpus, observed) == pytest.approx(prior, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(prior_curves, st.lists(st.floats(0.1, 1e3), min_size=2, max_size=4), st.data())
def test_the_corrected_curve_goes_through_the_observed_ratios(prior, rates, data) -> None:
    cpus = [float(c) for c in range(1, len(prior) + 1)]
    rates = rates[: len(cpus)]  # at most one rate per CPU count
    chosen = sorted(
        data.draw(st.lists(st.sampled_from(cpus), min_size=len(rates), max_size=len(rates), unique=True))
    )
    observed = dict(zip(chosen, rates, strict=True))
    got = corrected_cpu_values(prior, cpus, observed)
    c0 = chosen[0]
    for c in chosen:
        assert got[int(c) - 1] / got[int(c0) - 1] == pytest.approx(observed[c] / observed[c0], rel=1e-9)
    assert all(math.isfinite(v) for v in got)


# -- profiles and stores -----------------------------------------------------------------


def test_one_cpu_count_leaves_the_profile_alone() -> None:
    profile = ProfileStore.builtin().resolve("resnet18")
    assert refine_profile(profile, [point(4, 100.0), point(4, 120.0, t=1)]) is profile


def test_rates_of_different_shapes_are_not_compared() -> None:
    profile = ProfileStore.builtin().resolve("resnet18")
    two = Shape("v100", 2)
    assert refine_profile(profile, [point(4, 100.0), point(9, 100.0, shape=two)]) is profile


def test_a_refined_built_in_profile_says_so_and_asks_for_fewer_cpus() -> None:
    store = ProfileStore.builtin()
    prior = store.resolve("resnet18")
    assert best_case_per_gpu(prior.sensitivity).cpus == 9  # type: ignore[arg-type]
    assert store.provenance("resnet18") == {"throughput": "built-in", "sensitivity": "built-in"}
    refined = refine_store(store, [point(4, 200.0), point(9, 201.0), point(9, 199.0, t=2)])
    profile = refined.resolve("res18")  # aliases still resolve
    assert refined.provenance("resnet18") == {"throughput": "built-in", "sensitivity": "built-in+observed"}
    assert profile.throughput == prior.throughput  # only the CPU curve is refined
    assert best_case_per_gpu(profile.sensitivity).cpus == 4  # type: ignore[arg-type]
    assert profile.sensitivity.at(9, 62.5) == pytest.approx(prior.sensitivity.at(4, 62.5))  # type: ignore[union-attr]
    assert "observed: v100 x1" in profile.sources[-1]
    assert store.resolve("resnet18") is prior  # the base store is unchanged


def test_the_median_of_each_cpu_count_counts() -> None:
    (curve,) = curves([point(4, 100.0), point(4, 10_000.0, t=1), point(4, 101.0, t=2), point(9, 50.0)])
    assert curve.rates == {4.0: 101.0, 9.0: 50.0}


def test_an_unknown_model_gets_an_observed_curve(caplog) -> None:
    store = ProfileStore.builtin()
    refined = refine_store(store, [point(2, 50.0, model="my-net"), point(8, 100.0, model="my-net")])
    assert "my-net" in refined and refined.provenance("my-net") == {"sensitivity": "observed"}
    matrix = refined.resolve("my-net").sensitivity
    assert matrix is not None and matrix.at(8, 10) / matrix.at(2, 500) == pytest.approx(2.0)
    assert not caplog.records  # no "unknown model" warning from refining it


def test_refining_keeps_a_matrix_positive() -> None:
    prior = Profile("x", sensitivity=SensitivityMatrix((1.0, 2.0, 4.0), (10.0,), ((1.0,), (1.0,), (3.0,))))
    refined = refine_profile(
        prior, [ObservedPoint("x", V100, 1, 10, 100.0, 0), ObservedPoint("x", V100, 2, 10, 1e-9, 0)]
    )
    assert refined.sensitivity is not None and min(v for row in refined.sensitivity.values for v in row) > 0


def test_a_bad_point_is_refused() -> None:
    with pytest.raises(ValueError, match="samples_per_s_per_gpu"):
        ObservedPoint("x", V100, 4, 62.5, -1.0, 0)
    with pytest.raises(ValueError, match="cpus_per_gpu"):
        ObservedPoint("x", V100, math.nan, 62.5, 1.0, 0)


# -- provenance in documents -------------------------------------------------------------


def _document(source: str | None) -> dict:
    model: dict = {"throughput": [{"gpu_type": "a100", "num_gpus": 1, "steps_per_s": 2.0}]}
    if source is not None:
        model["source"] = source
    return {"format": "mosaic-profiles/1", "models": {"m": model}}


@pytest.mark.parametrize(
    ("source", "kind", "note"),
    [
        (None, "profiled", ()),
        ("measured on cluster X, 2026-10", "profiled", ("measured on cluster X, 2026-10",)),
        ("profiled: mosaic profile, 7 runs", "profiled", ("profiled: mosaic profile, 7 runs",)),
        ("Observed", "observed", ("Observed",)),
        ("built-in: copied from Gavel", "built-in", ("built-in: copied from Gavel",)),
    ],
)
def test_a_document_says_where_its_numbers_came_from(source, kind, note) -> None:
    profile = profiles_from_document(_document(source))["m"]
    assert profile.provenance == {"throughput": kind} and profile.sources == note
    assert ProfileStore({}).with_profiles([profile]).provenance("m") == {"throughput": kind}


def test_a_misspelt_kind_is_an_error_naming_the_model() -> None:
    with pytest.raises(ProfileError, match=r"model .m.*source.*built-in"):
        profiles_from_document(_document("builtin"))


def test_a_neutral_profile_has_no_blocks() -> None:
    assert ProfileStore.builtin().provenance("no-such-model") == {}


# -- a profiled (absolute) prior -----------------------------------------------------------


def _profiled(points: dict[str, float]) -> Profile:
    document = {
        "format": "mosaic-profiles/1",
        "models": {
            "image-cnn": {
                "source": "profiled: mosaic profile",
                "optimistic": {
                    "cpu_samples_per_s": points,
                    # 1 GB of 100 KB samples from storage at 5 MB/s: cached whole from 1 GB per
                    # GPU on; with 0.5 GB, half the samples come at 5 MB/s: 102 samples/s.
                    "dataset_gb": 1.0,
                    "sample_kb": 100.0,
                    "storage_mb_per_s_per_gpu": 5.0,
                    "mem_gb_per_gpu": [0.25, 0.5, 1.0, 16.0],
                    "reference": [3, 16],
                },
            }
        },
    }
    return profiles_from_document(document)["image-cnn"]


def test_a_profiled_curve_is_corrected_by_one_observed_cpu_count() -> None:
    """``mosaic profile`` measured 50, 95, 150 and 190 samples/s at 1, 2, 4 and 8 CPUs: on
    Synergy's CPU grid the demand is 9 (6 CPUs give 170). A job at 8 CPUs runs at 150: that
    point replaces the profile's, the curve is flat from 4 on, and the demand is 4, from
    this one observation."""
    prior = _profiled({"1": 50.0, "2": 95.0, "4": 150.0, "8": 190.0})
    assert prior.optimistic is not None and prior.optimistic.cpu_samples_per_s[8] == 190.0
    assert best_case_per_gpu(prior.sensitivity).cpus == 9  # type: ignore[arg-type]
    seen = [ObservedPoint("image-cnn", Shape("a100", 1), 8, 16.0, 150.0, 1.0)]
    refined = refine_profile(prior, seen)
    assert refined.provenance["sensitivity"] == "profiled+observed"
    assert best_case_per_gpu(refined.sensitivity).cpus == 4  # type: ignore[arg-type]
    assert refined.optimistic is not None and refined.optimistic.cpu_samples_per_s[8] == 150.0
    # A rate that confirms the profile leaves it as it was.
    agree = refine_profile(prior, [ObservedPoint("image-cnn", Shape("a100", 1), 8, 16.0, 190.0, 1.0)])
    assert agree.sensitivity == prior.sensitivity
    # The next job starts at the 9 CPUs the profile asks for: 150 there says the same.
    at_nine = refine_profile(prior, [ObservedPoint("image-cnn", Shape("a100", 1), 9, 16.0, 150.0, 1.0)])
    assert best_case_per_gpu(at_nine.sensitivity).cpus == 4  # type: ignore[arg-type]
    # Another GPU count is another curve: one observed count there says nothing; nor does a
    # fraction of a CPU per GPU.
    assert refine_profile(prior, [ObservedPoint("image-cnn", Shape("a100", 2), 8, 16.0, 150.0, 1.0)]) is prior
    assert (
        refine_profile(prior, [ObservedPoint("image-cnn", Shape("a100", 1), 7.5, 16.0, 150.0, 1.0)]) is prior
    )


def test_a_job_slowed_by_its_neighbours_at_one_cpu_does_not_look_cpu_sensitive() -> None:
    """The closed loop's text job: profiled flat (248 and 257 samples/s at 1 and 2 CPUs,
    alone), observed at 186 on 1 CPU while sharing the machine. Replacing only the 1-CPU
    point made it look 38 % faster at 2 CPUs; tune gave it 2, observed it flat again, gave
    it 1 back, and so on. The level moves; the curve keeps its ratios and its demand."""
    prior = _profiled({"1": 248.0, "2": 257.0})
    demand = best_case_per_gpu(prior.sensitivity).cpus  # type: ignore[arg-type]
    refined = refine_profile(prior, [ObservedPoint("image-cnn", Shape("a100", 1), 1, 16.0, 186.0, 1.0)])
    assert refined.optimistic is not None
    assert refined.optimistic.cpu_samples_per_s == {1: 186.0, 2: pytest.approx(257.0 * 186.0 / 248.0)}
    assert best_case_per_gpu(refined.sensitivity).cpus == demand  # type: ignore[arg-type]


def test_a_profiled_curve_is_not_compared_where_the_cache_limits() -> None:
    """With 0.5 GB per GPU the cache holds half the data set: a job there is slow for want
    of memory, not CPUs, and its rate is not compared with the profile's cached curve."""
    prior = _profiled({"1": 50.0, "2": 95.0, "4": 150.0, "8": 190.0})
    low = [ObservedPoint("image-cnn", Shape("a100", 1), 8, 0.5, 150.0, 1.0)]
    matrix = prior.sensitivity
    assert matrix is not None and matrix.at(8, 0.5) < matrix.at(8, 16)
    assert refine_profile(prior, low) is prior


def test_merging_absolute_rates() -> None:
    measured = {1: 50.0, 2: 95.0, 4: 150.0, 8: 190.0}
    assert merge_absolute(measured, {4: 150.0, 8: 190.0}) == measured  # agreement changes nothing
    assert merge_absolute(measured, {16: 200.0}) == {**measured, 16: 200.0}  # a point added
    # Observed at 9, below what was measured at 8: the curve does not fall (8 capped), and
    # nothing beyond promises more.
    assert merge_absolute(measured, {9: 150.0}) == {1: 50.0, 2: 95.0, 4: 150.0, 8: 150.0, 9: 150.0}
    # Observed at 2, as measured: the measured gain beyond holds in full.
    assert merge_absolute(measured, {2: 95.0}) == measured
