"""Mosaic's simulator at the settings of Rubick's artifact simulator (issue 41).

Runs `rubick` and `synergy-tune` on the Rubick Base workload with 60 s rounds, a 260 s
restart and no checkpoint cost, first as Mosaic charges restarts (a first start free),
then with the artifact's rule that every placement, the first included, costs 260 s
(``SimConfig.launch_s``); ``rubick`` also with the artifact's policy's δ and non-preemptive
(its Morphling keeps running jobs); and both on the artifact's own throughput rule as the
truth (``SimConfig.truth = "rubick-artifact"``, δ = 260). The artifact's own numbers (run
separately, outside the repo, with its ``simulator/simulator.py workload-base.csv --policy
morphling --interval 60``) are recorded beside them.
Usage: ``.venv/bin/python benchmarks/papers/rubick_truth.py``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import write_result
from benchmarks.papers.rubick import CLUSTER, TRACES
from planner.cluster import cluster_from_toml
from planner.config import PRESETS, build_scheduler
from planner.sim import SimConfig, simulate
from planner.traces.csvio import parse_trace
from profiles.store import ProfileStore

# Average JCT (h) of the artifact's simulator on workload-base.csv, 8x8 GPUs, 60 s interval,
# 260 s per placement (measured with its simulator.py; Synergy as given in issue 41).
ARTIFACT = {"rubick": 1.01, "synergy-tune": 1.90}


def run(
    preset: str,
    launch_s: float,
    policy_restart_s: float | None = None,
    preemptive: bool | None = None,
    truth: str = "measured",
) -> dict[str, Any]:
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    trace = parse_trace((TRACES / "rubick_base.csv").read_text(), "rubick_base.csv")
    profiles = ProfileStore.builtin()
    config = SimConfig(round_s=60.0, checkpoint_s=0.0, relaunch_s=260.0, launch_s=launch_s, truth=truth)
    started = time.perf_counter()
    scheduler = PRESETS[preset]
    if policy_restart_s is not None:  # Rubick's δ (ordering and allocation) = the simulator's restart
        scheduler = replace(scheduler, restart_cost_s=policy_restart_s)
    if preemptive is not None:  # the artifact's Morphling keeps running jobs where they are
        scheduler = replace(scheduler, preemptive=preemptive)
    result = simulate(nodes, trace, build_scheduler(scheduler, profiles), config, profiles=profiles)
    s = result.summary
    by_model: dict[str, list[tuple[float, float]]] = {}
    for r in result.records:
        if r.finish_time_s is not None and r.start_time_s is not None:
            jct = r.finish_time_s - r.submit_time_s
            by_model.setdefault(r.model, []).append((jct, r.start_time_s - r.submit_time_s))
    row = {
        "preset": preset,
        "launch_s": launch_s,
        "policy_restart_s": policy_restart_s,
        "preemptive": preemptive,
        "truth": truth,
        "avg_jct_h": s["avg_jct_s"] / 3600.0,
        "makespan_h": s["makespan_s"] / 3600.0,
        "restarts": s["restarts"],
        "finished": s["finished"],
        "artifact_avg_jct_h": ARTIFACT[preset],
        # per model: average JCT and the wait before the first start, hours
        "by_model_h": {
            m: {
                "jct": sum(j for j, _ in v) / len(v) / 3600.0,
                "first_wait": sum(q for _, q in v) / len(v) / 3600.0,
            }
            for m, v in sorted(by_model.items())
        },
        "wall_s": time.perf_counter() - started,
    }
    print(row, flush=True)
    return row


def main() -> None:
    presets = sys.argv[1].split(",") if len(sys.argv) > 1 else ["rubick", "synergy-tune"]
    rows = [run(p, launch) for p in presets for launch in (0.0, 260.0)]
    if "rubick" in presets:
        rows += [run("rubick", launch, 260.0) for launch in (0.0, 260.0)]
        rows += [run("rubick", launch, preemptive=False) for launch in (0.0, 260.0)]
    # On one truth, the artifact's rule (``mosaic sim --truth rubick-artifact``), δ = 260.
    rows += [run(p, 260.0, 260.0, truth="rubick-artifact") for p in presets]
    write_result(
        "rubick_truth",
        {"command": "benchmarks/papers/rubick_truth.py " + ",".join(presets), "rows": rows},
    )


if __name__ == "__main__":
    main()
