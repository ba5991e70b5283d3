"""The simulator's peak memory on traces of up to 100,000 jobs (issue 15).

For each size: a Gavel-style trace (``mosaic trace gen --kind gavel --rate R --seed 0``) is
replayed by ``mosaic sim`` on the 512-GPU Gavel cluster with the tiresias preset, at
capacity (16 jobs/hour, as ``benchmarks/performance/sim_speed.py``: queues build, every round has
hundreds of active jobs), and the process is measured by ``/usr/bin/time -v`` (maximum
resident set size, wall and CPU time). ``mosaic sim --help`` under the same measure gives
the floor (the interpreter and the imports). The growth per job between sizes says what a
job costs to keep.

    .venv/bin/python -m benchmarks.performance.sim_memory                  # 1,000, 10,000 and 100,000 jobs
    .venv/bin/python -m benchmarks.performance.sim_memory --jobs 1000 10000 --out sim_memory_small
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import write_result

HERE = Path(__file__).resolve().parents[2]
CLUSTER = HERE / "etc" / "clusters" / "gavel-512.toml"
TIME = "/usr/bin/time"


def timed(argv: list[str]) -> dict[str, Any]:
    """``argv`` under ``/usr/bin/time -v``: its peak RSS (MB), wall and CPU seconds."""
    done = subprocess.run([TIME, "-v", *argv], capture_output=True, text=True, cwd=HERE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    report = done.stderr

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", report, re.MULTILINE)
        if m is None:
            raise SystemExit(f"{TIME} -v printed no '{name}'")
        return m.group(1).strip()

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {
        "max_rss_mb": round(int(field("Maximum resident set size (kbytes)")) / 1024, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(float(field("User time (seconds)")) + float(field("System time (seconds)")), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument(
        "--rate", type=float, default=16.0, help="arrivals per hour (16: the cluster's capacity)"
    )
    parser.add_argument("--preset", default="tiresias")
    parser.add_argument("--out", default="sim_memory", help="result name under benchmarks/results/")
    args = parser.parse_args()
    if shutil.which(TIME) is None:
        raise SystemExit(f"{TIME} is missing (Debian: apt-get install time)")
    if any(n < 1 for n in args.jobs) or args.rate <= 0:
        parser.error("--jobs >= 1 each, --rate > 0")
    mosaic = [sys.executable, "-m", "slurm_plugin.cli.main"]
    floor = timed([*mosaic, "sim", "--help"])
    print(f"floor (interpreter + imports): {floor['max_rss_mb']} MB")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mosaic-simmem-") as tmp:
        for n in sorted(args.jobs):
            trace = Path(tmp) / f"trace-{n}.csv"
            subprocess.run(
                [*mosaic, "trace", "gen", "--kind", "gavel", "--jobs", str(n), "--rate", f"{args.rate:g}",
                 "--seed", "0", "--out", str(trace)],
                cwd=HERE, check=True, capture_output=True,
            )  # fmt: skip
            out = Path(tmp) / f"sim-{n}"
            measured = timed(
                [*mosaic, "sim", "--cluster", str(CLUSTER), "--trace", str(trace), "--out", str(out),
                 "--scheduler", args.preset, "--no-plot", "--no-progress"]
            )  # fmt: skip
            summary = _summary(out)
            row = {
                "jobs": n,
                "trace_mb": round(trace.stat().st_size / 2**20, 2),
                **measured,
                "rounds": summary.get("rounds"),
                "finished": summary.get("finished"),
                "jobs_csv_mb": round((out / "jobs.csv").stat().st_size / 2**20, 2),
            }
            print(row, flush=True)
            rows.append(row)
    growth = [
        {
            "from_jobs": a["jobs"],
            "to_jobs": b["jobs"],
            "kb_per_job": round((b["max_rss_mb"] - a["max_rss_mb"]) * 1024 / (b["jobs"] - a["jobs"]), 2),
        }
        for a, b in itertools.pairwise(rows)
    ]
    write_result(
        args.out,
        {
            "command": "python -m benchmarks.performance.sim_memory --jobs "
            + " ".join(str(n) for n in sorted(args.jobs))
            + f" --rate {args.rate:g} --preset {args.preset}",
            "cluster": str(CLUSTER.relative_to(HERE)),
            "measure": f"{TIME} -v: Maximum resident set size of the mosaic sim process",
            "floor": floor,
            "runs": rows,
            "growth": growth,
        },
    )


def _summary(out: Path) -> dict[str, Any]:
    import json

    path = out / "summary.json"
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}") from e
    return document


if __name__ == "__main__":
    main()
