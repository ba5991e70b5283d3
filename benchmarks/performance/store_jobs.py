"""What one tick's read of the state store costs with a long job history.

The controller reads each tick the records of the jobs Slurm lists now (``Store.jobs(ids)``),
not every job the store has ever seen (``Store.jobs()``). A store of ``--rows`` jobs, of which
``--listed`` are asked for; each read timed twice (the second reuses unchanged decoded rows),
with the process's peak RSS after it.

    .venv/bin/python -m benchmarks.performance.store_jobs [--rows 100000] [--listed 10000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.common import write_result
from slurm_plugin.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--listed", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "mosaic.db")
        meta = {"model": "resnet50", "plans": [{}]}
        store.add_jobs([(str(k), 1, meta) for k in range(args.rows)], 1.0)
        listed = [str(k) for k in range(args.rows - args.listed, args.rows)]
        rows = {}
        for label, ids in (("listed ids", listed), ("whole history", None)):
            times = []
            for _ in range(2):
                started = time.perf_counter()
                store.jobs(ids)
                times.append(time.perf_counter() - started)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rows[label] = {"first_s": times[0], "again_s": times[1], "peak_rss_mb": peak}
            print(f"{label:<14} first {times[0]:.3f} s  again {times[1]:.3f} s  peak RSS {peak:.0f} MB")
        store.close()
    write_result("store_jobs", {"benchmark": "store jobs read", "rows": args.rows, "listed": args.listed,
                                "reads": rows})  # fmt: skip


if __name__ == "__main__":
    main()
