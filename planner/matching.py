"""The one wrapper around ``scipy.optimize.linear_sum_assignment`` that Mosaic uses.

Every matching in Mosaic (migration relabelling, packing, sharing) goes through
:func:`assign`. It hides two traps of the raw solver: an ``inf`` entry makes SciPy
raise "cost matrix is infeasible", and a rectangular problem always returns a full
matching of the smaller side even where no allowed pair exists. Here forbidden pairs
are given as a mask and never returned.

Objectives, for a cost (or weight) matrix C of shape (n, m) and allowed pairs A:

* ``maximize=False``: among matchings of maximum cardinality within A, one with
  minimum total cost  min sum_{(i,j) in M} C[i,j]  (forbidden pairs are priced above
  any allowed total, so they are used only when unavoidable, then dropped).
* ``maximize=True`` (weights must be >= 0): a matching within A of maximum total
  weight  max sum_{(i,j) in M} C[i,j], of any cardinality. A forbidden pair counts as
  weight 0, i.e. "leave both unmatched", so it never displaces a better allowed pair.

>>> assign([[4.0, 1.0], [2.0, 3.0]])
[(0, 1), (1, 0)]
>>> assign([[10.0, 1.0], [1.0, 0.0]], maximize=True, forbidden=[[False, False], [False, True]])
[(0, 0)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import linear_sum_assignment


def assign(
    matrix: ArrayLike,
    *,
    maximize: bool = False,
    forbidden: ArrayLike | None = None,
) -> list[tuple[int, int]]:
    """Optimal (row, column) pairs, sorted by row; see the module docstring.

    Parameters
    ----------
    matrix : (n, m) array of finite costs (or, with ``maximize``, non-negative weights).
        Entries of forbidden pairs are ignored and may hold anything, ``inf`` included.
    maximize : bool
        Maximise total weight instead of minimising total cost.
    forbidden : (n, m) boolean array, optional
        True where a pair may not be matched. Non-finite entries are forbidden too.
    """
    m = np.array(matrix, dtype=float, copy=True)
    if m.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {m.shape}")
    if m.size == 0:
        return []
    blocked = ~np.isfinite(m)
    if forbidden is not None:
        mask = np.asarray(forbidden, dtype=bool)
        if mask.shape != m.shape:
            raise ValueError(f"forbidden mask has shape {mask.shape}, the matrix {m.shape}")
        blocked |= mask
    allowed = ~blocked
    if not allowed.any():
        return []
    if maximize:
        if (m[allowed] < 0).any():
            raise ValueError("maximize needs non-negative weights on allowed pairs")
        m[blocked] = 0.0
        rows, cols = linear_sum_assignment(m, maximize=True)
        keep = allowed[rows, cols] & (m[rows, cols] > 0)
    else:
        finite = m[allowed]
        # Larger than any total of allowed costs: a forbidden pair is never worth it.
        big = (np.abs(finite).max() + 1.0) * (min(m.shape) + 1)
        m[blocked] = big
        rows, cols = linear_sum_assignment(m)
        keep = allowed[rows, cols]
    return [(int(r), int(c)) for r, c in zip(rows[keep], cols[keep], strict=True)]


def total(matrix: ArrayLike, pairs: list[tuple[int, int]]) -> float:
    """Sum of the matrix entries of ``pairs``."""
    m = np.asarray(matrix, dtype=float)
    return float(sum(m[r, c] for r, c in pairs))


def assign_by_kind(
    kind_weights: ArrayLike,
    kind_allowed: ArrayLike,
    row_kind: ArrayLike,
    col_kind: ArrayLike,
    col_cost: ArrayLike | None = None,
    bonus: Mapping[tuple[int, int], float] | None = None,
) -> list[tuple[int, int]]:
    """A maximum-weight matching of rows and columns that come in a few kinds; sorted by row.

    Row r and column c have weight  K[row_kind[r], col_kind[c]] - col_cost[c] + bonus[(r, c)]
    and may be matched only where ``kind_allowed`` holds. The matching maximises the total
    weight over matchings of any cardinality, as ``assign(..., maximize=True)`` does on the
    full matrix (a pair of weight <= 0 is never returned), but it works on the kinds: a
    min-cost flow source -> row kind (capacity: its rows) -> column kind -> sink, where
    the sink arcs of a column kind are its columns, cheapest ``col_cost`` first (so a kind
    always uses its cheapest columns). Bonus pairs are pooled by kind (exactly: see the
    code). Successive shortest paths (Bellman-Ford on the kinds) push as many units
    at once as stay on a shortest path, so the work grows with the kinds, not the jobs.

    Among optimal matchings it returns a canonical one: the columns of a kind that are
    matched are its cheapest (then lowest index); they go to row kinds in kind order, and
    within a row kind the i-th row (in index order) gets the i-th of its columns (in
    index order). ``linear_sum_assignment`` on the full matrix reaches an optimum of the
    same total, but among tied optima its choice follows rounding in its dual updates,
    which no reduction reproduces.

    >>> assign_by_kind([[2.0, 3.0]], [[True, True]], [0, 0], [0, 1, 1], [0.0, 0.1, 0.2])
    [(0, 1), (1, 2)]
    """
    weights = np.array(kind_weights, dtype=float)
    allowed = np.array(kind_allowed, dtype=bool)
    rk = np.asarray(row_kind, dtype=int)
    ck = np.asarray(col_kind, dtype=int)
    cost = np.zeros(len(ck)) if col_cost is None else np.asarray(col_cost, dtype=float)
    if weights.ndim != 2 or allowed.shape != weights.shape:
        raise ValueError(f"kind weights {weights.shape} and allowed {allowed.shape} must be one 2-D shape")
    if rk.ndim != 1 or ck.ndim != 1 or cost.shape != ck.shape:
        raise ValueError(
            f"row kinds {rk.shape}, column kinds {ck.shape} and column costs {cost.shape} must be 1-D,"
            " one cost per column"
        )
    if not np.isfinite(weights[allowed]).all() or not np.isfinite(cost).all():
        raise ValueError("kind weights of allowed pairs and column costs must be finite")
    if (rk.size and not (rk.min() >= 0 and rk.max() < weights.shape[0])) or (
        ck.size and not (ck.min() >= 0 and ck.max() < weights.shape[1])
    ):
        raise ValueError(f"a row or column kind is outside the {weights.shape} kind matrix")
    extra = dict(bonus or {})
    for r, c in extra:
        if not (0 <= r < len(rk) and 0 <= c < len(ck)):
            raise ValueError(f"bonus pair {(r, c)} is outside {len(rk)} rows x {len(ck)} columns")
    if not rk.size or not ck.size:
        return []
    # Bonus pairs that share no row or column with another are pooled by (row kind, column
    # kind, bonus): the group's rows form one kind, its columns another, with the bonus
    # between the two. Exact: group rows are alike but for their partner, so any flow
    # that pairs k group rows with k group columns is relabelled onto the k real partners.
    # Rows and columns of other bonus pairs become kinds of their own.
    rows_named = Counter(r for r, _ in extra)
    cols_named = Counter(c for _, c in extra)
    pools: dict[tuple[int, int, float], list[tuple[int, int]]] = {}
    for (r, c), value in sorted(extra.items()):
        if rows_named[r] == 1 and cols_named[c] == 1:
            pools.setdefault((int(rk[r]), int(ck[c]), value), []).append((r, c))
    pooled = {pair for pairs_ in pools.values() for pair in pairs_}
    lone_rows = sorted({r for r, c in extra if (r, c) not in pooled})
    lone_cols = sorted({c for r, c in extra if (r, c) not in pooled})
    n_a, n_b = weights.shape
    row_kinds = [*range(n_a), *(a for a, _, _ in pools), *(int(rk[r]) for r in lone_rows)]
    col_kinds = [*range(n_b), *(b for _, b, _ in pools), *(int(ck[c]) for c in lone_cols)]
    row_of = {r: n_a + len(pools) + k for k, r in enumerate(lone_rows)}
    col_of = {c: n_b + len(pools) + k for k, c in enumerate(lone_cols)}
    partner: dict[int, int] = {}  # pooled column -> its row
    for g, pairs_ in enumerate(pools.values()):
        for r, c in pairs_:
            row_of[r], col_of[c], partner[c] = n_a + g, n_b + g, r
    row_groups: list[list[int]] = [[] for _ in row_kinds]
    for r in range(len(rk)):
        row_groups[row_of.get(r, int(rk[r]))].append(r)
    col_groups: list[list[int]] = [[] for _ in col_kinds]
    for c in sorted(range(len(ck)), key=lambda c: (cost[c], c)):
        col_groups[col_of.get(c, int(ck[c]))].append(c)
    w = weights[np.ix_(row_kinds, col_kinds)]
    ok = allowed[np.ix_(row_kinds, col_kinds)]
    for g, (_, _, value) in enumerate(pools):
        w[n_a + g, n_b + g] += value
    for (r, c), value in extra.items():
        if (r, c) not in pooled:
            w[row_of[r], col_of[c]] += value
    flow = _kind_flow(w, ok, [len(g) for g in row_groups], [cost[g] for g in col_groups])
    # Canonical pairs from the kind-level flow (see the docstring).
    per_row_kind: list[list[int]] = [[] for _ in row_groups]
    for b, group in enumerate(col_groups):
        taken = 0
        for a in range(len(row_groups)):
            n = int(flow[a, b])
            per_row_kind[a].extend(group[taken : taken + n])
            taken += n
    pairs: list[tuple[int, int]] = []
    for a, cols in enumerate(per_row_kind):
        mine = [c for c in cols if c in partner and row_of[partner[c]] == a]  # a pool with its own columns
        pairs.extend((partner[c], c) for c in mine)
        busy = {partner[c] for c in mine}
        rest = [c for c in sorted(cols) if c not in set(mine)]
        pairs.extend(zip([r for r in row_groups[a] if r not in busy], rest, strict=False))
    pairs = [(r, c) for r, c in pairs if weights[rk[r], ck[c]] - cost[c] + extra.get((r, c), 0.0) > 0]
    return sorted(pairs)


_EPS = 1e-13  # below this, two path lengths are equal (kind weights are O(1))


def _kind_flow(w: np.ndarray, ok: np.ndarray, supply: list[int], unit_cost: list[np.ndarray]) -> np.ndarray:
    """Units x[a, b] of the max-gain flow (see :func:`assign_by_kind`)."""
    n_a, n_b = w.shape
    x = np.zeros((n_a, n_b), dtype=int)
    used = np.zeros(n_a, dtype=int)
    filled = np.zeros(n_b, dtype=int)
    supply_arr = np.array(supply, dtype=int)
    size = np.array([len(u) for u in unit_cost], dtype=int)
    w = np.where(ok, w, 0.0)
    arc = np.where(ok, -w, np.inf)  # cost of row kind a -> column kind b
    while True:
        # Bellman-Ford from the source over the residual kind graph.
        d_a = np.where(used < supply_arr, 0.0, np.inf)
        pred_a = np.full(n_a, -1)  # -1: straight from the source
        d_b = np.full(n_b, np.inf)
        pred_b = np.full(n_b, -1)
        for _ in range(n_a + n_b + 2):
            via = d_a[:, None] + arc
            best = via.argmin(axis=0)
            cand = via[best, np.arange(n_b)]
            better_b = cand < d_b - _EPS
            d_b = np.where(better_b, cand, d_b)
            pred_b = np.where(better_b, best, pred_b)
            back = np.where(x > 0, d_b[None, :] + w, np.inf)
            best_a = back.argmin(axis=1)
            cand_a = back[np.arange(n_a), best_a]
            better_a = cand_a < d_a - _EPS
            d_a = np.where(better_a, cand_a, d_a)
            pred_a = np.where(better_a, best_a, pred_a)
            if not better_b.any() and not better_a.any():
                break
        else:
            raise RuntimeError("kind matching: Bellman-Ford did not settle (negative cycle)")
        open_b = filled < size
        if not open_b.any():
            return x
        nxt = np.array([u[f] if f < len(u) else np.inf for u, f in zip(unit_cost, filled, strict=True)])
        total = np.where(open_b, d_b + nxt, np.inf)
        b_star = int(total.argmin())
        if not total[b_star] < -_EPS:
            return x
        # The path: b* <- a <- b' <- a' ... <- source.
        path: list[tuple[int, int]] = []  # (a, b) forward arcs; reverse arcs between them
        b = b_star
        for _ in range(n_a + n_b + 1):
            a = int(pred_b[b])
            path.append((a, b))
            if pred_a[a] < 0:
                break
            b = int(pred_a[a])
        else:
            raise RuntimeError("kind matching: a path did not reach the source")
        source_kind = path[-1][0]
        room = int(supply_arr[source_kind] - used[source_kind])
        for k in range(len(path) - 1):
            a_back, b_back = path[k][0], path[k + 1][1]
            room = min(room, int(x[a_back, b_back]))
        rest = np.delete(total, b_star)
        threshold = min(float(rest.min()) if rest.size else np.inf, 0.0)
        units = unit_cost[b_star]
        f = int(filled[b_star])
        push = 1
        while (
            push < room
            and f + push < len(units)
            and d_b[b_star] + units[f + push] < -_EPS
            and d_b[b_star] + units[f + push] <= threshold
        ):
            push += 1
        for k, (a, b) in enumerate(path):
            x[a, b] += push
            if k + 1 < len(path):
                x[a, path[k + 1][1]] -= push
        used[source_kind] += push
        filled[b_star] += push
