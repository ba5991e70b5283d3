"""``mosaic``'s 2D-LAS splits and Tesserae's relabelling, on rigid jobs without time limits.

Tesserae's generator (``mosaic trace gen --kind shockwave --jobs 400 --rate 12``, seeds 1-5, on
``etc/clusters/tesserae-32.toml``) and the bundled demo trace: ``mosaic`` as it is, with
other splits for the jobs that declare no time limit (``-o policy.queue_thresholds_gpu_s``),
and with Tesserae's relabelling (``--migration tesserae``); ``tesserae-t`` beside it on each
seed. Average JCT and restarts per run, and the mean over the seeds of each variant's ratio to
``tesserae-t``.

    .venv/bin/python -m benchmarks.papers.mosaic_las_splits   (about 3 min)

Writes ``benchmarks/results/mosaic_las_splits.json``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from benchmarks.papers.mosaic import BUNDLED, CLUSTERS, simulate, trace_file

SEEDS = (1, 2, 3, 4, 5)
# variant -> extra sim flags for mosaic
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "split [3600]": ("-o", "policy.queue_thresholds_gpu_s=[3600]"),
    "split [10800, 43200]": ("-o", "policy.queue_thresholds_gpu_s=[10800, 43200]"),
    "split [28800, 115200]": ("-o", "policy.queue_thresholds_gpu_s=[28800, 115200]"),
    "with relabelling": ("--migration", "tesserae"),
}


def _row(summary: dict[str, Any]) -> dict[str, Any]:
    return {"avg_jct_s": summary["avg_jct_s"], "restarts": summary["restarts"], "jobs": summary["jobs"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="mosaic_las_splits")
    args = p.parse_args(argv)
    tesserae: dict[str, Any] = {}
    ratios: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = str(CLUSTERS / "tesserae-32.toml")
        for seed in SEEDS:
            workdir = Path(tmp) / f"seed{seed}"
            workdir.mkdir()
            trace = trace_file(f"gen:shockwave:400:12:{seed}", workdir)
            base = simulate("tesserae-t", trace, cluster, (), workdir)
            runs = {"tesserae-t": _row(base)}
            for variant, flags in VARIANTS.items():
                run = simulate("mosaic", trace, cluster, flags, workdir, f"v{len(runs)}")
                runs[f"mosaic {variant}"] = _row(run)
                ratios[variant].append(run["avg_jct_s"] / base["avg_jct_s"])
            tesserae[str(seed)] = runs
            line = ", ".join(f"{n} {r['avg_jct_s']:.0f} s" for n, r in runs.items())
            print(f"seed {seed}: {line}", flush=True)
        workdir = Path(tmp) / "demo"
        workdir.mkdir()
        trace, demo_cluster = str(BUNDLED / "demo_trace.csv"), str(BUNDLED / "demo_cluster.toml")
        demo = {
            f"mosaic {variant}": _row(simulate("mosaic", trace, demo_cluster, flags, workdir, f"d{k}"))
            for k, (variant, flags) in enumerate(VARIANTS.items())
        }
    mean = {v: round(sum(r) / len(r), 4) for v, r in ratios.items()}
    restarts = {v: sum(tesserae[str(s)][f"mosaic {v}"]["restarts"] for s in SEEDS) for v in VARIANTS}
    for v in VARIANTS:
        print(f"{v}: mean mosaic / tesserae-t {mean[v]:.3f}, restarts over the seeds {restarts[v]}")
    write_result(
        args.name,
        {
            "tesserae_seeds": tesserae,
            "mean_ratio_to_tesserae_t": mean,
            "restarts_over_seeds": restarts,
            "demo": demo,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
