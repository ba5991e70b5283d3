"""``mosaic`` against each paper's own preset, on that paper's benchmark trace and cluster.

Each case is one ``mosaic sim`` per preset on the same trace and cluster, in one run; the
result file records every summary and, per case, mosaic's average JCT over the paper preset's
(the issue's bar: within 1.10x, or better).

    .venv/bin/python -m benchmarks.mosaic [--cases demo,tesserae,...] [--name mosaic_papers]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "planner" / "sim" / "bundled"
CLUSTERS = ROOT / "etc" / "clusters"

# name -> (trace, cluster, the paper's preset and the baselines beside it, extra sim flags)
CASES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "demo": (str(BUNDLED / "demo_trace.csv"), str(BUNDLED / "demo_cluster.toml"), ("tiresias", "las"), ()),
    "tesserae": ("gen:shockwave:400:12", str(CLUSTERS / "tesserae-32.toml"), ("tesserae-t", "tiresias"), ()),
    "synergy": (
        "gen:synergy:300:9",
        str(CLUSTERS / "synergy-128.toml"),
        ("synergy-tune", "synergy-proportional"),
        (),
    ),
    "rubick-base": (
        str(BUNDLED / "rubick_base.csv"),
        str(CLUSTERS / "rubick-64.toml"),
        ("rubick", "synergy-tune"),
        ("--round-s", "360"),
    ),
    "crius-venus": (str(BUNDLED / "crius_venus.csv"), str(CLUSTERS / "crius-256.toml"), ("crius",), ()),
}


def trace_file(spec: str, workdir: Path) -> str:
    if not spec.startswith("gen:"):
        return spec
    _, kind, jobs, rate = spec.split(":")
    out = workdir / f"{kind}-{jobs}-{rate}.csv"
    cmd = [sys.executable, "-m", "slurm_plugin.cli.main", "trace", "gen", "--kind", kind]
    cmd += ["--jobs", jobs, "--rate", rate, "--seed", "1", "--out", str(out)]
    if kind == "synergy":
        cmd.append("--single-gpu")
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return str(out)


def simulate(preset: str, trace: str, cluster: str, flags: tuple[str, ...], workdir: Path) -> dict[str, Any]:
    out = workdir / preset
    cmd = [sys.executable, "-m", "slurm_plugin.cli.main", "sim", "--cluster", cluster, "--trace", trace]
    cmd += ["--scheduler", preset, "--out", str(out), *flags]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--name", default="mosaic_papers")
    args = p.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            spec, cluster, presets, flags = CASES[case]
            workdir = Path(tmp) / case
            workdir.mkdir()
            trace = trace_file(spec, workdir)
            runs = {name: simulate(name, trace, cluster, flags, workdir) for name in ("mosaic", *presets)}
            paper = presets[0]
            ratio = runs["mosaic"]["avg_jct_s"] / runs[paper]["avg_jct_s"]
            results[case] = {
                "paper_preset": paper,
                "mosaic_over_paper_avg_jct": round(ratio, 4),
                "runs": runs,
            }
            line = ", ".join(
                f"{n} {r['avg_jct_s'] / 3600:.2f} h ({r['finished']}/{r['jobs']}, {r['restarts']} restarts)"
                for n, r in runs.items()
            )
            print(f"{case}: {line}; mosaic / {paper} = {ratio:.3f}", flush=True)
    write_result(args.name, {"cases": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
