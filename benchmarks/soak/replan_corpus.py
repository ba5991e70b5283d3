"""A fixed corpus of random ``mosaic`` rounds, to compare two versions of the planner on the
very same rounds.

The replan stress benchmark (:mod:`benchmarks.soak.replan_stress_mosaic`) draws its rounds
with Hypothesis, whose draws for a seed shift with what else the process runs: two versions
of the planner are then counted on different rounds. ``draw`` writes the rounds once, as
snapshot JSON (one per line, the contract ``mosaic plan`` reads; the same file on every run of
the same code); ``check`` plans each round, applies it with no time passing, plans again, and
prints the lines whose second plan differs, for any version of the code to be run on the same
file.

    .venv/bin/python -m benchmarks.soak.replan_corpus draw rounds.jsonl [--draws 300] [--seeds 100-159]
    .venv/bin/python -m benchmarks.soak.replan_corpus check rounds.jsonl [--variant default]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from hypothesis import HealthCheck, given, seed, settings

from benchmarks.soak.replan_stress_mosaic import VARIANTS, replanned_change, scheduler, seed_range
from planner.core.codec import snapshot_from_json, snapshot_to_json
from planner.core.model import Snapshot
from tests.planner.test_mosaic import snapshots


def draw(out: TextIO, draws: int, seeds: range) -> int:
    """Writes ``draws`` rounds of each seed of ``seeds`` to ``out``; returns how many."""
    written = 0

    def keep(snapshot: Snapshot) -> None:
        nonlocal written
        out.write(json.dumps(snapshot_to_json(snapshot), sort_keys=True) + "\n")
        written += 1

    for at_seed in seeds:
        test = settings(
            max_examples=draws, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )(given(snapshots())(keep))
        seed(at_seed)(test)()
    return written


def rounds(path: Path) -> Iterator[Snapshot]:
    with path.open() as f:
        for number, line in enumerate(f, 1):
            yield snapshot_from_json(json.loads(line), f"{path}:{number}")


def check(path: Path, variant: str) -> dict[str, Any]:
    """Counts of the corpus's rounds that change when planned again, and their line numbers."""
    changed: dict[str, list[int]] = {"gpus_changed": [], "cpus_or_memory_changed": []}
    total = 0
    for number, snapshot in enumerate(rounds(path), 1):
        total += 1
        change = replanned_change(snapshot, scheduler(variant))
        if change is not None:
            changed[change].append(number)
    return {"variant": variant, "rounds": total, **{k: len(v) for k, v in changed.items()}, "lines": changed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("draw", help="write the corpus")
    d.add_argument("corpus", type=Path)
    d.add_argument("--draws", type=int, default=300, help="draws per seed")
    d.add_argument("--seeds", type=seed_range, default=seed_range("100-159"), help="A-B, both included")
    c = sub.add_parser("check", help="plan every round of the corpus twice")
    c.add_argument("corpus", type=Path)
    c.add_argument("--variant", choices=sorted(VARIANTS), default="default")
    args = p.parse_args(argv)
    if args.command == "draw":
        with args.corpus.open("w") as out:
            print(f"wrote {draw(out, args.draws, args.seeds)} rounds to {args.corpus}")
    else:
        print(json.dumps(check(args.corpus, args.variant)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
