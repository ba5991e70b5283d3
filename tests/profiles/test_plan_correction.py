"""Observed iteration times correct Rubick's plan pricer near what was measured."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.execplan import ExecPlan, resolve
from planner.core.model import Job
from planner.policies.crius.cells import MeasuredCells, corrected_cells
from planner.policies.crius.policy import CriusAllocation
from planner.policies.rubick.policy import book_for, shared_book
from planner.registry import StageContext
from profiles.observed import ObservedPoint, Shape
from profiles.perfmodel.csvio import parse_table
from profiles.plan_correction import Config, CorrectedPricer, correction, plan_times
from profiles.plan_pricing import _DATA, builtin_perfmodel, builtin_pricer
from profiles.schema import plan_key
from profiles.store import ProfileStore

DP4 = resolve(ExecPlan(), 4, 16)
DP8 = resolve(ExecPlan(), 8, 16)
ZERO4 = resolve(ExecPlan(zero_stage=2), 4, 16)
ZERO8 = resolve(ExecPlan(zero_stage=2), 8, 16)


def config(plan: ExecPlan, nodes: int = 1) -> Config:
    return Config(plan, plan.world_size, nodes)


def observed(
    model: str, plan: ExecPlan, batch: int, iter_time_s: float, nodes: int | None = 1
) -> ObservedPoint:
    gpus = plan.world_size
    shape = Shape("a800", gpus, batch, plan_key({"zero_stage": plan.zero_stage}), nodes)
    return ObservedPoint(model, shape, 8.0, 100.0, batch / iter_time_s / gpus, 0.0, job_id="1")


def test_without_observations_nothing_changes_and_an_observed_configuration_is_what_was_measured() -> None:
    assert correction([], config(DP4)) == 1.0
    assert correction([(config(DP4), 1.5), (config(DP4), 1.3), (config(DP4), 2.0)], config(DP4)) == 1.5


def test_a_near_configuration_moves_more_than_a_far_one_and_one_far_observation_barely_moves_it() -> None:
    seen = [(config(DP4), 2.0)]
    near = correction(seen, config(DP8))  # twice the GPUs, same strategy, one node
    farther = correction(seen, Config(ZERO4, 4, 2))  # another strategy on two nodes
    far = correction(seen, Config(ZERO8, 8, 2))  # and twice the GPUs
    assert 2.0 > near > farther > far > 1.0
    assert far < 1.1


@given(
    st.lists(
        st.tuples(st.sampled_from([DP4, DP8, ZERO4]), st.sampled_from([1, 2]), st.floats(0.2, 5.0)),
        max_size=6,
    ),
    st.sampled_from([DP4, DP8, ZERO4]),
    st.sampled_from([1, 2]),
)
def test_a_correction_lies_between_one_and_the_observed_ratios(observations, plan, nodes) -> None:
    seen = [(config(p, n), r) for p, n, r in observations]
    factor = correction(seen, config(plan, nodes))
    ratios = [r for _, r in seen] + [1.0]
    assert min(ratios) - 1e-9 <= factor <= max(ratios) + 1e-9


def test_heartbeat_rates_become_iteration_times_of_priced_models_only() -> None:
    pricer = builtin_pricer()
    points = [
        observed("t5", DP4, 16, 0.8),
        observed("resnet50", DP4, 16, 0.8),  # not a model Rubick prices
        observed("t5", DP4, 16, 0.8, nodes=None),  # recorded before nodes were: no configuration
    ]
    (time,) = plan_times(points, pricer)
    assert time.model == "t5" and time.config == Config(DP4, 4, 1, 8.0)
    assert time.iter_time_s == pytest.approx(0.8)


def test_the_corrected_pricer_answers_the_measured_time_where_it_was_measured() -> None:
    base = builtin_pricer()
    (predicted,) = base.iteration_times("t5", [(DP4, 1, None)])
    assert predicted is not None
    times = plan_times([observed("t5", DP4, 16, 2 * predicted)], base)
    pricer = CorrectedPricer(base.perf, base.models, base.gpu_mem_gb, observed=times)
    at, near, other = pricer.iteration_times("t5", [(DP4, 1, None), (DP8, 1, None), (ZERO4, 1, None)])
    assert at == pytest.approx(2 * predicted)
    (base_near,) = base.iteration_times("t5", [(DP8, 1, None)])
    assert base_near is not None and near is not None and near > base_near
    assert pricer.iteration_times("bert", [(DP4, 1, None)]) == base.iteration_times("bert", [(DP4, 1, None)])
    assert other is not None


def test_the_rubick_stages_price_with_what_running_jobs_measured() -> None:
    assert book_for(ProfileStore.builtin()) is shared_book()
    base = builtin_pricer()
    (predicted,) = base.iteration_times("t5", [(DP4, 1, None)])
    assert predicted is not None
    store = ProfileStore.builtin().with_observations([observed("t5", DP4, 16, 3 * predicted)])
    book = book_for(store)
    assert book is not shared_book() and book is book_for(store)  # one memo per set of observations
    assert book.pricer.iteration_times("t5", [(DP4, 1, None)]) == [pytest.approx(3 * predicted)]


def test_on_rubicks_validation_points_the_held_out_error_falls_as_a_job_runs() -> None:
    # T5 (the model the fit prices worst without forward times): its 16 measured points, run
    # in 10 random orders; after k observations, the error on the points not yet observed.
    rows = parse_table((_DATA / "validation.csv").read_text(), "validation.csv", require_time=True).rows
    t5 = [r for r in rows if r.query.model.name == "t5"]
    predicted = builtin_perfmodel().predict_many([r.query for r in t5], [None] * len(t5))
    points = [
        (Config(r.query.plan, r.query.plan.world_size, r.query.nodes, r.query.cpus_per_gpu), r.iter_time_s, p)
        for r, p in zip(t5, predicted, strict=True)
    ]
    errors = []
    for k in (0, 2, 5):
        per_order = []
        for seed in range(10):
            order = random.Random(seed).sample(points, len(points))
            seen = [(c, m / p) for c, m, p in order[:k]]
            per_order.append(statistics.mean(abs(p * correction(seen, c) - m) / m for c, m, p in order[k:]))
        errors.append(statistics.mean(per_order))
    assert errors[0] > 0.2  # the fit alone: about 32 % off on T5
    assert errors[2] < errors[1] < errors[0]
    assert not math.isnan(errors[2])
    assert json.dumps(errors)  # plain floats


def test_crius_cells_are_corrected_by_the_type_and_count_a_job_measured() -> None:
    # wide_resnet_1B at a global batch of 256 in Crius's table: 10.27 s per iteration on 4 a100.
    # A job measures twice that on 4 a100 (another cluster's hardware).
    table = MeasuredCells()
    job = Job(id="1", num_gpus=4, model="wide_resnet_1B", submit_time_s=0.0, batch_size=256)
    table_time = {
        (t, n): table.best_cell(job, t, n).iteration_time_s for t in ("a100", "v100") for n in (2, 4)
    }
    assert table_time[("a100", 4)] == pytest.approx(10.27, rel=1e-3)
    rate = 256 / (2 * table_time[("a100", 4)]) / 4
    point = ObservedPoint("wide_resnet_1B", Shape("a100", 4, 256, None, 1), 4.0, 16.0, rate, 0.0, job_id="1")
    assert corrected_cells(table, []) is table
    cells = corrected_cells(table, [point])
    got = {k: cells.best_cell(job, *k).iteration_time_s / v for k, v in table_time.items()}
    assert got[("a100", 4)] == pytest.approx(2.0)  # what was measured
    assert 2.0 > got[("a100", 2)] > got[("v100", 2)] > 1.0  # nearer Cells move more
    assert got[("v100", 4)] == pytest.approx(got[("a100", 2)])  # one step away, either way
    other = Job(id="2", num_gpus=4, model="bert_760M", submit_time_s=0.0, batch_size=256)
    assert cells.best_cell(other, "a100", 4) == table.best_cell(other, "a100", 4)
    # The stage is built on the corrected Cells when the controller's store carries points.
    stage = CriusAllocation.from_options({"estimate": "measured"}, StageContext(ProfileStore.builtin()))
    assert isinstance(stage.cells, MeasuredCells)
    store = ProfileStore.builtin().with_observations([point])
    stage = CriusAllocation.from_options({"estimate": "measured"}, StageContext(store))
    assert stage.cells.best_cell(job, "a100", 4).iteration_time_s == pytest.approx(
        2 * table_time[("a100", 4)]
    )
