"""A job's pricing error falling as it runs: Rubick's plan pricer corrected by observed times.

Rubick's fitted model (``profiles/perfmodel``, fitted on ``samples.csv`` only) prices a
model's plans without measured forward times, as the scheduler's pricer does; on the 99
measured points of ``validation.csv`` that is about 15 % off (BENCHMARKS.md, performance
model, column (c)). Here a job of each model runs at its measured configurations one after
another in a random order (50 orders per model); after ``k`` of them, the
:class:`profiles.plan_correction.CorrectedPricer` holds those ``k`` measured times and
prices the model's *other* points, the ones not measured yet. The error reported is the
mean relative error over those held-out points: the observed points themselves are priced
exactly and are left out, so the figure is what the correction predicts, not what it has
seen.

The correction's two parameters (prior weight ``w0``, distance scale) are chosen by
leave-one-model-out: for each model, the pair with the lowest held-out error on the other
six models (5 orders each) is chosen, then the model is scored with it (50 orders). The
"global factor" row is the same correction with one factor per model (an infinite scale),
which is what a per-model bias correction would do.

    .venv/bin/python benchmarks/papers/plan_learning.py   # about 10 s; writes results/plan_learning.json
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiles.perfmodel.csvio import Row, parse_table
from profiles.plan_correction import PRIOR_WEIGHT, SCALE, Config, correction
from profiles.plan_pricing import _DATA, builtin_perfmodel

STEPS = 6  # observations 0..5
ORDERS = 50
GRID = [(w0, s) for w0 in (0.1, 0.25, 0.5, 1.0) for s in (0.25, 0.5, 1.0, 2.0)]
GLOBAL = 1e9  # a scale so large every observation weighs the same: one factor per model
OUT = Path(__file__).resolve().parents[1] / "results" / "plan_learning.json"

Point = tuple[Config, float, float]  # configuration, measured seconds, predicted seconds


def load() -> dict[str, list[Point]]:
    rows: Sequence[Row] = parse_table(
        (_DATA / "validation.csv").read_text(), "validation.csv", require_time=True
    ).rows
    predicted = builtin_perfmodel().predict_many([r.query for r in rows], [None] * len(rows))
    out: dict[str, list[Point]] = {}
    for row, pred in zip(rows, predicted, strict=True):
        assert row.iter_time_s is not None
        q = row.query
        config = Config(q.plan, q.plan.world_size, q.nodes, q.cpus_per_gpu)
        out.setdefault(q.model.name, []).append((config, row.iter_time_s, pred))
    return out


def curve(
    points: dict[str, list[Point]], models: Sequence[str], w0: float, scale: float, orders: int
) -> list[float]:
    """Mean held-out error after 0..STEPS-1 observations, over ``models`` and ``orders``."""
    errors: list[list[float]] = [[] for _ in range(STEPS)]
    for seed in range(orders):
        for model in models:
            rng = random.Random(f"{seed}:{model}")  # a model's orders whatever else is scored
            order = list(points[model])
            rng.shuffle(order)
            for k in range(min(STEPS, len(order))):
                seen = [(c, measured / pred) for c, measured, pred in order[:k]]
                held = order[k:]
                errors[k].append(
                    statistics.mean(
                        abs(pred * correction(seen, c, w0, scale) - measured) / measured
                        for c, measured, pred in held
                    )
                )
    return [statistics.mean(e) for e in errors]


def best_pair(points: dict[str, list[Point]], models: Sequence[str]) -> tuple[float, float]:
    return min(GRID, key=lambda g: sum(curve(points, models, *g, orders=5)[1:]))


def pct(values: Sequence[float]) -> list[float]:
    return [round(100 * v, 1) for v in values]


def main() -> None:
    points = load()
    models = sorted(points)
    per_model: dict[str, Any] = {}
    cv_curves = []
    for model in models:
        pair = best_pair(points, [m for m in models if m != model])
        c = curve(points, [model], *pair, orders=ORDERS)
        cv_curves.append(c)
        per_model[model] = {
            "points": len(points[model]),
            "chosen_w0_scale": pair,
            "held_out_error_pct": pct(c),
        }
        print(f"{model:8s} n={len(points[model]):3d} w0,scale={pair} error % by observations: {pct(c)}")
    cross_validated = [statistics.mean(c[k] for c in cv_curves) for k in range(STEPS)]
    chosen = best_pair(points, models)
    defaults = curve(points, models, PRIOR_WEIGHT, SCALE, ORDERS)
    global_factor = curve(points, models, PRIOR_WEIGHT, GLOBAL, ORDERS)
    print(f"all, leave-one-model-out:   {pct(cross_validated)}")
    print(f"all, defaults {PRIOR_WEIGHT},{SCALE}:    {pct(defaults)} (pair chosen on all seven: {chosen})")
    print(f"all, one factor per model:  {pct(global_factor)}")
    result = {
        "observations": list(range(STEPS)),
        "orders_per_model": ORDERS,
        "per_model": per_model,
        "all_leave_one_model_out_pct": pct(cross_validated),
        "all_defaults_pct": pct(defaults),
        "defaults": {"prior_weight": PRIOR_WEIGHT, "scale": SCALE},
        "pair_chosen_on_all_models": chosen,
        "defaults_are_chosen_pair": chosen == (PRIOR_WEIGHT, SCALE),
        "all_one_factor_per_model_pct": pct(global_factor),
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
