"""Synergy-Greedy (§3.3) and the big-data baselines DRF and Tetris (§5.7).

All three give each job its best-case demand vector, as is, and skip a job for this
round when no server holds it along every dimension; none ever falls back to the
GPU-proportional share. That is what makes them fragment: CPUs and memory run out
while GPUs sit idle (Figure 10a), and skipped jobs lose their turn (§3.3). They differ
only in the order they try jobs and servers:

* Greedy: the scheduling policy's order, first server that fits (first-fit);
* DRF (Ghodsi et al.): ascending dominant share, each job its own user, first-fit;
* Tetris (Grandl et al.): repeatedly the (job, server) pair with the largest alignment,
  the dot product of the job's demand and the server's free resources.

Synergy fed both big-data policies its profiled best-case demands, and so does Mosaic.

A running job is never stopped by them: the placement kept it on its GPUs, so it renews
its lease first (§4.3), with its best-case demand if that fits there, else the share it
had, else its proportional share, else what is left. Only pending jobs are skipped.
"""

from __future__ import annotations

from planner.policies.synergy.base import (
    Demand,
    Round,
    SynergyShaping,
    best_case,
    candidates,
    commit,
    feasible_best_case,
    place_at,
    skip,
)
from planner.policies.synergy.demand import PerGpu
from planner.policies.synergy.pool import Counts
from planner.stages import SHAPINGS


def _first_fit_in(rnd: Round, demands: list[Demand]) -> None:
    renew_leases(rnd, demands)
    for d in demands:
        if d.kept:
            continue
        spot = place_at(rnd, d, feasible_best_case, pick="first")
        if spot is None:
            skip(rnd, d)
        else:
            commit(rnd, d, *spot)


def renew_leases(rnd: Round, demands: list[Demand]) -> None:
    """Running jobs keep running on their GPUs, in the given order (see the module text)."""
    for d in demands:
        counts = rnd.pool.reserved_counts(d.job.id)
        if not d.kept or counts is None:
            continue
        prop = rnd.prop(counts)
        had = d.had or prop
        for share in (feasible_best_case(rnd, d, counts), had, prop):
            if rnd.pool.fits(counts, share):
                break
        else:
            free = rnd.pool
            share = PerGpu(
                max(0, min(min(free.free_cpus[n] // g, had.cpus) for n, g in counts)),
                max(0.0, min(min(free.free_mem[n] / g, had.mem_gb) for n, g in counts)),
            )
        commit(rnd, d, counts, share)


@SHAPINGS.register("greedy")
class GreedyShaping(SynergyShaping):
    """First fit of best-case demand vectors in priority order, skipping what does not fit."""

    component = "greedy"
    beyond_runnable_set = True

    def allocate(self, rnd: Round) -> None:
        _first_fit_in(rnd, rnd.demands)


@SHAPINGS.register("drf")
class DrfShaping(SynergyShaping):
    """Dominant Resource Fairness over the runnable set, with static best-case demands."""

    component = "drf"
    beyond_runnable_set = True

    def allocate(self, rnd: Round) -> None:
        nodes = rnd.pool.nodes
        total_gpus = sum(n.gpus for n in nodes) or 1
        total_cpus = sum(n.cpus for n in nodes) or 1
        total_mem = sum(n.mem_gb for n in nodes) or 1.0
        everywhere = rnd.prop(tuple((n.name, 1) for n in nodes)) if nodes else PerGpu(0, 0.0)

        def dominant(kd: tuple[int, Demand]) -> tuple[float, int]:
            k, d = kd
            g = d.job.num_gpus
            share = best_case(d, everywhere)
            return max(g / total_gpus, share.cpus * g / total_cpus, share.mem_gb * g / total_mem), k

        _first_fit_in(rnd, [d for _, d in sorted(enumerate(rnd.demands), key=dominant)])


@SHAPINGS.register("tetris")
class TetrisShaping(SynergyShaping):
    """Tetris's alignment heuristic over the runnable set, with static best-case demands."""

    component = "tetris"
    beyond_runnable_set = True

    def allocate(self, rnd: Round) -> None:
        renew_leases(rnd, rnd.demands)
        waiting = [d for d in rnd.demands if not d.kept]
        while waiting:
            best: tuple[float, int, Counts, PerGpu] | None = None
            for k, d in enumerate(waiting):
                for counts in candidates(rnd, d):
                    share = feasible_best_case(rnd, d, counts)
                    if not rnd.pool.fits(counts, share):
                        continue
                    score = _alignment(rnd, counts, share)
                    if best is None or score > best[0]:
                        best = (score, k, counts, share)
            if best is None:
                break
            _, k, counts, share = best
            commit(rnd, waiting.pop(k), counts, share)
        for d in waiting:
            skip(rnd, d)


def _alignment(rnd: Round, counts: Counts, share: PerGpu) -> float:
    """Dot product of demand and free resources, each normalised by the node's capacity."""
    score = 0.0
    for node, g in counts:
        n = rnd.pool.by_name[node]
        free = rnd.pool
        score += (g / n.gpus) * (len(free.free_gpus[node]) / n.gpus)
        score += (share.cpus * g / max(n.cpus, 1)) * (free.free_cpus[node] / max(n.cpus, 1))
        score += (share.mem_gb * g / max(n.mem_gb, 1e-9)) * (free.free_mem[node] / max(n.mem_gb, 1e-9))
    return score
