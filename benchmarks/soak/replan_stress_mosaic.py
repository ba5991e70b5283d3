"""Re-planning an applied ``mosaic`` round over many random rounds: how many change.

The property test ``tests/planner/test_mosaic.py::test_mosaic_replanning_an_applied_round_changes_nothing``
draws a few dozen rounds per CI run (with the sharing stage on). This draws ``--draws`` rounds
from a fixed ``--seed`` with the same strategy, plans each, applies the plan with no time
passing and plans again, and counts the draws whose second round gives other GPUs, or the same
GPUs with other CPUs or memory: for the default preset and with the sharing stage on.

    .venv/bin/python -m benchmarks.soak.replan_stress_mosaic [--draws 1000] [--seed 5]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, seed, settings

from benchmarks.common import write_result
from planner import plan_round
from planner.config import build_scheduler, preset
from planner.pipeline import Scheduler
from tests.builders import profiles
from tests.planner.test_mosaic import TENANTS, _applied, snapshots


def scheduler(sharing: bool) -> Scheduler:
    config = replace(preset("mosaic"), tenants=TENANTS)
    if sharing:
        config = replace(config, placement="shared-consolidated", packing="bsbf-rigid")
    return build_scheduler(config, profiles())


def count(sharing: bool, draws: int, at_seed: int) -> dict[str, Any]:
    counts = {"draws": 0, "gpus_changed": 0, "cpus_or_memory_changed": 0}

    def check(snapshot: Any) -> None:
        sched = scheduler(sharing)
        first = plan_round(snapshot, sched)
        second = plan_round(_applied(snapshot, first), sched)
        counts["draws"] += 1
        gpus = {k: a.gpus for k, a in first.assignments.items()}
        if {k: a.gpus for k, a in second.assignments.items()} != gpus:
            counts["gpus_changed"] += 1
        elif second.assignments != first.assignments:
            counts["cpus_or_memory_changed"] += 1

    test = settings(
        max_examples=draws, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )(given(snapshots())(check))
    started = time.perf_counter()
    seed(at_seed)(test)()
    return {"sharing": sharing, **counts, "wall_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--name", default="replan_stress_mosaic", help="result file name")
    args = p.parse_args()
    rows = [count(sharing, args.draws, args.seed) for sharing in (False, True)]
    for row in rows:
        print(row, flush=True)
    command = f"python -m benchmarks.soak.replan_stress_mosaic --draws {args.draws} --seed {args.seed}"
    write_result(args.name, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
