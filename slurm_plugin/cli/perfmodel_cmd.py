"""``mosaic perfmodel``: fit Rubick's performance model, predict with it, check it.

* ``fit SAMPLES.csv [--model M] [--kind rubick|cpu-step] --out PARAMS.json``: fit the
  parameters (Rubick §4.3; ``cpu-step``: the step model of ranks of CPU threads,
  :mod:`profiles.perfmodel.cpu_step`, which ``mosaic profile`` fits) to measured iteration
  times and write a ``mosaic-perfmodel/1`` document;
* ``predict PARAMS.json QUERIES.csv [--out PRED.csv]``: the same rows with a
  ``pred_iter_time_s`` column (empty where ``--gpu-mem-gb`` says the plan does not fit);
* ``validate PARAMS.json MEASURED.csv [--json]``: relative errors per model and plan.

The CSV format is ``profiles/perfmodel/csvio.py``'s (the bundled ``samples.csv``
columns). Every input is read and checked before anything is written: a bad row is one
error line naming file, line and column, exit 2, and no output file.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from planner.core.errors import InputError
from profiles.names import normalise
from profiles.perfmodel import (
    FitOptions,
    PerfModel,
    PointError,
    accuracy,
    cpu_step,
    fit_perfmodel,
    format_accuracy,
)
from profiles.perfmodel.cpu_step import CpuStepModel, fit_cpu_step
from profiles.perfmodel.csvio import PREDICTION_COLUMN, Table, format_table, parse_table
from profiles.perfmodel.document import read_any, to_document
from profiles.perfmodel.query import ModelShape, plan_label
from slurm_plugin.files import read_text, write_atomic, write_json

log = logging.getLogger(__name__)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "perfmodel",
        parents=[common],
        help="fit, apply and check Rubick's iteration-time model",
        description="Rubick's performance model (§4): iteration time from execution plan and resources. "
        "CSV columns: model, params_m, global_batch, seq_len, hidden, layers, nodes, gpus, cpus_per_gpu, "
        "dp, tp, pp, zero_stage, offload_optimizer, grad_accum, activation_checkpointing, iter_time_s.",
    )
    actions = p.add_subparsers(dest="perfmodel_command", required=True, metavar="ACTION")

    f = actions.add_parser("fit", parents=[common], help="fit the parameters to measured iteration times")
    f.add_argument("samples", metavar="SAMPLES.csv", help="measured configurations (with iter_time_s)")
    f.add_argument("--model", action="append", default=[], metavar="M", help="fit only model M (repeatable)")
    f.add_argument("--out", metavar="PARAMS.json", required=True, help="where to write the fitted parameters")
    f.add_argument(
        "--kind",
        choices=("rubick", cpu_step.KIND),
        default="rubick",
        help="Rubick's model (GPU steps; default) or the CPU step model (ranks of CPU threads, "
        "as mosaic profile measures them)",
    )
    f.add_argument(
        "--pooling",
        type=float,
        default=FitOptions().pooling,
        help="penalty per unit of log for a model's k_opt_off/k_const leaving the shared value "
        "(default %(default)s; k_bwd's weight is FitOptions.pooling_by, chosen by leave-one-out)",
    )
    f.add_argument(
        "--rate-pooling",
        type=float,
        default=FitOptions().rate_pooling,
        help="the same for a model's compute rate (default %(default)s)",
    )
    f.set_defaults(run=run_fit)

    q = actions.add_parser("predict", parents=[common], help="predict iteration times of configurations")
    q.add_argument("params", metavar="PARAMS.json", help="fitted parameters (mosaic perfmodel fit)")
    q.add_argument("queries", metavar="QUERIES.csv", help="configurations (iter_time_s not needed)")
    q.add_argument("--out", metavar="PRED.csv", help="output CSV (default: stdout)")
    q.add_argument(
        "--gpu-mem-gb",
        type=float,
        metavar="GB",
        help="GPU memory; a plan whose estimate exceeds it is infeasible (empty prediction)",
    )
    q.set_defaults(run=run_predict)

    v = actions.add_parser("validate", parents=[common], help="compare predictions with measurements")
    v.add_argument("params", metavar="PARAMS.json", help="fitted parameters (mosaic perfmodel fit)")
    v.add_argument("measured", metavar="MEASURED.csv", help="measured configurations (with iter_time_s)")
    v.add_argument("--json", action="store_true", help="print the error table as JSON")
    v.set_defaults(run=run_validate)


def _load_model(path: str) -> PerfModel | CpuStepModel:
    return read_any(read_text(path), path)


def _shapes(model: PerfModel | CpuStepModel) -> dict[str, ModelShape]:
    return {key: fitted.shape for key, fitted in model.models.items()}


def run_fit(args: argparse.Namespace) -> int:
    table = parse_table(read_text(args.samples), args.samples, require_time=True)
    rows = list(table.rows)
    if args.model:
        wanted = {normalise(m) for m in args.model}
        rows = [r for r in rows if normalise(r.query.model.name) in wanted]
        if not rows:
            present = sorted({r.query.model.name for r in table.rows})
            raise InputError(
                f"{args.samples}: no rows of {', '.join(args.model)}; models there: {', '.join(present)}"
            )
    model: PerfModel | CpuStepModel
    if args.kind == cpu_step.KIND:
        model = fit_cpu_step([r.measurement() for r in rows])
        write_json(args.out, cpu_step.to_document(model, samples=len(rows)))
    else:
        model = fit_perfmodel(
            [r.measurement() for r in rows], FitOptions(pooling=args.pooling, rate_pooling=args.rate_pooling)
        )
        write_json(args.out, to_document(model, samples=len(rows)))
    print(f"fitted {len(rows)} samples of {len(model.models)} model(s), RMSLE {model.rmsle:.4f}")
    print(f"wrote {args.out}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    model = _load_model(args.params).with_gpu_memory(args.gpu_mem_gb)
    table = parse_table(read_text(args.queries), args.queries, require_time=False, shapes=_shapes(model))
    _warn_unusable_forwards(model, table)
    out_rows = []
    for row in table.rows:
        predicted = model.iteration_time_s(row.query, row.fwd_time_s)
        out_rows.append({**row.cells, PREDICTION_COLUMN: "" if predicted is None else f"{predicted:.6g}"})
    header = (*[c for c in table.header if c != PREDICTION_COLUMN], PREDICTION_COLUMN)
    text = format_table(header, out_rows)
    if args.out:
        write_atomic(args.out, text)
        log.info("wrote %s (%d rows)", args.out, len(out_rows))
    else:
        sys.stdout.write(text)
    return 0


def _warn_unusable_forwards(model: PerfModel | CpuStepModel, table: Table) -> None:
    if not isinstance(model, PerfModel):
        return  # the CPU step model uses no forward times
    rows = list(table.rows)
    for i in model.unusable_forwards([r.query for r in rows], [r.fwd_time_s for r in rows]):
        log.warning(
            "%s: column 'fwd_time_s': %g s is below the forward FLOPs at the GPUs' peak "
            "(%g TFLOP/s); not used, the forward time is estimated from the fitted rate",
            rows[i].source,
            rows[i].fwd_time_s,
            model.environment.peak_tflops,
        )


def _points(model: PerfModel | CpuStepModel, table: Table) -> list[PointError]:
    _warn_unusable_forwards(model, table)
    predicted = model.predict_many([r.query for r in table.rows], [r.fwd_time_s for r in table.rows])
    points = []
    for row, pred in zip(table.rows, predicted, strict=True):
        assert row.iter_time_s is not None  # parsed with require_time
        source = row.cells.get("source", "") or row.source
        points.append(
            PointError(source, row.query.model.name, plan_label(row.query.plan), row.iter_time_s, pred)
        )
    return points


def run_validate(args: argparse.Namespace) -> int:
    model = _load_model(args.params)
    table = parse_table(read_text(args.measured), args.measured, require_time=True, shapes=_shapes(model))
    result = accuracy(_points(model, table))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_accuracy(result))
    return 0
