"""Synergy-Tune (§4.2): near-optimal multi-resource packing that never hurts a job.

The runnable set is fixed by GPU demand alone (the placement stage), so GPUs are never
left idle for want of CPUs or memory. Jobs are packed in decreasing order of GPU, CPU
and memory demand, each on the server that fits its whole demand vector most tightly.
When a job does not fit:

1. if it asks for more than its GPU-proportional share, it is switched to that share
   and tried again;
2. otherwise (or if it still does not fit) it goes to the server that best fits its
   GPUs alone, and peers there holding more than their proportional share are switched
   back to it, most generous first, until the job fits. Because every job then holds
   at most its proportional share, it always does.

So no job ever runs slower than under GPU-proportional allocation (the invariant the
tests check), and at worst every job gets exactly that allocation.

A round is packed in three passes, so that re-planning an applied round changes nothing:

1. *keep*: a running job keeps its share where that already gives it all it wants, or where
   the share is within the proportional one and runs as fast (what step 2 left it);
2. *place*: every other job is packed by the rules above, in the order above; then a job
   the placement stage left waiting for GPUs, in its priority order, where the best fit
   left its GPUs free (the placement's own packing had not: the next round's placement
   would start it, for no new reason);
3. *upgrade*: a job below its wish gets it where it now fits, in the same order (the
   waiting jobs started last), until a whole pass upgrades nobody.

Packing running jobs by the rules in one pass (wish first) let a job that step 2 had
switched back take its wish again the next round, before the new job that needed the room
was placed, so that job switched a peer back in turn: a reshape, and a restart, for nothing
every round. With the passes, planning the applied round again keeps every job in pass 1
and meets in pass 3 the very room in which the last upgrade pass upgraded nobody.

Running jobs keep their GPUs (§4.3's lease renewal). If re-packing the new jobs'
GPUs in this order ever fails where the placement stage succeeded (it can, for jobs
spanning servers), the round is tuned on the placement's GPUs instead.

With ``placement_first`` (the ``mosaic`` preset, whose placement owns rigid jobs' GPUs), a
new rigid job stays on the servers the placement gave it where its wish fits there, and
where it fits nowhere; it moves to Tune's best fit only where its wish fits there and not
on its own servers. Re-packing every new job by best fit can swap two of them between the
GPUs the placement freed for each: the placement, planning the applied round again, then
finds the set it had left to a lower-ranked job and stops that job for a higher-ranked one
it had left waiting (a restart for no new reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from planner.policies.common import options_reader
from planner.policies.synergy.base import (
    Demand,
    Round,
    SynergyShaping,
    candidates,
    commit,
    place_at,
    wished,
)
from planner.policies.synergy.demand import DEFAULT_TOLERANCE, PerGpu, proportional_per_gpu
from planner.policies.synergy.pool import Counts, Pool, counts_of
from planner.registry import StageContext
from planner.stages import SHAPINGS


def proportional(rnd: Round, d: Demand, counts: Counts) -> PerGpu:
    return rnd.prop(counts)


def as_it_had(rnd: Round, d: Demand, counts: Counts) -> PerGpu:
    had = d.had
    assert had is not None
    return had


def _has_all_it_wants(rnd: Round, d: Demand) -> bool:
    """A running job already at its wished throughput keeps its share (no restart for nothing)."""
    had = d.had
    counts = rnd.pool.reserved_counts(d.job.id)
    if had is None or counts is None:
        return False
    prop = rnd.prop(counts)
    return (
        d.throughput(had) >= d.throughput(d.wish(prop)) - 1e-12
        and d.throughput(had) >= d.throughput(prop) - 1e-12
    )


def _has_a_fair_share(rnd: Round, d: Demand) -> bool:
    """A running job whose share is within its proportional one and runs at least as fast as
    it keeps it (where its wish does not fit): what :meth:`Demand.fair` left it when a peer
    needed room. Asking for the proportional share instead would reshape it for nothing."""
    had = d.had
    counts = rnd.pool.reserved_counts(d.job.id)
    if had is None or counts is None:
        return False
    return d.fair(had, rnd.prop(counts)) == had


@SHAPINGS.register("tune")
class TuneShaping(SynergyShaping):
    """Synergy-Tune: best-fit packing with a proportional-share floor for every job."""

    component = "tune"
    fills_freed_gpus = True
    placement_first: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "tune shaping", ["tolerance", "placement_first"])
        shaping = cls(f.opt_float("tolerance", minimum=0.0) or DEFAULT_TOLERANCE, context.profiles)
        shaping.placement_first = f.flag("placement_first", False)
        return shaping

    def allocate(self, rnd: Round) -> None:
        everywhere = proportional_per_gpu(rnd.pool.nodes) if rnd.pool.nodes else PerGpu(0, 0.0)
        # Running jobs first (their GPUs are fixed, and going first keeps their share
        # unless a new job needs it back), then by GPU, CPU and memory demand (§4.2).
        order = sorted(
            enumerate(rnd.demands),
            key=lambda kd: (not kd[1].kept, -kd[1].job.num_gpus, *_negated(kd[1].wish(everywhere)), kd[0]),
        )
        if not self.pack(rnd, [d for _, d in order]):
            self.on_placement_gpus(rnd)

    def pack(self, rnd: Round, order: list[Demand]) -> bool:
        """The passes over ``order``; False where a job's GPUs found no room (pass 2)."""
        kept = set()
        for d in order:
            if _keeps_its_share(rnd, d):
                counts = rnd.pool.reserved_counts(d.job.id)
                assert counts is not None and d.had is not None
                commit(rnd, d, counts, d.had)
                kept.add(d.job.id)
        for d in order:
            if d.job.id not in kept and not self.place(rnd, d):
                return False
        self.start_waiting(rnd)
        upgrade_all(rnd, [*order, *rnd.started])
        return True

    def place(self, rnd: Round, d: Demand) -> bool:
        if self.placement_first and (spot := _placement_first(rnd, d)) is not None:
            commit(rnd, d, *spot)
            return True
        spot = (
            (place_at(rnd, d, as_it_had) if _has_all_it_wants(rnd, d) else None)
            or place_at(rnd, d, wished)
            or (place_at(rnd, d, as_it_had) if _has_a_fair_share(rnd, d) else None)
            or place_at(rnd, d, proportional)
        )
        if spot is not None:
            commit(rnd, d, *spot)
            return True
        counts = _tightest_gpus(rnd, d)
        if counts is None:
            return False
        prop = rnd.prop(counts)
        wish = d.wish(prop)
        share = prop if wish.exceeds(prop) else wish
        _free_up(rnd, counts, share)
        if not rnd.pool.fits(counts, share):  # pragma: no cover - impossible by construction
            return False
        commit(rnd, d, counts, share)
        return True

    def start_waiting(self, rnd: Round) -> None:
        """Jobs the placement could not hold, in its order, where the best fit left GPUs free
        (into ``rnd.started``)."""
        free = rnd.pool.free_gpu_count()
        for job in rnd.waiting:
            if not free:
                break
            if job.num_gpus <= free and self.place(rnd, d := self.demand(job)):
                rnd.started.append(d)
                free = rnd.pool.free_gpu_count()

    def on_placement_gpus(self, rnd: Round) -> None:
        """Start over with every job on the GPUs the placement stage gave it."""
        again = Round(rnd.snapshot, rnd.demands, Pool(rnd.snapshot.nodes))
        for d in rnd.demands:
            again.pool.reserve(d.job.id, d.base.gpus)
        self.pack(again, sorted(rnd.demands, key=lambda d: (-d.job.num_gpus, d.job.id)))
        rnd.pool = again.pool


def _placement_first(rnd: Round, d: Demand) -> tuple[Counts, PerGpu] | None:
    """Where a new rigid job goes with ``placement_first``: its wish on the placement's servers,
    else its wish at Tune's best fit elsewhere, else its proportional share on the placement's
    servers (``None``: not such a job, or its servers have no room; Tune's rules decide)."""
    job = d.job
    if not d.base.gpus or job.elastic or job.candidate_plans or rnd.pool.reserved_counts(job.id) is not None:
        return None
    given = counts_of(d.base.gpus, rnd.pool.order)
    if given not in candidates(rnd, d):
        return None
    prop = rnd.prop(given)
    wish = d.wish(prop)
    if rnd.pool.fits(given, wish):
        return given, wish
    elsewhere = place_at(rnd, d, wished)
    if elsewhere is not None:
        return elsewhere
    return (given, prop) if rnd.pool.fits(given, prop) else None


def _keeps_its_share(rnd: Round, d: Demand) -> bool:
    """Pass 1: a running job kept on its GPUs whose share is all it wants or fair, and still fits
    beside the jobs kept before it."""
    counts = rnd.pool.reserved_counts(d.job.id)
    if not d.kept or counts is None or d.had is None:
        return False
    if not (_has_all_it_wants(rnd, d) or _has_a_fair_share(rnd, d)):
        return False
    return rnd.pool.fits(counts, d.had)


def upgrade_all(rnd: Round, order: list[Demand]) -> None:
    """Pass 3, in ``order`` and again until a whole pass upgrades nobody: a wish can hold less
    of one resource than the share it replaces (9 CPUs and 62.5 GB for 6 and 100), so an
    upgrade can make room for a job tried before it. Each job is upgraded at most once (at its
    wish it has all it wants), and the round ends where planning it again upgrades nobody."""
    while any([upgrade(rnd, d) for d in order]):
        pass


def upgrade(rnd: Round, d: Demand) -> bool:
    """A placed job that runs slower than at its wish gets the wish where it fits."""
    held = rnd.pool.held.get(d.job.id)
    if held is None:
        return False
    wish = d.wish(rnd.prop(held.counts))
    if d.throughput(held.share) >= d.throughput(wish) - 1e-12:
        return False
    extra = PerGpu(max(wish.cpus - held.share.cpus, 0), max(wish.mem_gb - held.share.mem_gb, 0.0))
    if not rnd.pool.fits(held.counts, extra):
        return False
    rnd.pool.reshare(d.job.id, wish)
    return True


def _negated(share: PerGpu) -> tuple[int, float]:
    return -share.cpus, -share.mem_gb


def _tightest_gpus(rnd: Round, d: Demand) -> Counts | None:
    """The node set that fits ``d``'s GPUs with the fewest GPUs to spare."""
    options = candidates(rnd, d)
    if not options:
        return None
    free = rnd.pool.free_gpus
    return min(
        options, key=lambda c: (sum(len(free[n]) - g for n, g in c), [rnd.pool.order[n] for n, _ in c])
    )


def _free_up(rnd: Round, counts: Counts, share: PerGpu) -> None:
    """Switch peers above their proportional share back to it until ``share`` fits."""
    demands = {d.job.id: d for d in (*rnd.demands, *rnd.started)}
    for node, g in counts:
        peers = []
        for job_id in rnd.pool.jobs_on(node):
            held = rnd.pool.held[job_id]
            prop = rnd.prop(held.counts)
            if held.share.exceeds(prop):
                excess = (held.share.cpus - prop.cpus) / max(prop.cpus, 1) + (
                    held.share.mem_gb - prop.mem_gb
                ) / max(prop.mem_gb, 1e-9)
                peers.append((-excess, job_id, prop))
        for _, job_id, prop in sorted(peers):
            if rnd.pool.fits(((node, g),), share):
                break
            rnd.pool.reshare(job_id, demands[job_id].fair(rnd.pool.held[job_id].share, prop))
