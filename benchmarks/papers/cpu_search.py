"""Synergy's optimistic CPU search (§3.1) against a full sweep, on Synergy's published CPU curves.

    python -m benchmarks.papers.cpu_search            # a second: writes benchmarks/results/cpu_search.json

``mosaic profile`` measures a job's throughput at a list of CPU counts with the §3.1 search: it
measures both ends and splits an interval only where the throughput still grows by more than
the threshold across it; ``--sweep`` measures every count as well, to compare. On a 2-core
machine the list is {1, 2}, which the search and the sweep both measure whole, so the
comparison needs curves over more CPUs. Synergy's own profiles have them: every model of
``profiles/builtin/data/synergy_model_profiles.json`` (msr-fiddle/synergy's simulator profiles,
measured on 24-CPU, 8-GPU servers) gives the throughput at 1, 2, 3, 4, 5, 6, 9, 12 and 24 CPUs
per GPU. Each curve (the largest memory column, so that memory is never what limits; counts
the profile leaves at 0 are unprofiled and dropped) is the truth a run "measures". For each
threshold: the runs the search takes (:func:`profiles.profiler.search.search_points`, the very
function ``mosaic profile`` replays) against the sweep's, and the error of the piecewise-linear
curve through the searched points (:func:`profiles.profiler.search.curve_error`, what ``mosaic
profile --sweep`` reports as ``search_error``) at every swept count.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from profiles.profiler.search import curve_error, search_points

DATA_NAME = "profiles/builtin/data/synergy_model_profiles.json"
DATA = Path(__file__).resolve().parents[2] / DATA_NAME
THRESHOLDS = (0.05, 0.10, 0.20)


def curves(document: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Profile name (``<model>_<gpus>``) -> throughput by CPUs per GPU, at the largest memory."""
    counts = document["tput_row_cpus"]
    out = {}
    for name, profile in sorted(document["profiles"]["models"].items()):
        column = [row[-1] for row in profile["tput"]]
        curve = {c: float(t) for c, t in zip(counts, column, strict=True) if t > 0}
        if len(curve) >= 2:
            out[name] = curve
    return out


def evaluate(sweep: dict[int, float], threshold: float) -> dict[str, Any]:
    searched = search_points(sorted(sweep), sweep, threshold)
    error = curve_error(searched, sweep)
    return {
        "search_runs": len(searched),
        "sweep_runs": len(sweep),
        "searched_cpus": sorted(searched),
        "mean_error": round(error.mean_rel, 4),
        "max_error": round(error.max_rel, 4),
        "worst_cpus": error.worst_cpus,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="cpu_search", help="result name under benchmarks/results/")
    args = parser.parse_args()
    document = json.loads(DATA.read_text())
    by_profile = curves(document)
    per_threshold: dict[str, Any] = {}
    for threshold in THRESHOLDS:
        rows = {name: evaluate(sweep, threshold) for name, sweep in by_profile.items()}
        search = sum(r["search_runs"] for r in rows.values())
        sweep = sum(r["sweep_runs"] for r in rows.values())
        per_threshold[f"{threshold:g}"] = {
            "profiles": len(rows),
            "search_runs": search,
            "sweep_runs": sweep,
            "runs_saved": round(1 - search / sweep, 4),
            "mean_error": round(statistics.fmean(r["mean_error"] for r in rows.values()), 4),
            "max_error": max(r["max_error"] for r in rows.values()),
            "worst_profile": max(rows, key=lambda n: (rows[n]["max_error"], n)),
            "rows": rows,
        }
        summary = {k: v for k, v in per_threshold[f"{threshold:g}"].items() if k != "rows"}
        print(f"threshold {threshold:g}: {json.dumps(summary)}")
    write_result(
        args.out,
        {
            "command": "python -m benchmarks.papers.cpu_search",
            "data": f"{DATA_NAME} (msr-fiddle/synergy simulator profiles)",
            "cpu_counts": document["tput_row_cpus"],
            "memory_column_gb": document["tput_col_mem_gb"][-1],
            "thresholds": per_threshold,
        },
    )


if __name__ == "__main__":
    main()
