"""Which CPU counts to measure next: Synergy's optimistic search (§3.1), one run at a time.

:func:`profiles.optimistic.cpu_points_to_measure` runs the whole search with a callable
that measures. A profiler that measures by running real jobs must be able to stop between
two runs (a budget, a crash, Ctrl-C) and resume, so it asks instead "which point next,
given what is measured so far?". :func:`next_cpu_count` answers by replaying that very
search over the measurements: the first point the search asks for that is not measured
yet is the next run, so the order and the stopping rule are exactly the §3.1 search's
(measure both ends, split an interval only where throughput still grows by more than the
threshold across it).

The candidate CPU counts are any increasing list (``--cpus 1,2,4,8,16``): the search
bisects the list's positions, which for ``1..N`` is the search over every count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.core.errors import ProfileError
from profiles.optimistic import DEFAULT_THRESHOLD, cpu_curve, cpu_points_to_measure


class _Unmeasured(Exception):  # control flow: the search asked for an unmeasured point
    def __init__(self, cpus: int) -> None:
        self.cpus = cpus


def check_cpu_counts(cpus: Sequence[int], where: str = "CPU counts") -> tuple[int, ...]:
    """``cpus`` sorted, or a :class:`ProfileError` naming what is wrong (empty, < 1, repeated)."""
    if not cpus:
        raise ProfileError(f"{where}: give at least one CPU count")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cpus):
        raise ProfileError(f"{where}: CPU counts are integers >= 1, got {list(cpus)}")
    if len(set(cpus)) != len(cpus):
        raise ProfileError(f"{where}: a CPU count is repeated in {list(cpus)}")
    return tuple(sorted(cpus))


def next_cpu_count(
    cpus: Sequence[int], measured: Mapping[int, float], threshold: float = DEFAULT_THRESHOLD
) -> int | None:
    """The CPU count the §3.1 search measures next, or ``None`` when the search is complete.

    ``measured`` maps CPU counts to throughput (any unit, one unit throughout); counts not
    in ``cpus`` are ignored.
    """
    counts = check_cpu_counts(cpus)
    if len(counts) == 1:
        return None if counts[0] in measured else counts[0]

    def at(position: int) -> float:
        c = counts[position - 1]
        if c not in measured:
            raise _Unmeasured(c)
        return measured[c]

    try:
        cpu_points_to_measure(len(counts), at, threshold=threshold, min_cpus=1)
    except _Unmeasured as need:
        return need.cpus
    return None


def search_points(
    cpus: Sequence[int], measured: Mapping[int, float], threshold: float = DEFAULT_THRESHOLD
) -> dict[int, float]:
    """The measurements the search itself uses, by CPU count: those it visits, in its order,
    until it is complete or asks for a count not in ``measured`` (measurements at other
    counts, e.g. of a full sweep, are left out)."""
    visited: dict[int, float] = {}
    while (c := next_cpu_count(cpus, visited, threshold)) is not None and c in measured:
        visited[c] = measured[c]
    return dict(sorted(visited.items()))


@dataclass(frozen=True, slots=True)
class CurveError:
    """How far the piecewise-linear curve through the searched points is from a full sweep."""

    points: int
    sweep_points: int
    mean_rel: float
    max_rel: float
    worst_cpus: int


def curve_error(searched: Mapping[int, float], sweep: Mapping[int, float]) -> CurveError:
    """Relative error of :func:`profiles.optimistic.cpu_curve` through ``searched`` at every
    count of the full ``sweep`` (the searched points themselves included, at error 0)."""
    if not searched or not sweep:
        raise ProfileError("curve error: need the searched points and a full sweep")
    curve = cpu_curve(searched)
    errors = {c: abs(curve(c) - v) / v for c, v in sweep.items()}
    worst = max(errors, key=lambda c: (errors[c], -c))
    return CurveError(
        points=len(searched),
        sweep_points=len(sweep),
        mean_rel=sum(errors.values()) / len(errors),
        max_rel=errors[worst],
        worst_cpus=worst,
    )
