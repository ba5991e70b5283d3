"""Crius Cells (§4-6): candidates, the measured oracle and the agile estimate behind CellModel."""

from __future__ import annotations

import pytest

from planner.execplan import plan_from_mapping, resolve
from planner.model import Job
from planner.policies.crius import MeasuredCells, candidate_counts, candidate_types, stage_choices
from planner.policies.crius.cell import CellModel
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
