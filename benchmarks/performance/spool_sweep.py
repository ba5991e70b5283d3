"""The spool sweep's memory and time against the number of entries in the spool.

A spool of ``--jobs`` jobs, each with a plan file and its lock file (``plans/``), is swept
with half the jobs listed by Slurm and the rest too recent to remove (what a controller's sweep
finds every 10 minutes when a day of jobs has ended: nothing removed, everything read). The
peak of Python's allocations during the sweep (``tracemalloc``) and its wall time are
recorded, for each size in ``--jobs``.

    .venv/bin/python -m benchmarks.performance.spool_sweep [--jobs 1000,4000,16000] [--name N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchmarks.common import write_result
from slurm_plugin.controller.spoolsweep import sweep_spool


def measure(jobs: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp)
        (spool / "plans").mkdir()
        (spool / "status").mkdir()
        for k in range(jobs):
            (spool / "plans" / f"{100000 + k}.json").write_text("{}")
            (spool / "plans" / f".{100000 + k}.json.lock").write_text("")
        listed = [str(100000 + k) for k in range(0, jobs, 2)]
        tracemalloc.start()
        started = time.perf_counter()
        result = sweep_spool(spool, listed, time.time(), 86400.0)
        wall = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert result.jobs_removed == 0 and result.kept_listed + result.kept_recent == jobs
        return {"jobs": jobs, "entries": 2 * jobs, "peak_mb": round(peak / 1e6, 3), "wall_s": round(wall, 4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", default="1000,4000,16000")
    p.add_argument("--name", default="spool_sweep")
    args = p.parse_args()
    rows = []
    for n in (int(x) for x in args.jobs.split(",")):
        rows.append(measure(n))
        print(rows[-1], flush=True)
    write_result(
        args.name,
        {"command": f"python -m benchmarks.performance.spool_sweep --jobs {args.jobs}", "rows": rows},
    )


if __name__ == "__main__":
    main()
