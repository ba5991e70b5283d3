"""Crius Cells (§4-6): candidates, the measured oracle and the agile estimate behind CellModel."""

from __future__ import annotations

import time

import pytest

from planner.core.errors import ConfigError
from planner.core.execplan import plan_from_mapping, resolve
from planner.core.model import Job
from planner.policies.crius import AgileCells, MeasuredCells, candidate_counts, candidate_types, stage_choices
from planner.policies.crius.cell import CellModel
from planner.policies.crius.cells import dp_fits
from profiles.perfmodel.crius import builtin_crius


def make_job(model: str = "bert_760M", gpus: int = 4, batch: int | None = 256, **kw: object) -> Job:
    return Job(id="j", num_gpus=gpus, model=model, submit_time_s=0.0, batch_size=batch, **kw)  # type: ignore[arg-type]


# -- candidates (§6.1) -----------------------------------------------------------------


def test_candidate_counts_are_half_same_and_double():
    assert candidate_counts(make_job(gpus=4)) == (2, 4, 8)
    assert candidate_counts(make_job(gpus=1)) == (1, 2)  # no half GPU
    assert candidate_counts(make_job(gpus=3)) == (3, 6)


def test_candidate_counts_respect_the_bounds_the_job_gives():
    assert candidate_counts(make_job(gpus=4, min_gpus=4)) == (4, 8)
    assert candidate_counts(make_job(gpus=4, max_gpus=4)) == (2, 4)
    assert candidate_counts(make_job(gpus=4, min_gpus=4, max_gpus=4)) == (4,)


def test_candidate_types_are_the_accepted_ones_in_cluster_order():
    cluster = ["a100", "v100", "a40", "a10"]
    assert candidate_types(make_job(), cluster) == tuple(cluster)
    assert candidate_types(make_job(gpu_types=("a10", "a100")), cluster) == ("a100", "a10")
    assert candidate_types(make_job(gpu_type="v100"), cluster) == ("v100",)


def test_stage_choices_are_powers_of_two_dividing_the_count():
    assert stage_choices(1) == (1,)
    assert stage_choices(8) == (1, 2, 4, 8)
    assert stage_choices(12) == (1, 2, 4)
    assert stage_choices(6) == (1, 2)


# -- MeasuredCells ---------------------------------------------------------------------


def test_measured_cells_is_a_cell_model():
    model: CellModel = MeasuredCells()
    assert model.best_cell(make_job(), "a100", 2) is not None


def test_measured_cell_is_the_table_value_with_a_dp_plan_that_resolves():
    table = builtin_crius()
    cell = MeasuredCells().best_cell(make_job("bert_760M", batch=256), "a10", 4)
    assert cell is not None
    assert cell.iteration_time_s == table.best_time_s("bert_760M", 256, "a10", 4)
    assert cell.throughput(256) == pytest.approx(256 / 10.502463340759277)
    plan = plan_from_mapping(cell.plan)
    assert resolve(plan, 4, 256).dp == 4
    assert plan.tp == plan.pp == 1


def test_measured_cells_report_oom_and_unmeasured_as_not_fitting():
    cells = MeasuredCells()
    job = make_job("bert_2.6B", batch=512)
    assert cells.best_cell(job, "a100", 4) is None  # measured -1 (out of memory)
    listed = {(c.gpu_type, c.gpus): c for c in cells.cells(job, ["a100"], [4, 8])}
    assert not listed[("a100", 4)].fits
    assert listed[("a100", 8)].fits
    assert cells.best_cell(job, "a100", 1) is None  # not measured


def test_measured_cells_do_not_know_other_models_or_jobs_without_a_batch():
    cells = MeasuredCells()
    assert cells.best_cell(make_job("resnet50"), "a100", 2) is None
    assert cells.cells(make_job("resnet50"), ["a100"], [2]) == []
    assert cells.best_cell(make_job(batch=None), "a100", 2) is None


def test_measured_cells_match_model_names_loosely():
    cells = MeasuredCells()
    a = cells.best_cell(make_job("bert__760M"), "a100", 2)
    b = cells.best_cell(make_job("BERT-760M"), "A100", 2)
    assert a is not None and a == b


# -- AgileCells --------------------------------------------------------------------------

_AGILE: list[AgileCells] = []


def agile() -> AgileCells:
    if not _AGILE:
        _AGILE.append(AgileCells())
    return _AGILE[0]


def test_agile_cells_is_a_cell_model_and_best_cell_is_the_fastest_stage_count():
    model: CellModel = agile()
    job = make_job("bert_1.3B", gpus=4, batch=256)
    best = model.best_cell(job, "a40", 8)
    listed = [c for c in model.cells(job, ["a40"], [8]) if c.fits]
    assert best is not None and best in listed
    assert best.iteration_time_s == min(c.iteration_time_s for c in listed)  # type: ignore[type-var]
    assert {c.stages for c in model.cells(job, ["a40"], [8])} == set(stage_choices(8))


@pytest.mark.parametrize(
    ("model", "batch"),
    [("bert_760M", 128), ("moe_2.4B", 1024), ("wide_resnet_6.8B", 512), ("bert_6.7B", 256)],
)
def test_every_agile_cell_plan_resolves_for_its_gpus_and_the_global_batch(model: str, batch: int):
    job = make_job(model, gpus=8, batch=batch)
    cells = agile().cells(job, ["a100", "v100", "a40", "a10"], candidate_counts(job))
    assert len(cells) == 4 * sum(len(stage_choices(n)) for n in candidate_counts(job))
    for cell in cells:
        if not cell.fits:
            assert dict(cell.plan) == {}
            continue
        plan = resolve(plan_from_mapping(cell.plan), cell.gpus, batch)
        assert plan.pp == cell.stages
        assert plan.world_size == cell.gpus
        assert plan.global_batch == batch


def test_agile_cells_report_cells_that_do_not_fit():
    job = make_job("bert_6.7B", gpus=1, batch=128)
    assert agile().best_cell(job, "a10", 1) is None  # 48 GB of model states, one 24 GB GPU
    (cell,) = agile().cells(job, ["a10"], [1])
    assert not cell.fits and cell.iteration_time_s is None and cell.throughput(128) == 0.0


def test_agile_cells_do_not_know_other_models_or_jobs_without_a_batch():
    assert agile().best_cell(make_job("resnet50"), "a100", 2) is None
    assert agile().cells(make_job("resnet50"), ["a100"], [2]) == []
    assert agile().best_cell(make_job(batch=None), "a100", 2) is None
    assert agile().knows("moe__2.4B") and not agile().knows("resnet50")


def test_agile_cell_plan_is_read_only_and_cached_calls_are_fast():
    job = make_job("moe_1.3B", gpus=4, batch=512)
    cell = agile().best_cell(job, "a100", 4)
    assert cell is not None and agile().best_cell(job, "a100", 4) is cell
    with pytest.raises(TypeError):
        cell.plan["dp"] = 1  # type: ignore[index]
    repeat = 2000
    started = time.perf_counter()
    for _ in range(repeat):
        agile().best_cell(job, "a100", 4)
    # Memoised: well under a millisecond per call (about 10 us here; an uncached call takes ms).
    assert (time.perf_counter() - started) / repeat < 5e-4


def test_agile_and_measured_cells_agree_on_the_type_ranking_of_a_clear_case():
    # bert_760M at batch 128 on 2 GPUs: measured A100 3.4 s < V100 7.0 s < A40 7.5 s < A10 9.1 s;
    # the estimate (which never reads these four points) puts A100 first and A10 last.
    job = make_job("bert_760M", gpus=2, batch=128)
    est = {t: agile().best_cell(job, t, 2) for t in ("a100", "v100", "a40", "a10")}
    times = {t: c.iteration_time_s for t, c in est.items() if c is not None}
    assert len(times) == 4
    assert min(times, key=times.__getitem__) == "a100" and max(times, key=times.__getitem__) == "a10"


def test_dp_fits_is_the_artifacts_rule_on_the_measured_dp_memory():
    # bert_760M at batch 256 on 2 GPUs needs 17.925 GB per replica: 1.2 x 17.925 = 21.5 GB
    # fits 0.8 x 40 = 32 (A100) but not 0.8 x 24 = 19.2 (A10).
    assert dp_fits("bert_760M", 256, "a100", 2)
    assert not dp_fits("bert_760M", 256, "a10", 2)
    assert not dp_fits("bert_760M", 256, "a100", 1)  # -1: not available
    assert not dp_fits("bert_6.7B", 256, "a100", 8)  # no DP-only run fits at any count
    assert not dp_fits("bert_760M", 256, "h100", 2)


def test_measured_cells_plan_a_model_that_dp_cannot_hold_with_the_agile_plan():
    job = make_job("bert_6.7B", gpus=8, batch=256)
    cell = MeasuredCells().best_cell(job, "a100", 8)
    assert cell is not None
    assert cell.iteration_time_s == builtin_crius().best_time_s("bert_6.7B", 256, "a100", 8)
    plan = resolve(plan_from_mapping(cell.plan), 8, 256)
    assert plan.pp == cell.stages and plan.tp * plan.pp > 1  # not plain DP
    dp = MeasuredCells(plans="dp").best_cell(job, "a100", 8)
    assert dp is not None and plan_from_mapping(dp.plan).tp * plan_from_mapping(dp.plan).pp == 1
    with pytest.raises(ConfigError, match="plans must be"):
        MeasuredCells(plans="best")
