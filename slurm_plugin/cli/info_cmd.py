"""``mosaic presets`` and ``mosaic profiles``: what this installation knows."""

from __future__ import annotations

import argparse

from planner.config import PRESET_TIERS, PRESETS, SchedulerConfig, build_scheduler, component_names
from planner.policies.synergy.demand import best_case_per_gpu
from profiles.observed import ObservedPoint, refine_store
from profiles.store import ProfileStore
from slurm_plugin.profiles_file import load_profile_store


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "presets",
        parents=[common],
        help="list scheduler presets by tier (recommended, paper reproductions, baselines and "
        "ablations), the components they compose and how each runs on the live controller",
    )
    p.set_defaults(run=run_presets)
    q = sub.add_parser("profiles", parents=[common], help="list model profiles, or show one")
    q.add_argument("model", nargs="?", help="a model name or alias")
    q.add_argument("--profiles", action="append", default=[], metavar="JSON", help="extra profile file(s)")
    q.add_argument(
        "--spool",
        metavar="DIR",
        help="also the observations the controller with this spool recorded (refined as it plans)",
    )
    q.set_defaults(run=run_profiles)


TIER_TITLES = {
    "recommended": "Recommended",
    "paper reproductions": "Paper reproductions (one published system each, for comparison)",
    "baselines and ablations": "Baselines and ablations",
}
RUN_TIME_POLICIES = frozenset({"sjf", "srtf", "ftf"})  # orderings that read jobs' run times


def live_support(config: SchedulerConfig, shares_gpus: bool) -> str:
    """How the preset runs on the live controller (``mosaic controller --scheduler NAME``)."""
    if config.trigger == "event":
        text = (
            "yes, event-driven: the daemon plans at each arrival and completion as well as every "
            "round_s (--once plans when it is run)"
        )
    else:
        text = "yes: plans every round_s"
    if shares_gpus:
        text += "; shares GPUs: needs gres/shard nodes (else a shared placement is refused and waits)"
    if config.policy in RUN_TIME_POLICIES:
        text += "; orders by run time: live, only the #MOSAIC --duration-s estimates"
    return text


def run_presets(args: argparse.Namespace) -> int:
    for tier, names in PRESET_TIERS.items():
        print(f"{TIER_TITLES.get(tier, tier)}:")
        for name in names:
            config = PRESETS[name]
            scheduler = build_scheduler(config)
            stages = [
                f"policy={config.policy}",
                "preemptive" if scheduler.preemptive else "non-preemptive",
                f"placement={config.placement}",
                f"shaping={config.shaping}",
            ]
            for label, value in (
                ("packing", config.packing),
                ("reconfig", config.reconfiguration),
                ("migration", config.migration),
            ):
                if value is not None:
                    stages.append(f"{label}={value}")
            print(f"  {name:<21} {' '.join(stages)}")
            print(f"  {'':<21} live: {live_support(config, scheduler.max_jobs_per_gpu > 1)}")
        print()
    for stage, names in component_names().items():
        print(f"{stage + ':':<17} {', '.join(names) or '(none yet)'}")
    return 0


def run_profiles(args: argparse.Namespace) -> int:
    store = load_profile_store(args.profiles)
    if args.model is None:
        for name in store.names():
            p = store.resolve(name)
            data = []
            if p.throughput:
                data.append(f"{len(p.throughput)} throughputs")
            if p.sensitivity is not None:
                data.append("CPU/memory sensitivity")
            if not data and p.sources:  # measured elsewhere (Crius's best-plan iteration times)
                data.append("; ".join(p.sources))
            print(f"{name:<16} {p.task:<15} {', '.join(data) or 'neutral (no measurements)'}")
        return 0
    observed = _observations(args.spool, store, args.model) if args.spool else []
    if observed:
        store = refine_store(store, observed)
    p = store.resolve(args.model)
    print(f"{p.name} ({p.task}); aliases: {', '.join(p.aliases) or '-'}")
    print(f"  sources: {'; '.join(p.sources) or '-'}")
    blocks = store.provenance(args.model)
    print(f"  blocks: {', '.join(f'{b} ({k})' for b, k in blocks.items()) or '-'}")
    if args.spool:
        print(f"  observed runs: {len(observed)}")
    if p.throughput:
        gpu_types = sorted({k.gpu_type for k in p.throughput})
        print(
            f"  measured on {', '.join(gpu_types)}; batch sizes {', '.join(str(b) for b in p.batch_sizes())}"
        )
    if p.sensitivity is not None:
        print(f"  best-case CPUs/GPU {p.ideal_cpus_per_gpu}, memory GB/GPU {p.ideal_mem_gb_per_gpu}")
        demand = best_case_per_gpu(p.sensitivity)
        print(f"  demand from the matrix (5 % tolerance): {demand.cpus} CPUs, {demand.mem_gb:g} GB per GPU")
    return 0


def _observations(spool: str, store: ProfileStore, model: str) -> list[ObservedPoint]:
    """The model's observed points in the controller's state store at ``spool`` (none: no store)."""
    from pathlib import Path

    from slurm_plugin.store import Store

    path = Path(spool) / "mosaic.db"
    if not path.is_file():
        return []
    db = Store(path)
    try:
        key = store.model_key(model)
        return [o for o in db.observations() if store.model_key(o.model) == key]
    finally:
        db.close()
