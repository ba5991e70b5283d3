"""Tesserae packing: edges, weights, the matching, and its baselines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner import plan_round
from planner.config import build_scheduler, preset
from planner.policies.packing import GavelPacking, PackingGraph, PackingOptions, TesseraePacking
from planner.policies.placement import ConsolidatedPlacement
from planner.registry import StageContext
from planner.validate import plan_violations
from profiles.colocation import ColocationModel, Side
from profiles.document import profiles_from_document
from tests.builders import make_job, make_nodes, make_snapshot, profiles, running, scheduler

STORE = profiles()
MODEL = ColocationModel(STORE)


def placed_and_pending(nodes, jobs):
    snapshot = make_snapshot(nodes, jobs)
    draft = ConsolidatedPlacement().place(snapshot, jobs)
    return snapshot, draft


def pack(stage, nodes, jobs):
    snapshot, draft = placed_and_pending(nodes, jobs)
    return stage.pack(snapshot, jobs, draft)


def tesserae(**options):
    return TesseraePacking.from_options(options, StageContext(STORE))


def combined(a, b, gpus=1, gpu_type="v100"):
    return MODEL.estimate(Side(a[0], a[1], gpus), Side(b[0], b[1], gpus), gpu_type).combined


def test_a_pending_job_is_packed_onto_the_best_partner():
    # One V100 node with 2 GPUs both taken; recommendation(2048) helps with resnet50(64).
    nodes = make_nodes(1, gpus=2, gpu_type="v100")
    jobs = [
        make_job("r", 1, model="resnet50", batch_size=64),
        make_job("t", 1, submit=1, model="transformer", batch_size=64),
        make_job("p", 1, submit=2, model="recommendation", batch_size=2048),
    ]
    draft = pack(tesserae(), nodes, jobs)
    assert set(draft.assignments) == {"r", "t", "p"}
    partner = draft.assignments["p"].shares_with[0]
    assert draft.assignments[partner].shares_with == ("p",)
    assert draft.assignments["p"].gpus == draft.assignments[partner].gpus
    best = max(
        ("r", ("resnet50", 64)),
        ("t", ("transformer", 64)),
        key=lambda c: combined(c[1], ("recommendation", 2048)),
    )
    assert partner == best[0]


def test_no_edge_when_the_pair_does_not_pay_or_cannot_share():
    nodes = make_nodes(1, gpus=4, gpu_type="v100")
    # resnet50 and transformer at 4 GPUs: Gavel measured (0, 0): they cannot share.
    jobs = [
        make_job("a", 4, model="resnet50", batch_size=64),
        make_job("b", 4, submit=1, model="transformer", batch_size=64),
    ]
    assert "b" not in pack(tesserae(), nodes, jobs).assignments
    # Any pair needs combined > 1 + min_gain.
    jobs = [
        make_job("a", 1, model="resnet18", batch_size=128),
        make_job("b", 1, submit=1, model="recommendation", batch_size=2048),
    ]
    gain = combined(("resnet18", 128), ("recommendation", 2048)) - 1
    assert gain > 0.1
    one = make_nodes(1, gpus=1)
    assert "b" in pack(tesserae(min_gain=max(gain - 0.01, 0)), one, jobs).assignments
    assert "b" not in pack(tesserae(min_gain=gain + 0.01), one, jobs).assignments


def test_edges_need_equal_gpu_counts_and_unprotected_jobs():
    nodes = make_nodes(1, gpus=2)
    base = make_job("a", 2, model="resnet18", batch_size=128)
    rec = {"model": "recommendation", "batch_size": 2048, "submit": 1}
    for pending in (
        make_job("b", 1, **rec),
        make_job("b", 2, guaranteed=True, **rec),
        make_job("b", 2, deadline_s=10.0, **rec),
    ):
        assert "b" not in pack(tesserae(), nodes, [base, pending]).assignments
    protected = make_job("a", 2, model="resnet18", batch_size=128, guaranteed=True)
    assert "b" not in pack(tesserae(), nodes, [protected, make_job("b", 2, **rec)]).assignments
    assert "b" in pack(tesserae(), nodes, [base, make_job("b", 2, **rec)]).assignments


def test_max_gpus_restricts_packing_to_small_jobs():
    nodes = make_nodes(1, gpus=2)
    jobs = [
        make_job("a", 2, model="resnet18", batch_size=128),
        make_job("b", 2, submit=1, model="recommendation", batch_size=2048),
    ]
    assert "b" in pack(tesserae(), nodes, jobs).assignments
    assert "b" not in pack(tesserae(max_gpus=1), nodes, jobs).assignments


def test_hungarian_beats_greedy_where_greedy_takes_the_wrong_partner():
    # Two placed jobs x, y; two pending p (high priority), q. Greedy gives p its best
    # partner even if that leaves q with none; the matching maximises the total.
    doc = {
        "format": "mosaic-profiles/1",
        "models": {
            "x": {
                "throughput": [{"gpu_type": "v100", "num_gpus": 1, "steps_per_s": 1}],
                "colocation": [
                    {
                        "with": "p",
                        "gpu_type": "v100",
                        "num_gpus": 1,
                        "steps_per_s": 0.6,
                        "with_steps_per_s": 0.6,
                    },
                    {
                        "with": "q",
                        "gpu_type": "v100",
                        "num_gpus": 1,
                        "steps_per_s": 0.6,
                        "with_steps_per_s": 0.6,
                    },
                ],
            },
            "y": {
                "throughput": [{"gpu_type": "v100", "num_gpus": 1, "steps_per_s": 1}],
                "colocation": [
                    {
                        "with": "p",
                        "gpu_type": "v100",
                        "num_gpus": 1,
                        "steps_per_s": 0.55,
                        "with_steps_per_s": 0.5,
                    },
                    {
                        "with": "q",
                        "gpu_type": "v100",
                        "num_gpus": 1,
                        "steps_per_s": 0.3,
                        "with_steps_per_s": 0.3,
                    },
                ],
            },
            "p": {"throughput": [{"gpu_type": "v100", "num_gpus": 1, "steps_per_s": 1}]},
            "q": {"throughput": [{"gpu_type": "v100", "num_gpus": 1, "steps_per_s": 1}]},
        },
    }
    store = STORE.with_profiles(profiles_from_document(doc).values())
    context = StageContext(store)
    nodes = make_nodes(1, gpus=2)
    jobs = [
        make_job("x", model="x"),
        make_job("y", submit=1, model="y"),
        make_job("p", submit=2, model="p"),
        make_job("q", submit=3, model="q"),
    ]
    # Weights: x-p 1.2, x-q 1.2, y-p 1.05, y-q 0.6 (no edge). Greedy: p takes x, q gets
    # nothing (1.2). Matching: p-y and q-x (2.25).
    greedy = pack(GavelPacking.from_options({}, context), nodes, jobs)
    optimal = pack(TesseraePacking.from_options({}, context), nodes, jobs)
    assert greedy.assignments["p"].shares_with == ("x",) and "q" not in greedy.assignments
    assert optimal.assignments["p"].shares_with == ("y",) and optimal.assignments["q"].shares_with == ("x",)


def test_candidate_plans_pick_the_best_packed_strategy():
    doc = {
        "format": "mosaic-profiles/1",
        "models": {
            "llm": {
                "throughput": [
                    {"gpu_type": "a100", "num_gpus": 2, "steps_per_s": 1.0},
                    {"gpu_type": "a100", "num_gpus": 2, "plan": {"pp": 2}, "steps_per_s": 1.0},
                ],
                "colocation": [
                    {
                        "with": "cnn",
                        "gpu_type": "a100",
                        "num_gpus": 2,
                        "steps_per_s": 0.3,
                        "with_steps_per_s": 0.6,
                    },
                    {
                        "with": "cnn",
                        "gpu_type": "a100",
                        "num_gpus": 2,
                        "plan": {"pp": 2},
                        "steps_per_s": 0.6,
                        "with_steps_per_s": 0.7,
                    },
                ],
            },
            "cnn": {"throughput": [{"gpu_type": "a100", "num_gpus": 2, "steps_per_s": 1.0}]},
        },
    }
    store = STORE.with_profiles(profiles_from_document(doc).values())
    stage = TesseraePacking.from_options({}, StageContext(store))
    nodes = make_nodes(1, gpus=2, gpu_type="a100")
    llm = make_job("llm", 2, model="llm", candidate_plans=({"tp": 2}, {"pp": 2}))
    jobs = [llm, make_job("cnn", 2, submit=1, model="cnn")]
    draft = pack(stage, nodes, jobs)
    # Default plan: 0.3 + 0.6 = 0.9, no gain; with pp=2: 0.6 + 0.7 = 1.3.
    assert draft.assignments["llm"].plan == {"pp": 2}
    assert draft.assignments["cnn"].shares_with == ("llm",)


def test_an_existing_pair_is_kept_rather_than_reshuffled():
    nodes = make_nodes(1, gpus=2)
    a = running(make_job("a", 1, model="resnet18", batch_size=128), [("n1", 0)])
    b = running(make_job("b", 1, submit=1, model="resnet18", batch_size=128), [("n1", 1)])
    c = running(make_job("c", 1, submit=2, model="recommendation", batch_size=2048), [("n1", 1)])
    snapshot = make_snapshot(nodes, [a, b, c])
    plan = plan_round(snapshot, scheduler("fifo", packing="tesserae", migration="tesserae"))
    # c already shares b's GPU; an equal-weight partner a exists, but the pair stays.
    assert plan.assignments["c"].shares_with == ("b",)
    assert plan.migrated == ()


def test_packing_presets_respect_capacity_with_two_jobs_per_gpu():
    nodes = make_nodes(2, gpus=4, gpu_type="v100", cpus=24, mem_gb=500.0)
    models = ["resnet18", "lm", "recommendation", "transformer", "a3c", "cyclegan"]
    jobs = [make_job(i, 1 + (i % 3 == 0), submit=i, model=models[i % 6], batch_size=None) for i in range(20)]
    for name in ("tesserae-t", "tesserae-ftf", "tiresias-single", "gavel-las"):
        sched = build_scheduler(preset(name), STORE)
        plan = plan_round(make_snapshot(nodes, jobs), sched)
        assert sched.max_jobs_per_gpu == 2
        assert plan_violations(make_snapshot(nodes, jobs), plan, 2) == []
        shared = [j for j, a in plan.assignments.items() if a.shares_with]
        assert shared, name
        if name == "tiresias-single":
            assert all(plan.assignments[j].num_gpus == 1 for j in shared)


def test_packing_graph_drops_columns_that_could_never_be_matched():
    nodes = make_nodes(1, gpus=2)
    jobs = [make_job("a", model="resnet50"), make_job("b", submit=1, model="resnet50")]
    jobs += [make_job(f"p{i}", submit=10 + i, model="lm") for i in range(50)]
    snapshot, draft = placed_and_pending(nodes, jobs)
    graph = PackingGraph(snapshot, jobs, draft, MODEL, PackingOptions())
    cls = graph.solve_class(1)
    assert [j.id for j in cls.cols] == ["p0", "p1"]  # one kind, two rows: two columns suffice


def test_options_are_validated():
    with pytest.raises(Exception, match="unknown key 'gpus'"):
        tesserae(gpus=1)


def test_a_job_that_fits_a_node_is_not_packed_onto_a_spread_partner():
    # "wide" spans two 2-GPU nodes (no node holds 4); the 2-GPU pending job could fit a
    # single node, so it must not share wide's GPUs, which span two nodes.
    nodes = make_nodes(2, gpus=2)
    wide = running(make_job("wide", 2, model="resnet18", batch_size=128), [("n1", 0), ("n2", 0)])
    pending = make_job("p", 2, submit=1, model="recommendation", batch_size=2048)
    snapshot = make_snapshot(nodes, [wide, pending])
    plan = plan_round(snapshot, scheduler("fifo", packing="tesserae"))
    assert "p" not in plan.assignments or len(plan.assignments["p"].per_node) == 1


def tesserae_rigid(**options):
    from planner.policies.mosaic.stages import TesseraeRigidPacking

    return TesseraeRigidPacking.from_options(options, StageContext(STORE))


def test_mosaics_tesserae_packing_pairs_only_rigid_best_effort_jobs():
    # One V100 node with 2 GPUs both taken; recommendation(2048) gains beside either placed
    # job, most beside one, which is kept out of pairing when it is guaranteed or elastic.
    nodes = make_nodes(1, gpus=2, gpu_type="v100")
    pending = make_job("p", 1, submit=2, model="recommendation", batch_size=2048)
    placed = [
        make_job("r", 1, model="resnet18", batch_size=128),
        make_job("t", 1, submit=1, model="transformer", batch_size=64),
    ]
    assert (
        min(
            combined(("resnet18", 128), ("recommendation", 2048)),
            combined(("transformer", 64), ("recommendation", 2048)),
        )
        > 1.3
    )
    best = pack(tesserae(), nodes, [*placed, pending]).assignments["p"].shares_with[0]
    other = next(j.id for j in placed if j.id != best)
    for kept_out in ({"guaranteed": True, "tenant": "a"}, {"min_gpus": 1, "max_gpus": 2}):
        jobs = [replace(j, **kept_out) if j.id == best else j for j in placed]
        draft = pack(tesserae_rigid(), nodes, [*jobs, pending])
        assert draft.assignments["p"].shares_with == (other,)
        assert draft.assignments[best].shares_with == ()
    # A guaranteed pending job is never a guest.
    guest = replace(pending, guaranteed=True, tenant="a")
    assert "p" not in pack(tesserae_rigid(), nodes, [*placed, guest]).assignments
    # Only rigid best-effort jobs: the same pairs as Tesserae's own packing.
    assert pack(tesserae_rigid(), nodes, [*placed, pending]).assignments == (
        pack(tesserae(), nodes, [*placed, pending]).assignments
    )
