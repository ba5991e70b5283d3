"""Diffing plans into actions and the scontrol fields of a start (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.core.model import Assignment
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.controller.rounddiff import Kind, diff, infeasible, mem_mb_per_node, start_fields
from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.fixture(scope="module")
def obs():
    return build_observation(
        2e9,
        parse_squeue_json((DATA / "squeue.json").read_text()),
        parse_sinfo_json((DATA / "sinfo.json").read_text()),
        {},
        ControllerConfig(),
    )


def _a(gpus, cpus=4, mem_gb=8.0, plan=None):
    return Assignment(gpus=tuple(gpus), cpus=cpus, mem_gb=mem_gb, plan=plan)


RUNNING_1 = _a([("n1", 1), ("n1", 2)])  # job 1 as Slurm runs it


def test_unchanged_plan_gives_no_action(obs):
    assert diff(obs, {"1": RUNNING_1}, 1) == []


def test_renumbering_gpus_on_the_same_node_is_not_a_relaunch(obs):
    # Slurm picks indices inside a node; only the count per node matters.
    assert diff(obs, {"1": _a([("n1", 0), ("n1", 3)])}, 1) == []


def test_absent_running_job_is_stopped(obs):
    actions = diff(obs, {}, 7)
    assert [(a.kind, a.job_id, a.request_id, a.reason) for a in actions if a.job_id == "1"] == [
        (Kind.STOP, "1", "r7-stop-1", "preempted")
    ]


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (_a([("n2", 0), ("n2", 1)]), "moved"),
        (_a([("n1", 1)]), "resized"),
        (_a([("n1", 1), ("n1", 2)], cpus=8), "reshaped"),
        (_a([("n1", 1), ("n1", 2)], mem_gb=16.0), "reshaped"),
        (_a([("n1", 1), ("n1", 2)], plan={"zero_stage": 2}), "reshaped"),
    ],
)
def test_changed_resources_are_a_stop_then_a_start(obs, target, reason):
    actions = [a for a in diff(obs, {"1": target}, 3) if a.job_id == "1"]
    assert [(a.kind, a.reason) for a in actions] == [(Kind.STOP, reason), (Kind.START, reason)]
    assert actions[1].assignment == target


def test_pending_jobs_start_when_planned_and_stay_held_otherwise(obs):
    actions = diff(obs, {"1": RUNNING_1, "2": _a([("n2", 0)], cpus=2, mem_gb=4.0)}, 5)
    assert [(a.kind, a.job_id) for a in actions] == [(Kind.START, "2")]  # 3 and 4 are held already


def test_stops_come_before_starts(obs):
    actions = diff(obs, {"2": _a([("n1", 1)])}, 1)
    kinds = [a.kind for a in actions]
    assert kinds.index(Kind.STOP) < kinds.index(Kind.START)


def test_start_fields_set_exactly_the_planned_resources():
    fields = start_fields(_a([("n3", 0), ("n3", 1)], cpus=6, mem_gb=10.0), "mosaic r1-start-9 placed")
    assert fields == {
        "NumNodes": "1-1",
        "Gres": "gpu:2",
        "NumTasks": "1",
        "CPUsPerTask": "6",
        "NumCPUs": "6",
        "MinCPUsNode": "6",
        "MinMemoryNode": "10240",
        "ReqNodeList": "n3",
        "StartTime": "now",
        "AdminComment": "mosaic r1-start-9 placed",
    }


def test_two_node_start_splits_cpus_and_memory_per_node():
    fields = start_fields(_a([("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)], cpus=8, mem_gb=16.0), "x")
    assert (fields["NumNodes"], fields["Gres"], fields["MinCPUsNode"]) == ("2-2", "gpu:2", "4")
    assert (fields["MinMemoryNode"], fields["ReqNodeList"]) == ("8192", "n1,n2")


def test_memory_is_rounded_up_to_whole_mb():
    assert mem_mb_per_node(_a([("n1", 0)], mem_gb=1.0001)) == 1025


def test_infeasible_requests_are_caught_before_any_update(obs):
    assert infeasible(_a([("n1", 0)]), obs.nodes) is None
    assert "not a usable node" in (infeasible(_a([("n4", 0)]), obs.nodes) or "")  # drained
    assert "asked 1 GPUs, 64 CPUs" in (infeasible(_a([("n1", 0)], cpus=64), obs.nodes) or "")
    uneven = _a([("n1", 0), ("n1", 1), ("n2", 0)])
    assert "uneven GPUs per node" in (infeasible(uneven, obs.nodes) or "")


def test_a_job_moved_to_another_gpu_type_gets_that_type_as_its_feature():
    from slurm_plugin.controller.rounddiff import retyped_features

    types = ("a100", "v100")
    assert retyped_features("a100", "v100", types) == "v100"
    assert retyped_features("a100&ib", "v100", types) == "v100&ib"  # other features kept
    assert retyped_features("a100|v100", "v100", types) == "v100"
    assert retyped_features("v100", "v100", types) is None  # already right
    assert retyped_features("ib", "v100", types) is None  # no GPU-type feature: nothing to change
    assert retyped_features("", "v100", types) is None
