"""How far predictions are from measurements: relative errors per point, model and plan.

Rubick §7.1 (Table 2) reports, per model and execution plan, the average and maximum of
``|predicted - measured| / measured``; :func:`accuracy` computes the same table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PointError:
    """One measured point: where it came from, its model and plan label, both times."""

    source: str
    model: str
    plan: str
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return abs(self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, slots=True)
class ErrorStats:
    """Average and largest relative error over ``count`` points."""

    count: int
    avg: float
    max: float

    @classmethod
    def of(cls, points: Sequence[PointError]) -> ErrorStats:
        errors = [p.error for p in points]
        return cls(count=len(errors), avg=sum(errors) / len(errors), max=max(errors))


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Errors overall, per model and per (model, plan), and the worst point."""

    overall: ErrorStats
    per_model: tuple[tuple[str, ErrorStats], ...]
    per_plan: tuple[tuple[str, str, ErrorStats], ...]
    worst: PointError
    points: tuple[PointError, ...]

    def to_json(self) -> dict[str, object]:
        def stats(s: ErrorStats) -> dict[str, object]:
            return {"n": s.count, "avg_pct": round(100 * s.avg, 3), "max_pct": round(100 * s.max, 3)}

        return {
            "overall": stats(self.overall),
            "per_model": {m: stats(s) for m, s in self.per_model},
            "per_plan": [{"model": m, "plan": p, **stats(s)} for m, p, s in self.per_plan],
            "worst": {
                "source": self.worst.source,
                "model": self.worst.model,
                "plan": self.worst.plan,
                "measured_s": self.worst.measured_s,
                "predicted_s": self.worst.predicted_s,
                "error_pct": round(100 * self.worst.error, 3),
            },
        }


def accuracy(points: Sequence[PointError]) -> Accuracy:
    """The error table of ``points`` (at least one), models and plans in first-seen order."""
    if not points:
        raise ValueError("accuracy of no points")
    models = list(dict.fromkeys(p.model for p in points))
    plans = list(dict.fromkeys((p.model, p.plan) for p in points))
    return Accuracy(
        overall=ErrorStats.of(points),
        per_model=tuple((m, ErrorStats.of([p for p in points if p.model == m])) for m in models),
        per_plan=tuple(
            (m, label, ErrorStats.of([p for p in points if (p.model, p.plan) == (m, label)]))
            for m, label in plans
        ),
        worst=max(points, key=lambda p: p.error),
        points=tuple(points),
    )


def format_accuracy(result: Accuracy) -> str:
    """A plain-text table: one line per model, its plans indented below, then the total."""
    lines = [f"{'model / plan':<24} {'n':>3} {'avg %':>7} {'max %':>7}"]
    for model, stats in result.per_model:
        lines.append(f"{model:<24} {stats.count:>3} {100 * stats.avg:>7.2f} {100 * stats.max:>7.2f}")
        for m, label, s in result.per_plan:
            if m == model:
                lines.append(f"  {label:<22} {s.count:>3} {100 * s.avg:>7.2f} {100 * s.max:>7.2f}")
    o, w = result.overall, result.worst
    lines.append(f"{'all':<24} {o.count:>3} {100 * o.avg:>7.2f} {100 * o.max:>7.2f}")
    lines.append(
        f"worst: {w.source or w.model} ({w.plan}): measured {w.measured_s:.4g} s, "
        f"predicted {w.predicted_s:.4g} s, {100 * w.error:.1f} %"
    )
    return "\n".join(lines)
