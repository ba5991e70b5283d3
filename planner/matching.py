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
