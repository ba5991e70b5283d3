"""Re-planning an applied ``mosaic`` round over many random rounds: how many change.

The property test ``tests/planner/test_mosaic.py::test_mosaic_replanning_an_applied_round_changes_nothing``
draws a few dozen rounds per CI run (with the sharing stage on). This draws ``--draws`` rounds
for each Hypothesis seed of ``--seeds`` with the same strategy, plans each, applies the plan
with no time passing and plans again, and counts the draws whose second round gives other GPUs,
or the same GPUs with other CPUs or memory: for the default preset, and with each packing
stage it leaves out (SJF-BSBF's sharing, Tesserae's packing with pairs dissolved). Rounds that
change are rare and cluster around a few seeds' examples (Hypothesis draws variations of an
example it found interesting), so one seed says little: the count is over many.

    .venv/bin/python -m benchmarks.soak.replan_stress_mosaic [--draws 300] [--seeds 100-159]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, seed, settings

from benchmarks.common import write_result
from planner import plan_round
from planner.config import build_scheduler, preset
from planner.core.model import Snapshot
from planner.pipeline import Scheduler
from tests.builders import profiles
from tests.planner.test_mosaic import TENANTS, _applied, snapshots

# The default preset, and with each packing stage it leaves out (as the mosaic benchmark runs them).
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "sharing": {"placement": "shared-consolidated", "packing": "bsbf-rigid"},
    "tesserae-packing": {
        "placement": "shared-consolidated",
        "packing": "tesserae-rigid",
        "options": {"placement": {"dissolve": True}},
    },
}


def scheduler(variant: str) -> Scheduler:
    config = replace(preset("mosaic"), tenants=TENANTS)
    fields = dict(VARIANTS[variant])
    if "options" in fields:
        fields["options"] = {**config.options, **fields["options"]}
    return build_scheduler(replace(config, **fields), profiles())


def replanned_change(snapshot: Snapshot, sched: Scheduler) -> str | None:
    """What planning ``snapshot``'s round again, applied with no time passing, changes:
    ``"gpus_changed"``, ``"cpus_or_memory_changed"`` or nothing (``None``)."""
    first = plan_round(snapshot, sched)
    second = plan_round(_applied(snapshot, first), sched)
    if {k: a.gpus for k, a in second.assignments.items()} != {
        k: a.gpus for k, a in first.assignments.items()
    }:
        return "gpus_changed"
    if second.assignments != first.assignments:
        return "cpus_or_memory_changed"
    return None


def count(variant: str, draws: int, at_seed: int) -> dict[str, Any]:
    counts = {"seed": at_seed, "draws": 0, "gpus_changed": 0, "cpus_or_memory_changed": 0}

    def check(snapshot: Any) -> None:
        counts["draws"] += 1
        change = replanned_change(snapshot, scheduler(variant))
        if change is not None:
            counts[change] += 1

    test = settings(
        max_examples=draws, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )(given(snapshots())(check))
    seed(at_seed)(test)()
    return counts


def total(variant: str, draws: int, seeds: range) -> dict[str, Any]:
    """:func:`count` over ``seeds``: the sums, and the seeds whose draws changed."""
    started = time.perf_counter()
    rows = [count(variant, draws, s) for s in seeds]
    changed = [r for r in rows if r["gpus_changed"] or r["cpus_or_memory_changed"]]
    return {
        "variant": variant,
        "sharing": variant != "default",
        "seeds": len(rows),
        "draws": sum(r["draws"] for r in rows),
        "gpus_changed": sum(r["gpus_changed"] for r in rows),
        "cpus_or_memory_changed": sum(r["cpus_or_memory_changed"] for r in rows),
        "seeds_changed": [r["seed"] for r in changed],
        "by_seed": changed,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def seed_range(text: str) -> range:
    """``A-B`` (both included) or one seed ``A``."""
    first, dash, last = text.partition("-")
    try:
        a, b = int(first), int(last if dash else first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A-B or A, got {text!r}") from None
    if b < a:
        raise argparse.ArgumentTypeError(f"{text!r} ends before it starts")
    return range(a, b + 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=300, help="draws per seed")
    p.add_argument("--seeds", type=seed_range, default=seed_range("100-159"), help="A-B, both included")
    p.add_argument("--name", default="replan_stress_mosaic", help="result file name")
    args = p.parse_args()
    rows = [total(variant, args.draws, args.seeds) for variant in VARIANTS]
    for row in rows:
        print({k: v for k, v in row.items() if k != "by_seed"}, flush=True)
    seeds = f"{args.seeds.start}-{args.seeds.stop - 1}"
    command = f"python -m benchmarks.soak.replan_stress_mosaic --draws {args.draws} --seeds {seeds}"
    write_result(args.name, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
