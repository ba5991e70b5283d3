"""Synergy's mechanisms: demand vectors, Greedy, Tune, Opt, DRF and Tetris (§3-5)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import plan_round
from planner.core.errors import ConfigError
from planner.core.model import Assignment, JobState, Node, Outcome, RoundPlan, Snapshot
from planner.policies.synergy.demand import PerGpu, best_case_per_gpu, proportional_per_gpu
from planner.validate import plan_violations
from profiles.schema import SensitivityMatrix
from tests.builders import make_job, make_snapshot, profiles, running, scheduler

SYNERGY_SERVER = {"gpus": 8, "gpu_type": "v100", "cpus": 24, "mem_gb": 500.0}  # §5.1
MODELS = ["resnet18", "alexnet", "shufflenet", "mobilenet", "resnet50", "gnmt", "lstm", "transformer", "m5",
          "deepspeech", "unknown-model"]  # fmt: skip
MECHANISMS = ["synergy-tune", "synergy-opt", "synergy-greedy", "drf", "tetris"]


def servers(count: int) -> tuple[Node, ...]:
    return tuple(Node(f"s{i}", **SYNERGY_SERVER) for i in range(1, count + 1))  # type: ignore[arg-type]


def matrix(model: str) -> SensitivityMatrix:
    m = profiles().resolve(model).sensitivity
    assert m is not None
    return m


def throughput(model: str, a: Assignment) -> float:
    m = profiles().resolve(model).sensitivity
    g = a.num_gpus
    return 1.0 if m is None else m.at(a.cpus / g, a.mem_gb / g)


def proportional_throughput(snapshot: Snapshot, model: str, a: Assignment) -> float:
    prop = proportional_per_gpu([snapshot.node(n) for n in a.nodes])
    m = profiles().resolve(model).sensitivity
    return 1.0 if m is None else m.at(prop.cpus, prop.mem_gb)


def plan(snapshot: Snapshot, preset: str, **overrides: object) -> RoundPlan:
    result = plan_round(snapshot, scheduler(preset, **overrides))
    assert plan_violations(snapshot, result) == []
    return result


# -- demand vector (§3.2) ------------------------------------------------------------------
def test_best_case_demand_is_the_smallest_point_reaching_the_plateau() -> None:
    # Synergy's own profiling found these ideal allocations (its data's "cpus"/"mem_gb")
    assert best_case_per_gpu(matrix("alexnet")) == PerGpu(12, 125.0)
    assert best_case_per_gpu(matrix("resnet18")) == PerGpu(9, 62.5)
    assert best_case_per_gpu(matrix("m5")) == PerGpu(6, 187.5)
    assert best_case_per_gpu(matrix("lstm")) == PerGpu(1, 20.83)


def test_tolerance_accepts_a_near_plateau() -> None:
    # resnet50 reaches 1.15 at 4 CPUs; 1.0 at 3 CPUs is within 15 % but not within 5 %
    assert best_case_per_gpu(matrix("resnet50"), 0.05) == PerGpu(4, 62.5)
    assert best_case_per_gpu(matrix("resnet50"), 0.15) == PerGpu(3, 62.5)


def test_bad_tolerance_is_refused() -> None:
    with pytest.raises(ConfigError, match="tolerance"):
        scheduler("synergy-tune", options={"shaping": {"tolerance": 1.5}})


# -- Tune (§4.2) -----------------------------------------------------------------------------
def test_tune_gives_sensitive_jobs_what_insensitive_ones_do_not_need() -> None:
    jobs = [make_job(i, model="resnet18" if i <= 2 else "lstm", submit=i) for i in range(1, 9)]
    snapshot = make_snapshot(servers(1), jobs)
    tuned = plan(snapshot, "synergy-tune").assignments
    prop = plan(snapshot, "synergy-proportional").assignments
    assert all(prop[j].cpus == 3 for j in prop)
    assert tuned["1"].cpus == tuned["2"].cpus == 9  # its best case (§3.2)
    assert all(tuned[str(i)].cpus == 1 for i in range(3, 9))
    assert sum(throughput(j.model, tuned[j.id]) for j in jobs) > sum(
        throughput(j.model, prop[j.id]) for j in jobs
    )


def test_tune_switches_generous_peers_back_to_proportional_when_a_job_does_not_fit() -> None:
    # 8 alexnets want 12 CPUs each on one 24-CPU server: most are switched back to the
    # proportional 3 CPUs, and none gets less
    jobs = [make_job(i, model="alexnet", submit=i) for i in range(1, 9)]
    snapshot = make_snapshot(servers(1), jobs)
    tuned = plan(snapshot, "synergy-tune")
    assert len(tuned.assignments) == 8  # tune never skips a job whose GPUs fit
    for j in jobs:
        a = tuned.assignments[j.id]
        assert throughput(j.model, a) >= proportional_throughput(snapshot, j.model, a) - 1e-9


def test_tune_runs_what_greedy_skips() -> None:
    # speech/image jobs want ~6-12 CPUs per GPU: greedy fragments, leaving GPUs idle (§5.4)
    jobs = [make_job(i, model=("alexnet", "m5")[i % 2], submit=i) for i in range(1, 17)]
    snapshot = make_snapshot(servers(2), jobs)
    greedy = plan(snapshot, "synergy-greedy")
    tuned = plan(snapshot, "synergy-tune")
    assert len(tuned.assignments) == 16
    assert len(greedy.assignments) < 16
    skipped = set(greedy.order) - set(greedy.assignments)
    assert all(greedy.reasons[j] is Outcome.NO_RESOURCES for j in skipped)


def test_tune_keeps_running_jobs_on_their_gpus() -> None:
    first = running(make_job(1, model="resnet18"), [("s2", 5)], cpus=3, mem_gb=62.5)
    jobs = [first, *(make_job(i, model="lstm", submit=i) for i in range(2, 6))]
    result = plan(make_snapshot(servers(2), jobs), "synergy-tune")
    assert result.assignments["1"].gpus == (("s2", 5),)
    assert "1" in result.reshaped and "1" not in result.migrated  # more CPUs, same GPU


def test_multi_gpu_job_split_over_servers_gets_the_same_share_per_gpu() -> None:
    job = make_job(1, num_gpus=16, model="resnet18")
    result = plan(make_snapshot(servers(2), [job]), "synergy-tune")
    a = result.assignments["1"]
    assert a.per_node == (("s1", 8), ("s2", 8))
    shares = a.node_shares()
    assert shares[0][1:] == shares[1][1:]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_mechanisms_combine_with_orderings(mechanism: str) -> None:
    jobs = [make_job(i, model=MODELS[i % len(MODELS)], submit=i, duration_s=1000.0 * i) for i in range(1, 12)]
    snapshot = make_snapshot(servers(1), jobs)
    for policy in ("fifo", "srtf", "las", "ftf"):
        plan(snapshot, mechanism, policy=policy)


# -- Opt (§4.1, Appendix A.1) ------------------------------------------------------------------
def test_opt_matches_or_beats_tune_on_one_server() -> None:
    jobs = [make_job(i, model=MODELS[i % 4], submit=i) for i in range(1, 9)]
    snapshot = make_snapshot(servers(1), jobs)
    opt = plan(snapshot, "synergy-opt").assignments
    tune = plan(snapshot, "synergy-tune").assignments
    total = {
        name: sum(throughput(j.model, a[j.id]) for j in jobs) for name, a in (("opt", opt), ("tune", tune))
    }
    assert total["opt"] >= total["tune"] - 1e-9


def test_second_lp_fragments_at_most_3s_jobs() -> None:
    from planner.policies.synergy.base import SynergyShaping
    from planner.policies.synergy.opt import fragmented, ideal_shares
    from planner.stages import Draft

    jobs = [make_job(i, model=MODELS[i % len(MODELS)], submit=i) for i in range(1, 33)]
    snapshot = make_snapshot(servers(4), jobs)
    draft = scheduler("synergy-proportional").placement.place(snapshot, jobs)
    stage = SynergyShaping(0.05, profiles())
    rnd = stage._round(snapshot, Draft(draft.assignments, draft.outcomes))
    chosen = {d.job.id: s for d, s in zip(rnd.demands, ideal_shares(rnd), strict=True)}
    assert fragmented(rnd, chosen) <= 3 * len(snapshot.nodes)


def test_tune_on_the_placements_gpus_keeps_no_share_a_moved_job_had_elsewhere() -> None:
    # Found by `benchmarks.papers.synergy multigpu` (LAS, t=171,000 s): when Tune's own GPU re-pack
    # fails it packs on the placement's GPUs, where a job the placement moved is not on its
    # GPUs. Its old share fitted the new server alone, and two such jobs were both kept with it:
    # 6 CPUs on a server of 4. Only a job kept on its GPUs keeps its share.
    from planner.policies.synergy.tune import TuneShaping
    from planner.stages import Draft

    big, small = Node("big", 8, "v100", 24, 500.0), Node("small", 2, "v100", 4, 64.0)
    jobs = [running(make_job(k, model="unknown-model"), [("big", k)], cpus=3, mem_gb=32.0) for k in (0, 1)]
    snapshot = make_snapshot([big, small], jobs)
    moved = {j.id: Assignment((("small", int(j.id)),), 2, 32.0) for j in jobs}
    draft = Draft(moved, {j.id: Outcome.MOVED for j in jobs})
    stage = TuneShaping(0.05, profiles())
    rnd = stage._round(snapshot, draft)
    stage.on_placement_gpus(rnd)
    shaped = stage._draft(rnd, draft)
    assert plan_violations(snapshot, RoundPlan(assignments=shaped.assignments), 1) == []
    assert sum(a.cpus for a in shaped.assignments.values()) <= small.cpus


def _context():
    from planner.registry import StageContext

    return StageContext(profiles())


def _tune_shape(snapshot: Snapshot, assigned: dict[str, Assignment], waiting: list[str]):
    """Tune on a hand-made draft: ``assigned`` kept or placed, ``waiting`` left for want of GPUs."""
    from planner.policies.synergy.tune import TuneShaping
    from planner.stages import Draft

    outcomes = {**dict.fromkeys(assigned, Outcome.KEPT), **dict.fromkeys(waiting, Outcome.NO_CAPACITY)}
    return TuneShaping(0.05, profiles()).shape(snapshot, Draft(dict(assigned), outcomes))


@pytest.mark.parametrize("placement_first", [False, True])
def test_tune_placement_first_moves_a_new_job_only_where_its_wish_does_not_fit(placement_first) -> None:
    # resnet50 wishes 4 CPUs and 62.5 GB per GPU. The placement put 0 where that does not fit
    # (2 CPUs) and 1 where it does, with room to spare. Tune's best fit moves both (0 to the
    # node it fills exactly, 1 to the tighter of the two others); placement_first moves 0 only.
    from planner.policies.synergy.tune import TuneShaping
    from planner.stages import Draft

    nodes = [
        Node("small", 2, "v100", 2, 128.0),
        Node("exact", 1, "v100", 4, 64.0),
        Node("tighter", 2, "v100", 10, 200.0),
        Node("roomy", 2, "v100", 16, 256.0),
    ]
    snapshot = make_snapshot(nodes, [make_job(0), make_job(1)])
    placed = {"0": Assignment((("small", 0),), 1, 64.0), "1": Assignment((("roomy", 0),), 8, 128.0)}
    stage = TuneShaping.from_options({"placement_first": placement_first}, _context())
    shaped = stage.shape(snapshot, Draft(placed, dict.fromkeys(placed, Outcome.PLACED))).assignments
    assert shaped["0"].nodes == ("exact",)
    assert shaped["1"].nodes == (("roomy",) if placement_first else ("tighter",))
    assert shaped["0"].cpus == shaped["1"].cpus == 4


def test_tune_placement_first_must_be_a_boolean() -> None:
    from planner.policies.synergy.tune import TuneShaping

    with pytest.raises(ConfigError, match="placement_first"):
        TuneShaping.from_options({"placement_first": "yes"}, _context())


def test_tune_starts_two_waiting_jobs_where_the_second_switches_the_first_back() -> None:
    # Found by a random search over Tune's rounds: the second waiting job needed room and Tune
    # switched back a peer it knew no demand for (the first waiting job): a KeyError.
    node = Node("n", 2, "v100", 10, 200.0)
    snapshot = make_snapshot([node], [make_job(0, model="m5"), make_job(1, model="resnet50")])
    shaped = _tune_shape(snapshot, {}, ["0", "1"])
    assert set(shaped.assignments) == {"0", "1"}
    assert plan_violations(snapshot, RoundPlan(assignments=shaped.assignments), 1) == []


def test_tune_upgrades_until_a_whole_pass_upgrades_nobody() -> None:
    # Found by the same search: resnet18's wish (9 CPUs, 62.5 GB) holds less memory than the
    # proportional share it replaced (6, 100), which made room for m5's wish (6, 187.5) after
    # m5 had been tried; the next round upgraded m5, a reshape for nothing.
    node = Node("n", 4, "v100", 24, 400.0)
    jobs = [
        running(make_job(0, model="alexnet"), [("n", 0)], cpus=4, mem_gb=62.5),
        running(make_job(1, model="m5"), [("n", 1)], cpus=8, mem_gb=40.0),
        make_job(2, model="resnet18"),
        make_job(3, model="gnmt"),
        make_job(4, model="m5"),
    ]
    snapshot = make_snapshot([node], jobs)
    first = _tune_shape(snapshot, {j.id: j.assignment for j in jobs if j.assignment}, ["2", "3", "4"])
    assert first.assignments["1"].mem_gb == 187.5
    placed = first.assignments
    applied = [
        replace(j, state=JobState.RUNNING, assignment=placed[j.id]) if j.id in placed else j for j in jobs
    ]
    again = _tune_shape(make_snapshot([node], applied), dict(first.assignments), ["4"])
    assert again.assignments == first.assignments


# -- properties ---------------------------------------------------------------------------------
@st.composite
def synergy_snapshots(draw: st.DrawFn) -> Snapshot:
    n_servers = draw(st.integers(1, 4))
    cpus = draw(st.sampled_from([24, 32, 40, 48]))  # CPU:GPU 3-6, as Figure 12
    nodes = tuple(Node(f"s{i}", 8, "v100", cpus, 500.0) for i in range(n_servers))
    jobs = []
    for i in range(draw(st.integers(1, 40))):
        gpus = draw(st.sampled_from([1, 1, 1, 2, 4, 8, 16]))
        jobs.append(make_job(i, num_gpus=gpus, model=draw(st.sampled_from(MODELS)), submit=float(i)))
    snapshot = make_snapshot(nodes, jobs)
    # some jobs already run, on what a previous tune round gave them
    first = plan_round(snapshot, scheduler("synergy-tune"))
    keep = draw(st.sets(st.sampled_from(sorted(first.assignments) or ["none"])))
    return replace(
        snapshot,
        jobs=tuple(
            running(
                j, first.assignments[j.id].gpus, first.assignments[j.id].cpus, first.assignments[j.id].mem_gb
            )
            if j.id in keep
            else j
            for j in jobs
        ),
    )


@given(synergy_snapshots())
def test_tune_never_runs_a_job_below_its_proportional_throughput(snapshot: Snapshot) -> None:
    models = {j.id: j.model for j in snapshot.jobs}
    placed = plan_round(snapshot, scheduler("synergy-proportional"))
    for preset in ("synergy-tune", "synergy-opt"):
        result = plan(snapshot, preset)
        assert set(result.assignments) == set(placed.assignments)  # the runnable set is GPU-only
        for job_id, a in result.assignments.items():
            floor = proportional_throughput(snapshot, models[job_id], a)
            assert throughput(models[job_id], a) >= floor - 1e-9, (preset, job_id, a)


@given(synergy_snapshots())
def test_static_demand_mechanisms_skip_and_try_the_next_jobs(snapshot: Snapshot) -> None:
    placed = plan_round(snapshot, scheduler("synergy-proportional"))
    waiting_for_gpus = {
        j for j, why in placed.reasons.items() if why in (Outcome.NO_CAPACITY, Outcome.NO_CONSOLIDATED_SLOT)
    }
    for preset in ("synergy-greedy", "drf", "tetris"):
        result = plan(snapshot, preset)
        assert set(result.assignments) <= set(placed.assignments) | waiting_for_gpus
        for job_id in set(placed.assignments) - set(result.assignments):
            assert result.reasons[job_id] is Outcome.NO_RESOURCES


# -- simulator: progress at W_j of the actual allocation (§3.1, item 5) --------------------------
def test_simulated_job_runs_at_its_matrix_speed_for_the_share_it_gets() -> None:
    from planner.sim import SimConfig, simulate
    from tests.builders import trace_job

    trace = [trace_job(1, duration=36_000.0, model="alexnet")]
    jct = {}
    for preset in ("synergy-proportional", "synergy-tune"):
        result = simulate(servers(1), trace, scheduler(preset), SimConfig(), profiles=profiles())
        jct[preset] = result.records[0].jct_s
    # proportional: 3 CPUs and 62.5 GB per GPU, W = 1.0; tune: 12 CPUs and 125 GB, W = 2.94
    assert jct["synergy-proportional"] == pytest.approx(36_000.0)
    assert jct["synergy-tune"] == pytest.approx(36_000.0 / 2.94)


def test_reference_share_makes_more_cpus_per_gpu_speed_up_the_baseline_too() -> None:
    from planner.sim import SimConfig, simulate
    from tests.builders import trace_job

    trace = [trace_job(1, duration=36_000.0, model="resnet18")]
    six_per_gpu = (Node("s1", 8, "v100", 48, 500.0),)
    fixed = SimConfig(reference_share=(3.0, 62.5))
    baseline = scheduler("synergy-proportional")
    own = simulate(six_per_gpu, trace, baseline, SimConfig(), profiles=profiles())
    measured_at_3 = simulate(six_per_gpu, trace, baseline, fixed, profiles=profiles())
    assert own.records[0].jct_s == pytest.approx(36_000.0)  # durations at this server's share
    assert measured_at_3.records[0].jct_s == pytest.approx(36_000.0 / 1.75)  # W(6 CPUs) / W(3 CPUs)


def test_tune_does_not_keep_a_running_share_of_fewer_cpus_than_gpus():
    # Found by the mosaic re-planning stress: a 2-GPU job that runs with 1 CPU (as another stage
    # or Slurm started it) was kept at 1 // 2 = 0 CPUs per GPU, so Tune planned it 0 CPUs; the
    # next round Tune gave it its share: a reshape every time. Such a share is no share Tune
    # gives; the job is now shaped as a new one would be, on the GPUs it holds.
    from planner import plan_round
    from planner.core.model import Assignment, Job, JobState, Node, Snapshot
    from tests.builders import scheduler

    nodes = (Node("n0", 4, "a100", 8, 128.0),)
    job = Job(
        "1", 2, "moe_1.3B", 0.0, state=JobState.RUNNING, assignment=Assignment((("n0", 0), ("n0", 1)), 1, 1.0)
    )
    plan = plan_round(Snapshot(1000.0, nodes, (job,)), scheduler("synergy-tune"))
    assert plan.assignments["1"].gpus == (("n0", 0), ("n0", 1))
    assert plan.assignments["1"].cpus >= 2


def test_tune_shapes_the_jobs_beside_a_sharing_pair_as_without_it() -> None:
    # A pair on GPU 1 splits that GPU's proportional share (3 CPUs: 1 each, rounded down); the
    # resnet18 beside it still gets its best case (9 CPUs, §3.2), as in a round without a pair,
    # rather than every job on the cluster falling back to its proportional share.
    jobs = [make_job(1, model="resnet18"), make_job(2, model="lstm"), make_job(3, model="lstm")]
    snapshot = make_snapshot(servers(1), jobs)
    pair = (("s1", 1),)
    assigned = {
        "1": Assignment((("s1", 0),), 0, 0.0),
        "2": Assignment(pair, 0, 0.0, shares_with=("3",)),
        "3": Assignment(pair, 0, 0.0, shares_with=("2",)),
    }
    shaped = _tune_shape(snapshot, assigned, []).assignments
    assert shaped["1"].cpus == 9
    assert shaped["2"].cpus == shaped["3"].cpus == 1
    assert shaped["2"].shares_with == ("3",)
    assert plan_violations(snapshot, RoundPlan(assignments=shaped), 2) == []
