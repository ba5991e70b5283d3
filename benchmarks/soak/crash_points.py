"""Crash point x outcome: the controller killed (SIGKILL) at every step of a round, then restarted.

For each case of ``tests/slurm_plugin/test_live_crash_points.py`` (every registered crash point,
and the later occurrences of the per-job ones) this runs the test's scenario on a private
test cluster with accounting (4 nodes x 4 GPUs; as root): the real ``mosaic controller
--once`` in a subprocess with ``MOSAIC_CRASH_AT``, then two plain ticks, and records what the
restarted controller left (``tests/slurm_plugin/crash_scenario.py``: jobs lost, runs that
ended FAILED/CANCELLED, jobs held that the plan runs, the crashed round's fate, actions left
'planned', AdminComment vs the store, runs per job, plan files). Writes
``benchmarks/results/crash_points.json`` and prints the markdown table of BENCHMARKS.md.

    .venv/bin/python -m benchmarks.soak.crash_points      # every case (~30 s each)
    .venv/bin/python -m benchmarks.soak.crash_points --only stop.checkpointed start.done+round.applied
    .venv/bin/python -m benchmarks.soak.crash_points --cluster /tmp/mosaic-testcluster   # one already up
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import shape_named
from tests.slurm_plugin.crash_scenario import Outcome, crash_and_recover
from tests.slurm_plugin.test_live_crash_points import CASES, TWICE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--only", nargs="+", metavar="POINT[:N][+POINT[:N]]", help="these cases only (A+B: A, then B)"
    )
    parser.add_argument("--cluster", type=Path, help="use this running test cluster (its --dir)")
    parser.add_argument("--name", default="crash_points", help="result file name (default crash_points)")
    args = parser.parse_args()
    cases = list(args.only or [*CASES, *(f"{a}+{b}" for a, b in TWICE)])
    with tempfile.TemporaryDirectory(prefix="mosaic-crash-") as tmp:
        root = Path(tmp)
        if args.cluster is not None:
            cluster = lifecycle.load(args.cluster)
            outcomes = campaign(cluster, root, cases)
        else:
            cluster = lifecycle.up(shape_named("homogeneous", accounting=True), root / "cluster")
            try:
                outcomes = campaign(cluster, root, cases)
            finally:
                lifecycle.down(root / "cluster")
    rows = [o.to_json() for o in outcomes]
    write_result(
        args.name,
        {
            "cases": len(rows),
            "clean": sum(1 for o in outcomes if clean(o)),
            "outcomes": rows,
        },
    )
    print(table(rows))


def campaign(cluster: lifecycle.Cluster, root: Path, cases: list[str]) -> list[Outcome]:
    outcomes = []
    for k, case in enumerate(cases):
        work = root / f"{k:02d}-{case.replace(':', '_').replace('+', '_then_')}"
        crash_at, _, then = case.partition("+")
        try:
            outcome = crash_and_recover(cluster, work, crash_at, then or None)
        finally:
            run(["scancel", "--user=root"], env=cluster.env, check=False)
            lifecycle.wait_jobs_gone(cluster, 60.0)
        print(json.dumps(outcome.to_json()), flush=True)
        outcomes.append(outcome)
        time.sleep(0.5)
    return outcomes


def clean(o: Outcome) -> bool:
    return o.returncode == -9 and o.then_returncode in {None, -9} and not o.problems


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| crash point | killed | crashed round in the store | after restart | lost | FAILED | "
        "held, planned to run | runs as planned | actions left planned | AdminComment = store | "
        "plan files |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        files = len(r["bad_plan_files"]) + len(r["stray_temp_files"])
        killed = "SIGKILL" if r["returncode"] == -9 else f"exit {r['returncode']}"
        point = f"`{r['crash_at']}`"
        if r.get("then"):
            point += f", restart killed at `{r['then']}`"
            killed += ", SIGKILL" if r["then_returncode"] == -9 else f", exit {r['then_returncode']}"
        as_planned = "yes" if not r["wrong_runs"] and not r["wrong_state"] else "no"
        audit = "yes" if not r["audit_mismatch"] else "no"
        plans = "ok" if not files else f"{files} bad"
        lines.append(
            f"| {point} | {killed} | {r['round_after_crash']} | {r['round_outcome']} "
            f"| {len(r['lost'])} | {len(r['ended_badly'])} | {len(r['held_but_planned'])} | {as_planned} "
            f"| {len(r['planned_actions_left'])} | {audit} | {plans} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
