"""The performance models fitted from the profiler's seven CPU plan samples, against other
measured CPU configurations of the same job.

    python -m benchmarks.tools.profiler_fit                 # ~12 min on 2 cores: 7 + 14 runs of 20 s
    python -m benchmarks.tools.profiler_fit --run-s 30
    python -m benchmarks.tools.profiler_fit --run-s 10 --repeat 3   # ~20 min: each configuration 3 times

Three ``mosaic profile --example text-transformer --local`` commands, as a user runs them:

1. ``--plans auto`` at the example's global batch (16): the seven default samples (1-2 ranks of
   one thread and one rank of two, gradient accumulation 1-8), fitted into
   ``text.perfmodel.json`` (Rubick's model) and ``text.cpu-step.json`` (the CPU step model);
2. seven other configurations at batch 16: 2 ranks with accumulation 2 and 8, 1 rank with 2
   and 16, and 1 rank of 2 threads with accumulation 2, 8 and 16;
3. seven at batch 32: 1-2 ranks of one thread and 1 rank of two, accumulation 1-16;

``--framework deepspeed`` does the same with the example's DeepSpeed path (ZeRO on gloo): the
seven DeepSpeed defaults (data parallelism, ZeRO-2 and three ZeRO-Offload runs over 1-2 ranks,
1-2 threads and accumulation 1-4) against 14 other ZeRO-1/ZeRO-2/offload configurations at
batch 16 and 32 (``OTHER_16_DS``, ``OTHER_32_DS``).

With ``--repeat N`` every configuration is measured N times (the profiler goes round its
samples N times) and its median is used, for the fitted samples and the others alike.
Then ``mosaic perfmodel validate`` of each fit on the samples themselves and on the others
(the 14 configurations less any that the default samples also measured).
The load average before and after each command is recorded (the runs are pinned to cores, but
on a machine this small anything else running is in their way). Writes
``benchmarks/results/profiler_fit.json`` with the measured rows and the fitted parameters.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import write_result

SHAPE = "0.43776,64,128,2"  # text-transformer: parameters (M), sequence, hidden, layers
OTHER_16 = [
    {"ranks": 2, "threads": 1, "plan": {"grad_accum": 8}},
    {"ranks": 2, "threads": 1, "plan": {"grad_accum": 2}},
    {"ranks": 1, "threads": 1, "plan": {"grad_accum": 2}},
    {"ranks": 1, "threads": 1, "plan": {"grad_accum": 16}},
    *({"ranks": 1, "threads": 2, "plan": {"grad_accum": a}} for a in (2, 8, 16)),
]
OTHER_32 = [
    {"ranks": 1, "threads": 1, "plan": {}},
    {"ranks": 2, "threads": 1, "plan": {}},
    {"ranks": 1, "threads": 1, "plan": {"grad_accum": 4}},
    {"ranks": 2, "threads": 1, "plan": {"grad_accum": 4}},
    {"ranks": 1, "threads": 2, "plan": {}},
    {"ranks": 1, "threads": 2, "plan": {"grad_accum": 4}},
    {"ranks": 2, "threads": 1, "plan": {"grad_accum": 16}},
]

Z2, OFF = {"zero_stage": 2}, {"zero_stage": 2, "offload_optimizer": True}
OTHER_16_DS = [
    {"ranks": 1, "threads": 1, "plan": {"zero_stage": 1}},
    {"ranks": 2, "threads": 1, "plan": {"zero_stage": 1, "grad_accum": 2}},
    {"ranks": 2, "threads": 1, "plan": {**Z2, "grad_accum": 4}},
    {"ranks": 1, "threads": 2, "plan": Z2},
    {"ranks": 1, "threads": 2, "plan": {**OFF, "grad_accum": 4}},
    {"ranks": 1, "threads": 1, "plan": {**OFF, "grad_accum": 8}},
    {"ranks": 2, "threads": 1, "plan": {**OFF, "grad_accum": 2}},
]
OTHER_32_DS = [
    {"ranks": 1, "threads": 1, "plan": {}},
    {"ranks": 2, "threads": 1, "plan": Z2},
    {"ranks": 1, "threads": 2, "plan": OFF},
    {"ranks": 1, "threads": 1, "plan": {"zero_stage": 1, "grad_accum": 4}},
    {"ranks": 2, "threads": 1, "plan": {**OFF, "grad_accum": 4}},
    {"ranks": 1, "threads": 2, "plan": {**Z2, "grad_accum": 2}},
    {"ranks": 2, "threads": 1, "plan": {"grad_accum": 2}},
]
KEYS = ("global_batch", "gpus", "cpus_per_gpu", "zero_stage", "offload_optimizer", "grad_accum")


def mosaic(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "mosaic"), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done


def profile(
    out: Path, plans: str, run_s: float, repeat: int, framework: str, batch: int | None = None
) -> dict[str, Any]:
    args = ["profile", "--example", "text-transformer", "--local", "--cpus", "2", "--plans", plans]
    args += ["--model-shape", SHAPE, "--run-s", f"{run_s:g}", "--out", str(out), "--json"]
    if framework != "torch":
        args += ["--framework", framework]
    if repeat > 1:
        args += ["--repeat", str(repeat)]
    if batch is not None:
        args += ["--global-batch", str(batch)]
    load_before = os.getloadavg()[0]
    summary = json.loads(mosaic(*args).stdout)
    return {"command": "mosaic " + " ".join(args), "load_before": load_before,
            "load_after": os.getloadavg()[0], "summary": summary}  # fmt: skip


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return [{k: r[k] for k in (*KEYS, "iter_time_s", "source")} for r in csv.DictReader(f)]


def _config(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[k] for k in KEYS)


def _rows_of(header: str, body: list[str]) -> list[dict[str, str]]:
    return list(csv.DictReader([header, *body]))


def validate(params: Path, measured: Path) -> dict[str, Any]:
    return json.loads(mosaic("perfmodel", "validate", str(params), str(measured), "--json").stdout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-s", type=float, default=20.0, help="seconds measured per run")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measurements of every configuration (the median is used)"
    )
    parser.add_argument(
        "--framework", choices=("torch", "deepspeed"), default="torch", help="the example's training path"
    )
    parser.add_argument("--out", default="profiler_fit", help="result name under benchmarks/results/")
    args = parser.parse_args()
    o16, o32 = (OTHER_16_DS, OTHER_32_DS) if args.framework == "deepspeed" else (OTHER_16, OTHER_32)
    with tempfile.TemporaryDirectory(prefix="mosaic-profiler-fit-") as tmp:
        root = Path(tmp)
        run = (args.run_s, args.repeat, args.framework)
        fitted = profile(root / "text.json", "auto", *run)
        other16 = profile(root / "o16.json", json.dumps(o16), *run)
        other32 = profile(root / "o32.json", json.dumps(o32), *run, batch=32)
        others = root / "others.csv"
        sampled = {_config(r) for r in rows(root / "text.samples.csv")}
        lines = (root / "o16.samples.csv").read_text().splitlines()
        lines += (root / "o32.samples.csv").read_text().splitlines()[1:]
        header, body = lines[0], lines[1:]
        kept = [
            line
            for line, row in zip(body, _rows_of(header, body), strict=True)
            if _config(row) not in sampled
        ]
        others.write_text("\n".join([header, *kept]) + "\n")
        params, cpu = root / "text.perfmodel.json", root / "text.cpu-step.json"
        result = {
            "command": "python -m benchmarks.tools.profiler_fit " + " ".join(sys.argv[1:]),
            "profiles": {"samples": fitted, "other_16": other16, "other_32": other32},
            "samples": rows(root / "text.samples.csv"),
            "others": rows(others),
            "perfmodel": json.loads(params.read_text()),
            "cpu_step": json.loads(cpu.read_text()),
            "validate_on_samples": validate(params, root / "text.samples.csv"),
            "validate_on_others": validate(params, others),
            "cpu_step_on_samples": validate(cpu, root / "text.samples.csv"),
            "cpu_step_on_others": validate(cpu, others),
        }
    write_result(args.out, result)
    for key in ("validate_on_samples", "validate_on_others", "cpu_step_on_samples", "cpu_step_on_others"):
        print(key, json.dumps(result[key]["overall"]))


if __name__ == "__main__":
    main()
