"""The Rubick artifact simulator's throughput rule (profiles/perfmodel/rubick_artifact.py)."""

import math

import pytest

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan
from profiles.perfmodel.rubick_artifact import (
    ArtifactRow,
    ArtifactTable,
    artifact_label,
    artifact_time,
    builtin_artifact_tables,
    parse_artifact_placements,
    rotation_code,
)
from profiles.perfmodel.rubick_measured import MODELS, builtin_rubick_measured

T = builtin_artifact_tables()

# Times linear in (nodes, GPUs): nodes + GPUs / 4, so any triangulation interpolates the same.
# Placement 8 has three rows, 3.5, 2.5 and 3.0: the interpolation reads their mean, 3.
LINEAR = ArtifactTable.of(
    [
        ArtifactRow("ga", "4", 2.0),
        ArtifactRow("gc", "8", 3.5),
        ArtifactRow("ga", "8", 2.5),
        ArtifactRow("ga", "8", 3.0),  # a second ga row of the placement: the first one answers
        ArtifactRow("ga", "44", 4.0),
        ArtifactRow("ga", "88", 6.0),
        ArtifactRow("ga", "444", 6.0),
        ArtifactRow("ga", "888", 9.0),
    ]
)


def test_the_bundled_tables_hold_the_seven_models():
    assert set(T) == set(MODELS)
    assert sum(len(t.rows) for t in T.values()) == 512
    assert [m for m, t in T.items() if t.numeric_plans] == ["llama30"]


def test_a_measured_row_answers_for_its_plan_and_equals_mosaics_measurement():
    time_s, how = artifact_time(T["bert"], (4, 4), "ga")
    assert (time_s, how) == (0.210015789474, "measured")
    mosaic = builtin_rubick_measured().time_s("bert", ExecPlan(), (4, 4), 32)
    assert mosaic is not None and mosaic.how == "measured" and mosaic.time_s == pytest.approx(time_s)
    assert artifact_time(LINEAR, (8,), "gc") == (3.5, "measured")


def test_an_unmeasured_plan_takes_the_placements_ga_row():
    # t5's ZeRO-1 was never measured: no label, the ga row of the placement (0.32 s), where
    # Mosaic scales the fit from the measured ZeRO-2 time (0.24 s).
    assert artifact_label(ExecPlan(dp=8, zero_stage=1)) is None
    ga = artifact_time(T["t5"], (8,), None)
    assert ga == (artifact_time(T["t5"], (8,), "ga")[0], "ga")
    assert artifact_time(T["t5"], (8,), "zero-dp")[0] < ga[0]
    # A label with no row at a measured placement: the first ga row, not the interpolation.
    assert artifact_time(LINEAR, (8,), "zero-dp") == (2.5, "ga")


def test_a_placement_is_its_smallest_rotation_in_node_order():
    assert rotation_code((2, 1, 1)) == rotation_code((1, 2, 1)) == "112"
    assert rotation_code((1, 0, 2)) == "12"
    assert rotation_code((3, 3, 2)) == "233"
    assert artifact_time(T["t5"], (2, 1, 1), "ga") == artifact_time(T["t5"], (1, 2, 1), "ga")
    assert artifact_time(T["t5"], (1, 1, 2), "ga")[1] == "measured"


def test_an_unmeasured_placement_is_interpolated_over_all_plans_by_nodes_and_gpus():
    # (6, 6): 2 nodes, 12 GPUs, inside the measured points' hull: 2 + 12 / 4.
    time_s, how = artifact_time(LINEAR, (6, 6), "ga")
    assert how == "interpolated" and time_s == pytest.approx(5.0)


def test_outside_the_measured_points_the_answer_is_nan():
    # 1 node, 2 GPUs: below the smallest measured count.
    time_s, how = artifact_time(LINEAR, (2,), "ga")
    assert how == "outside" and math.isnan(time_s)
    # LLaMA-30B packed on 3 x 8: its job in the artifact would fail.
    time_s, how = artifact_time(T["llama30"], (8, 8, 8), "641")
    assert how == "outside" and math.isnan(time_s)


def test_a_table_of_numeric_labels_never_matches_a_text_label():
    numeric = ArtifactTable.of(
        [
            ArtifactRow("344", "888888", 2.0),
            ArtifactRow("642", "888888", 4.0),
            ArtifactRow("444", "88", 1.0),
            ArtifactRow("114", "4", 0.5),
        ]
    )
    assert numeric.numeric_plans
    # The label's row is there, but the mean of the placement's nodes and GPUs answers.
    assert artifact_time(numeric, (8,) * 6, "344") == (pytest.approx(3.0), "interpolated")
    assert artifact_time(numeric, (8,) * 6, "ga")[1] == "interpolated"
    # The bundled LLaMA-30B: 2.53 s for plan 344 on 6 x 8, whose row measured 2.23 s.
    time_s, how = artifact_time(T["llama30"], (8,) * 6, artifact_label(ExecPlan(dp=4, tp=4, pp=3)))
    assert how == "interpolated" and time_s == pytest.approx(2.5335, abs=1e-4)
    assert any(r.plan == "344" and r.placement == "888888" and r.time_s < 2.3 for r in T["llama30"].rows)


def test_labels_of_plans():
    assert artifact_label(ExecPlan(dp=8)) == "ga"
    assert artifact_label(ExecPlan(dp=8, activation_checkpointing=True)) == "gc"
    assert artifact_label(ExecPlan(dp=8, zero_stage=2)) == "zero-dp"
    assert artifact_label(ExecPlan(dp=8, zero_stage=2, offload_optimizer=True)) == "zero-offload"
    assert artifact_label(ExecPlan(dp=4, tp=4, pp=3)) == "344"
    assert artifact_label(ExecPlan(dp=16, tp=2, pp=2)) is None  # no three-digit code
    assert artifact_label(ExecPlan(dp=8, zero_stage=3)) is None


def test_the_artifacts_own_file_reads_as_its_table():
    text = "exec_plan,placement,iter_time\n344,888888,2.2\n642,888888,2.8\n444,88,1\n114,4,0.5\n"
    table = parse_artifact_placements(text, "placements.csv")
    assert table.numeric_plans and [r.plan for r in table.rows] == ["344", "642", "444", "114"]
    assert artifact_time(table, (8,) * 6, "344") == (pytest.approx(2.5), "interpolated")
    with pytest.raises(InputError, match="span no triangle"):
        parse_artifact_placements("exec_plan,placement,iter_time\nga,8,1\nga,88,2\n", "placements.csv")
    with pytest.raises(InputError, match=r"placements\.csv:1: missing column"):
        parse_artifact_placements("plan,placement,iter_time\n", "placements.csv")
    with pytest.raises(InputError, match=r"placements\.csv:2: column 'placement'"):
        parse_artifact_placements("exec_plan,placement,iter_time\nga,8x,1\n", "placements.csv")
