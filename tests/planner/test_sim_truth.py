"""The simulator's truth option: Rubick's artifact rule for its seven models (SimConfig.truth)."""

import pytest

from planner.core.errors import ConfigError
from planner.core.execplan import plan_from_mapping
from planner.core.model import Assignment
from planner.sim import SimConfig, simulate
from planner.sim.progress import TRUTHS, SpeedModel
from profiles.perfmodel.rubick_artifact import artifact_time, builtin_artifact_tables
from profiles.perfmodel.rubick_measured import builtin_rubick_measured
from tests.builders import make_nodes, profiles, scheduler, trace_job

A800 = make_nodes(6, gpus=8, gpu_type="a800", cpus=96, mem_gb=1600.0)
PLAN_344 = {"dp": 4, "tp": 4, "pp": 3}
ITERATIONS = 100
# LLaMA-30B's plan 344 on 6 x 8 A800s: Mosaic's truth reads its measured row (2.23 s); the
# artifact's table labels it 344 as a number, so its rule answers the interpolation (2.53 s).
MOSAIC_S = builtin_rubick_measured().time_s("llama30", plan_from_mapping(PLAN_344), (8,) * 6, 4).time_s
ARTIFACT_S = artifact_time(builtin_artifact_tables()["llama30"], (8,) * 6, "344")[0]


def llama30(job_id="a", gpus=48, plan=PLAN_344):
    return trace_job(job_id, 0, gpus, ITERATIONS * MOSAIC_S, model="llama30", batch_size=4,
                     iterations=ITERATIONS, gpu_type="a800", plan=plan)  # fmt: skip


def placed(gpus_per_node, nodes=A800):
    gpus = tuple((n.name, i) for n, count in zip(nodes, gpus_per_node, strict=False) for i in range(count))
    return Assignment(gpus, 12 * len(gpus), 200.0 * len(gpus))


def test_the_two_truths_price_a_rubick_model_differently():
    assert pytest.approx(2.5335, abs=1e-4) == ARTIFACT_S and pytest.approx(2.2330, abs=1e-4) == MOSAIC_S
    nodes = {n.name: n for n in A800}
    mosaic = SpeedModel(profiles(), nodes)
    artifact = SpeedModel(profiles(), nodes, truth="rubick-artifact")
    job, where = llama30(), placed((8,) * 6)
    assert mosaic.truth == TRUTHS[0] == "measured"
    assert mosaic.speed(job, where) == pytest.approx(1.0)
    # The trace's time per iteration (Mosaic's measurement) over the artifact's.
    assert artifact.speed(job, where) == pytest.approx(MOSAIC_S / ARTIFACT_S)
    assert artifact.artifact_time_s(job, where) == pytest.approx(ARTIFACT_S)


def test_on_the_artifacts_truth_each_job_runs_at_its_own_rows_time_per_iteration():
    # Two jobs of one model, plan and placement whose trace rows give different times per
    # iteration (Base's llama30-91: 2.662 s for its one iteration, 2.6618 s measured): each
    # runs at its own over the artifact's, the second not at the first's memoised speed.
    artifact = SpeedModel(profiles(), {n.name: n for n in A800}, truth="rubick-artifact")
    where = placed((8,) * 6)
    slower = trace_job("b", 0, 48, 1.1 * ITERATIONS * MOSAIC_S, model="llama30", batch_size=4,
                       iterations=ITERATIONS, gpu_type="a800", plan=PLAN_344)  # fmt: skip
    assert artifact.speed(llama30(), where) == pytest.approx(MOSAIC_S / ARTIFACT_S)
    assert artifact.speed(slower, where) == pytest.approx(1.1 * MOSAIC_S / ARTIFACT_S)
    assert artifact.speed(llama30("c"), where) == pytest.approx(MOSAIC_S / ARTIFACT_S)


def test_where_the_artifact_has_no_time_mosaics_truth_answers():
    nodes = {n.name: n for n in A800}
    mosaic = SpeedModel(profiles(), nodes)
    artifact = SpeedModel(profiles(), nodes, truth="rubick-artifact")
    # LLaMA-30B on 3 x 8 GPUs lies outside the artifact's interpolation (NaN).
    job, where = llama30(gpus=24, plan={"dp": 1, "tp": 4, "pp": 6}), placed((8, 8, 8))
    assert artifact.artifact_time_s(job, where) is None
    assert artifact.speed(job, where) == mosaic.speed(job, where)
    # A model the artifact never measured, and a row without iterations, keep Mosaic's truth.
    other = trace_job("b", 0, 1, 1000, model="resnet50", batch_size=64)
    assert artifact.speed(other, placed((1,))) == mosaic.speed(other, placed((1,)))
    no_iterations = trace_job(
        "c", 0, 48, 500.0, model="llama30", batch_size=4, gpu_type="a800", plan=PLAN_344
    )
    assert artifact.speed(no_iterations, placed((8,) * 6)) == mosaic.speed(no_iterations, placed((8,) * 6))


def test_a_simulation_on_the_artifacts_truth_finishes_the_job_at_the_artifacts_time():
    def finish(**config):
        result = simulate(A800, [llama30()], scheduler("fifo"), SimConfig(**config), profiles=profiles())
        return result.records[0].finish_time_s

    assert finish() == pytest.approx(ITERATIONS * MOSAIC_S)
    assert finish(truth="measured") == finish()
    assert finish(truth="rubick-artifact") == pytest.approx(ITERATIONS * ARTIFACT_S)


def test_an_unknown_truth_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match=r"truth must be one of measured, rubick-artifact, got 'paper'"):
        SimConfig(truth="paper")
    with pytest.raises(ConfigError, match="measured, rubick-artifact"):
        SpeedModel(profiles(), {}, truth="paper")
