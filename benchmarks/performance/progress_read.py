"""What reading every running job's progress costs a controller tick, by heartbeat log length.

The tick takes each running job's newest ``progress`` from its heartbeat log
(:func:`slurm_plugin.planfile.last_progress`). A log grows for as long as the job runs: one
heartbeat every ``--interval-s`` seconds with the runtime API's telemetry, about 300 bytes.
For ``--jobs`` jobs that have run ``--hours`` hours this times, in one process and
alternated, the reader read from the end (``last_progress``) and the previous reader (every
record of the log's last 4 MiB parsed, then the newest with a progress taken).

    .venv/bin/python -m benchmarks.performance.progress_read [--jobs 200] [--hours 1 6 24] [--repeat 3]

Writes ``benchmarks/results/progress_read.json``.
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
from slurm_plugin import planfile
from wrapper import status


def heartbeat(job_id: str, step: int, start: float, interval_s: float, total: int) -> str:
    """One heartbeat as the runtime API writes it (with telemetry)."""
    return json.dumps(
        {
            "event": "heartbeat",
            "time": start + step * interval_s,
            "job_id": job_id,
            "plan_version": 2,
            "step": step * 50,
            "samples": step * 3200,
            "samples_per_s": 812.5 + step % 7,
            "progress": step / total,
            "cpu_percent": 387.5,
            "rss_mb": 5120.4,
            "gpu_util": [97, 96, 98, 97],
            "gpu_mem_mb": [30512, 30498, 30520, 30507],
        },
        sort_keys=True,
    )


def write_logs(spool: Path, jobs: int, hours: float, interval_s: float) -> int:
    """``jobs`` status directories whose logs hold ``hours`` of heartbeats; the log's size."""
    lines = int(hours * 3600 / interval_s)
    text = "\n".join(heartbeat("j", k, 1_795_300_000.0, interval_s, lines) for k in range(lines)) + "\n"
    for k in range(jobs):
        directory = status.status_dir(spool, str(k))
        directory.mkdir(parents=True)
        (directory / status.HEARTBEATS).write_text(text)
    return len(text.encode())


def previous_reader(spool: Path, job_id: str) -> float | None:
    """The reader before this change: every record of the last 4 MiB, newest with a progress."""
    directory = status.status_dir(spool, job_id)
    for record in reversed(list(status.read_records(directory / status.HEARTBEATS))):
        value = record.get("progress")
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
            return float(value)
    return None


def time_all(spool: Path, jobs: int, read: Any) -> tuple[float, list[float | None]]:
    started = time.perf_counter()
    values = [read(spool, str(k)) for k in range(jobs)]
    return time.perf_counter() - started, values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200, help="running jobs")
    parser.add_argument(
        "--hours", type=float, nargs="+", default=[1.0, 6.0, 24.0], help="how long each job has run"
    )
    parser.add_argument("--interval-s", type=float, default=5.0, help="seconds between heartbeats")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for hours in args.hours:
        with tempfile.TemporaryDirectory() as tmp:
            spool = Path(tmp)
            size = write_logs(spool, args.jobs, hours, args.interval_s)
            new_s, old_s = [], []
            for _ in range(args.repeat):
                t_new, v_new = time_all(spool, args.jobs, planfile.last_progress)
                t_old, v_old = time_all(spool, args.jobs, previous_reader)
                if v_new != v_old:
                    raise SystemExit(f"{hours} h: the two readers disagree")
                new_s.append(t_new)
                old_s.append(t_old)
        row = {
            "hours": hours,
            "log_bytes": size,
            "from_the_end_s": statistics.median(new_s),
            "whole_tail_s": statistics.median(old_s),
        }
        rows.append(row)
        print(
            f"{args.jobs} jobs x {hours:g} h ({size / 2**20:.2f} MiB log): from the end "
            f"{row['from_the_end_s'] * 1000:.1f} ms, whole tail {row['whole_tail_s'] * 1000:.1f} ms",
            flush=True,
        )
    write_result(
        "progress_read",
        {
            "command": f"python -m benchmarks.performance.progress_read --jobs {args.jobs} --hours "
            + " ".join(f"{h:g}" for h in args.hours)
            + f" --interval-s {args.interval_s:g} --repeat {args.repeat}",
            "jobs": args.jobs,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
