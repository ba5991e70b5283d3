"""Slurm's view -> the planner's Snapshot, on real captured output."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner import plan_round
from planner.config import build_scheduler, preset
from planner.core.codec import snapshot_from_json, snapshot_to_json
from planner.core.model import JobState
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.observe import (
    OUTSIDE_PREFIX,
    SUBMITTED_FEATURES,
    _managed_job,
    build_observation,
    first_sight_meta,
)
from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json
from slurm_plugin.store import JobRecord

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
CONFIG = ControllerConfig(partitions=("gpu",))


@pytest.fixture(scope="module")
def slurm():
    return (
        parse_squeue_json((DATA / "squeue.json").read_text()),
        parse_sinfo_json((DATA / "sinfo.json").read_text()),
    )


def _record(job_id, **kw):
    values = dict(
        job_id=job_id, num_gpus=2, meta={}, attained_gpu_s=0.0, progress=None, accounted_until_s=None,
        pending_since_s=None, policy_state=None, plan_version=0, first_seen_s=0.0, finished_s=None,
    )  # fmt: skip
    values.update(kw)
    return JobRecord(**values)


def test_drained_and_down_nodes_are_not_capacity(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    assert [(n.name, n.gpus, n.gpu_type) for n in obs.snapshot.nodes] == [
        ("n1", 4, "a100"),
        ("n2", 4, "a100"),
    ]
    assert set(obs.nodes) == {"n1", "n2"}


def test_running_job_carries_its_real_allocation(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    job = next(j for j in obs.snapshot.jobs if j.id == "1")
    assert job.state is JobState.RUNNING and job.model == "unknown"
    assert job.assignment is not None
    assert job.assignment.gpus == (("n1", 1), ("n1", 2))
    assert (job.assignment.cpus, job.assignment.mem_gb) == (4, 8.0)


def test_a_job_whose_gpu_indices_slurm_has_not_named_takes_gpus_no_other_job_holds(slurm):
    # Job 1 holds 2 GPUs of n1, where job 5 (outside Mosaic) holds GPU 0. Without its
    # gres_detail, assuming the first indices would put both on GPU 0.
    jobs, nodes = slurm
    unnamed = [replace(j, gpu_indices=()) if j.id == "1" else j for j in jobs]
    obs = build_observation(2e9, unnamed, nodes, {}, CONFIG)
    job = next(j for j in obs.snapshot.jobs if j.id == "1")
    assert job.assignment is not None and job.assignment.gpus == (("n1", 1), ("n1", 2))
    held = [g for j in obs.snapshot.jobs if j.assignment is not None for g in j.assignment.gpus]
    assert len(held) == len(set(held))


def test_outside_job_is_pinned_occupied_capacity(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    ghost = next(j for j in obs.snapshot.jobs if j.id == OUTSIDE_PREFIX + "5")
    assert ghost.is_running and not ghost.preemptible and ghost.guaranteed
    assert ghost.assignment.gpus == (("n1", 0),)  # type: ignore[union-attr]
    assert "5" not in obs.managed


def test_job_running_on_a_drained_node_is_left_to_finish(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    pinned = next(j for j in obs.snapshot.jobs if j.id == OUTSIDE_PREFIX + "7")
    assert pinned.assignment.gpus == (("n2", 1),)  # type: ignore[union-attr]  # n4 is drained
    assert "7" not in obs.managed


def test_pending_held_requeued_and_bad_jobs_are_planned_and_completing_is_skipped(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    assert sorted(obs.managed) == ["1", "2", "3", "4"]
    by_id = {j.id: j for j in obs.snapshot.jobs}
    assert by_id["3"].gpu_type == "v100"  # from its -C v100 constraint
    assert by_id["3"].restarts == 1 and by_id["4"].num_gpus == 5
    assert "6" not in by_id  # COMPLETING: decided next tick


def test_store_records_override_the_request_and_supply_service(slurm):
    records = {
        "2": _record("2", num_gpus=1, meta={"model": "resnet50", "duration_s": 100.0, "tenant": "t"},
                     attained_gpu_s=30.0, progress=0.5, pending_since_s=1.5e9, policy_state={"queue": 1}),
    }  # fmt: skip
    obs = build_observation(2e9, *slurm, records, CONFIG)
    job = next(j for j in obs.snapshot.jobs if j.id == "2")
    assert (job.model, job.attained_gpu_s, job.progress, job.remaining_s) == ("resnet50", 30.0, 0.5, 50.0)
    assert job.tenant == "t" and job.pending_since_s == 1.5e9 and job.policy_state == {"queue": 1}


def test_a_job_moved_to_another_gpu_type_keeps_the_type_it_asked_for(slurm):
    # Job 3 was submitted with -C v100 (recorded at first sight); the controller moved it to
    # a100 by rewriting its Features. Its reference type stays v100, as in the simulator.
    squeue, sinfo = slurm
    moved = [replace(sj, features="a100") if sj.id == "3" else sj for sj in squeue]
    first = first_sight_meta(next(sj for sj in squeue if sj.id == "3"))
    assert first[SUBMITTED_FEATURES] == "v100"
    records = {"3": _record("3", meta=first)}
    jobs = {j.id: j for j in build_observation(2e9, moved, sinfo, records, CONFIG).snapshot.jobs}
    assert jobs["3"].gpu_type == "v100"
    # Without the record (first seen before it was kept) the constraint Slurm shows now.
    jobs = {j.id: j for j in build_observation(2e9, moved, sinfo, {}, CONFIG).snapshot.jobs}
    assert jobs["3"].gpu_type == "a100"


def test_snapshot_round_trips_through_the_json_contract_and_plans(slurm):
    obs = build_observation(2e9, *slurm, {}, CONFIG)
    document = snapshot_to_json(obs.snapshot)
    assert snapshot_from_json(document) == obs.snapshot
    plan = plan_round(obs.snapshot, build_scheduler(preset("las")))
    # Outside capacity is never moved or stopped.
    assert plan.assignments[OUTSIDE_PREFIX + "5"].gpus == (("n1", 0),)
    used = [g for a in plan.assignments.values() for g in a.gpus]
    assert len(used) == len(set(used))


def test_slurm_time_limit_reaches_the_snapshot_in_seconds():
    # squeue.json as captured (Slurm 22.05: time_limit in minutes, null for none), with time
    # limits set: running job 1 --time=90, held job 2 unlimited in Slurm 23.02's shape,
    # held job 3 --time=1-00:00:00 (requeued, with a store record), outside job 5 --time=30.
    document = json.loads((DATA / "squeue.json").read_text())
    limits = {1: 90, 2: {"set": True, "infinite": True, "number": 0}, 3: 1440, 5: 30}
    for raw in document["jobs"]:
        raw["time_limit"] = limits.get(raw["job_id"])
    squeue = parse_squeue_json(json.dumps(document))
    sinfo = parse_sinfo_json((DATA / "sinfo.json").read_text())
    records = {"3": _record("3", num_gpus=1)}
    snapshot = build_observation(2e9, squeue, sinfo, records, CONFIG).snapshot
    jobs = {j.id: j for j in snapshot.jobs}
    assert jobs["1"].is_running and jobs["1"].time_limit_s == 5400.0
    assert jobs["2"].time_limit_s is None and jobs["4"].time_limit_s is None  # infinite; null
    assert jobs["3"].state is JobState.PENDING and jobs["3"].time_limit_s == 86400.0
    assert jobs[OUTSIDE_PREFIX + "5"].time_limit_s == 1800.0
    assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot


def test_unmanaged_partitions_are_configurable(slurm):
    obs = build_observation(2e9, *slurm, {}, ControllerConfig(partitions=("gpu", "other")))
    assert "5" in obs.managed and not any(j.id.startswith(OUTSIDE_PREFIX + "5") for j in obs.snapshot.jobs)


def test_elastic_directives_reach_the_snapshot_and_a_bad_range_leaves_the_job_rigid(caplog):
    from dataclasses import replace

    from slurm_plugin.directives import encode_comment

    squeue = parse_squeue_json((DATA / "squeue.json").read_text())
    pending = next(j for j in squeue if j.state == "PENDING")
    good = replace(pending, comment=encode_comment({"min_gpus": 1, "max_gpus": 8, "gpu_types": ["A100"]}))
    bad = replace(pending, id="99", comment=encode_comment({"min_gpus": 64}))
    obs = build_observation(2e9, [good, bad], parse_sinfo_json((DATA / "sinfo.json").read_text()), {}, CONFIG)
    jobs = {j.id: j for j in obs.snapshot.jobs}
    assert (jobs[good.id].min_gpus, jobs[good.id].max_gpus, jobs[good.id].gpu_types) == (1, 8, ("a100",))
    assert (jobs["99"].min_gpus, jobs["99"].max_gpus, jobs["99"].elastic) == (None, None, False)
    assert "job 99: min_gpus" in caplog.text


def test_pending_jobs_follow_every_change_of_their_inputs(slurm):
    """Pending jobs' planner records are reused between ticks only while nothing they come
    from changed: Slurm's record, the store's record, the config."""
    from dataclasses import replace

    jobs, nodes = slurm
    held = next(j for j in jobs if j.name == "held")
    record = _record(held.id, meta={"model": "resnet50", "duration_s": 600})
    first = build_observation(2e9, jobs, nodes, {held.id: record}, CONFIG)
    again = build_observation(2e9 + 60, jobs, nodes, {held.id: record}, CONFIG)
    assert first.snapshot.jobs == again.snapshot.jobs and first.layouts == again.layouts

    def pending(obs):
        return next(j for j in obs.snapshot.jobs if j.id == held.id)

    assert pending(again).model == "resnet50"
    accounted = replace(record, attained_gpu_s=3600.0, pending_since_s=5.0, policy_state={"queue": 1})
    job = pending(build_observation(2e9, jobs, nodes, {held.id: accounted}, CONFIG))
    assert job == _managed_job(held, accounted, {}, CONFIG, 0.0, None)  # what a full build gives
    assert (job.attained_gpu_s, job.pending_since_s, job.policy_state) == (3600.0, 5.0, {"queue": 1})
    progressed = replace(accounted, progress=0.5)
    job = pending(build_observation(2e9, jobs, nodes, {held.id: progressed}, CONFIG))
    assert job.progress == 0.5 and job.remaining_s == 300.0
    served = replace(record, attained_gpu_s=7200.0, meta={"model": "bert"})
    assert (pending(build_observation(2e9, jobs, nodes, {held.id: served}, CONFIG)).attained_gpu_s) == 7200.0
    assert pending(build_observation(2e9, jobs, nodes, {held.id: served}, CONFIG)).model == "bert"
    later = [replace(j, submit_time=j.submit_time + 5) if j.id == held.id else j for j in jobs]
    moved = pending(build_observation(2e9, later, nodes, {held.id: served}, CONFIG))
    assert moved.submit_time_s == held.submit_time + 5
    limited = [replace(j, time_limit_s=3600.0) if j.id == held.id else j for j in jobs]  # scontrol update
    assert pending(build_observation(2e9, limited, nodes, {held.id: served}, CONFIG)).time_limit_s == 3600.0
    bare = _record(held.id)
    assert pending(build_observation(2e9, jobs, nodes, {held.id: bare}, CONFIG)).model == "unknown"
    other = ControllerConfig(partitions=("gpu",), default_model="gpt2")
    assert pending(build_observation(2e9, jobs, nodes, {held.id: bare}, other)).model == "gpt2"


@pytest.mark.parametrize("feature", ["a800", "H800", "a100"])
def test_a_node_feature_naming_a_known_gpu_type_is_its_type(slurm, feature):
    # A800s (Rubick's cluster) were not among the known types and became the default v100.
    from slurm_plugin.controller.observe import node_gpu_type

    _, nodes = slurm
    node = replace(nodes[0], features=("ib", feature))
    assert node_gpu_type(node, CONFIG) == feature.lower()


def test_a_node_of_an_unknown_gpu_type_keeps_the_name_slurm_gives_it(slurm, caplog):
    # A node whose type the controller could not match was labelled v100 (default_gpu_type).
    from slurm_plugin.controller.observe import UNKNOWN_GPU_TYPE, node_gpu_type
    from slurm_plugin.slurm.parse import gres_gpu_type

    assert gres_gpu_type("gpu:rtx4090:8(S:0-1),shard:16") == "rtx4090"
    assert gres_gpu_type("gres/gpu:4") == "" and gres_gpu_type("") == ""
    jobs, nodes = slurm
    bare = replace(nodes[0], features=("ib",))
    assert node_gpu_type(replace(bare, gres_gpu_type="RTX4090"), CONFIG) == "rtx4090"
    assert node_gpu_type(replace(bare, gres_gpu_type="nvidia_a100-sxm4-80gb"), CONFIG) == "a100"
    assert node_gpu_type(replace(bare, gres_gpu_type="tesla_v100"), CONFIG) == "v100"
    assert node_gpu_type(replace(bare, features=("a40",), gres_gpu_type="rtx4090"), CONFIG) == "a40"
    # No type anywhere: "unknown", logged once, unless the operator chose a default.
    with caplog.at_level("WARNING"):
        assert node_gpu_type(replace(bare, name="untyped-1"), CONFIG) == UNKNOWN_GPU_TYPE
        assert node_gpu_type(replace(bare, name="untyped-1"), CONFIG) == UNKNOWN_GPU_TYPE
    assert [r.getMessage() for r in caplog.records].count(
        "node untyped-1: neither its GRES (gpu:TYPE:N) nor its features (ib) name a GPU type of "
        "[controller] gpu_types; planned as type 'unknown' (set a feature, or default_gpu_type)"
    ) == 1
    chosen = ControllerConfig(partitions=("gpu",), default_gpu_type="T4")
    assert node_gpu_type(bare, chosen) == "t4"
    # sinfo's typed GRES reaches the snapshot, and the round plans on it.
    text = (DATA / "sinfo.json").read_text().replace('"gres": "gpu:4"', '"gres": "gpu:rtx4090:4"')
    typed = [replace(n, features=()) for n in parse_sinfo_json(text)]
    assert {n.gres_gpu_type for n in typed} == {"rtx4090"}
    obs = build_observation(2e9, jobs, typed, {}, CONFIG)
    assert {n.gpu_type for n in obs.snapshot.nodes} == {"rtx4090"}
    assert {n.gpu_mem_gb for n in obs.snapshot.nodes} == {None}  # Slurm does not say
    named = [replace(n, gres_gpu_type="nvidia_a100-sxm4-80gb") for n in typed]
    seen = build_observation(2e9, jobs, named, {}, CONFIG).snapshot.nodes
    assert {(n.gpu_type, n.gpu_mem_gb) for n in seen} == {("a100", 80.0)}
    plan = plan_round(obs.snapshot, build_scheduler(preset("mosaic")))
    assert plan.assignments
