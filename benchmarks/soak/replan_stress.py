"""Re-planning an applied round, per preset, over many more random rounds than the tests draw.

The property test ``tests/planner/test_pipeline_properties.py::
test_replanning_an_applied_plan_changes_nothing`` (a plan, applied with no time passing and
planned again, gives the same assignments and no starts, stops, moves or reshapes) runs a
few dozen hypothesis draws per CI run. This runs it for each preset alone with ``--draws``
draws from a fixed ``--seed`` and records, per preset, whether it held, after how many draws
it first failed, and the shrunk counterexample's cluster and jobs.

    .venv/bin/python -m benchmarks.soak.replan_stress [--draws 1000] [--seed 5] [--presets a,b] [--name N]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from benchmarks.common import write_result
from planner import plan_round
from tests.planner import test_pipeline_properties as props


def stress(name: str, draws: int, at_seed: int) -> dict[str, Any]:
    calls = {"draws": 0, "first_failure": None}
    example: dict[str, Any] = {}

    def check(snapshot: Any, preset: str) -> None:
        calls["draws"] += 1
        sched = props.scheduler(preset)
        first = plan_round(snapshot, sched)
        second = plan_round(props._next_round(snapshot, first), sched)
        same = second.assignments == first.assignments and not (
            second.preempted or second.migrated or second.started or second.reshaped
        )
        if not same:
            if calls["first_failure"] is None:
                calls["first_failure"] = calls["draws"]
            example.clear()
            example.update(
                nodes=[
                    f"{n.name}: {n.gpus} {n.gpu_type}, {n.cpus} CPUs, {n.mem_gb:g} GB" for n in snapshot.nodes
                ],
                jobs=len(snapshot.jobs),
                running=sum(j.is_running for j in snapshot.jobs),
                multi_node_jobs=sum(len({n for n, _ in a.gpus}) > 1 for a in first.assignments.values()),
                changed={
                    "started": list(second.started),
                    "preempted": list(second.preempted),
                    "migrated": list(second.migrated),
                    "reshaped": list(second.reshaped),
                },
            )
        assert same

    test = given(props.snapshots(), st.just(name))(check)
    test = settings(
        max_examples=draws,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        print_blob=False,
    )(test)
    test = seed(at_seed)(test)
    started = time.perf_counter()
    try:
        test()
        held = True
    except AssertionError:
        held = False
    return {
        "preset": name,
        "held": held,
        "draws_until_first_failure": calls["first_failure"],
        "calls": calls["draws"],
        "wall_s": round(time.perf_counter() - started, 1),
        **({"shrunk_example": example} if not held else {}),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--presets", default=",".join(props.PRESET_NAMES))
    p.add_argument("--name", default="replan_stress", help="result file name")
    args = p.parse_args()
    rows = []
    for name in args.presets.split(","):
        row = stress(name, args.draws, args.seed)
        print(
            row["preset"],
            "held" if row["held"] else f"failed at draw {row['draws_until_first_failure']}",
            flush=True,
        )
        rows.append(row)
    command = f"python -m benchmarks.soak.replan_stress --draws {args.draws} --seed {args.seed}"
    if args.presets != ",".join(props.PRESET_NAMES):
        command += f" --presets {args.presets}"
    write_result(args.name, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
