"""Crius §8.7: the decision time of the depth-bounded search, per search depth, on 1,280 GPUs.

Builds a busy ``etc/clusters/crius-1280.toml`` (Crius Table 1): every server filled with
running jobs of Crius's measured models (a seeded draw of model, global batch and a count
that tiles the server, each job's Cell measured there), no GPU idle, and one more job
waiting (a ``bert_2.6B``, global batch 256, asking 8 A100s): no Cell of it fits
the idle GPUs, so every decision runs the full search. For each depth it times one round of
the ``crius`` preset (``-o reconfiguration.depth=D``) on that snapshot and, inside it, the one
decision (``search.best_choice``), best of ``--repeat`` runs (wall clock, this machine), and
prints the choice's size. Paper: 0.88 s per decision at depth 3, 5.98 s deeper (Fig. 21(a));
the goal here: <= 1 s at depth 3.

    .venv/bin/python benchmarks/performance/crius_search_time.py [--depths 0,1,2,3,4,5] [--repeat 3] \
        [--seed 1]

Writes ``benchmarks/results/crius_search_time.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_result  # noqa: E402
from planner import Job, Snapshot, plan_round  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.config import build_scheduler, preset  # noqa: E402
from planner.core.model import Assignment, JobState, Node  # noqa: E402
from planner.policies.crius import policy, search  # noqa: E402
from profiles.perfmodel.crius import builtin_crius  # noqa: E402


def busy_snapshot(nodes: tuple[Node, ...], seed: int) -> Snapshot:
    """Every server tiled with running jobs whose measured Cell fits there (no GPU idle)."""
    table = builtin_crius()
    rng = random.Random(seed)
    shapes: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for r in table.records:
        if r.iter_time_s is not None and r.nodes == 1:
            shapes.setdefault((r.gpu_type, r.gpus), []).append((r.model, r.batch_size))
    for options in shapes.values():
        options.sort()
    jobs: list[Job] = []
    for node in nodes:
        left = node.gpus
        index = 0
        while left > 0:
            sizes = [g for g in (8, 4, 2, 1) if g <= left and shapes.get((node.gpu_type, g))]
            if not sizes:
                break
            g = rng.choice(sizes[:2])
            model, batch = rng.choice(shapes[(node.gpu_type, g)])
            gpus = tuple((node.name, k) for k in range(index, index + g))
            jobs.append(
                Job(
                    id=str(len(jobs)),
                    num_gpus=g,
                    model=model,
                    submit_time_s=float(len(jobs)),
                    state=JobState.RUNNING,
                    attained_gpu_s=3600.0 * g,
                    remaining_s=float(rng.choice([3600, 14400, 36000])),
                    batch_size=batch,
                    gpu_type=node.gpu_type,
                    assignment=Assignment(gpus, node.cpus * g // node.gpus, node.mem_gb * g / node.gpus),
                )
            )
            index += g
            left -= g
    waiting = Job(
        id="waiting",
        num_gpus=8,
        model="bert_2.6B",
        submit_time_s=1e6,
        remaining_s=36000.0,
        batch_size=256,
        gpu_type="a100",
    )
    return Snapshot(time_s=2e6, nodes=nodes, jobs=(*jobs, waiting))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="0,1,2,3,4,5")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--estimate", default="measured", choices=("measured", "agile"))
    parser.add_argument("--name", default="crius_search_time", help="result file name")
    args = parser.parse_args()
    nodes = cluster_from_toml((ROOT / "etc/clusters/crius-1280.toml").read_text(), "crius-1280")
    snapshot = busy_snapshot(nodes, args.seed)
    running = [j for j in snapshot.jobs if j.is_running]
    busy = sum(j.num_gpus for j in running)
    print(f"{sum(n.gpus for n in nodes)} GPUs, {len(running)} running jobs on {busy}, 1 waiting")
    timed: list[float] = []
    original = search.best_choice

    def timed_choice(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            timed.append(time.perf_counter() - t0)

    policy.best_choice = timed_choice  # type: ignore[assignment]
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        config = preset("crius").with_overrides(
            options={"reconfiguration": {"scale": [0.5, 2], "depth": depth, "estimate": args.estimate}}
        )
        scheduler = build_scheduler(config)
        plan_round(snapshot, scheduler)  # warm the Cell memo (what a running scheduler has)
        rounds, decisions = [], []
        plan = None
        for _ in range(args.repeat):
            timed.clear()
            t0 = time.perf_counter()
            plan = plan_round(snapshot, scheduler)
            rounds.append(time.perf_counter() - t0)
            decisions.append(sum(timed))
        assert plan is not None
        placed = plan.assignments.get("waiting")
        changed = len(plan.migrated) + len(plan.reshaped) + len(plan.preempted)
        row = {
            "depth": depth,
            "decision_s": round(min(decisions), 4),
            "round_s": round(min(rounds), 4),
            "placed": placed is not None,
            "placed_gpus": placed.num_gpus if placed else 0,
            "placed_type": plan.gpu_type_of.get("waiting"),
            "running_jobs_changed": changed,
        }
        rows.append(row)
        print(row)
    write_result(
        args.name,
        {
            "gpus": sum(n.gpus for n in nodes),
            "running_jobs": len(running),
            "seed": args.seed,
            "estimate": args.estimate,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
