"""How fast two jobs run when they share GPUs: normalised packed throughput.

Tesserae §4.2 normalises a packed job's throughput by its isolated throughput (Gavel
does the same): if PointNet runs at 50 it/s alone and 15 it/s packed, its normalised
packed throughput is 0.3. A pair is worth packing when the two normalised values add up
to more than 1 (more work done than running one of them alone).

Where a pair was not measured, estimates follow this order, and each estimate says
which rule produced it (``PairEstimate.source``):

1. measured on the GPU type asked for, at the jobs' GPU count;
2. measured at 1 GPU, the ratio kept for k GPUs (Tesserae §4.3: k-GPU data-parallel
   throughput is k times the 1-GPU one, packed or not, so the ratio is unchanged);
3. the same on another GPU type, in the GPU catalog's fallback order (v100, p100, k80:
   Gavel's types, newest first): GPU generations change absolute speed more than the
   interference ratio;
4. the median normalised throughput of all measured pairs of the two models' tasks
   (e.g. image packed with language), over every GPU type, at 1 GPU;
5. the median over all measured pairs (0.58 per job in Gavel's data).

Unmeasured pairs are assumed to fit in GPU memory; a measured ``(0, 0)`` pair never
shares. ``noise`` multiplies every value by a fixed random factor in [1-n, 1+n] per
(pair, side), drawn from ``seed``: Tesserae §7.2's profiling-error study.
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiles.gpus import catalog
from profiles.schema import ColocationKey, plan_key
from profiles.store import ProfileStore


@dataclass(frozen=True, slots=True)
class Side:
    """One job of a pair, as the profiles see it."""

    model: str
    batch_size: int | None
    num_gpus: int
    plan: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PairEstimate:
    """Normalised packed throughputs of A and B (packed / isolated) and where they come from."""

    a: float
    b: float
    source: str

    @property
    def fits(self) -> bool:
        return self.a > 0 or self.b > 0

    @property
    def combined(self) -> float:
        return self.a + self.b


def _side_key(side: Side) -> tuple[object, ...]:
    return side.model, side.batch_size, side.num_gpus, plan_key(side.plan)


class ColocationModel:
    """Estimates :class:`PairEstimate` for any two jobs (memoised)."""

    def __init__(self, store: ProfileStore, *, noise: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        self.store = store
        self.noise = noise
        self.seed = seed
        self._memo: dict[tuple[object, ...], PairEstimate] = {}
        self._medians: tuple[dict[tuple[str, str], float], float] | None = None

    def estimate(self, a: Side, b: Side, gpu_type: str) -> PairEstimate:
        key = (*_side_key(a), *_side_key(b), gpu_type)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = self._noisy(self._estimate(a, b, gpu_type), a, b, gpu_type)
        return cached

    # -- the rules -------------------------------------------------------------------
    def _estimate(self, a: Side, b: Side, gpu_type: str) -> PairEstimate:
        table = self.store.colocation_table()
        pa, pb = self.store.resolve(a.model), self.store.resolve(b.model)
        ma, mb = self.store.model_key(a.model), self.store.model_key(b.model)
        for t in catalog().borrow_order(gpu_type):
            for scale in dict.fromkeys((a.num_gpus, 1)):
                ba = pa.nearest_batch(a.batch_size) if pa.throughput else a.batch_size
                bb = pb.nearest_batch(b.batch_size) if pb.throughput else b.batch_size
                gb = scale if b.num_gpus == a.num_gpus else b.num_gpus
                key = ColocationKey(t, ma, ba, scale, mb, bb, gb, plan_key(a.plan), plan_key(b.plan))
                packed = table.get(key)
                if packed is None:
                    continue
                rule = "measured" if t == gpu_type else f"measured on {t}"
                if scale != a.num_gpus:
                    rule += f", {scale}-GPU ratio"
                if packed == (0.0, 0.0):
                    return PairEstimate(0.0, 0.0, f"{rule}: cannot share")
                iso_a = pa.steps_per_s(t, scale, ba, plan=a.plan)
                iso_b = pb.steps_per_s(t, gb, bb, plan=b.plan)
                if iso_a and iso_b:
                    return PairEstimate(packed[0] / iso_a, packed[1] / iso_b, rule)
        medians, overall = self._task_medians()
        ra = medians.get((pa.task, pb.task))
        rb = medians.get((pb.task, pa.task))
        if ra is not None and rb is not None:
            return PairEstimate(ra, rb, f"median of measured {pa.task}+{pb.task} pairs")
        return PairEstimate(overall, overall, "median of all measured pairs")

    def _task_medians(self) -> tuple[dict[tuple[str, str], float], float]:
        if self._medians is None:
            by_tasks: dict[tuple[str, str], list[float]] = {}
            everything: list[float] = []
            for key, (ta, _) in self.store.colocation_table().items():
                if key.gpus_a != 1 or key.gpus_b != 1 or ta <= 0:
                    continue
                pa, pb = self.store.resolve(key.model_a), self.store.resolve(key.model_b)
                iso = pa.steps_per_s(key.gpu_type, 1, key.batch_a)
                if not iso:
                    continue
                by_tasks.setdefault((pa.task, pb.task), []).append(ta / iso)
                everything.append(ta / iso)
            medians = {k: statistics.median(v) for k, v in by_tasks.items()}
            # With no measurements at all, sharing is assumed to split a GPU evenly.
            self._medians = (medians, statistics.median(everything) if everything else 0.5)
        return self._medians

    # -- profiling noise (Tesserae §7.2) ---------------------------------------------
    def _noisy(self, estimate: PairEstimate, a: Side, b: Side, gpu_type: str) -> PairEstimate:
        if self.noise == 0.0 or not estimate.fits:
            return estimate
        return PairEstimate(
            estimate.a * self._factor(a, b, gpu_type),
            estimate.b * self._factor(b, a, gpu_type),
            estimate.source + f", noise {self.noise:g}",
        )

    def _factor(self, mine: Side, other: Side, gpu_type: str) -> float:
        text = repr(
            (
                mine.model,
                mine.batch_size,
                mine.num_gpus,
                plan_key(mine.plan),
                other.model,
                other.batch_size,
                other.num_gpus,
                plan_key(other.plan),
                gpu_type,
            )
        )
        rng = np.random.default_rng([self.seed, zlib.crc32(text.encode())])
        return 1.0 + self.noise * (2.0 * float(rng.random()) - 1.0)
