"""Theorem 1 (the pair rule) and Algorithm 2 (the micro-batch search) of SJF-BSBF."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.sharing import PairTimes, SubBatchOption, best_setting, completion_times
from planner.sharing.pair import average_completion_s

times = st.floats(min_value=1.0, max_value=1e5)
ratios = st.floats(min_value=0.5, max_value=6.0)


def option(xi_running=1.5, xi_new=1.5, slowdown=1.0, micro=None, steps=1):
    return SubBatchOption(micro, steps, slowdown, xi_running, xi_new)


@given(times, times, ratios, ratios)
def test_theorem_1_the_best_insertion_time_is_now_or_after_the_running_job(r, n, xr, xn):
    t = PairTimes(r, n, xr, xn)
    ends = min(average_completion_s(t, 0.0), average_completion_s(t, r))
    scan = min(average_completion_s(t, r * k / 2000) for k in range(2001))
    assert ends <= scan + 1e-9 * max(r, n)


@given(times, times, ratios, ratios, st.floats(min_value=0.0, max_value=1.0))
def test_work_is_conserved_whatever_the_insertion_time(r, n, xr, xn, frac):
    # Each job's completion covers its solo work: alone at speed 1, shared at 1/ξ.
    t = PairTimes(r, n, xr, xn)
    end_r, end_n = completion_times(t, frac * r)
    assert end_r >= min(r, xr * r) - 1e-6 and end_n >= frac * r + min(n, xn * n) - 1e-6
    assert max(end_r, end_n) <= frac * r + max(xr, 1) * r + max(xn, 1) * n + 1e-6


def test_inserting_after_the_running_job_is_sequential():
    assert completion_times(PairTimes(3600, 600, 2.0, 2.0), 3600) == (3600, 4200)
    assert completion_times(PairTimes(3600, 600, 2.0, 2.0), 9999) == (3600, 4200)  # clamped to R


def test_hand_computed_concurrent_case():
    # R = 3600, N = 600, ξ = 1.5: the new job needs 900 s shared and ends first; the
    # running job has done 600 s of work by then and needs 3000 s more alone.
    assert completion_times(PairTimes(3600, 600, 1.5, 1.5), 0) == (3900, 900)
    d = best_setting(3600, 600, [option()])
    assert d.concurrent and d.concurrent_s == 2400 and d.sequential_s == (3600 + 4200) / 2


def test_without_interference_sharing_always_wins():
    d = best_setting(100, 5000, [option(1.0, 1.0)])
    assert d.concurrent and d.avg_completion_s < d.sequential_s


def test_heavy_interference_with_a_long_new_job_waits():
    # ξ = 3 on both: shared, the short running job (600 s) would take 1800 s.
    d = best_setting(600, 3600, [option(3.0, 3.0)])
    assert not d.concurrent and d.avg_completion_s == d.sequential_s == (600 + 600 + 3600) / 2


def test_a_tie_waits():
    # ξ = 2 both, N = R/2: concurrent sum = R + 3N = 2R + N = sequential sum.
    assert not best_setting(1000, 500, [option(2.0, 2.0)]).concurrent


@pytest.mark.parametrize(("r", "n"), [(math.inf, 10.0), (10.0, math.inf)])
def test_unknown_sizes_wait(r, n):
    assert not best_setting(r, n, [option(1.0, 1.0)]).concurrent


def test_no_option_that_fits_means_waiting():
    d = best_setting(1000, 100, [])
    assert not d.concurrent and d.option is None


def test_algorithm_2_takes_the_micro_batch_with_the_best_pair_jct():
    # Full batch interferes heavily; half the batch costs 10 % more time but interferes less.
    full = option(2.5, 2.5, 1.0, micro=None, steps=1)
    half = option(1.3, 1.4, 1.1, micro=64, steps=2)
    d = best_setting(7200, 1800, [full, half])
    expected = min(
        (average_completion_s(PairTimes(7200, 1800 * o.slowdown, o.xi_running, o.xi_new), 0), o)
        for o in (full, half)
    )
    assert d.option == expected[1] == half and d.concurrent_s == expected[0]


@given(times, times, st.lists(st.tuples(ratios, ratios, st.floats(1.0, 3.0)), min_size=1, max_size=6))
def test_the_verdict_is_never_worse_than_either_choice(r, n, opts):
    options = [option(a, b, s) for a, b, s in opts]
    d = best_setting(r, n, options)
    assert d.avg_completion_s <= d.sequential_s
    best = min(average_completion_s(PairTimes(r, n * o.slowdown, o.xi_running, o.xi_new), 0) for o in options)
    assert d.concurrent == (best < d.sequential_s)
    assert d.avg_completion_s == pytest.approx(min(best, d.sequential_s))


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="interference ratios"):
        PairTimes(1, 1, 0.0, 1.0)
    with pytest.raises(ValueError, match="solo times"):
        PairTimes(-1, 1, 1.0, 1.0)


@given(
    times,
    times,
    st.lists(st.tuples(ratios, ratios, st.floats(1.0, 3.0)), min_size=1, max_size=8),
)
def test_dropping_dominated_micro_batches_never_changes_the_verdict(r, n, opts):
    from planner.policies.sharing import _undominated

    options = [option(a, b, s, micro=k) for k, (a, b, s) in enumerate(opts)]
    full, pruned = best_setting(r, n, options), best_setting(r, n, _undominated(options))
    assert full.concurrent == pruned.concurrent
    assert full.avg_completion_s == pytest.approx(pruned.avg_completion_s)
