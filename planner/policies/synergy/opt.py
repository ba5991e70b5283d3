"""Synergy-Opt (§4.1, Appendix A.1): the throughput upper bound, made into an allocation.

First program (A.1.2, eqs. 8-12), solved as the ILP the paper uses: one binary
y[c, m, j] per job and per (CPUs, memory) point of its sensitivity matrix (plus its exact
proportional share), maximising total normalised throughput on one *super-machine*
holding all CPUs and memory, with exactly one point per job and no job below its
proportional throughput. A tiny resource cost breaks ties towards smaller allocations
(a flat matrix must not grab resources others could use).

Second program (A.1.3, eqs. 15-19), a linear program: x[i, j] = the fraction of job j
(its GPUs and its chosen CPUs and memory) on server i. Solved to a vertex (dual
simplex), at most 3s jobs are fractional (Theorem A.2); the objective prefers each
running job's current server, Synergy's lease renewal. Jobs with one x[i, j] = 1 go
there; the fractional ones (the paper leaves their rounding open, §4.1.3) are placed
by Synergy-Tune's rules with the ILP's share as their demand, which keeps the
proportional-throughput floor. Both are solved by HiGHS through SciPy.

A running job whose share is at least as fast as its proportional one keeps it (the
lease renewal, §4.3) and is a fixed point of the ILP; the leftover CPUs and memory of a
server go, last, to its jobs below their best case (Synergy-Tune's passes). So planning an
applied round again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from planner.policies.synergy.base import Demand, Round, SynergyShaping, commit, drafted_type
from planner.policies.synergy.demand import PerGpu, proportional_per_gpu
from planner.policies.synergy.pool import Counts
from planner.policies.synergy.tune import TuneShaping, upgrade_all
from planner.stages import SHAPINGS
from profiles.schema import SensitivityMatrix

_TIE_COST = 1e-4
_KEEP_BONUS = 1e-3  # among (nearly) equal throughputs, a running job keeps its share: no restart


@SHAPINGS.register("opt")
class OptShaping(SynergyShaping):
    """Synergy-Opt: ILP on the super-machine, then an LP to spread jobs over servers."""

    component = "opt"
    fills_freed_gpus = True

    def allocate(self, rnd: Round) -> None:
        if not rnd.demands:
            return
        # Pass 1, the lease renewal (§4.3): a running job on its GPUs whose share is at least
        # as fast as its proportional one keeps it, and the ILP counts it as fixed. Re-solving
        # the ILP for running jobs moved their shares round after round for nothing (its
        # super-machine and the servers' proportional floors change as jobs move).
        kept: dict[str, PerGpu] = {}
        for d in rnd.demands:
            counts = rnd.pool.reserved_counts(d.job.id)
            share = _fair_share(rnd, d)
            if counts is not None and share is not None and rnd.pool.fits(counts, share):
                commit(rnd, d, counts, share)
                kept[d.job.id] = share
        shares = ideal_shares(rnd, kept)
        chosen = {d.job.id: share for d, share in zip(rnd.demands, shares, strict=True)}
        tune = TuneShaping(self.tolerance, self.profiles)

        def place(d: Demand) -> bool:
            return tune.place(rnd, Demand(d.job, d.base, d.kept, d.matrix, chosen[d.job.id]))

        # Pass 2: other running jobs renew their GPUs with the ILP's share where it fits there,
        # else Tune's rules (never below proportional); then the LP places whole jobs and
        # Tune's rules the rest.
        for d in rnd.demands:
            if d.job.id not in kept and rnd.pool.reserved_counts(d.job.id) is not None and not place(d):
                tune.on_placement_gpus(rnd)
                return
        pending = [d for d in rnd.demands if d.job.id not in rnd.pool.held]
        whole = spread_over_servers(rnd, pending, chosen)
        rest = []
        for d in pending:
            counts = whole.get(d.job.id)
            if (
                counts is not None
                and rnd.pool.has_gpus(d.job.id, counts)
                and rnd.pool.fits(counts, chosen[d.job.id])
            ):
                commit(rnd, d, counts, chosen[d.job.id])
            else:
                rest.append(d)
        for d in sorted(rest, key=lambda d: -d.job.num_gpus):
            if not place(d):
                tune.on_placement_gpus(rnd)
                return
        tune.start_waiting(rnd)  # as Tune: GPUs the placement could not give them may be free
        # Pass 3: what a server has left goes to its jobs below their best case (Tune's
        # upgrade), so that the next round, with every job kept, has nothing to upgrade.
        upgrade_all(rnd, [*rnd.demands, *rnd.started])


def _fair_share(rnd: Round, d: Demand) -> PerGpu | None:
    """Pass 1: the share of a running job on its GPUs, if at least as fast as proportional."""
    counts = rnd.pool.reserved_counts(d.job.id)
    had = d.had
    if not d.kept or counts is None or had is None:
        return None
    return had if d.throughput(had) >= d.throughput(rnd.prop(counts)) - 1e-12 else None


def _points(rnd: Round, d: Demand) -> tuple[tuple[PerGpu, float], ...]:
    # The fairness floor (eq. 12) is the proportional share where the job runs: the
    # placement's servers (Synergy's servers are all alike; Mosaic's need not be).
    home = rnd.pool.reserved_counts(d.job.id) or tuple(d.base.per_node)
    prop = rnd.prop(home) if home else proportional_per_gpu(rnd.pool.nodes)
    points = ((prop, 1.0),) if d.matrix is None else _grid_points(d.matrix, prop)
    current = d.had  # a running job may keep exactly what it has (no restart)
    if current is not None and all(p != current for p, _ in points):
        w = d.throughput(current)
        if w >= d.throughput(prop) - 1e-12:
            points = (*points, (current, w))
    return points


@lru_cache(maxsize=4096)
def _grid_points(matrix: SensitivityMatrix, prop: PerGpu) -> tuple[tuple[PerGpu, float], ...]:
    """(share, W) for every matrix point and the proportional share, none below W(prop)."""
    points = {PerGpu(int(c), m) for c in matrix.cpus_per_gpu for m in matrix.mem_gb_per_gpu if c >= 1}
    points.add(prop)
    floor = matrix.at(prop.cpus, prop.mem_gb)
    scored = ((p, matrix.at(p.cpus, p.mem_gb)) for p in sorted(points))
    return tuple((p, w) for p, w in scored if w >= floor - 1e-12)


def ideal_shares(rnd: Round, fixed: Mapping[str, PerGpu] | None = None) -> list[PerGpu]:
    """The ILP (8-12): each runnable job's best CPUs and memory per GPU on the super-machine
    (a job in ``fixed`` has that one share)."""
    nodes = rnd.pool.nodes
    cap_cpus = float(sum(n.cpus for n in nodes))
    cap_mem = float(sum(n.mem_gb for n in nodes))
    fixed = fixed or {}
    points = [
        ((fixed[d.job.id], d.throughput(fixed[d.job.id])),) if d.job.id in fixed else _points(rnd, d)
        for d in rnd.demands
    ]
    n_vars = sum(len(p) for p in points)
    objective = np.empty(n_vars)
    cpu_row = np.empty(n_vars)
    mem_row = np.empty(n_vars)
    rows, cols = [], []
    k = 0
    for j, (d, pts) in enumerate(zip(rnd.demands, points, strict=True)):
        g = d.job.num_gpus
        current = d.had
        for p, w in pts:
            cpu_row[k] = p.cpus * g
            mem_row[k] = p.mem_gb * g
            # eq. 8, minus the tie-breaking resource cost; eq. 12 holds by construction of
            # the points (none below the proportional throughput, which is always one)
            keep = _KEEP_BONUS if p == current else 0.0
            objective[k] = -(w + keep - _TIE_COST * (cpu_row[k] / cap_cpus + mem_row[k] / cap_mem))
            rows.append(j)
            cols.append(k)
            k += 1
    one_each = coo_matrix((np.ones(n_vars), (rows, cols)), shape=(len(points), n_vars))
    constraints = [
        LinearConstraint(np.vstack([cpu_row, mem_row]), -np.inf, [cap_cpus, cap_mem]),  # eqs. 9, 10
        LinearConstraint(one_each, 1, 1),  # eq. 11
    ]
    result = milp(objective, constraints=constraints, integrality=np.ones(n_vars), bounds=Bounds(0, 1))
    if result.x is None:  # the proportional allocation is always feasible; keep it on failure
        return [proportional_per_gpu(nodes) for _ in rnd.demands]
    shares, k = [], 0
    for pts in points:
        picked = int(np.argmax(result.x[k : k + len(pts)]))
        shares.append(pts[picked][0])
        k += len(pts)
    return shares


def spread_over_servers(rnd: Round, demands: list[Demand], chosen: dict[str, PerGpu]) -> dict[str, Counts]:
    """The LP (15-19) over the free capacity: whole jobs per server (fractional ones are left out).

    Solved to a vertex by dual simplex with a zero objective: any feasible vertex has at most
    3s fractional jobs (Theorem A.2), the property the rounding relies on.
    """
    pool = rnd.pool
    servers = [n for n in pool.nodes if pool.free_gpus[n.name]]
    var: list[tuple[int, int]] = []  # (server, job)
    for j, d in enumerate(demands):
        drafted = drafted_type(rnd, d)
        for i, n in enumerate(servers):
            if d.job.accepts_type(n.gpu_type) and drafted in (None, n.gpu_type):
                var.append((i, j))
    if not var:
        return {}
    n_vars = len(var)
    gpu_cap = [len(pool.free_gpus[n.name]) for n in servers]
    ub_rows: list[int] = []
    ub_cols: list[int] = []
    ub_vals: list[float] = []
    b_ub = np.concatenate(
        [gpu_cap, [pool.free_cpus[n.name] for n in servers], [pool.free_mem[n.name] for n in servers]]
    )
    s = len(servers)
    for k, (i, j) in enumerate(var):
        d = demands[j]
        g = d.job.num_gpus
        share = chosen[d.job.id]
        ub_rows += [i, s + i, 2 * s + i]
        ub_cols += [k, k, k]
        ub_vals += [g, share.cpus * g, share.mem_gb * g]  # eqs. 15, 16, 17
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(3 * s, n_vars)).tocsr()
    # eq. 18 with equality: a job is allocated exactly once
    a_eq = coo_matrix((np.ones(n_vars), ([j for _, j in var], range(n_vars))), shape=(len(demands), n_vars))
    result = linprog(
        np.zeros(n_vars),
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=a_eq.tocsr(),
        b_eq=np.ones(len(demands)),
        method="highs-ds",
    )
    if result.x is None:  # infeasible (fragmented capacity): Tune's rules place everyone
        return {}
    whole: dict[str, Counts] = {}
    for k, (i, j) in enumerate(var):
        if result.x[k] > 1 - 1e-6:
            d = demands[j]
            server = servers[i]
            if d.job.num_gpus <= server.gpus:
                whole[d.job.id] = ((server.name, d.job.num_gpus),)
    return whole


def fragmented(rnd: Round, chosen: dict[str, PerGpu]) -> int:
    """How many runnable jobs the second LP splits across servers (Theorem A.2: at most 3s)."""
    return len(rnd.demands) - len(spread_over_servers(rnd, rnd.demands, chosen))
