"""Fuzz every parser a user, a job or a node can feed, N inputs each; count the failures.

    .venv/bin/python -m benchmarks.soak.fuzz --inputs 2000 --seed 1 [--only NAME ...] [--out FILE]

Inputs come from ``tests/fuzz/mutate.py`` (mutations of valid seeds, and random text or
bytes); each target (``tests/fuzz/targets.py``) must accept an input or refuse it with its
own error naming the input. Anything else is a failure: the first few distinct ones (by
exception type and message head) are listed. Writes ``benchmarks/results/fuzz.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from tests.fuzz.mutate import random_inputs
from tests.fuzz.targets import TARGETS, Bug, KnownBug

RESULTS = Path(__file__).resolve().parents[1] / "results" / "fuzz.json"


def fuzz_target(name: str, inputs: int, seed: int, keep: int = 5) -> dict[str, Any]:
    target = TARGETS[name]
    rng = random.Random(f"{seed}:{name}")
    accepted = refused = failures = known = 0
    distinct: dict[str, str] = {}
    started = time.perf_counter()
    for _ in range(inputs):
        data = random_inputs(target, rng)
        try:
            verdict = target.check(data)
        except KnownBug:
            known += 1
            continue
        except Bug as e:
            failures += 1
            cause = e.__cause__
            key = f"{type(cause).__name__}: {str(cause)[:60]}" if cause is not None else str(e)[:80]
            if key not in distinct and len(distinct) < keep:
                distinct[key] = str(e)[:400]
            continue
        if verdict is None:
            accepted += 1
        else:
            refused += 1
    return {
        "inputs": inputs,
        "accepted": accepted,
        "refused_with_error": refused,
        "failures": failures,
        "known_reported": known,
        "distinct_failures": list(distinct.values()),
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=2000, help="inputs per parser (default 2000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=sorted(TARGETS), help="these parsers only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = args.only or list(TARGETS)
    results = {}
    for name in names:
        results[name] = fuzz_target(name, args.inputs, args.seed)
        r = results[name]
        print(
            f"{name:22s} {r['inputs']:6d} inputs  {r['accepted']:6d} accepted  "
            f"{r['refused_with_error']:6d} refused  {r['failures']:5d} failures  "
            f"{r['known_reported']:4d} known  {r['seconds']:6.1f} s",
            flush=True,
        )
        for text in r["distinct_failures"]:
            print(f"    {text}", flush=True)
    summary = {
        "command": "python -m benchmarks.soak.fuzz " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seed": args.seed,
        "inputs_per_parser": args.inputs,
        "parsers": len(names),
        "total_inputs": sum(r["inputs"] for r in results.values()),
        "total_failures": sum(r["failures"] for r in results.values()),
        "total_known_reported": sum(r["known_reported"] for r in results.values()),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"{summary['total_inputs']} inputs, {summary['total_failures']} failures -> {args.out}")
    return 1 if summary["total_failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
