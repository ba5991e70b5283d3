"""Rubick's performance model (§4): fit on the bundled samples, validate on the held-out points.

Fits ``profiles.perfmodel`` on ``profiles/builtin/data/rubick/samples.csv`` only (34 rows)
and compares its predictions with the 99 measured points of ``validation.csv``, as
Rubick's Table 2 does: average and maximum relative error overall, per model and per
plan, and the worst point, three ways: (a) with every point's ``fwd_time_s`` (the
forward time the artifact's validate scripts feed the model, as Morphling's own
predictions use; four LLaMA-2-7B ZeRO-Offload inputs of 0.4-3 ms lie below the physical
floor and are not used, see ``Environment.peak_tflops``), (b) with it for the 3D TP/PP
points only, (c) with none (forward time from the fitted compute rate). Morphling's own
predictions (``rubick_pred_s``) get the same table for comparison.

The pooling weight of ``k_bwd`` (``FitOptions.pooling_by``) is chosen here by
leave-one-out cross-validation on the samples (``fit.leave_one_out``), which never looks
at validation.csv; the run prints each candidate's leave-one-out error and checks that
the default is the best one. A model without samples (LLaMA-30B) takes the parameters of
its fitted family member (``fit.family``); the evidence, also from the samples only, is
``family_evidence``: each model of a pair fitted without its samples and predicted from
its sibling's parameters or from the shared ones. Also reported: other sharing choices (validation only), the
error on the data-parallel family and on the 3D points separately. Writes
``benchmarks/results/perfmodel_validate.json``.

    .venv/bin/python benchmarks/papers/perfmodel.py           # everything, about 18 min on a loaded machine
    .venv/bin/python benchmarks/papers/perfmodel.py --quick   # fit + validation tables only, seconds

``--quick`` is for iterating on the model: it prints the same (a)/(b)/(c) and Morphling
tables from the same fit, and skips the leave-one-out comparisons, the family evidence and
the variants (which need minutes and choose the defaults), so it does not write the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import write_result
from profiles.perfmodel import FitOptions, PointError, accuracy, fit_perfmodel, format_accuracy, plan_label
from profiles.perfmodel.csvio import Row, parse_table
from profiles.perfmodel.fit import Measurement, leave_one_out
from profiles.perfmodel.terms import PARAM_NAMES

DATA = Path(__file__).resolve().parents[2] / "profiles" / "builtin" / "data" / "rubick"
DEFAULT = FitOptions()
# Candidates for the default's k_bwd pooling weight, compared by leave-one-out on the samples.
CANDIDATES: dict[str, FitOptions] = {
    "k_bwd shared by all models": replace(DEFAULT, pooled=("k_opt_off", "k_const"), pooling_by=()),
    **{
        f"k_bwd per model, pooling weight {w:g}": replace(DEFAULT, pooling_by=(("k_bwd", w),))
        for w in (0.1, 0.3, 1.0)
    },
}
VARIANTS: dict[str, FitOptions] = {
    "before (no sample forward times; k_opt_off, k_const per model)": replace(
        DEFAULT, pooled=("k_opt_off", "k_const"), pooling_by=(), fwd_weight=0.0, fwd_as_input=False
    ),
    "all seven k per model, pooled at 0.03": replace(DEFAULT, pooled=PARAM_NAMES, pooling_by=()),
}


FORWARDS = ("all", "3d", "none")


def forward_inputs(rows: list[Row], forwards: str) -> list[float | None]:
    """The rows' ``fwd_time_s`` to feed: ``all``, only the 3D TP/PP rows' (``3d``), or ``none``."""
    if forwards not in FORWARDS:
        raise ValueError(f"forwards must be one of {FORWARDS}, got {forwards!r}")
    return [
        r.fwd_time_s
        if forwards == "all" or (forwards == "3d" and r.query.plan.tp * r.query.plan.pp > 1)
        else None
        for r in rows
    ]


def points(model: Any, rows: list[Row], rubick: bool = False, forwards: str = "none") -> list[PointError]:
    """Per-point errors; ``forwards`` as in :func:`forward_inputs`."""
    predicted = (
        [float(r.cells["rubick_pred_s"]) for r in rows]
        if rubick
        else model.predict_many([r.query for r in rows], forward_inputs(rows, forwards))
    )
    out = []
    for row, pred in zip(rows, predicted, strict=True):
        assert row.iter_time_s is not None
        label = plan_label(row.query.plan)
        out.append(
            PointError(
                row.cells.get("source", row.source), row.query.model.name, label, row.iter_time_s, pred
            )
        )
    return out


def loo_stats(samples: list[Row], options: FitOptions) -> dict[str, Any]:
    errors = leave_one_out([r.measurement() for r in samples], options)
    worst = max(range(len(errors)), key=lambda i: errors[i])
    return {
        "n": len(errors),
        "avg_pct": round(100 * sum(errors) / len(errors), 3),
        "max_pct": round(100 * max(errors), 3),
        "worst": samples[worst].cells.get("source", samples[worst].source),
    }


# (held-out model, sibling): BERT-large and RoBERTa-large are one architecture (24 x 1024
# encoder); GPT-2 and T5 are not (decoder, encoder-decoder), the control.
FAMILY_PAIRS = (("roberta", "bert"), ("bert", "roberta"), ("gpt2", "t5"), ("t5", "gpt2"))


def _errors(model: Any, measured: list[Measurement], feed: bool = True) -> dict[str, float]:
    """Average and largest relative error of ``model`` on ``measured`` (forward times fed or not)."""
    forwards = [m.fwd_time_s if feed else None for m in measured]
    predicted = model.predict_many([m.query for m in measured], forwards)
    errors = [abs(p - m.iter_time_s) / m.iter_time_s for p, m in zip(predicted, measured, strict=True)]
    return {"avg_pct": round(100 * sum(errors) / len(errors), 3), "max_pct": round(100 * max(errors), 3)}


def family_evidence(samples: list[Row]) -> dict[str, Any]:
    """Per pair: the held-out model's samples predicted by a fit without them, two ways.

    With the shared parameters (what a model without samples got before) and with the
    sibling's fitted parameters (what ``PerfModel.family_fit`` gives a family member);
    each sample's forward time fed as the fit feeds it (``shared``, ``sibling``), and not
    fed (``*_no_forward``: the compute rate's estimate, as the plan pricer predicts).
    Samples only.
    """
    measured = [r.measurement() for r in samples]
    out: dict[str, Any] = {}
    for held, sibling in FAMILY_PAIRS:
        rest = [m for m in measured if m.query.model.name != held]
        mine = [m for m in measured if m.query.model.name == held]
        fitted = fit_perfmodel(rest)
        sib = fitted.models[sibling]
        as_sibling = replace(fitted, models={**fitted.models, held: replace(sib, shape=mine[0].query.model)})

        out[f"{held} from {sibling}"] = {
            "n": len(mine),
            "shared": _errors(fitted, mine),
            "sibling": _errors(as_sibling, mine),
            "shared_no_forward": _errors(fitted, mine, feed=False),
            "sibling_no_forward": _errors(as_sibling, mine, feed=False),
        }
        print(f"\nfamily evidence, {held} held out: {out[f'{held} from {sibling}']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fit and print the validation tables only (no JSON written)"
    )
    args = parser.parse_args(argv)
    samples = list(parse_table((DATA / "samples.csv").read_text(), "samples.csv", require_time=True).rows)
    validation = list(
        parse_table((DATA / "validation.csv").read_text(), "validation.csv", require_time=True).rows
    )
    started = time.perf_counter()
    model = fit_perfmodel([r.measurement() for r in samples])
    fit_s = time.perf_counter() - started
    every = accuracy(points(model, validation, forwards="all"))
    given = accuracy(points(model, validation, forwards="3d"))
    ours = accuracy(points(model, validation))
    rubick = accuracy(points(model, validation, rubick=True))
    print("(a) With every point's forward input as the artifact's scripts feed it (fwd_time_s):")
    print(format_accuracy(every))
    print("\n(b) With the profiled forward times of the 3D configurations only:")
    print(format_accuracy(given))
    print("\n(c) Without any measured forward time (fitted compute rate):")
    print(format_accuracy(ours))
    print("\nMorphling's own predictions (rubick_pred_s):")
    print(format_accuracy(rubick))
    if args.quick:
        print(f"\nfit on {len(samples)} samples in {fit_s:.2f} s (--quick: nothing written)")
        return

    is_3d = [r.query.plan.tp * r.query.plan.pp > 1 for r in validation]
    ours_points = list(ours.points)
    subsets = {
        "data-parallel family (68)": accuracy(
            [p for p, three in zip(ours_points, is_3d, strict=True) if not three]
        ),
        "3D TP/PP (31)": accuracy([p for p, three in zip(ours_points, is_3d, strict=True) if three]),
        "3D TP/PP (31), profiled forward given": accuracy(
            [p for p, three in zip(given.points, is_3d, strict=True) if three]
        ),
        "data-parallel family (68), scripts' forward given": accuracy(
            [p for p, three in zip(every.points, is_3d, strict=True) if not three]
        ),
    }
    unshared = replace(model, family_sharing=False)
    without_family = {
        "mosaic": accuracy(points(unshared, validation)).to_json(),
        "mosaic_with_profiled_3d_forward": accuracy(points(unshared, validation, forwards="3d")).to_json(),
        "mosaic_with_every_forward": accuracy(points(unshared, validation, forwards="all")).to_json(),
    }
    print("\n(a) without family sharing (LLaMA-30B on the shared parameters):")
    print(format_accuracy(accuracy(points(unshared, validation, forwards="all"))))
    evidence = family_evidence(samples)
    loo = {}
    for name, options in CANDIDATES.items():
        loo[name] = loo_stats(samples, options)
        print(f"\nleave-one-out on the samples, {name}: {loo[name]}", flush=True)
    chosen = min(loo, key=lambda k: loo[k]["avg_pct"])
    default_name = next(k for k, o in CANDIDATES.items() if o == DEFAULT)
    print(f"lowest leave-one-out error: {chosen!r}; the default is {default_name!r}")
    variants = {}
    for name, options in {**CANDIDATES, **VARIANTS}.items():
        fitted = fit_perfmodel([r.measurement() for r in samples], options)
        result = accuracy(points(fitted, validation)).to_json()
        with_forward = accuracy(points(fitted, validation, forwards="3d")).to_json()
        with_all = accuracy(points(fitted, validation, forwards="all")).to_json()
        variants[name] = {
            "pooled": list(options.pooled),
            "overall": result["overall"],
            "overall_with_profiled_3d_forward": with_forward["overall"],
            "overall_with_every_forward": with_all["overall"],
            "per_model": result["per_model"],
            "samples_rmsle": fitted.rmsle,
        }
        if name in loo:
            variants[name]["samples_leave_one_out"] = loo[name]
        print(f"\n{name}: {result['overall']}")
    write_result(
        "perfmodel_validate",
        {
            "command": ".venv/bin/python benchmarks/papers/perfmodel.py",
            "samples": len(samples),
            "validation_points": len(validation),
            "fit_seconds": round(fit_s, 2),
            "samples_rmsle": model.rmsle,
            "shared": {
                **{k: getattr(model.shared, k) for k in PARAM_NAMES},
                "flops_per_s": model.shared_rate,
            },
            "rates_tflops": {k: round(f.rate / 1e12, 2) for k, f in model.models.items()},
            "mosaic": ours.to_json(),
            "mosaic_with_profiled_3d_forward": given.to_json(),
            "mosaic_with_every_forward": every.to_json(),
            "rubick": rubick.to_json(),
            "subsets": {k: v.to_json()["overall"] for k, v in subsets.items()},
            "default_options": {
                "pooled": list(DEFAULT.pooled),
                "pooling": DEFAULT.pooling,
                "pooling_by": dict(DEFAULT.pooling_by),
                "rate_pooling": DEFAULT.rate_pooling,
                "fwd_weight": DEFAULT.fwd_weight,
                "fwd_as_input": DEFAULT.fwd_as_input,
            },
            "family_evidence": evidence,
            "without_family_sharing": {
                k: {"overall": v["overall"], "per_model": v["per_model"]} for k, v in without_family.items()
            },
            "samples_leave_one_out": loo,
            "lowest_leave_one_out": chosen,
            "default_is_lowest_leave_one_out": chosen == default_name,
            "unused_forward_inputs": [
                validation[i].cells.get("source", validation[i].source)
                for i in model.unusable_forwards(
                    [r.query for r in validation], forward_inputs(validation, "all")
                )
            ],
            "variants": variants,
            "points": [
                {
                    "source": p.source,
                    "model": p.model,
                    "plan": p.plan,
                    "measured_s": p.measured_s,
                    "predicted_s": round(p.predicted_s, 6),
                    "predicted_with_forward_s": round(g.predicted_s, 6),
                    "predicted_with_every_forward_s": round(e.predicted_s, 6),
                    "error_with_every_forward_pct": round(100 * e.error, 3),
                    "rubick_s": r.predicted_s,
                    "error_pct": round(100 * p.error, 3),
                    "rubick_error_pct": round(100 * r.error, 3),
                }
                for p, g, e, r in zip(ours.points, given.points, every.points, rubick.points, strict=True)
            ],
        },
    )


if __name__ == "__main__":
    main()
