"""The Hungarian wrapper against brute force on every small case hypothesis finds."""

from itertools import permutations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.matching import assign, total


def brute_force(matrix, allowed, maximize):
    n, m = matrix.shape
    best_key = None
    # Every partial matching: each row picks a distinct column or nothing.
    for cols in permutations([*range(m), *([None] * n)], n):
        if any(c is not None for c in cols) and len({c for c in cols if c is not None}) != sum(
            c is not None for c in cols
        ):
            continue
        pairs = [(r, c) for r, c in enumerate(cols) if c is not None]
        if any(not allowed[r, c] for r, c in pairs):
            continue
        value = sum(matrix[r, c] for r, c in pairs)
        key = value if maximize else (-len(pairs), value)
        if best_key is None or (key > best_key if maximize else key < best_key):
            best_key = key
    return best_key


@st.composite
def problems(draw):
    n = draw(st.integers(1, 4))
    m = draw(st.integers(1, 4))
    values = draw(st.lists(st.integers(0, 9), min_size=n * m, max_size=n * m))
    mask = draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m))
    return np.array(values, float).reshape(n, m), np.array(mask).reshape(n, m)


@given(problems())
def test_minimisation_matches_brute_force(problem):
    matrix, forbidden = problem
    pairs = assign(matrix, forbidden=forbidden)
    assert all(not forbidden[r, c] for r, c in pairs)
    assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
    best = brute_force(matrix, ~forbidden, maximize=False)
    assert (-len(pairs), total(matrix, pairs)) == best


@given(problems())
def test_maximisation_matches_brute_force(problem):
    matrix, forbidden = problem
    pairs = assign(matrix, maximize=True, forbidden=forbidden)
    assert all(not forbidden[r, c] for r, c in pairs)
    assert total(matrix, pairs) == brute_force(matrix, ~forbidden, maximize=True)


def test_infinite_entries_are_forbidden_not_an_error():
    matrix = [[np.inf, 1.0], [2.0, np.inf]]
    assert assign(matrix) == [(0, 1), (1, 0)]
    assert assign([[np.inf]]) == []


def test_a_row_with_nothing_allowed_stays_unmatched():
    pairs = assign([[1.0, 2.0], [5.0, 5.0]], forbidden=[[False, False], [True, True]])
    assert pairs == [(0, 0)]


def test_max_weight_prefers_one_heavy_pair_over_two_light_ones():
    matrix = [[10.0, 1.0], [1.0, 0.0]]
    forbidden = [[False, False], [False, True]]
    assert assign(matrix, maximize=True, forbidden=forbidden) == [(0, 0)]


def test_rectangular_and_empty():
    assert assign(np.zeros((0, 3))) == []
    assert assign([[3.0, 1.0, 2.0]]) == [(0, 1)]
    assert assign([[3.0], [1.0], [2.0]]) == [(1, 0)]


def test_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        assign([1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        assign([[-1.0]], maximize=True)
    with pytest.raises(ValueError, match="mask has shape"):
        assign([[1.0]], forbidden=[[True, False]])


def test_docstring_examples():
    import doctest

    import planner.matching

    assert doctest.testmod(planner.matching).failed == 0
