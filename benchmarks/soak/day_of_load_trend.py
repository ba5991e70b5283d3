"""Trends of day-of-load runs' per-tick samples, segment by segment, from their result files.

For each run and each segment of ticks (from the tick squeue's MinJobAge window filled, or
``--from-tick``, cut at each ``--split`` tick), every sampled metric's first and last value and
its slope per controller-hour, Theil-Sen (the median pairwise slope, which a tick's transient
block barely moves) and least squares. Where the run recorded ``jobs_with_service`` (open jobs
with attained GPU service), also a least-squares fit of each metric on controller hours *and*
that count together: how much of the metric's rise the jobs that ran and wait again account
for, and what trend in time is left beside them (only where the count does not itself rise in
step with time: ``hours_service_correlation`` near 1 means the two cannot be told apart).

    .venv/bin/python -m benchmarks.soak.day_of_load_trend day_of_load_10k_heapfix \\
        day_of_load_10k_compressed --split 181 --out day_of_load_trends
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, write_result
from benchmarks.soak.day_of_load import median_slope, slope

METRICS = (
    "rss_mb",
    "py_blocks",
    "gc_objects",
    "malloc_uordblks_mb",
    "malloc_fordblks_mb",
    "sqlite_mb",
    "listed",
    "jobs_with_service",
    "total_s",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="result names under benchmarks/results/ (or paths)")
    parser.add_argument("--from-tick", type=int, default=None,
                        help="first tick (default: each run's window_filled_at_tick)")  # fmt: skip
    parser.add_argument("--split", type=int, nargs="*", default=[], metavar="TICK",
                        help="also cut the ticks into segments at these ticks")  # fmt: skip
    parser.add_argument("--out", default=None, help="write the trends as this result name")
    args = parser.parse_args()
    runs = {}
    for name in args.runs:
        document = _load(name)
        runs[document.get("benchmark", name)] = run_trends(document, args.from_tick, args.split)
    print(json.dumps(runs, indent=1))
    if args.out:
        write_result(
            args.out,
            {
                "command": "python -m benchmarks.soak.day_of_load_trend "
                + " ".join(args.runs)
                + (f" --from-tick {args.from_tick}" if args.from_tick is not None else "")
                + (" --split " + " ".join(map(str, args.split)) if args.split else "")
                + f" --out {args.out}",
                "runs": runs,
            },
        )


def _load(name: str) -> dict[str, Any]:
    path = Path(name)
    if not path.exists():
        path = RESULTS / f"{name}.json"
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{name}: not a readable result file ({e})") from e
    if not isinstance(document, dict) or not isinstance(document.get("per_tick"), list):
        raise SystemExit(f"{path}: not a day_of_load result (no per_tick list)")
    return document


def run_trends(document: dict[str, Any], from_tick: int | None, splits: Sequence[int]) -> dict[str, Any]:
    ticks = document["per_tick"]
    tick_s = float(document["tick_s"])
    first = from_tick if from_tick is not None else document.get("window_filled_at_tick") or ticks[0]["tick"]
    last = ticks[-1]["tick"]
    cuts = [first, *sorted(t for t in splits if first < t < last), last]
    segments = [(cuts[0], last)] + (list(itertools.pairwise(cuts)) if len(cuts) > 2 else [])
    return {
        "slurm_times": document.get("slurm_times", "wall"),
        "ticks": len(ticks),
        "lost": document.get("fates", {}).get("lost"),
        "segments": [segment_trends(ticks, tick_s, a, b) for a, b in segments],
    }


def segment_trends(ticks: Sequence[dict[str, Any]], tick_s: float, first: int, last: int) -> dict[str, Any]:
    rows = [t for t in ticks if first <= t["tick"] <= last]
    hours = [t["tick"] * tick_s / 3600 for t in rows]
    out: dict[str, Any] = {"ticks": [first, last]}
    service = [t.get("jobs_with_service") for t in rows]
    with_service = all(isinstance(s, int) for s in service) and len(set(service)) > 1
    for metric in METRICS:
        values = [t.get(metric) for t in rows]
        if len(rows) < 2 or any(not isinstance(v, int | float) for v in values):
            continue
        ys = [float(v) for v in values]  # type: ignore[arg-type]
        entry: dict[str, Any] = {
            "first": ys[0],
            "last": ys[-1],
            "theil_sen_per_hour": _round(median_slope(hours, ys)),
            "least_squares_per_hour": _round(slope(hours, ys)),
        }
        if with_service and metric != "jobs_with_service":
            entry["with_service"] = joint_fit(hours, [float(s) for s in service], ys)  # type: ignore[arg-type]
        out[metric] = entry
    return out


def joint_fit(hours: Sequence[float], service: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """``y = a + b * hours + c * service`` by least squares: ``b`` per controller-hour and ``c``
    per job with service, and how much of ``y``'s variance the fit explains (R²)."""
    x = np.column_stack([np.ones(len(hours)), hours, service])
    y = np.asarray(ys)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    total = float(((y - y.mean()) ** 2).sum())
    # Where the count itself rises in step with time the two slopes cannot be told apart:
    # the correlation says how far they can.
    spread = float(np.std(hours)) * float(np.std(service))
    correlation = float(np.corrcoef(hours, service)[0, 1]) if spread > 0 else 0.0
    return {
        "per_hour": round(float(coef[1]), 4),
        "per_job_with_service": round(float(coef[2]), 4),
        "r2": round(1 - float((residual**2).sum()) / total, 4) if total > 0 else 1.0,
        "hours_service_correlation": round(correlation, 4),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


if __name__ == "__main__":
    main()
