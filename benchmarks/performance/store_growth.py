"""How the state store grows with rounds when the queue is long, with and without compaction.

Every round the controller stores its plan, which lists every queued job in ``order``,
``reasons`` and ``policy_state``. One real round plan of a busy ``--jobs``-job snapshot
(``tiresias`` on 16 GPUs, as in the day-of-load run) is planned once, then stored
``--rounds`` times into two fresh stores as the controller stores it (``begin_round``,
``finish_round``): one that keeps every plan whole (the store before compaction) and one
compacted after each round as the controller's tick does (``compact_rounds(--keep)``). The
database's size (pages in use, and the file with its WAL) is sampled every ``--every``
rounds, and the cost of the reads that scan every round (``mosaic report``'s decision
times) is timed at the end: read by SQLite from each plan (``Store.decision_times``), and as
``mosaic report`` read them before, every stored round decoded in Python (with the process's
peak RSS before and after).

    .venv/bin/python -m benchmarks.performance.store_growth [--jobs 10000] [--rounds 600] [--keep 288]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import busy_snapshot, write_result
from planner import build_scheduler, plan_round, preset
from planner.cluster import cluster_from_toml
from planner.core.codec import round_plan_to_json
from slurm_plugin.store import Store

CLUSTER = """
[[nodes]]
count = 4
gpus = 4
gpu_type = "v100"
cpus = 16
mem_gb = 64
"""


def size_mb(store: Store, path: Path) -> dict[str, float]:
    page = store.db.execute("PRAGMA page_size").fetchone()[0]
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    free = store.db.execute("PRAGMA freelist_count").fetchone()[0]
    on_disk = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return {
        "used_mb": round((pages - free) * page / 1e6, 2),
        "file_mb": round(pages * page / 1e6, 2),
        "on_disk_mb": round(on_disk / 1e6, 2),
    }


def run(plan: dict[str, Any], rounds: int, keep: int | None, every: int, directory: Path) -> dict[str, Any]:
    path = directory / ("compacted.db" if keep else "whole.db")
    store = Store(path)
    samples = []
    compact_s = 0.0
    for k in range(1, rounds + 1):
        round_id = store.begin_round(float(k * 300), plan)
        store.finish_round(round_id, 0)
        if keep:
            started = time.perf_counter()
            store.compact_rounds(keep)
            compact_s += time.perf_counter() - started
        if k % every == 0 or k == rounds:
            samples.append({"rounds": k, **size_mb(store, path)})
    started = time.perf_counter()
    decisions = store.decision_times()
    read_s = time.perf_counter() - started
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    decoded = [float(r.plan.get("decision_time_s", 0.0)) for r in store.rounds(100_000)]
    decoded_s = time.perf_counter() - started
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert decoded[::-1] == decisions
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = {
        "keep": keep,
        "samples": samples,
        "final": size_mb(store, path),
        "compact_s_per_round": compact_s / rounds if keep else None,
        "decision_times_read_s": read_s,
        "decision_times": len(decisions),
        "decoded_read_s": decoded_s,
        "decoded_read_peak_rss_mb": [round(peak_before), round(peak_after)],
    }
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--keep", type=int, default=288, help="round_plans_kept")
    parser.add_argument("--every", type=int, default=25, help="rounds between size samples")
    parser.add_argument("--out", default="store_growth")
    args = parser.parse_args()
    snapshot = busy_snapshot(cluster_from_toml(CLUSTER), args.jobs)
    plan = round_plan_to_json(plan_round(snapshot, build_scheduler(preset("tiresias"))))
    plan_kb = len(json.dumps(plan)) / 1e3
    print(f"one round plan of {args.jobs} jobs: {plan_kb:.0f} KB")
    with tempfile.TemporaryDirectory(prefix="mosaic-store-growth-", dir=os.environ.get("TMPDIR")) as tmp:
        # The compacted store first: a peak RSS is the process's, and decoding every whole plan
        # sets a high one.
        compacted = run(plan, args.rounds, args.keep, args.every, Path(tmp))
        whole = run(plan, args.rounds, None, args.every, Path(tmp))
    for label, r in (("whole plans", whole), (f"compacted, keep {args.keep}", compacted)):
        print(
            f"{label:<22} after {args.rounds} rounds: {r['final']['used_mb']:.0f} MB in use, "
            f"{r['final']['on_disk_mb']:.0f} MB on disk; "
            f"decision times read in {r['decision_times_read_s']:.2f} s (decoded in Python: "
            f"{r['decoded_read_s']:.2f} s, peak RSS {r['decoded_read_peak_rss_mb'][1]} MB)"
        )
    write_result(
        args.out,
        {
            "command": "python -m benchmarks.performance.store_growth "
            + f"--jobs {args.jobs} --rounds {args.rounds} --keep {args.keep} --every {args.every}",
            "jobs": args.jobs,
            "rounds": args.rounds,
            "plan_kb": round(plan_kb, 1),
            "plan_keys_kb": {k: round(len(json.dumps(v)) / 1e3, 1) for k, v in plan.items()},
            "whole": whole,
            "compacted": compacted,
        },
    )


if __name__ == "__main__":
    main()
