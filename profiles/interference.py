"""Interference ratios ξ of two jobs sharing GPUs (SJF-BSBF §IV-A3, Eq. 5-6).

When job A shares GPUs with job B, each iteration of A takes ξ_A times as long as
alone (and B's ξ_B times). ξ is the inverse of the pair's normalised packed throughput
(packed / isolated steps/s), which :class:`profiles.colocation.ColocationModel` gives
from Gavel's measured pairs, with its documented fallbacks for unmeasured pairs (the
1-GPU ratio, another GPU type, the median of the two tasks' pairs, the median of all).

Two adaptations for SJF-BSBF, where a job may share only some of its GPUs and run
with gradient accumulation:

* a job that accumulates gradients shares its GPUs with a *micro-batch* in memory, so
  its side of the pair is looked up at the micro-batch (the plan's accumulation keys
  are not part of what was measured);
* two jobs of different GPU counts share GPU by GPU: each shared GPU holds one worker
  of each, so the pair is looked up at one GPU each (the ratio Tesserae §4.3 keeps for
  any data-parallel scale).

A measured ``(0, 0)`` pair cannot share (out of GPU memory): it has no ratios. That is
the memory limit of Algorithm 2: a smaller micro-batch may fit where the full batch
does not. ``fixed`` injects one ξ for every pair that fits (Figure 6(b)'s sweep).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from profiles.colocation import ColocationModel, Side
from profiles.iteration import accumulation_of, without_accumulation
from profiles.store import ProfileStore


@dataclass(frozen=True, slots=True)
class Sharer:
    """One job of a sharing pair: its model, per-GPU batch, GPU count and plan (maybe with GA)."""

    model: str
    batch_size: int | None
    num_gpus: int
    plan: Mapping[str, Any] | None = None


def _side(job: Sharer, num_gpus: int) -> Side:
    ga = accumulation_of(job.plan)
    batch = ga[0] if ga is not None else job.batch_size
    return Side(job.model, batch, num_gpus, without_accumulation(job.plan))


class PairInterference:
    """ξ of both jobs of a pair, from the profiles (or ``fixed`` for all pairs that fit)."""

    def __init__(
        self, store: ProfileStore, *, fixed: float | None = None, noise: float = 0.0, seed: int = 0
    ) -> None:
        if fixed is not None and not fixed > 0:
            raise ValueError(f"an interference ratio must be > 0, got {fixed}")
        self.colocation = ColocationModel(store, noise=noise, seed=seed)
        self.fixed = fixed

    def ratios(self, a: Sharer, b: Sharer, gpu_type: str) -> tuple[float, float] | None:
        """(ξ_a, ξ_b) when ``a`` and ``b`` share GPUs of ``gpu_type``; ``None``: they cannot."""
        speed_a, speed_b = self._normalised(a, b, gpu_type)
        if not (speed_a > 0 and speed_b > 0):
            return None
        return 1.0 / speed_a, 1.0 / speed_b

    def speed_of(self, a: Sharer, b: Sharer, gpu_type: str) -> float:
        """``a``'s throughput beside ``b`` over its throughput alone (1/ξ_a; 0: cannot share)."""
        return self._normalised(a, b, gpu_type)[0]

    def _normalised(self, a: Sharer, b: Sharer, gpu_type: str) -> tuple[float, float]:
        same = a.num_gpus == b.num_gpus
        est = self.colocation.estimate(
            _side(a, a.num_gpus if same else 1), _side(b, b.num_gpus if same else 1), gpu_type
        )
        if self.fixed is not None and est.fits:
            return 1.0 / self.fixed, 1.0 / self.fixed
        return est.a, est.b
