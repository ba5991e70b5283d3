"""The state store over months of rounds, with and without ``history_days``.

Two fresh stores are written as a controller writes them (:class:`~slurm_plugin.store.Store`'s
own methods), round after round of ``--round-s`` seconds of controller time for ``--days``
days: each round a plan (a compacted round's, ~3 KB: what the store keeps of every round
but the newest ``round_plans_kept``), ``--actions`` actions, one tick, new jobs at
``--jobs-per-day`` and each job marked finished a day after it came. One store keeps
everything (``history_days = 0``); the other is pruned as the controller's tick prunes it
(:meth:`Store.prune_history` on the first round and once an hour of controller time, with
``--history-days``). Sampled once a day: rows per table, the database's pages in use and its
file with the WAL; every prune is timed.

    .venv/bin/python -m benchmarks.performance.store_history [--days 120] [--history-days 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from benchmarks.performance.store_growth import size_mb
from slurm_plugin.store import Store

DAY = 86400.0


def compacted_plan(k: int) -> dict[str, Any]:
    """What a compacted round keeps: its decisions and timings (``Store.compact_rounds``)."""
    assignments = {
        str(10_000 + j): {"gpus": [[f"gpu-{j // 4:02d}", j % 4]], "cpus": 4, "mem_gb": 32.0, "plan": None}
        for j in range(16)
    }
    return {
        "compacted": True,
        "jobs_ordered": 2000,
        "assignments": assignments,
        "started": [str(10_000 + k % 16)],
        "preempted": [],
        "migrated": [],
        "reshaped": [],
        "decision_time_s": 0.0123,
        "stage_times_s": {"ordering": 0.004, "placement": 0.006, "shaping": 0.002},
    }


def rows(store: Store) -> dict[str, int]:
    return {
        t: int(store.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
        for t in ("jobs", "rounds", "actions", "ticks")
    }


def run(args: argparse.Namespace, history_days: float, directory: Path) -> dict[str, Any]:
    path = directory / f"history_{history_days:g}.db"
    store = Store(path)
    rounds_per_day = int(DAY // args.round_s)
    jobs_per_round = args.jobs_per_day / rounds_per_day
    samples: list[dict[str, Any]] = []
    prunes: list[float] = []
    pruned_at: float | None = None
    added = 0.0
    next_job = 0
    pending_finish: list[tuple[float, str]] = []
    started = time.perf_counter()
    for k in range(args.days * rounds_per_day):
        now = 1.7e9 + k * args.round_s
        added += jobs_per_round
        new = []
        while next_job < int(added):
            new.append((str(next_job), 1, {"model": "resnet50", "submission": f"s{next_job}"}))
            pending_finish.append((now + DAY, str(next_job)))
            next_job += 1
        store.add_jobs(new, now)
        done = [job for t, job in pending_finish if t <= now]
        if done:
            store.mark_finished(done, now)
            pending_finish = [(t, job) for t, job in pending_finish if t > now]
        round_id = store.begin_round(now, compacted_plan(k))
        for a in range(args.actions):
            store.log_action(
                f"r{round_id}-{a}", round_id, str(max(0, next_job - 1 - a)), "start", "done", "", now
            )
        store.finish_round(round_id, args.actions)
        store.log_tick(now, True, round_id, None, 1.0)
        if history_days > 0 and (pruned_at is None or now - pruned_at >= 3600.0):
            t0 = time.perf_counter()
            store.prune_history(now - history_days * DAY)
            prunes.append(time.perf_counter() - t0)
            pruned_at = now
        if (k + 1) % rounds_per_day == 0:
            samples.append({"day": (k + 1) // rounds_per_day, **rows(store), **size_mb(store, path)})
            print(json.dumps({"history_days": history_days, **samples[-1]}), flush=True)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    final = {**rows(store), **size_mb(store, path)}
    store.close()
    out: dict[str, Any] = {"history_days": history_days, "wall_s": round(time.perf_counter() - started, 1)}
    out["final"] = final
    out["samples"] = samples
    if prunes:
        ordered = sorted(prunes)
        out["prunes"] = {
            "count": len(prunes),
            "median_s": round(statistics.median(prunes), 5),
            "p99_s": round(ordered[int(0.99 * (len(ordered) - 1))], 5),
            "max_s": round(max(prunes), 5),
            "total_s": round(sum(prunes), 2),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=120)
    p.add_argument("--history-days", type=float, default=30.0)
    p.add_argument("--round-s", type=float, default=300.0)
    p.add_argument("--actions", type=int, default=20, help="actions logged per round")
    p.add_argument("--jobs-per-day", type=float, default=2000.0)
    p.add_argument("--name", default="store_history")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(args, 0.0, Path(tmp)), run(args, args.history_days, Path(tmp))]
    command = "python -m benchmarks.performance.store_history " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "name"
    )
    write_result(args.name, {"command": command, "runs": runs})


if __name__ == "__main__":
    main()
