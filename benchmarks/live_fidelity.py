"""Fidelity: the bundled demo trace on the live test cluster vs the simulator.

Target (issue): live within 10% of the simulation. Runs ``mosaic demo``'s code
(``slurm_plugin.demo.run_demo``: submit, controller ticks, sacct) for each preset and
compares the summary keys with the simulator's run of the same trace (same round length,
the live path's ~2 s restart as the simulator's restart cost).

    .venv/bin/python benchmarks/live_fidelity.py --presets fifo las
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.common import write_result
from planner.config import preset
from slurm_plugin.demo import BUNDLED_TRACE, run_demo

KEYS = ("avg_jct_s", "p50_jct_s", "makespan_s", "avg_queue_s", "restarts", "gpu_util", "rounds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--presets", nargs="+", default=["fifo", "las"])
    parser.add_argument("--time-scale", type=float, default=60.0)
    parser.add_argument("--round-s", type=float, default=2.0)
    args = parser.parse_args()
    rows = []
    for name in args.presets:
        with tempfile.TemporaryDirectory(prefix="mosaic-fidelity-") as tmp:
            result = run_demo(
                Path(tmp),
                preset(name),
                python=sys.executable,
                time_scale=args.time_scale,
                round_s=args.round_s,
            )
        row = {
            "preset": name,
            "live": {k: result.live.get(k) for k in KEYS},
            "sim": {k: result.sim.get(k) for k in KEYS},
        }
        row["relative_error"] = {
            k: (row["live"][k] - row["sim"][k]) / row["sim"][k]
            for k in ("avg_jct_s", "makespan_s")
            if row["sim"][k]
        }
        rows.append(row)
        print(row)
    write_result(
        "live_fidelity",
        {
            "trace": [list(j) for j in BUNDLED_TRACE],
            "time_scale": args.time_scale,
            "round_s": args.round_s,
            "cluster": "test cluster homogeneous: 4 nodes x 4 GPUs",
            "rows": rows,
            "target_relative_error": 0.10,
        },
    )


if __name__ == "__main__":
    main()
