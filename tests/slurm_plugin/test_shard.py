"""Shared GPUs on the live path, against output captured from the test cluster's ``shard`` shape.

``squeue_shard.json`` / ``sinfo_shard.json``: 2 nodes x 4 a100, ``gpu:4,shard:8``; jobs 1 and
2 ``--gres=shard:1 -w n1`` (both ran with ``CUDA_VISIBLE_DEVICES=0``), job 3 ``shard:2 -w n2``,
job 10 a held ``shard:1``, jobs 4-9 cancelled. ``sacct_shard.txt``: two ``shard:1`` jobs, a
``shard:2`` and a ``gpu:1`` job, with ``AccountingStorageTRES=gres/gpu,gres/shard``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.model import Assignment
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.observe import build_observation, sharing_notice
from slurm_plugin.controller.rounddiff import Kind, diff, shard_infeasible, start_fields, wanted_shards
from slurm_plugin.report import build_report
from slurm_plugin.slurm.parse import (
    gpu_indices,
    parse_parsable,
    parse_sinfo_json,
    parse_squeue_json,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.fixture(scope="module")
def squeue():
    return {j.id: j for j in parse_squeue_json((DATA / "squeue_shard.json").read_text())}


@pytest.fixture(scope="module")
def obs():
    return build_observation(
        2e9,
        parse_squeue_json((DATA / "squeue_shard.json").read_text()),
        parse_sinfo_json((DATA / "sinfo_shard.json").read_text()),
        {},
        ControllerConfig(),
    )


def _a(gpus, shares_with=(), cpus=2, mem_gb=2.0, plan=None):
    return Assignment(gpus=tuple(gpus), cpus=cpus, mem_gb=mem_gb, plan=plan, shares_with=tuple(shares_with))


# -- parsing --------------------------------------------------------------------------


def test_shard_allocations_are_read_back_from_gres_detail(squeue):
    assert (squeue["1"].shards_per_node, squeue["1"].gpus_per_node) == (1, 0)
    assert squeue["1"].gpu_indices == (("n1", (0,)),)
    assert squeue["3"].shards_per_node == 2
    assert squeue["3"].gpu_indices == (("n2", (0,)),)
    assert squeue["10"].shards_per_node == 1 and squeue["10"].gpu_indices == ()


@pytest.mark.parametrize(
    ("detail", "indices"),
    [("shard:1(IDX:0)", (0,)), ("shard:2(IDX:3)", (3,)), ("gpu:2(IDX:1-2)", (1, 2)), ("shard:1", ())],
)
def test_gpu_indices_of_gpu_and_shard_entries(detail, indices):
    assert gpu_indices(detail) == indices


def test_sinfo_tells_shards_per_gpu():
    nodes = parse_sinfo_json((DATA / "sinfo_shard.json").read_text())
    assert {(n.name, n.gpus, n.shards, n.shards_per_gpu) for n in nodes} == {
        ("n1", 4, 8, 2),
        ("n2", 4, 8, 2),
    }


# -- observe ---------------------------------------------------------------------------


def test_two_shard_jobs_on_one_gpu_are_a_pair_in_the_snapshot(obs):
    jobs = {j.id: j for j in obs.snapshot.jobs}
    assert jobs["1"].assignment.gpus == (("n1", 0),)
    assert jobs["1"].assignment.shares_with == ("2",)
    assert jobs["2"].assignment.shares_with == ("1",)
    # A shard:2 job holds its GPU alone: one GPU, no partner.
    assert jobs["3"].num_gpus == 1 and jobs["3"].assignment.shares_with == ()
    assert jobs["10"].num_gpus == 1 and jobs["10"].assignment is None
    assert obs.shards_per_gpu == 2


# -- the start's fields and feasibility ---------------------------------------------------


def test_shard_job_starts_with_half_the_shards_when_sharing_and_all_of_them_alone():
    shared = _a([("n1", 0)], shares_with=["7"])
    alone = _a([("n2", 3)])
    assert wanted_shards(shared, 2) == 1
    assert wanted_shards(alone, 2) == 2
    # With 8 shards per GPU, partners holding one each would leave 6 for Slurm to give a third job.
    assert wanted_shards(shared, 8) == 4
    assert wanted_shards(shared, 0) == 0  # a gpu job never gets shards
    fields = start_fields(shared, "audit", shards=1)
    assert (fields["Gres"], fields["ReqNodeList"], fields["NumNodes"]) == ("shard:1", "n1", "1-1")
    assert start_fields(alone, "audit", shards=2)["Gres"] == "shard:2"
    assert start_fields(alone, "audit")["Gres"] == "gpu:1"


@given(st.integers(1, 8), st.booleans())
def test_partners_never_ask_more_than_a_gpus_shards(whole, sharing):
    a = _a([("n1", 0)], shares_with=["x"] if sharing else [])
    shards = wanted_shards(a, whole)
    assert 1 <= shards <= whole
    # Two partners fit on one GPU exactly when whole >= 2, and fill it: what they leave is
    # at most one shard, less than either holds.
    if sharing and whole >= 2:
        assert 2 * shards <= whole
        assert whole - 2 * shards <= 1


def test_a_gpu_job_planned_onto_a_shared_gpu_is_refused_with_the_reason(obs, squeue):
    gpu_job = replace(squeue["10"], shards_per_node=0, gpus_per_node=1)
    why = shard_infeasible(_a([("n1", 0)], shares_with=["1"]), gpu_job, obs.nodes)
    assert why is not None and "--gres=gpu" in why and "--gres=shard" in why
    assert shard_infeasible(_a([("n1", 1)]), gpu_job, obs.nodes) is None


def test_a_shard_job_on_two_gpus_of_a_node_is_refused(obs, squeue):
    why = shard_infeasible(_a([("n2", 1), ("n2", 2)]), squeue["10"], obs.nodes)
    assert why is not None and "one GPU" in why
    assert shard_infeasible(_a([("n2", 1)], shares_with=["3"]), squeue["10"], obs.nodes) is None


def test_a_node_without_shards_refuses_a_shard_job(obs, squeue):
    nodes = dict(obs.nodes)
    nodes["n2"] = replace(nodes["n2"], shards=0)
    why = shard_infeasible(_a([("n2", 1)]), squeue["10"], nodes)
    assert why is not None and "offers none" in why


# -- diff ---------------------------------------------------------------------------------


def test_a_pair_already_sharing_is_left_alone(obs):
    plan = {"1": _a([("n1", 0)], ["2"]), "2": _a([("n1", 0)], ["1"]), "3": _a([("n2", 0)])}
    assert [a for a in diff(obs, plan, 1) if a.kind is not Kind.HOLD] == []


def test_a_whole_gpu_host_is_relaunched_on_one_shard_when_a_partner_joins(obs):
    plan = {
        "1": _a([("n1", 0)], ["2"]),
        "2": _a([("n1", 0)], ["1"]),
        "3": _a([("n2", 0)], ["10"]),
        "10": _a([("n2", 0)], ["3"]),
    }
    actions = [(a.kind, a.job_id, a.reason) for a in diff(obs, plan, 4)]
    assert actions == [(Kind.STOP, "3", "shared"), (Kind.START, "3", "shared"), (Kind.START, "10", "placed")]


def test_a_partner_left_alone_on_one_shard_is_not_relaunched(obs):
    # Job 2 finished: job 1 keeps its single shard (it still has the whole GPU to itself).
    plan = {"1": _a([("n1", 0)]), "3": _a([("n2", 0)])}
    assert [a.job_id for a in diff(obs, plan, 2) if a.kind is not Kind.HOLD and a.job_id != "2"] == []


# -- report -----------------------------------------------------------------------------


def test_report_counts_a_shard_as_half_a_gpu():
    rows = parse_parsable((DATA / "sacct_shard.txt").read_text())
    report = build_report(rows, ["gpu"], now=2e9)
    gpus = {job: runs[0].gpus for job, runs in report.runs.items()}
    assert gpus == {"1": 0.5, "2": 0.5, "3": 1.0, "4": 1.0}
    records = {r.job_id: r for r in report.records}
    assert all(records[j].num_gpus == 1 for j in "1234")
    length = {job: runs[0].end - runs[0].start for job, runs in report.runs.items()}
    assert records["1"].attained_gpu_s == pytest.approx(0.5 * length["1"])
    assert report.allocated_gpu_s == pytest.approx(sum(gpus[j] * length[j] for j in gpus))


def test_report_divides_shards_by_the_nodes_own_shards_per_gpu():
    # A shard counted half a GPU whatever the node offered: gres/shard=8 on 2 GPUs is 4 per GPU.
    from slurm_plugin.report import shards_per_gpu_by_node

    text = (DATA / "sinfo_shard.json").read_text()
    nodes = parse_sinfo_json(text.replace("gpu:4,shard:8", "gpu:2,shard:8"))
    assert shards_per_gpu_by_node(nodes) == {"n1": 4, "n2": 4}
    rows = parse_parsable((DATA / "sacct_shard.txt").read_text())
    report = build_report(rows, ["gpu"], now=2e9, shards_per_gpu=shards_per_gpu_by_node(nodes))
    assert {job: runs[0].gpus for job, runs in report.runs.items()} == {
        "1": 0.25,
        "2": 0.25,
        "3": 0.5,
        "4": 1.0,
    }
    # A run on a node Slurm no longer lists takes the cluster's count when its nodes agree.
    gone = [{**r, "NodeList": "n9"} for r in rows]
    report = build_report(gone, ["gpu"], now=2e9, shards_per_gpu={"n1": 8, "n2": 8})
    assert report.runs["3"][0].gpus == 0.25


def test_startup_notice_says_whether_the_cluster_can_share():
    shard_nodes = parse_sinfo_json((DATA / "sinfo_shard.json").read_text())
    plain_nodes = parse_sinfo_json((DATA / "sinfo.json").read_text())
    assert "run on gres/shard" in sharing_notice("sjf-ffs", shard_nodes, ["gpu"])
    assert "offer no gres/shard" in sharing_notice("sjf-ffs", plain_nodes, ["gpu"])


def test_jobs_whose_gpu_slurm_did_not_name_are_never_partners(squeue):
    # No gres_detail: observe assumes GPUs no other job holds whole, so two whole-GPU jobs on
    # one node are on two GPUs, and never partners.
    blind = [
        replace(j, gpu_indices=(), shards_per_node=0, gpus_per_node=1) if j.id in {"1", "2"} else j
        for j in squeue.values()
    ]
    nodes = parse_sinfo_json((DATA / "sinfo_shard.json").read_text())
    snapshot = build_observation(2e9, blind, nodes, {}, ControllerConfig()).snapshot
    jobs = {j.id: j for j in snapshot.jobs}
    assert (jobs["1"].assignment.gpus, jobs["2"].assignment.gpus) == ((("n1", 0),), (("n1", 1),))
    assert jobs["1"].assignment.shares_with == jobs["2"].assignment.shares_with == ()
