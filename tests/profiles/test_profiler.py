"""``mosaic profile``'s pure decisions (profiles/profiler/): search order, schedule, heartbeats, output."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.errors import ProfileError
from planner.core.execplan import ExecPlan
from profiles.document import profiles_from_document
from profiles.optimistic import cpu_points_to_measure
from profiles.perfmodel.query import ModelShape, make_query
from profiles.perfmodel.rubick_measured import builtin_rubick_fit
from profiles.profiler.measure import throughput
from profiles.profiler.output import (
    CacheSpec,
    fit_samples,
    profile_document,
    repeat_spread,
    sample_rows,
    samples_csv,
    slowdowns,
)
from profiles.profiler.runs import (
    PlanSample,
    Request,
    check_samples_fit,
    default_plan_samples,
    next_run,
    parse_plan_samples,
    remaining,
)
from profiles.profiler.search import curve_error, next_cpu_count, search_points
from profiles.profiler.state import RunResult, State, check_identity, state_from_json
from tests.builders import profiles


def drive(cpus: tuple[int, ...], truth: Callable[[int], float], threshold: float = 0.1) -> list[int]:
    """The CPU counts next_cpu_count asks for, in order, measuring each with ``truth``."""
    measured: dict[int, float] = {}
    order = []
    while (c := next_cpu_count(cpus, measured, threshold)) is not None:
        assert c not in measured  # never the same point twice
        order.append(c)
        measured[c] = truth(c)
    return order


def synergy_curve(model: str) -> Callable[[int], float]:
    m = profiles().resolve(model).sensitivity
    assert m is not None
    return lambda c: m.at(float(c), m.mem_gb_per_gpu[-1])


@pytest.mark.parametrize("model", ["resnet18", "alexnet", "mobilenet", "resnet50", "lstm", "m5"])
def test_one_run_at_a_time_visits_what_the_whole_search_visits_in_its_order(model: str) -> None:
    truth = synergy_curve(model)
    calls: list[int] = []

    def measure(c: int) -> float:
        calls.append(c)
        return truth(c)

    expected = cpu_points_to_measure(24, measure)
    first_visits = list(dict.fromkeys(calls))
    assert drive(tuple(range(1, 25)), truth) == first_visits
    assert set(first_visits) == set(expected)


def test_a_list_of_counts_is_bisected_by_position() -> None:
    # 1,2,4,8,16 saturating at 4 CPUs (10 samples/s per CPU up to 4):
    # ends first: 16 (40) vs 1 (10) grows > 10 % -> middle position: 4 (40);
    # [4, 16] is flat -> not split; [1, 4] grows -> its middle position: 2; done.
    order = drive((1, 2, 4, 8, 16), lambda c: 10.0 * min(c, 4))
    assert order == [16, 1, 4, 2]


def test_flat_throughput_is_measured_at_the_two_ends_only() -> None:
    assert drive((1, 2, 3, 4, 5, 6, 7, 8), lambda c: 100.0) == [8, 1]
    assert drive((3,), lambda c: 1.0) == [3]


def test_bad_cpu_lists_are_refused() -> None:
    for bad in ((), (0, 1), (2, 2)):
        with pytest.raises(ProfileError, match="CPU count"):
            next_cpu_count(bad, {})


@given(st.lists(st.floats(1, 100), min_size=2, max_size=20))
def test_search_points_are_what_the_search_visits_even_with_a_full_sweep(values: list[float]) -> None:
    cpus = tuple(range(1, len(values) + 1))
    sweep = dict(zip(cpus, values, strict=True))
    order = drive(cpus, sweep.__getitem__)
    assert sorted(search_points(cpus, sweep)) == sorted(order)


def test_curve_error_against_a_sweep() -> None:
    sweep = {1: 10.0, 2: 20.0, 3: 24.0, 4: 30.0}
    searched = {1: 10.0, 4: 30.0}
    # The line through (1, 10) and (4, 30) gives 16.67 at 2 (-16.7 %) and 23.33 at 3 (-2.8 %).
    err = curve_error(searched, sweep)
    assert err.points == 2 and err.sweep_points == 4 and err.worst_cpus == 2
    assert err.max_rel == pytest.approx(10 / 3 / 20)
    assert err.mean_rel == pytest.approx((0 + (10 / 3) / 20 + (2 / 3) / 24 + 0) / 4)


# -- the schedule ------------------------------------------------------------------------


def samples7() -> tuple[PlanSample, ...]:
    return default_plan_samples(2, offload=False)


def test_schedule_is_the_search_then_plans_then_each_partner_alone_and_together() -> None:
    request = Request(cpus=(1, 2, 4), plans=samples7(), pairs=("example:b",), pair_cpus=3)
    done: dict[str, float] = {}
    keys = []
    while (run := next_run(request, done)) is not None:
        keys.append(run.key)
        done[run.key] = {1: 10.0, 2: 20.0, 4: 21.0}.get(run.cpus, 5.0)
    plan_keys = [f"plan-{s.label}" for s in samples7()]
    # The search on 1,2,4: ends 4 then 1 (21 > 11: split), middle 2.
    assert keys == ["cpu-4", "cpu-1", "cpu-2", *plan_keys, "cpu-3", "solo-example:b-3", "pair-example:b-3"]
    assert remaining(request, done) == []


def test_repeated_samples_go_round_all_samples_before_measuring_one_again() -> None:
    request = Request(cpus=(1,), plans=samples7(), repeat=3)
    done: dict[str, float] = {}
    order = []
    while (run := next_run(request, done)) is not None:
        order.append((run.key, run.repeat))
        done[run.key] = 1.0
    labels = [s.label for s in samples7()]
    expected = [(f"plan-{label}" + (f"/{k}" if k > 1 else ""), k) for k in (1, 2, 3) for label in labels]
    assert order == [("cpu-1", 1), *expected]
    assert "measurement 3" in next_run(request, dict(list(done.items())[:-1])).describe()  # type: ignore[union-attr]
    assert Request(cpus=(1,), plans=samples7()).to_json().get("repeat") is None  # old states resume
    with pytest.raises(ProfileError, match="--repeat must be at least 1"):
        Request(cpus=(1,), plans=samples7(), repeat=0)


def test_a_sample_row_is_the_median_of_its_measurements_and_the_spread_is_reported() -> None:
    shape = ModelShape(name="toy", params=1e6, seq_len=64, hidden=128, layers=2)
    sample = samples7()[0]
    runs = {
        f"plan-{sample.label}": result("plan", 1, 16 / 0.050, 1 / 0.050),
        f"plan-{sample.label}/2": result("plan", 1, 16 / 0.040, 1 / 0.040),
        f"plan-{sample.label}/3": result("plan", 1, 16 / 0.080, 1 / 0.080),  # a slow spell
    }
    (row,) = sample_rows(shape, [sample], runs, 16, repeat=3)
    assert float(row["iter_time_s"]) == pytest.approx(0.050) and row["source"].endswith("(median of 3 runs)")
    assert repeat_spread([sample], runs, 3) == {sample.label: pytest.approx((0.080 - 0.040) / 0.050)}
    (partial,) = sample_rows(shape, [sample], {k: runs[k] for k in list(runs)[:2]}, 16, repeat=3)
    assert float(partial["iter_time_s"]) == pytest.approx(0.045)  # a budget stopped the third
    (single,) = sample_rows(shape, [sample], runs, 16)
    assert float(single["iter_time_s"]) == pytest.approx(0.050) and "median" not in single["source"]


def test_remaining_lists_the_search_and_every_later_run() -> None:
    request = Request(cpus=(1, 2), plans=samples7(), sweep=True)
    left = remaining(request, {"cpu-1": 1.0})
    assert left[0].startswith("CPU search: 2 CPU(s) next") and "unmeasured: 2" in left[0]
    assert len(left) == 1 + len(samples7())  # the sweep's counts are in the search line


def test_a_sweep_measures_every_count_after_the_search() -> None:
    request = Request(cpus=(1, 2, 3, 4), sweep=True)
    done: dict[str, float] = {}
    while (run := next_run(request, done)) is not None:
        done[run.key] = 7.0
    assert sorted(done) == ["cpu-1", "cpu-2", "cpu-3", "cpu-4"]


def test_requests_that_cannot_be_profiled_are_refused() -> None:
    with pytest.raises(ProfileError, match="at least 7"):
        Request(cpus=(1,), plans=samples7()[:6])
    with pytest.raises(ProfileError, match="threshold"):
        Request(cpus=(1,), threshold=1.5)
    with pytest.raises(ProfileError, match="repeated"):
        Request(cpus=(1,), pairs=("a", "a"), pair_cpus=1)


def test_default_samples_are_seven_with_three_zero_offload_for_deepspeed() -> None:
    ds = default_plan_samples(2, offload=True)
    assert len(ds) == 7 and sum(s.plan.offload_optimizer for s in ds) == 3
    assert all(s.cpus <= 2 for s in ds)
    torch = default_plan_samples(2, offload=False)
    assert len({s.label for s in torch}) == 7 and not any(s.plan.zero_stage for s in torch)
    assert not any(s.plan.activation_checkpointing for s in torch)  # not every script does it
    with pytest.raises(ProfileError, match="only 4 default plan samples fit in 1 CPU"):
        default_plan_samples(1, offload=False)


def test_plan_samples_from_json_and_their_errors() -> None:
    samples = parse_plan_samples('[{"ranks": 2, "threads": 1, "plan": {"zero_stage": 2}}, {"threads": 2}]')
    assert samples == (PlanSample(2, 1, ExecPlan(zero_stage=2)), PlanSample(1, 2, ExecPlan()))
    for text, match in (
        ("{", "not JSON"),
        ("{}", "JSON list"),
        ('[{"ranks": 0}]', r"--plans\[0\]: ranks must be an integer >= 1"),
        ('[{"gpus": 1}]', "unknown key"),
        ('[{"plan": {"zero_stage": 9}}]', "zero_stage"),
        ('[{"plan": {"tp": 2}}]', "tp = pp = 1"),
    ):
        with pytest.raises(ProfileError, match=match):
            parse_plan_samples(text)
    with pytest.raises(ProfileError, match="global batch 6 does not split over 2 rank"):
        check_samples_fit([PlanSample(2, 1, ExecPlan(grad_accum=2))], 6)


# -- heartbeats ----------------------------------------------------------------------------


def beat(t: object, step: int, samples: int, **extra: object) -> dict[str, object]:
    return {"event": "heartbeat", "time": t, "step": step, "samples": samples, **extra}


def test_throughput_skips_the_warmup_and_ignores_what_is_not_a_heartbeat() -> None:
    records = [
        {"event": "start", "time": 0.0},
        beat(1.0, 1, 16),  # warm-up: not measured
        beat(3.0, 11, 176),
        "garbage",
        beat("x", 12, 192),
        beat(5.0, 21, 336),
        beat(7.0, 31, 496),
    ]
    rate = throughput(records, warmup=1)
    assert rate is not None
    assert rate.samples_per_s == pytest.approx((496 - 176) / 4) and rate.steps_per_s == pytest.approx(5)
    assert rate.beats == 3 and rate.window_s == 4.0 and rate.samples_per_step == pytest.approx(16)


def test_a_restart_in_the_same_log_starts_the_count_over_and_too_few_beats_give_none() -> None:
    records = [beat(1, 5, 50), beat(2, 10, 100), beat(3, 1, 10), beat(4, 2, 20), beat(5, 4, 40)]
    rate = throughput(records, warmup=0)
    assert rate is not None and rate.samples_per_s == pytest.approx(15)
    assert throughput([beat(1, 1, 1), beat(2, 2, 2)], warmup=1) is None
    assert throughput([beat(1, 1, 1), beat(2, 1, 1)], warmup=0) is None  # no progress


# -- what is written -------------------------------------------------------------------------


def result(kind: str, cpus: int, samples: float, steps: float, **partner: float) -> RunResult:
    return RunResult(kind, cpus, samples, steps, beats=5, window_s=10.0, wall_s=20.0, **partner)


def test_the_document_carries_the_searched_curve_and_the_pairs_and_reads_back() -> None:
    request = Request(cpus=(1, 2, 3, 4), pairs=("example:text",), pair_cpus=2)
    runs = {
        "cpu-4": result("cpu", 4, 64.0, 2.0),
        "cpu-1": result("cpu", 1, 16.0, 0.5),
        "cpu-2": result("cpu", 2, 32.0, 1.0),
        "cpu-3": result("cpu", 3, 48.0, 1.5),
        "solo-example:text-2": result("solo", 2, 20.0, 1.25),
        "pair-example:text-2": result(
            "pair", 2, 24.0, 0.75, partner_samples_per_s=10.0, partner_steps_per_s=0.625
        ),
    }
    cache = CacheSpec(dataset_gb=10.0, sample_kb=100.0, storage_mb_per_s=50.0, reference=(2.0, 8.0))
    doc = profile_document("img", request, runs, cache, task="image", partner_models={"example:text": "text"})
    entry = doc["models"]["img"]
    assert entry["source"] == "profiled" and entry["batch_size"] == 32 and entry["task"] == "image"
    assert entry["optimistic"]["cpu_samples_per_s"] == {"1": 16.0, "2": 32.0, "3": 48.0, "4": 64.0}
    assert entry["ideal_cpus_per_gpu"] == 4
    assert entry["colocation"] == [
        {"with": "text", "gpu_type": "cpu", "num_gpus": 1, "steps_per_s": 0.75, "with_steps_per_s": 0.625}
    ]
    profile = profiles_from_document(json.loads(json.dumps(doc)))["img"]
    assert profile.provenance == {"sensitivity": "profiled", "colocation": "profiled"}
    m = profile.sensitivity
    assert m is not None and m.at(4.0, 8.0) == pytest.approx(2 * m.at(2.0, 8.0))
    # Together vs alone: 24/32 for the job, 10/20 for its partner.
    assert slowdowns(request, runs) == {"example:text": {"self": 0.75, "partner": 0.5}}


def test_a_document_needs_a_measured_point() -> None:
    with pytest.raises(ProfileError, match="no CPU measurement"):
        profile_document("x", Request(cpus=(1,)), {}, CacheSpec(1.0, 1.0, 1.0))


def test_plan_samples_become_perfmodel_rows_and_the_fit_reproduces_them() -> None:
    # Times from Rubick's model fitted on the bundled samples, for a GPT-2-sized shape: a refit
    # on seven of them must give them back (the pipeline loses nothing on the way).
    shape = ModelShape(name="toy", params=124e6, seq_len=512, hidden=768, layers=12)
    truth = builtin_rubick_fit()
    samples = default_plan_samples(4, offload=True)
    runs = {}
    for s in samples:
        query = make_query(shape, s.ranks, 32, s.plan, nodes=1, cpus_per_gpu=s.threads)
        t = truth.iteration_time_s(query)
        assert t is not None
        runs[f"plan-{s.label}"] = result("plan", s.cpus, 32 / t, 1 / t)
    rows = sample_rows(shape, samples, runs, 32)
    assert len(rows) == 7 and {r["offload_optimizer"] for r in rows} == {"0", "1"}
    fitted, document = fit_samples(samples_csv(rows), "samples.csv")
    assert document["format"] == "mosaic-perfmodel/1" and document["fit"]["samples"] == 7
    assert fitted.rmsle is not None and fitted.rmsle < 0.05


def test_state_round_trips_and_refuses_another_profile() -> None:
    state = State({"target": {"example": "a"}, "request": {"cpus": [1, 2]}}).with_run(
        "pair-x-1", result("pair", 1, 3.0, 1.0, partner_samples_per_s=2.0, partner_steps_per_s=0.5)
    )
    back = state_from_json(json.dumps(state.to_json()), "state.json")
    assert back == state and back.elapsed_s == 20.0
    with pytest.raises(ProfileError, match=r"state.json: this state is from another profile \(request"):
        check_identity(back, {"target": {"example": "a"}, "request": {"cpus": [1, 4]}}, "state.json")
    with pytest.raises(ProfileError, match=r"runs\.cpu-1"):
        state_from_json({"format": "mosaic-profile-state/1", "identity": {}, "runs": {"cpu-1": {}}}, "s")
