import json

import pytest

from planner import plan_round
from planner.core.codec import (
    round_plan_from_json,
    round_plan_to_json,
    snapshot_from_json,
    snapshot_to_json,
)
from planner.core.errors import SnapshotError
from planner.core.model import JobState
from tests.builders import make_job, make_nodes, make_snapshot, running, scheduler


def _doc():
    return {
        "time_s": 100.0,
        "nodes": [{"name": "n1", "gpus": 4, "gpu_type": "a100", "cpus": 32, "mem_gb": 256}],
        "jobs": [
            {
                "id": 7,
                "num_gpus": 2,
                "model": "gpt2",
                "submit_time_s": 1.5,
                "state": "running",
                "attained_gpu_s": 20.0,
                "assignment": {
                    "gpus": [["n1", 0], ["n1", 1]],
                    "cpus": 16,
                    "mem_gb": 128.0,
                    "plan": None,
                    "shares_with": [],
                },
                "future_field": {"ignored": True},
            },
            {
                "id": "j2",
                "num_gpus": 1,
                "model": "bert",
                "submit_time_s": 2,
                "state": "pending",
                "attained_gpu_s": 0,
                "progress": 0.25,
                "tenant": "nlp",
                "guaranteed": True,
                "plan": {"zero_stage": 2},
            },
        ],
    }


def test_snapshot_parses_and_round_trips():
    snap = snapshot_from_json(_doc())
    assert [j.id for j in snap.jobs] == ["7", "j2"]
    first = snap.jobs[0]
    assert first.state is JobState.RUNNING and first.assignment is not None
    assert first.assignment.gpus == (("n1", 0), ("n1", 1))
    assert snap.jobs[1].plan == {"zero_stage": 2} and snap.jobs[1].guaranteed
    again = snapshot_from_json(json.loads(json.dumps(snapshot_to_json(snap))))
    assert again == snap


def _on(gpus, shares_with=()):
    return {"gpus": gpus, "cpus": 4, "mem_gb": 8.0, "plan": None, "shares_with": list(shares_with)}


def test_running_jobs_may_hold_one_gpu_only_when_they_share_it():
    doc = _doc()
    doc["jobs"][1].update(state="running", assignment=_on([["n1", 1]], shares_with=["7"]))
    snapshot = snapshot_from_json(doc)  # j2 names 7: a pair sharing GPU 1
    assert snapshot.jobs[1].assignment.gpus == (("n1", 1),)
    doc["jobs"][1].update(assignment=_on([["n1", 2]]))  # another GPU: nothing to share
    snapshot_from_json(doc)


def test_json_text_is_accepted_and_bad_json_is_named():
    assert snapshot_from_json(json.dumps(_doc())).time_s == 100.0
    with pytest.raises(SnapshotError, match=r"snap\.json: not valid JSON"):
        snapshot_from_json("{", source="snap.json")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["jobs"][1].pop("num_gpus"), r"jobs\[1\] \(job 'j2'\): missing required key 'num_gpus'"),
        (
            lambda d: d["jobs"][1].update(num_gpus="2"),
            r"job 'j2'\): key 'num_gpus': expected an integer >= 1",
        ),
        (lambda d: d["jobs"][1].update(num_gpus=0), r"key 'num_gpus': expected an integer >= 1, got 0"),
        (lambda d: d["jobs"][1].update(state="done"), r"key 'state': expected 'pending' or 'running'"),
        (lambda d: d["jobs"][1].update(progress=1.5), r"key 'progress': expected a number in \[0, 1\]"),
        (lambda d: d["jobs"][0].pop("assignment"), r"job '7'\).assignment: a running job needs"),
        (lambda d: d["jobs"][0]["assignment"].update(gpus=[["n9", 0]]), r"names unknown node 'n9'"),
        (lambda d: d["jobs"][0]["assignment"].update(gpus=[["n1", 4]]), r"node 'n1' has no GPU 4"),
        (lambda d: d["jobs"][0]["assignment"].update(gpus=[["n1", 0], ["n1", 0]]), "same GPU twice"),
        (
            lambda d: d["jobs"][0]["assignment"].update(gpus=["n1:0"]),
            r"entry 0 must be \[node name, GPU index\]",
        ),
        (lambda d: d["jobs"].append(dict(d["jobs"][1])), "duplicate job id 'j2'"),
        (lambda d: d["nodes"][0].update(gpus=-1), r"node 'n1'\): key 'gpus'"),
        (lambda d: d.pop("time_s"), "missing required key 'time_s'"),
        (lambda d: d.update(jobs={}), "key 'jobs': expected a list"),
        (
            lambda d: d["jobs"][1].update(min_gpus="1"),
            r"job 'j2'\): key 'min_gpus': expected an integer >= 1",
        ),
        (lambda d: d["jobs"][1].update(min_gpus=2), r"job 'j2'\): key 'min_gpus': expected an integer in"),
        (
            lambda d: d["jobs"][0].update(max_gpus=1),
            r"job '7'\): key 'max_gpus': expected an integer >= num_gpus 2",
        ),
        (
            lambda d: d["jobs"][1].update(gpu_types="a100"),
            r"job 'j2'\): key 'gpu_types': expected a list of GPU",
        ),
        (
            lambda d: d["jobs"][1].update(gpu_types=["a100", 3]),
            r"key 'gpu_types': expected a list of GPU type",
        ),
        (lambda d: d["jobs"][1].update(gpu_types=["a100", "a100"]), r"key 'gpu_types': lists 'a100' twice"),
        (
            lambda d: d["jobs"][1].update(gpu_type="t4", gpu_types=["a100"]),
            r"job 'j2'\): key 'gpu_types': gpu_type 't4' is not among",
        ),
        (
            lambda d: d["jobs"][1].update(time_limit_s="1h"),
            r"job 'j2'\): key 'time_limit_s': expected a number, got '1h'",
        ),
        (
            lambda d: d["jobs"][1].update(time_limit_s=0),
            r"job 'j2'\): key 'time_limit_s': expected a number > 0",
        ),
        (
            lambda d: d["jobs"][0].update(time_limit_s=-60),
            r"job '7'\): key 'time_limit_s': expected a number > 0",
        ),
        (lambda d: d["jobs"][1].update(time_limit_s=True), r"key 'time_limit_s': expected a number"),
        (  # two running jobs on one GPU that do not share it were planned silently
            lambda d: d["jobs"][1].update(state="running", assignment=_on([["n1", 2], ["n1", 1]])),
            r"snapshot: running jobs '7' and 'j2' both hold GPU 1 of node 'n1' without sharing it",
        ),
    ],
)
def test_malformed_snapshots_name_the_job_and_key(mutate, message):
    doc = _doc()
    mutate(doc)
    with pytest.raises(SnapshotError, match=message):
        snapshot_from_json(doc)


def test_a_nodes_gpu_memory_parses_and_round_trips():
    doc = _doc()
    snap = snapshot_from_json(doc)
    assert snap.nodes[0].gpu_mem_gb is None and "gpu_mem_gb" not in snapshot_to_json(snap)["nodes"][0]
    doc["nodes"][0]["gpu_mem_gb"] = 80
    snap = snapshot_from_json(doc)
    assert snap.nodes[0].gpu_mem_gb == 80.0
    assert snapshot_from_json(snapshot_to_json(snap)) == snap
    doc["nodes"][0]["gpu_mem_gb"] = 0
    with pytest.raises(SnapshotError, match=r"node 'n1'.*key 'gpu_mem_gb': expected a positive number"):
        snapshot_from_json(doc)


def test_time_limit_parses_and_round_trips():
    doc = _doc()
    doc["jobs"][0]["time_limit_s"] = 7200
    doc["jobs"][1]["time_limit_s"] = None  # null: no limit, as absent
    snap = snapshot_from_json(doc)
    assert (snap.jobs[0].time_limit_s, snap.jobs[1].time_limit_s) == (7200.0, None)
    written = snapshot_to_json(snap)["jobs"]
    assert written[0]["time_limit_s"] == 7200.0 and "time_limit_s" not in written[1]
    assert snapshot_from_json(json.loads(json.dumps(snapshot_to_json(snap)))) == snap
    # A policy's state update keeps it.
    assert snap.jobs[0].with_policy_state({"queue": 2}).time_limit_s == 7200.0


def test_elastic_demand_parses_and_round_trips():
    doc = _doc()
    doc["jobs"][1].update(num_gpus=2, min_gpus=1, max_gpus=4, gpu_types=["a100", "v100"])
    snap = snapshot_from_json(doc)
    job = snap.jobs[1]
    assert (job.min_gpus, job.max_gpus, job.gpu_types) == (1, 4, ("a100", "v100"))
    assert job.gpu_range == (1, 4) and job.elastic
    written = snapshot_to_json(snap)["jobs"]
    assert written[1]["gpu_types"] == ["a100", "v100"] and written[1]["max_gpus"] == 4
    assert not {"min_gpus", "max_gpus", "gpu_types"} & set(written[0])  # a rigid job writes none
    assert snapshot_from_json(json.loads(json.dumps(snapshot_to_json(snap)))) == snap


def test_round_plan_round_trips():
    nodes = make_nodes(2)
    jobs = [running(make_job(1, 2), [("n1", 0), ("n1", 1)], 8, 32.0), make_job(2, 4, submit=1.0)]
    plan = plan_round(make_snapshot(nodes, jobs), scheduler("tiresias"))
    document = json.loads(json.dumps(round_plan_to_json(plan)))
    assert set(document) >= {"assignments", "preempted", "migrated", "decision_time_s"}
    assert round_plan_from_json(document) == plan


def test_round_plan_states_each_jobs_count_type_and_plan():
    nodes = [*make_nodes(1, gpu_type="t4", prefix="t"), *make_nodes(1, gpu_type="a100", prefix="a")]
    elastic = make_job(1, 2, min_gpus=1, max_gpus=4, gpu_types=("a100", "v100"), plan={"tp": 2})
    plan = plan_round(make_snapshot(nodes, [elastic, make_job(2, 1, 1.0, gpu_type="t4")]), scheduler("fifo"))
    document = json.loads(json.dumps(round_plan_to_json(plan)))
    chosen = document["assignments"]["1"]
    assert (chosen["num_gpus"], chosen["gpu_type"], chosen["plan"]) == (2, "a100", {"tp": 2})
    assert chosen["gpus"] == [["a1", 0], ["a1", 1]]
    assert (document["assignments"]["2"]["num_gpus"], document["assignments"]["2"]["gpu_type"]) == (1, "t4")
    assert plan.gpu_type_of == {"1": "a100", "2": "t4"}
    assert round_plan_from_json(document) == plan


def test_round_plan_gpu_type_is_null_for_gpus_of_several_types():
    nodes = [
        *make_nodes(1, gpus=2, gpu_type="t4", prefix="t"),
        *make_nodes(1, gpus=2, gpu_type="a100", prefix="a"),
    ]
    job = running(make_job(1, 4), [("t1", 0), ("t1", 1), ("a1", 0), ("a1", 1)], 8, 32.0)
    plan = plan_round(make_snapshot(nodes, [job]), scheduler("fifo", preemptive=False))
    document = round_plan_to_json(plan)
    assert document["assignments"]["1"]["gpu_type"] is None and document["assignments"]["1"]["num_gpus"] == 4
    assert round_plan_from_json(document) == plan
    # A document without the derived keys (an older writer) still reads.
    for a in document["assignments"].values():
        del a["gpu_type"], a["num_gpus"]
    assert round_plan_from_json(document).assignments == plan.assignments


def test_round_plan_rejects_unknown_outcomes():
    with pytest.raises(SnapshotError, match="unknown outcome 'maybe'"):
        round_plan_from_json({"assignments": {}, "reasons": {"1": "maybe"}})
