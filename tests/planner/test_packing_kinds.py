"""The kind-level packing and sharing paths against the full-matrix / per-host reference.

The packing stages used to build the full placed x pending matrix and run the Hungarian
(``assign``) or a greedy argmax on it; the sharing stages evaluated every host for every
new job. The fast paths work per kind. Here each is compared with its reference on
random instances, ties included:

* greedy (gavel) packing and both sharing stages: identical decisions, always;
* the Hungarian: the same total weight always, the same pairs whenever the optimum is
  unique (among tied optima ``linear_sum_assignment`` picks by rounding in its duals,
  which no reduction reproduces; the kind-level flow returns its documented canonical one).
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import permutations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan_round
from planner.config import build_scheduler, preset
from planner.core.model import JobState, Outcome
from planner.matching import assign, assign_by_kind, total
from planner.pipeline import _protect_running
from planner.policies.common import remaining_estimate_s
from planner.policies.packing import ClassGraph, GavelPacking, PackingOptions
from planner.policies.sharing import _Candidate, _Round
from planner.sharing.pair import SubBatchOption, best_setting, concurrent_completion_s
from planner.stages import Draft
from tests.builders import make_job, make_nodes, make_snapshot, profiles

STORE = profiles()


# -- the Hungarian on kinds ------------------------------------------------------------------


@st.composite
def kind_problems(draw, max_rows=5, max_cols=5, max_bonus=2):
    """Rows and columns of a few kinds; integer kind weights make ties common."""
    n_a, n_b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    integral = draw(st.booleans())
    cell = st.integers(1, 3).map(float) if integral else st.floats(1.0, 3.0, allow_nan=False)
    weights = np.array(draw(st.lists(cell, min_size=n_a * n_b, max_size=n_a * n_b))).reshape(n_a, n_b)
    allowed = np.array(draw(st.lists(st.booleans(), min_size=n_a * n_b, max_size=n_a * n_b)))
    allowed = allowed.reshape(n_a, n_b)
    rows = draw(st.lists(st.integers(0, n_a - 1), min_size=1, max_size=max_rows))
    cols = draw(st.lists(st.integers(0, n_b - 1), min_size=1, max_size=max_cols))
    tie = 1e-9 * np.arange(len(cols)) if draw(st.booleans()) else np.zeros(len(cols))
    bonus = {}
    value = st.sampled_from([0.05, 0.05, 0.0, 0.5, 2.0])
    for r, c in draw(st.lists(st.tuples(st.integers(0, len(rows) - 1), st.integers(0, len(cols) - 1)),
                              max_size=max_bonus)):  # fmt: skip
        bonus[(r, c)] = draw(value)
    return weights, allowed, np.array(rows), np.array(cols), tie, bonus


def full(problem):
    weights, allowed, rk, ck, tie, bonus = problem
    matrix = weights[np.ix_(rk, ck)] - tie[None, :]
    for (r, c), value in bonus.items():
        matrix[r, c] += value
    return np.maximum(matrix, 0.0), ~allowed[np.ix_(rk, ck)]


def optima(matrix, forbidden):
    """Every maximum-weight matching (pairs with weight > 0), by brute force."""
    n, m = matrix.shape
    found = {}
    for cols in permutations([*range(m), *([None] * n)], n):
        pairs = tuple((r, c) for r, c in enumerate(cols) if c is not None)
        if any(forbidden[r, c] or matrix[r, c] <= 0 for r, c in pairs):
            continue
        found[pairs] = total(matrix, list(pairs))
    best = max(found.values(), default=0.0)
    return best, {p for p, v in found.items() if v >= best - 1e-12}


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@settings(max_examples=300, deadline=None)
@given(kind_problems())
def test_kind_matching_is_optimal_and_equals_the_hungarian_when_the_optimum_is_unique(problem):
    matrix, forbidden = full(problem)
    new = assign_by_kind(*problem)
    old = assign(matrix, maximize=True, forbidden=forbidden)
    assert len({r for r, _ in new}) == len(new) == len({c for _, c in new})
    assert all(not forbidden[r, c] for r, c in new)
    assert math.isclose(total(matrix, new), total(matrix, old), rel_tol=0, abs_tol=1e-9)
    best, winners = optima(matrix, forbidden)
    assert math.isclose(total(matrix, new), best, rel_tol=0, abs_tol=1e-9)
    if len(winners) == 1:
        assert new == old


@settings(max_examples=200, deadline=None)
@given(kind_problems(max_rows=8, max_cols=12))
def test_kind_matching_breaks_ties_canonically(problem):
    # Matched columns of a kind are its first (cheapest) ones; within a row kind the
    # i-th row gets the i-th column; the total equals the Hungarian's.
    weights, _, rk, ck, tie, bonus = problem
    matrix, forbidden = full(problem)
    new = assign_by_kind(*problem)
    old = assign(matrix, maximize=True, forbidden=forbidden)
    assert math.isclose(total(matrix, new), total(matrix, old), rel_tol=0, abs_tol=1e-9)
    special_rows = {r for r, _ in bonus}
    special_cols = {c for _, c in bonus}
    matched_cols = {c for _, c in new}
    for b in range(weights.shape[1]):
        plain = [c for c in range(len(ck)) if ck[c] == b and c not in special_cols]
        used = [c in matched_cols for c in sorted(plain, key=lambda c: (tie[c], c))]
        assert used == sorted(used, reverse=True)  # a prefix
    for a in range(weights.shape[0]):
        pairs = [(r, c) for r, c in new if rk[r] == a and r not in special_rows]
        assert [c for _, c in pairs] == sorted(c for _, c in pairs)
        plain_rows = [r for r in range(len(rk)) if rk[r] == a and r not in special_rows]
        assert [r for r, _ in pairs] == plain_rows[: len(pairs)]


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@settings(max_examples=300, deadline=None)
@given(kind_problems(max_bonus=6))
def test_kind_matching_with_many_bonus_pairs_is_optimal(problem):
    # Bonus pairs pooled (a row and a column named once), and rows or columns named by
    # several pairs (a node each), mixed: the total is the brute-force optimum.
    matrix, forbidden = full(problem)
    new = assign_by_kind(*problem)
    assert len({r for r, _ in new}) == len(new) == len({c for _, c in new})
    assert all(not forbidden[r, c] and matrix[r, c] > 0 for r, c in new)
    best, _ = optima(matrix, forbidden)
    assert math.isclose(total(matrix, new), best, rel_tol=0, abs_tol=1e-9)


def test_kind_matching_scales_with_kinds_not_jobs():
    rng = np.random.default_rng(0)
    weights = rng.uniform(1.0, 2.0, (20, 20))
    allowed = rng.random((20, 20)) < 0.8
    rk, ck = rng.integers(0, 20, 1500), rng.integers(0, 20, 5000)
    tie = 1e-9 * np.arange(5000)
    # Hundreds of jobs already sharing (the keep bonus), over most kind pairs: the
    # network grows by a node pair per (row kind, column kind), not per job.
    pairs = zip(rng.permutation(1500)[:700], rng.permutation(5000)[:700], strict=True)
    keep = {(int(r), int(c)): 0.05 for r, c in pairs}
    problem = (weights, allowed, rk, ck, tie, keep)
    new = assign_by_kind(*problem)
    matrix, forbidden = full(problem)
    old = assign(matrix, maximize=True, forbidden=forbidden)
    assert math.isclose(total(matrix, new), total(matrix, old), rel_tol=0, abs_tol=1e-9)


def test_kind_matching_rejects_bad_input():
    with pytest.raises(ValueError, match="outside"):
        assign_by_kind([[1.0]], [[True]], [0, 1], [0])
    with pytest.raises(ValueError, match="bonus pair"):
        assign_by_kind([[1.0]], [[True]], [0], [0], None, {(0, 3): 1.0})
    with pytest.raises(ValueError, match="finite"):
        assign_by_kind([[math.inf]], [[True]], [0], [0])


# -- greedy (gavel) packing on kinds -----------------------------------------------------------


def reference_greedy(graph):
    """The former GavelPacking.match: argmax over the full matrix, column by column."""
    free = np.ones(len(graph.rows), dtype=bool)
    pairs = []
    for c in range(len(graph.cols)):
        usable = free & ~graph.forbidden[:, c]
        if not usable.any():
            continue
        r = int(np.argmax(np.where(usable, graph.weights[:, c], -np.inf)))
        free[r] = False
        pairs.append((r, c))
    return pairs


@settings(max_examples=300, deadline=None)
@given(kind_problems(max_rows=8, max_cols=10), st.sampled_from([0.0, 0.05]))
def test_greedy_packing_on_kinds_equals_the_full_matrix_argmax(problem, keep_bonus):
    weights, allowed, rk, ck, tie, bonus = problem
    rows = [make_job(f"r{k}") for k in range(len(rk))]
    cols = [make_job(f"c{k}") for k in range(len(ck))]
    plans = {(a, b): (None, None) for a in range(weights.shape[0]) for b in range(weights.shape[1])}
    graph = ClassGraph(rows, cols, weights, allowed, rk, ck, tie, tuple(bonus), keep_bonus, plans)
    stage = GavelPacking(PackingOptions(), None)  # type: ignore[arg-type]
    got = [(int(p.id[1:]), int(q.id[1:])) for p, q, _ in stage.match(graph)]
    assert got == reference_greedy(graph)


# -- sharing (SJF-BSBF, SJF-FFS) on kinds ---------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.floats(0.0, 1e5), st.just(math.inf)), min_size=1, max_size=6),
    st.one_of(st.floats(0.0, 1e5), st.just(math.inf)),
    st.lists(st.tuples(st.floats(1.0, 3.0), st.floats(1.0, 3.0), st.floats(1.0, 3.0)), max_size=3),
)
def test_vectorised_theorem_1_equals_best_setting(running, new_s, raw):
    options = [SubBatchOption(None, 1, s, xr, xn) for s, xr, xn in raw]
    width = max(1, len(options))
    shape = (len(running), width)
    slowdown, xi_r, xi_n, valid = np.ones(shape), np.ones(shape), np.ones(shape), np.zeros(shape, bool)
    for k, o in enumerate(options):
        slowdown[:, k], xi_r[:, k], xi_n[:, k], valid[:, k] = o.slowdown, o.xi_running, o.xi_new, True
    ok, avg = concurrent_completion_s(np.array(running), new_s, slowdown, xi_r, xi_n, valid)
    for k, r in enumerate(running):
        d = best_setting(r, new_s, options)
        assert bool(ok[k]) == d.concurrent
        if d.concurrent:
            assert avg[k] == d.avg_completion_s  # bit for bit


def reference_pack(stage, snapshot, ordered, draft):
    """The former per-host Algorithm 1 loop (every host evaluated for every new job)."""
    from planner.policies.sharing import _NEVER_SHARED, _protected

    state = _Round.start(snapshot, ordered, draft)
    outcomes = dict(draft.outcomes)
    added = False
    for job in ordered:
        if not state.hosts:
            break
        if (
            job.id in state.assignments
            or job.is_running
            or _protected(job)
            or draft.outcomes.get(job.id) in _NEVER_SHARED
        ):
            continue
        choice = reference_choose(stage, state, job)
        if choice is not None:
            slots, partners, plan = choice
            state.share(job, slots, partners, plan)
            outcomes[job.id] = Outcome.PLACED
            added = True
    if not added:
        return draft
    assignments = {j.id: state.assignments[j.id] for j in ordered if j.id in state.assignments}
    return Draft(assignments=assignments, outcomes=outcomes)


def reference_choose(stage, state, job):
    from profiles.iteration import accumulation_plan

    g = job.num_gpus
    largest = state.largest_node(job)
    one_node = g <= largest
    if not one_node and largest == 0:
        return None
    nodes = 1 if one_node else math.ceil(g / largest)
    candidates = {}
    for host in state.hosts:
        a = state.assignments[host]
        if not all(job.accepts_type(state.snapshot.node(n).gpu_type) for n in a.nodes):
            continue
        options = stage.model.options(state.jobs[host], a.plan, job, state.gpu_type(a), nodes)
        if not options.fitting:
            continue
        if stage.component == "bsbf sharing":
            d = best_setting(
                state.host_remaining_s(stage.model, host), remaining_estimate_s(job), options.contenders
            )
            if d.concurrent:
                candidates[host] = _Candidate(host, (d.avg_completion_s,), options.fitting)
        else:
            candidates[host] = _Candidate(host, (), options.fitting)
    if not candidates:
        return None
    node_rank = {n.name: i for i, n in enumerate(state.snapshot.nodes)}
    entries = [
        (c.key, node_rank[s[0]], s, c.host)
        for c in candidates.values()
        for s in state.assignments[c.host].gpus
    ]
    ranked = sorted(entries, key=lambda x: (x[0], x[1], x[2]))
    if not one_node:
        chosen = ranked[:g]
        slots = [(h, s) for _, _, s, h in chosen] if len(chosen) == g else None
    else:
        per_node = {}
        for entry in ranked:
            per_node.setdefault(entry[2][0], []).append(entry)
        best = None
        for node, entries in per_node.items():
            if len(entries) < g:
                continue
            cost = (entries[g - 1][0], node_rank[node])
            if best is None or cost < best[0]:
                best = (cost, [(h, s) for _, _, s, h in entries[:g]])
        slots = None if best is None else best[1]
    if slots is None:
        return None
    partners = list(dict.fromkeys(h for h, _ in slots))
    setting = stage.settle(state, job, [candidates[h] for h in partners])
    if setting is None:
        return None
    plan = job.plan
    if setting.micro_batch is not None and job.batch_size is not None:
        plan = accumulation_plan(job.batch_size, setting.micro_batch, job.plan) or None
    return [s for _, s in slots], partners, plan


MODELS = [("resnet18", 128), ("resnet50", 64), ("transformer", 64), ("lm", 20), ("recommendation", 2048),
          ("a3c", 4), ("cyclegan", 1)]  # fmt: skip


@st.composite
def sharing_rounds(draw):
    """A mid-trace round: some jobs running (placed by a first FIFO round), others waiting."""
    n_nodes = draw(st.integers(1, 3))
    mixed = draw(st.booleans())
    nodes = [*make_nodes(n_nodes, gpus=4, gpu_type="v100")]
    if mixed:
        nodes += make_nodes(1, gpus=4, gpu_type="k80", prefix="k")
    n_jobs = draw(st.integers(1, 24))
    jobs = []
    for k in range(n_jobs):
        model, batch = draw(st.sampled_from(MODELS))
        jobs.append(
            make_job(
                f"j{k}",
                draw(st.sampled_from([1, 1, 1, 2, 4, 8])),
                submit=float(k),
                model=model,
                batch_size=batch,
                duration_s=draw(st.sampled_from([600.0, 3600.0, 7200.0, 36000.0])),
            )
        )
    first = plan_round(make_snapshot(nodes, jobs), build_scheduler(preset("fifo")))
    later = []
    for job in jobs:
        a = first.assignments.get(job.id)
        later.append(_with_state(job, a, draw(st.floats(0.0, 0.9))))
    more = draw(st.integers(0, 12))
    for k in range(more):
        model, batch = draw(st.sampled_from(MODELS))
        later.append(
            make_job(f"p{k}", draw(st.sampled_from([1, 1, 2, 4])), submit=100.0 + k, model=model,
                     batch_size=batch, duration_s=draw(st.sampled_from([300.0, 3600.0, 20000.0])))
        )  # fmt: skip
    return make_snapshot(nodes, later, time_s=3600.0)


def _with_state(job, assignment, done):
    if assignment is None:
        return job
    return replace(
        job,
        state=JobState.RUNNING,
        assignment=assignment,
        remaining_s=(job.duration_s or 0) * (1 - done),
    )


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@settings(max_examples=60, deadline=None)
@given(sharing_rounds(), st.sampled_from(["sjf-bsbf", "sjf-ffs"]))
def test_sharing_on_kinds_decides_as_the_per_host_loop(snapshot, name):
    fast = build_scheduler(preset(name), STORE)
    slow = build_scheduler(preset(name), STORE)
    ordered = _protect_running(fast.ordering.order(snapshot), fast.preemptive)
    draft = fast.placement.place(snapshot, ordered)
    got = fast.packing.pack(snapshot, ordered, draft)
    want = reference_pack(slow.packing, snapshot, ordered, draft)
    assert got == want
