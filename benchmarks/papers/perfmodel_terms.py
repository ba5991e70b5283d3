"""Rubick's performance model: our terms against the artifact's, one departure at a time.

Each variant changes one term of ``profiles/perfmodel/terms.py`` (or one input) to what
Morphling's artifact computes (``sched/morphling_sched/pred_throughput.py`` and the
``validate_*.py`` scripts of AlibabaPAI/reconfigurable-dl-scheduler), is fitted on
``samples.csv`` exactly as the default is, and is scored two ways:

* the **leave-one-out** error on the samples (``fit.leave_one_out``), which never reads
  ``validation.csv`` and is the only score that may choose a variant;
* ``validation.csv`` under (a) (every point's forward input as the scripts feed it) and
  (c) (no forward input), reported, never used to choose.

The variants that are not an option of the code are applied by wrapping
``breakdown_columns`` here (the benchmark's own patch; the library is unchanged):

* ``offload sync once``: under ZeRO-Offload the gradient sync is charged once, inside
  ``T_cc`` (the artifact's ``_predict_overlap_sync_time``), not a second time in ``T_oo``
  as the paper's ``f^{k_off}(T_comm_dp, T_off)`` has it;
* ``recompute on the critical path``: activation checkpointing's extra forward is added
  outside the backward/sync overlap (the artifact's ``alpha_f``), not inside it.

``t5 row 3 forward dropped`` changes the data, not the model: samples.csv's T5 2-GPU DP
row carries a forward time of 0.080 s, but its own run's breakdown in the artifact's
``profile/t5/data.csv`` (forward 80 + Tcc 341 + Topt 82 = 503 ms against an iteration of
611 ms) leaves 108 ms unaccounted, where the other 30 rows with a forward time leave
2-13 ms (T5's 4-GPU row, 101 ms, is the one samples.csv already leaves empty). Its
leave-one-out error is over different inputs and is not comparable with the others'.

    .venv/bin/python benchmarks/papers/perfmodel_terms.py   # 8 min on the loaded machine

Writes ``benchmarks/results/perfmodel_terms.json``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import write_result
from benchmarks.papers.perfmodel import DATA, points
from profiles.perfmodel import Environment, FitOptions, accuracy, fit_perfmodel
from profiles.perfmodel import fit as fit_module
from profiles.perfmodel.csvio import Row, parse_table
from profiles.perfmodel.fit import leave_one_out
from profiles.perfmodel.terms import Columns, FloatArray, ParamColumns, breakdown_columns, overlap

Breakdown = Callable[[Columns, ParamColumns, Environment], dict[str, FloatArray]]


def _sync_once(c: Columns, k: ParamColumns, env: Environment) -> dict[str, FloatArray]:
    parts = breakdown_columns(c, k, env)
    t_dp, t_off = parts["t_comm_dp"], parts["t_off"]
    extra = overlap(t_dp, t_off, k.k_off) - overlap(np.zeros_like(t_dp), t_off, k.k_off)
    parts["total"] = parts["total"] - np.where(c.offload > 0, extra, 0.0)
    return parts


def _recompute_outside(c: Columns, k: ParamColumns, env: Environment) -> dict[str, FloatArray]:
    # Only rows without accumulation or pipelining (every checkpointed row of the bundled
    # data): there the overlapped backward is all of T_bwd.
    parts = breakdown_columns(c, k, env)
    t_fwd, t_bwd, t_dp = parts["t_fwd"], parts["t_bwd"], parts["t_comm_dp"]
    simple = (c.recompute > 0) & (c.accum == 1) & (c.pp == 1)
    inside = overlap(t_bwd, t_dp, k.k_sync)
    outside = overlap(t_bwd - t_fwd, t_dp, k.k_sync) + t_fwd
    parts["total"] = parts["total"] + np.where(simple, outside - inside, 0.0)
    return parts


@contextmanager
def _patched(breakdown: Breakdown | None) -> Iterator[None]:
    if breakdown is None:
        yield
        return
    # fit.py imports breakdown_columns (not re-exported): replace its module-level name.
    namespace = vars(fit_module)
    original = namespace["breakdown_columns"]
    namespace["breakdown_columns"] = breakdown
    try:
        yield
    finally:
        namespace["breakdown_columns"] = original


T5_PROFILE = "artifact/71_performance_model/model/profile/t5/"


def _drop_t5_row3_forward(samples: list[Row]) -> list[Row]:
    def row3(r: Row) -> bool:
        source = r.cells.get("source", r.source)
        return source.startswith("artifact/71_performance_model/model/profile/t5/") and source.endswith(
            "#row3"
        )

    return [replace(r, fwd_time_s=None) if row3(r) else r for r in samples]


DEFAULT = FitOptions()
K_SYNC_PER_MODEL = replace(DEFAULT, pooled=("k_bwd", "k_sync", "k_opt_off", "k_const"))
# name -> (fit options, patched breakdown or None, drop t5 row 3's forward time)
VARIANTS: dict[str, tuple[FitOptions, Breakdown | None, bool]] = {
    "default": (DEFAULT, None, False),
    "fp32 gradient volume (grad_bytes 4, the artifact's 8 bytes per parameter)": (
        replace(DEFAULT, environment=Environment(grad_bytes=4.0)),
        None,
        False,
    ),
    "k_sync per model, pooled (the artifact fits it per model)": (K_SYNC_PER_MODEL, None, False),
    "offload sync once (the artifact's code)": (DEFAULT, _sync_once, False),
    "recompute on the critical path (the artifact's alpha_f)": (DEFAULT, _recompute_outside, False),
    "t5 row 3 forward dropped (data)": (DEFAULT, None, True),
}


def evaluate(samples: list[Row], validation: list[Row], options: FitOptions) -> dict[str, Any]:
    started = time.perf_counter()
    model = fit_perfmodel([r.measurement() for r in samples], options)
    out: dict[str, Any] = {"samples_rmsle": round(float(model.rmsle or 0.0), 4)}
    for key, forwards in (("validation_a", "all"), ("validation_c", "none")):
        result = accuracy(points(model, validation, forwards=forwards))
        over = sum(1 for p in result.points if p.error > 0.12)
        doc = result.to_json()
        out[key] = {"overall": doc["overall"], "points_above_12_pct": over}
        if key == "validation_a":
            out[key]["per_model_avg_pct"] = {m: round(100 * s.avg, 3) for m, s in result.per_model}
    errors = leave_one_out([r.measurement() for r in samples], options)
    out["samples_leave_one_out"] = {
        "avg_pct": round(100 * sum(errors) / len(errors), 3),
        "max_pct": round(100 * max(errors), 3),
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def main() -> None:
    samples = list(parse_table((DATA / "samples.csv").read_text(), "samples.csv", require_time=True).rows)
    validation = list(
        parse_table((DATA / "validation.csv").read_text(), "validation.csv", require_time=True).rows
    )
    results: dict[str, Any] = {}
    for name, (options, breakdown, drop) in VARIANTS.items():
        rows = _drop_t5_row3_forward(samples) if drop else samples
        with _patched(breakdown):
            results[name] = evaluate(rows, validation, options)
        print(f"{name}: {results[name]}", flush=True)
    base = results["default"]["samples_leave_one_out"]["avg_pct"]
    comparable = {k: v for k, v in results.items() if not VARIANTS[k][2]}
    best = min(comparable, key=lambda k: comparable[k]["samples_leave_one_out"]["avg_pct"])
    print(f"lowest leave-one-out on the same samples: {best!r} (default {base} %)")
    write_result(
        "perfmodel_terms",
        {
            "command": ".venv/bin/python benchmarks/papers/perfmodel_terms.py",
            "variants": results,
            "lowest_leave_one_out_same_samples": best,
        },
    )


if __name__ == "__main__":
    main()
