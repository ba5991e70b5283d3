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
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import bellman_ford, dijkstra


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
    min-cost flow (:class:`_KindNetwork`) whose nodes are the kinds plus one node per group
    of bonus pairs, so the work grows with the kinds and the bonus pairs, not the jobs.

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
    net = _KindNetwork(weights, allowed, rk, ck, cost, extra)
    net.solve()
    pairs = [(r, c) for r, c in net.pairs() if weights[rk[r], ck[c]] - cost[c] + extra.get((r, c), 0.0) > 0]
    return sorted(pairs)


_EPS = 1e-13  # below this, two path lengths are equal (kind weights are O(1))


class _KindNetwork:
    """The min-cost flow behind :func:`assign_by_kind`.

    Nodes: the source; a hub per row kind and per column kind; a node per group of bonus
    rows and per group of bonus columns. A bonus pair that shares no row or column with
    another is pooled with the others of its (row kind, column kind, bonus): the pool's
    rows form one node, its columns another, joined by an arc of weight K + bonus
    (exact: a pool's rows are alike but for their partner, so k units on that arc are k
    of the real pairs). Rows and columns named by several bonus pairs get a node each,
    with an arc per pair. Arcs, each of cost -weight:

        source -> row node (capacity: its rows), bonus row node -> its row kind's hub,
        row hub a -> column hub b (weight K[a, b], where allowed), column hub -> each
        bonus column node of its kind, bonus row node -> bonus column node (K + bonus),
        column node -> sink: one arc per column, of cost col_cost (cheapest used first).

    So a row and a column not joined by a bonus meet through their two hubs at weight
    K: the network has (row kinds x column kinds) + O(bonus pairs) arcs whatever the
    number of jobs. Successive shortest paths with Johnson potentials (Dijkstra on the
    reduced costs, SciPy's) push, along each path, as many units as stay on a shortest
    path, so the column costs (distinct priority ties) do not cost a path each.
    """

    def __init__(
        self,
        weights: np.ndarray,
        allowed: np.ndarray,
        rk: np.ndarray,
        ck: np.ndarray,
        cost: np.ndarray,
        extra: dict[tuple[int, int], float],
    ) -> None:
        self.kinds: tuple[int, int] = weights.shape  # (row kinds, column kinds)
        self.cost = cost
        n_a, n_b = weights.shape
        rows_named = Counter(r for r, _ in extra)
        cols_named = Counter(c for _, c in extra)
        pools: dict[tuple[int, int, float], list[tuple[int, int]]] = {}
        for (r, c), value in sorted(extra.items()):
            if rows_named[r] == 1 and cols_named[c] == 1:
                pools.setdefault((int(rk[r]), int(ck[c]), value), []).append((r, c))
        self.pools = list(pools.values())
        pooled = {pair for pairs_ in self.pools for pair in pairs_}
        lone_rows = sorted({r for r, c in extra if (r, c) not in pooled})
        lone_cols = sorted({c for r, c in extra if (r, c) not in pooled})
        n_p = len(self.pools)
        # Row nodes: hubs 0..n_a-1, pools, lone rows; column nodes likewise.
        self.row_hub = [*range(n_a), *(a for a, _, _ in pools), *(int(rk[r]) for r in lone_rows)]
        self.col_hub = [*range(n_b), *(b for _, b, _ in pools), *(int(ck[c]) for c in lone_cols)]
        row_node = {r: n_a + n_p + k for k, r in enumerate(lone_rows)}
        col_node = {c: n_b + n_p + k for k, c in enumerate(lone_cols)}
        for g, pairs_ in enumerate(self.pools):
            for r, c in pairs_:
                row_node[r], col_node[c] = n_a + g, n_b + g
        self.row_members: list[list[int]] = [[] for _ in self.row_hub]
        for r in range(len(rk)):
            self.row_members[row_node.get(r, int(rk[r]))].append(r)
        self.col_members: list[list[int]] = [[] for _ in self.col_hub]
        for c in sorted(range(len(ck)), key=lambda c: (cost[c], c)):
            self.col_members[col_node.get(c, int(ck[c]))].append(c)
        n_r, n_c = len(self.row_hub), len(self.col_hub)
        # Graph node ids: 0 the source, 1..n_r the row nodes, then the column nodes.
        self.n_r = n_r
        self.n_nodes = 1 + n_r + n_c
        tails: list[int] = []
        heads: list[int] = []
        costs: list[float] = []
        caps: list[int] = []
        big = len(rk)

        def add(tail: int, head: int, arc_cost: float, cap: int) -> None:
            tails.append(tail)
            heads.append(head)
            costs.append(arc_cost)
            caps.append(cap)

        for i, members in enumerate(self.row_members):
            if members:
                add(0, 1 + i, 0.0, len(members))
        for i in range(n_a, n_r):
            add(1 + i, 1 + self.row_hub[i], 0.0, len(self.row_members[i]))
        for a in range(n_a):
            for b in range(n_b):
                if allowed[a, b]:
                    add(1 + a, 1 + n_r + b, -float(weights[a, b]), big)
        for j in range(n_b, n_c):
            add(1 + n_r + self.col_hub[j], 1 + n_r + j, 0.0, len(self.col_members[j]))
        self.bonus_arc: dict[tuple[int, int], int] = {}  # (row node, column node) -> arc
        self.pool_of_arc: dict[tuple[int, int], int] = {}
        self.lone_pair: dict[tuple[int, int], tuple[int, int]] = {}
        for g, (a, b, value) in enumerate(pools):
            if allowed[a, b]:
                self.pool_of_arc[(n_a + g, n_b + g)] = g
                self.bonus_arc[(n_a + g, n_b + g)] = len(tails)
                add(1 + n_a + g, 1 + n_r + n_b + g, -float(weights[a, b] + value), len(self.pools[g]))
        for (r, c), value in sorted(extra.items()):
            if (r, c) not in pooled and allowed[rk[r], ck[c]]:
                i, j = row_node[r], col_node[c]
                self.lone_pair[(i, j)] = (r, c)
                self.bonus_arc[(i, j)] = len(tails)
                add(1 + i, 1 + n_r + j, -float(weights[rk[r], ck[c]] + value), 1)
        self.tail = np.array(tails, dtype=np.int64)
        self.head = np.array(heads, dtype=np.int64)
        self.arc_cost = np.array(costs, dtype=float)
        self.cap = np.array(caps, dtype=np.int64)
        self.flow = np.zeros(len(tails), dtype=np.int64)
        self.arc_of = {(int(t), int(h)): e for e, (t, h) in enumerate(zip(tails, heads, strict=True))}
        # The residual graph: every arc forward (entries 0..E-1) and backward (E..2E-1);
        # no two share a (tail, head), as no arc has an opposite. slot_arc[k] is the entry
        # stored in the k-th slot of the CSR data.
        n_arcs = len(tails)
        entry = np.arange(1, 2 * n_arcs + 1, dtype=float)
        self.residual = csr_matrix(
            (entry, (np.concatenate([self.tail, self.head]), np.concatenate([self.head, self.tail]))),
            shape=(self.n_nodes, self.n_nodes),
        )
        self.slot_arc = self.residual.data.astype(np.int64) - 1
        self.unit_cost = [cost[m] for m in self.col_members]
        self.filled = np.zeros(n_c, dtype=np.int64)

    def _distances(self, potential: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shortest path lengths (reduced by ``potential``) from the source in the residual
        graph, and predecessors. The graph's structure is fixed (every arc both ways); an
        arc not in the residual graph, or at a node no longer reachable, weighs ``inf``."""
        n_arcs = len(self.tail)
        forward = np.where(self.flow < self.cap, self.arc_cost, np.inf)
        backward = np.where(self.flow > 0, -self.arc_cost, np.inf)
        values = np.empty(2 * n_arcs)
        with np.errstate(invalid="ignore"):  # inf - inf at unreachable nodes: no arc
            values[:n_arcs] = forward + potential[self.tail] - potential[self.head]
            values[n_arcs:] = backward + potential[self.head] - potential[self.tail]
        values[~np.isfinite(values)] = np.inf
        # Rounding may leave a shortest-path arc a hair below zero.
        np.maximum(values, 0.0, out=values)
        self.residual.data[:] = values[self.slot_arc]
        dist, pred = dijkstra(self.residual, indices=0, return_predecessors=True)
        return dist, pred

    def _initial_potential(self) -> np.ndarray:
        """Shortest path lengths from the source before any flow (arcs go forward only)."""
        graph = csr_matrix((self.arc_cost, (self.tail, self.head)), shape=(self.n_nodes, self.n_nodes))
        dist: np.ndarray = bellman_ford(graph, indices=0)
        return dist

    def solve(self) -> None:
        """Successive shortest paths until no path to the sink gains weight."""
        first_col = 1 + self.n_r
        size = np.array([len(u) for u in self.unit_cost], dtype=np.int64)
        next_cost = np.array([u[0] if len(u) else np.inf for u in self.unit_cost])
        potential = self._initial_potential()
        while True:
            dist, pred = self._distances(potential)
            # The new shortest lengths; a node unreachable now stays so (residual arcs
            # appear only along a path, between nodes the path reached).
            potential = potential + dist
            total = potential[first_col:] + next_cost
            j_star = int(total.argmin())
            if not total[j_star] < -_EPS:
                return
            path = self._path(pred, first_col + j_star)
            room = min(int(self.cap[e] - self.flow[e] if forward else self.flow[e]) for e, forward in path)
            total[j_star] = np.inf
            threshold = min(float(total.min()), 0.0)
            reach = potential[first_col + j_star]
            units = self.unit_cost[j_star]
            f = int(self.filled[j_star])
            push = 1
            while (
                push < room
                and f + push < size[j_star]
                and reach + units[f + push] < -_EPS
                and reach + units[f + push] <= threshold
            ):
                push += 1
            for e, forward in path:
                self.flow[e] += push if forward else -push
            self.filled[j_star] += push
            next_cost[j_star] = units[f + push] if f + push < size[j_star] else np.inf

    def _path(self, pred: np.ndarray, node: int) -> list[tuple[int, bool]]:
        """The arcs (arc, forward?) of the shortest path from the source to ``node``."""
        path: list[tuple[int, bool]] = []
        for _ in range(self.n_nodes):
            before = int(pred[node])
            if before < 0:
                raise RuntimeError("kind matching: a path did not reach the source")
            forward = self.arc_of.get((before, node))
            if forward is not None and self.flow[forward] < self.cap[forward]:
                path.append((forward, True))
            else:
                path.append((self.arc_of[(node, before)], False))
            node = before
            if node == 0:
                return path
        raise RuntimeError("kind matching: a path did not reach the source")

    def _units(self, tail: int, head: int) -> int:
        """Units of flow on the arc from node ``tail`` to node ``head`` (0: no such arc)."""
        e = self.arc_of.get((tail, head))
        return 0 if e is None else int(self.flow[e])

    def pairs(self) -> list[tuple[int, int]]:
        """The canonical matching of the flow (see :func:`assign_by_kind`)."""
        n_a, n_b = self.kinds
        used_cols = [m[: int(f)] for m, f in zip(self.col_members, self.filled, strict=True)]
        pairs: list[tuple[int, int]] = []
        busy_rows: set[int] = set()
        busy_cols: set[int] = set()
        for (i, j), e in sorted(self.bonus_arc.items()):
            units = int(self.flow[e])
            if not units:
                continue
            if (i, j) in self.pool_of_arc:
                # k units on a pool's arc: its k cheapest used columns with their partners.
                partner = {c: r for r, c in self.pools[self.pool_of_arc[(i, j)]]}
                chosen = [(partner[c], c) for c in used_cols[j] if c not in busy_cols][:units]
            else:
                chosen = [self.lone_pair[(i, j)]]
            pairs.extend(chosen)
            busy_rows.update(r for r, _ in chosen)
            busy_cols.update(c for _, c in chosen)
        # The rest meet through the hubs: each hub's rows (index order) and columns.
        hub_rows: list[list[int]] = [[] for _ in range(n_a)]
        for i, a in enumerate(self.row_hub):
            if i < n_a:
                hub_rows[a].extend(self.row_members[i][: self._units(0, 1 + i)])
            else:
                free = [r for r in self.row_members[i] if r not in busy_rows]
                hub_rows[a].extend(free[: self._units(1 + i, 1 + a)])
        hub_cols: list[list[int]] = [[] for _ in range(n_b)]
        for j, b in enumerate(self.col_hub):
            hub_cols[b].extend(c for c in used_cols[j] if c not in busy_cols)
        per_row_hub: list[list[int]] = [[] for _ in range(n_a)]
        for b in range(n_b):
            group = sorted(hub_cols[b], key=lambda c: (self.cost[c], c))
            taken = 0
            for a in range(n_a):
                n = self._units(1 + a, 1 + self.n_r + b)
                per_row_hub[a].extend(group[taken : taken + n])
                taken += n
        for a in range(n_a):
            pairs.extend(zip(sorted(hub_rows[a]), sorted(per_row_hub[a]), strict=True))
        return pairs
