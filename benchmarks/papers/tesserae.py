"""Tesserae's evaluation, reproduced on Mosaic's simulator (Tesserae §6-7).

Five parts, each written to benchmarks/results/tesserae_<part>.json:

* ``table``: the Shockwave-style trace (900 jobs, 80 jobs/h) on 32 and 80 A100 GPUs,
  avg JCT, makespan, migrations and worst FTF for tiresias, tiresias-single,
  gavel-las, tesserae-t and tesserae-ftf; with Tesserae's Table 1 models and with
  Gavel's job types (which have measured co-location data).
* ``packing``: the Hungarian matching against greedy pairing under the same policy, at
  a 30 s and a 180 s restart cost.
* ``migration``: how many migrations Tesserae's relabelling saves against Gavel's rule
  (no relabelling) and Algorithm 5, counted on *the same* snapshots: every round of a
  tesserae-t simulation is also planned without relabelling and with Algorithm 5.
* ``scaling``: decision time at 256 GPUs for 256..3,000 active jobs, per stage
  (Tesserae Figure 14), and 4,096 GPUs x 10,000 jobs.
* ``noise``: avg JCT of tesserae-t when the planner's profiles carry noise n in [0, 1]
  (Tesserae Figure 16), three noise seeds each.

    .venv/bin/python benchmarks/papers/tesserae.py [table] [packing] [migration] [scaling] [noise]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import busy_snapshot, write_result
from planner import Snapshot, build_scheduler, plan_round, preset
from planner.cluster import cluster_from_toml
from planner.pipeline import _protect_running, finalize
from planner.policies.migration import gpu_level_relabelling
from planner.sim import SimConfig, Simulator, simulate
from planner.traces.generators import shockwave_trace
from profiles.store import ProfileStore

ETC = Path(__file__).resolve().parents[2] / "etc" / "clusters"
PRESETS = ("tiresias", "tiresias-single", "gavel-las", "tesserae-t", "tesserae-ftf")
PROFILES = ProfileStore.builtin()


def cluster(name: str):  # type: ignore[no-untyped-def]
    return cluster_from_toml((ETC / f"{name}.toml").read_text())


def summary_row(s: dict) -> dict:  # type: ignore[type-arg]
    return {
        "avg_jct_h": s["avg_jct_s"] / 3600,
        "makespan_h": s["makespan_s"] / 3600,
        "migrations": s["migrations"],
        "restarts": s["restarts"],
        "max_ftf": s["max_ftf"],
        "gpu_util": s["gpu_util"],
    }


def part_table() -> None:
    rows = {}
    for models in ("tesserae", "gavel"):
        trace = shockwave_trace(900, jobs_per_hour=80, seed=0, models=models)
        for name in ("tesserae-32", "tesserae-80"):
            nodes = cluster(name)
            for p in PRESETS:
                s = simulate(
                    nodes, trace, build_scheduler(preset(p), PROFILES), SimConfig(), profiles=PROFILES
                )
                rows[f"{models}/{name}/{p}"] = summary_row(s.summary)
                r = rows[f"{models}/{name}/{p}"]
                print(
                    f"{models:<9}{name:<13}{p:<17}{r['avg_jct_h']:8.2f} h{r['makespan_h']:9.1f} h"
                    f"{r['migrations']:8d} mig{r['max_ftf']:8.2f} rho"
                )
    write_result(
        "tesserae_table",
        {
            "command": "benchmarks/papers/tesserae.py table",
            "trace": "shockwave_trace(900, 80 jobs/h, seed 0), models tesserae (Table 1) or gavel",
            "clusters": "etc/clusters/tesserae-32.toml (8 x 4 A100), tesserae-80.toml (20 x 4 A100)",
            "rows": rows,
        },
    )


def part_migration() -> None:
    """Count migrations of the same rounds under three relabelling rules."""
    trace = shockwave_trace(900, jobs_per_hour=80, seed=0, models="gavel")
    nodes = cluster("tesserae-32")
    results = {}
    for label, options in (
        ("reserving placement", {}),
        ("gavel-rule placement", {"reserve": False}),
        ("fresh placement", {"sticky": False}),
    ):
        config = preset("tesserae-t").with_overrides(options={"placement": options} if options else {})
        sched = build_scheduler(config, PROFILES)
        sim = Simulator(nodes, trace, sched, SimConfig(), profiles=PROFILES)
        counts = {"tesserae": 0, "gavel rule": 0, "algorithm 5": 0, "algorithm 5 split jobs": 0}
        original = sim._plan

        def plan_and_compare(t: float, original=original, sched=sched, sim=sim, counts=counts):  # type: ignore[no-untyped-def]
            plan = original(t)
            snap = Snapshot(t, sim.nodes, tuple(j.snapshot_view() for j in sim.active.values()))
            ordered = _protect_running(sched.ordering.order(snap), sched.preemptive)
            draft = sched.placement.place(snap, ordered)
            draft = sched.packing.pack(snap, ordered, draft)
            draft = sched.shaping.shape(snap, draft)
            counts["tesserae"] += len(plan.migrated)
            counts["gavel rule"] += len(finalize(snap, ordered, draft).migrated)
            old = {j.id: j.assignment.gpus for j in snap.jobs if j.is_running and j.assignment}
            new = {j: a.gpus for j, a in draft.assignments.items()}
            relabel = gpu_level_relabelling(old, new, snap.nodes)
            moved = {j for j in set(old) & set(new) if relabel.apply(new[j]) != tuple(old[j])}
            counts["algorithm 5"] += len(moved)
            counts["algorithm 5 split jobs"] += sum(
                len({n for n, _ in relabel.apply(s)}) > len({n for n, _ in s}) for s in new.values()
            )
            return plan

        sim._plan = plan_and_compare  # type: ignore[method-assign]
        sim.run()
        counts["reduction_vs_gavel_rule"] = 1 - counts["tesserae"] / max(counts["gavel rule"], 1)
        results[label] = counts
        print(
            f"{label:<22} tesserae {counts['tesserae']:6d}  gavel rule {counts['gavel rule']:6d}  "
            f"algorithm 5 {counts['algorithm 5']:6d} ({counts['algorithm 5 split jobs']} splits)  "
            f"reduction {counts['reduction_vs_gavel_rule']:.0%}"
        )
    write_result(
        "tesserae_migration",
        {
            "command": "benchmarks/papers/tesserae.py migration",
            "trace": "shockwave_trace(900, 80 jobs/h, seed 0, models gavel) on tesserae-32, tesserae-t",
            "method": "each round planned once, its placement+packing relabelled three ways; "
            "migrations counted on identical snapshots",
            "results": results,
        },
    )


def part_packing() -> None:
    """Hungarian vs greedy packing under the same policy, at two restart costs."""
    trace = shockwave_trace(900, jobs_per_hour=80, seed=0, models="gavel")
    nodes = cluster("tesserae-32")
    variants = {
        "las + greedy packing + gavel rule (gavel-las)": preset("gavel-las"),
        "las + tesserae packing + tesserae migration": preset("tesserae-t").with_overrides(policy="las"),
        "tiresias + greedy packing + tesserae migration": preset("tesserae-t").with_overrides(
            packing="gavel"
        ),
        "tiresias + tesserae packing + tesserae migration (tesserae-t)": preset("tesserae-t"),
    }
    rows = {}
    for restart in (30.0, 180.0):
        config = SimConfig(checkpoint_s=restart / 3, relaunch_s=2 * restart / 3)
        for label, sched_config in variants.items():
            s = simulate(nodes, trace, build_scheduler(sched_config, PROFILES), config, profiles=PROFILES)
            rows[f"{restart:.0f}s/{label}"] = r = summary_row(s.summary)
            print(
                f"restart {restart:4.0f} s  {label:<64}{r['avg_jct_h']:7.2f} h{r['migrations']:7d} mig"
                f"{r['restarts']:7d} restarts"
            )
    write_result(
        "tesserae_packing",
        {
            "command": "benchmarks/papers/tesserae.py packing",
            "trace": "shockwave_trace(900, 80 jobs/h, seed 0, models gavel) on tesserae-32",
            "rows": rows,
        },
    )


def part_scaling() -> None:
    sched = build_scheduler(preset("tesserae-t"), PROFILES)
    points = []
    for gpus, n_jobs, repeat in [
        (256, 256, 5),
        (256, 512, 5),
        (256, 1024, 5),
        (256, 2048, 5),
        (256, 3000, 5),
        (4096, 10_000, 1),
    ]:
        nodes = cluster_from_toml(
            f'[[nodes]]\ncount = {gpus // 8}\ngpus = 8\ngpu_type = "v100"\ncpus = 24\nmem_gb = 500\n'
        )
        snap = busy_snapshot(nodes, n_jobs, first_round="tesserae-t")
        plans = [plan_round(snap, sched, clock=time.perf_counter) for _ in range(repeat)]
        best = min(plans, key=lambda p: p.decision_time_s)
        point = {
            "gpus": gpus,
            "jobs": n_jobs,
            "decision_time_s": best.decision_time_s,
            "stages_s": dict(best.stage_times_s),
            "running": sum(j.is_running for j in snap.jobs),
        }
        points.append(point)
        stages = "  ".join(f"{k} {v * 1000:.0f}" for k, v in best.stage_times_s.items())
        print(f"{gpus:5d} GPUs {n_jobs:6d} jobs: {best.decision_time_s:.3f} s  ({stages} ms)")
    write_result(
        "tesserae_scaling",
        {
            "command": "benchmarks/papers/tesserae.py scaling",
            "preset": "tesserae-t",
            "snapshot": "Gavel-style jobs, one tesserae-t round applied, attained 0-50 GPU-h, best of 5",
            "target": "<= 0.3 s at 2,048 jobs on 256 GPUs",
            "points": points,
        },
    )


def part_noise() -> None:
    trace = shockwave_trace(900, jobs_per_hour=80, seed=0, models="gavel")
    nodes = cluster("tesserae-32")
    rows = {}
    for noise in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        jcts = []
        for seed in range(3 if noise else 1):
            sched = build_scheduler(preset("tesserae-t"), PROFILES, profile_noise=noise, seed=seed)
            jcts.append(
                simulate(nodes, trace, sched, SimConfig(), profiles=PROFILES).summary["avg_jct_s"] / 3600
            )
        rows[str(noise)] = {"avg_jct_h": statistics.mean(jcts), "per_seed": jcts}
    base = rows["0.0"]["avg_jct_h"]
    for noise, r in rows.items():
        r["increase"] = r["avg_jct_h"] / base - 1
        print(f"noise {noise:>4}: avg JCT {r['avg_jct_h']:.2f} h ({r['increase']:+.1%})")
    write_result(
        "tesserae_noise",
        {
            "command": "benchmarks/papers/tesserae.py noise",
            "trace": "shockwave_trace(900, 80 jobs/h, seed 0, models gavel) on tesserae-32, tesserae-t",
            "rows": rows,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parts = {
        "table": part_table,
        "packing": part_packing,
        "migration": part_migration,
        "scaling": part_scaling,
        "noise": part_noise,
    }
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(parts)} (default: all)")
    args = parser.parse_args()
    unknown = [p for p in args.parts if p not in parts]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(parts)}")
    for part in args.parts or parts:
        parts[part]()


if __name__ == "__main__":
    main()
