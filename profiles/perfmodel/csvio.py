"""The measurement CSV of ``mosaic perfmodel`` (the columns of the bundled ``samples.csv``).

One row per configuration::

    model,params_m,global_batch,seq_len,hidden,layers,nodes,gpus,cpus_per_gpu,dp,tp,pp,
    zero_stage,offload_optimizer,grad_accum,activation_checkpointing,iter_time_s,source

``params_m`` is millions of parameters; ``iter_time_s`` seconds per iteration (one global
batch). Required: ``model``, ``global_batch``, ``gpus`` and, for fitting and validation,
``iter_time_s``. The shape columns (``params_m``, ``seq_len``, ``hidden``, ``layers``) may
be left empty for a model the parameters were fitted on. Empty optional cells mean the
defaults: 1 node, ``dp = gpus/(tp·pp)``, ``tp = pp = 1``, ZeRO stage 0, no offload,
``grad_accum`` 1, no activation checkpointing. An optional ``offload_param`` and
``heads`` column are read too, and an optional ``fwd_time_s``: the profiled forward time
of that configuration (seconds, one GPU's forward passes of one iteration), Rubick's
``T_fwd`` input: a prediction uses it instead of the rate-based estimate (unless it is
below the physical floor, ``Environment.peak_tflops``), and the fit feeds it to the
sample's Eq. 1 and calibrates the model's compute rate on it (``FitOptions.fwd_as_input``,
``fwd_weight``); any other column
(``source``, ``rubick_pred_s``) is carried along untouched. Every error names the source,
the line and the column.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.core.errors import InputError
from planner.core.execplan import MAX_ZERO_STAGE, ExecPlan, PlanError, resolve
from profiles.names import normalise
from profiles.perfmodel.fit import Measurement
from profiles.perfmodel.query import ModelShape, Query

COLUMNS = (
    "model",
    "params_m",
    "global_batch",
    "seq_len",
    "hidden",
    "layers",
    "nodes",
    "gpus",
    "cpus_per_gpu",
    "dp",
    "tp",
    "pp",
    "zero_stage",
    "offload_optimizer",
    "grad_accum",
    "activation_checkpointing",
    "iter_time_s",
    "fwd_time_s",
    "source",
)
REQUIRED = ("model", "global_batch", "gpus")
SHAPE_COLUMNS = ("params_m", "seq_len", "hidden", "layers")
PREDICTION_COLUMN = "pred_iter_time_s"
_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


@dataclass(frozen=True, slots=True)
class Row:
    """One parsed CSV row: its line, the query, the measured time (if any) and all cells."""

    line: int
    query: Query
    iter_time_s: float | None
    cells: Mapping[str, str]
    source: str
    fwd_time_s: float | None = None

    def measurement(self) -> Measurement:
        if self.iter_time_s is None:
            raise InputError(f"{self.source}: column 'iter_time_s': is empty (a measured time is needed)")
        return Measurement(self.query, self.iter_time_s, self.source, self.fwd_time_s)


@dataclass(frozen=True, slots=True)
class Table:
    """A parsed file: its header (column order kept for writing) and rows."""

    header: tuple[str, ...]
    rows: tuple[Row, ...]


class _Cells:
    __slots__ = ("cells", "where")

    def __init__(self, cells: Mapping[str, str], where: str) -> None:
        self.cells = cells
        self.where = where

    def fail(self, column: str, message: str) -> InputError:
        return InputError(f"{self.where}: column '{column}': {message}")

    def text(self, column: str) -> str:
        return (self.cells.get(column) or "").strip()

    def number(self, column: str, *, required: bool = False, positive: bool = True) -> float | None:
        text = self.text(column)
        if not text:
            if required:
                raise self.fail(column, "is empty")
            return None
        try:
            value = float(text)
        except ValueError:
            raise self.fail(column, f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or (positive and value <= 0):
            raise self.fail(column, f"expected a positive number, got {text!r}")
        return value

    def integer(self, column: str, *, required: bool = False, minimum: int = 1) -> int | None:
        value = self.number(column, required=required, positive=False)
        if value is None:
            return None
        if not value.is_integer() or value < minimum:
            raise self.fail(column, f"expected an integer >= {minimum}, got {self.text(column)!r}")
        return int(value)

    def flag(self, column: str) -> bool:
        text = self.text(column).lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise self.fail(column, f"expected 0 or 1, got {self.text(column)!r}")


def parse_table(
    text: str,
    source: str,
    *,
    require_time: bool,
    shapes: Mapping[str, ModelShape] | None = None,
) -> Table:
    """Parse measurement CSV text; ``shapes`` fills empty shape columns by model name."""
    try:
        return _parse_table(text, source, require_time, shapes)
    except csv.Error as e:  # e.g. a bare carriage return inside a cell
        raise InputError(f"{source}: not CSV the csv module can read: {e}") from e


def _parse_table(
    text: str, source: str, require_time: bool, shapes: Mapping[str, ModelShape] | None
) -> Table:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise InputError(f"{source}: empty file (expected a header with {', '.join(REQUIRED)})")
    header = tuple(h.strip() for h in reader.fieldnames)
    reader.fieldnames = list(header)
    needed = REQUIRED + (("iter_time_s",) if require_time else ())
    missing = [c for c in needed if c not in header]
    if missing:
        raise InputError(
            f"{source}:1: missing column(s) {', '.join(missing)}; the header has {', '.join(header)}"
        )
    rows = []
    for cells in reader:
        line = reader.line_num
        if None in cells:
            raise InputError(f"{source}:{line}: more cells than the header has columns")
        clean = {k: (v or "") for k, v in cells.items()}
        rows.append(_row(clean, f"{source}:{line}", line, require_time, shapes or {}))
    if not rows:
        raise InputError(f"{source}: no rows after the header")
    return Table(header=header, rows=tuple(rows))


def _row(
    cells: Mapping[str, str], where: str, line: int, require_time: bool, shapes: Mapping[str, ModelShape]
) -> Row:
    c = _Cells(cells, where)
    name = c.text("model")
    if not name:
        raise c.fail("model", "is empty")
    shape = _shape(c, name, shapes)
    gpus = c.integer("gpus", required=True)
    global_batch = c.integer("global_batch", required=True)
    assert gpus is not None and global_batch is not None
    nodes = c.integer("nodes") or 1
    if gpus % nodes:
        raise c.fail("nodes", f"{gpus} GPUs do not spread evenly over {nodes} nodes")
    tp, pp = c.integer("tp") or 1, c.integer("pp") or 1
    if gpus % (tp * pp):
        raise c.fail("tp", f"{gpus} GPUs cannot be split into tp {tp} x pp {pp} model replicas")
    dp = c.integer("dp")
    if dp is not None and dp * tp * pp != gpus:
        raise c.fail("dp", f"dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp}, not the {gpus} GPUs")
    replicas = gpus // (tp * pp)
    if global_batch % replicas:
        raise c.fail("global_batch", f"global batch {global_batch} does not split over dp {replicas}")
    accum = c.integer("grad_accum")
    if accum is not None and (global_batch // replicas) % accum:
        raise c.fail(
            "grad_accum", f"{global_batch // replicas} examples per GPU do not split into {accum} steps"
        )
    zero = c.integer("zero_stage", minimum=0) or 0
    offload_optimizer, offload_param = c.flag("offload_optimizer"), c.flag("offload_param")
    # DeepSpeed's rules (planner.core.execplan.check), each reported at the column that breaks it.
    if zero > MAX_ZERO_STAGE:
        raise c.fail("zero_stage", f"expected 0, 1, 2 or 3, got {zero}")
    if offload_optimizer and zero == 0:
        raise c.fail("offload_optimizer", "needs zero_stage >= 1 (ZeRO-Offload moves ZeRO's state)")
    if offload_param and zero != MAX_ZERO_STAGE:
        raise c.fail("offload_param", f"needs zero_stage 3, got {zero}")
    if pp > 1 and zero > 1:
        raise c.fail("zero_stage", f"pipeline parallelism (pp {pp}) works with zero_stage 0 or 1 only")
    plan = ExecPlan(
        tp=tp,
        pp=pp,
        zero_stage=zero,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        grad_accum=accum,
        activation_checkpointing=c.flag("activation_checkpointing"),
    )
    try:
        resolved = resolve(plan, gpus, global_batch, where)
    except PlanError as e:  # the checks above catch what a row can break; kept for safety
        raise InputError(f"{where}: {str(e).removeprefix(f'{where}: ')}") from None
    cpus = c.number("cpus_per_gpu")
    if offload_optimizer and cpus is None:
        raise c.fail("cpus_per_gpu", "is empty, but ZeRO-Offload's optimizer step depends on it")
    time = c.number("iter_time_s", required=require_time)
    forward = c.number("fwd_time_s")
    if forward is not None and time is not None and forward >= time:
        raise c.fail("fwd_time_s", f"forward time {forward:g} s is not below the iteration time {time:g} s")
    query = Query(model=shape, plan=resolved, nodes=nodes, cpus_per_gpu=cpus)
    return Row(line=line, query=query, iter_time_s=time, cells=cells, source=where, fwd_time_s=forward)


def _shape(c: _Cells, name: str, shapes: Mapping[str, ModelShape]) -> ModelShape:
    known = shapes.get(normalise(name))
    values: dict[str, float | None] = {col: c.number(col) for col in SHAPE_COLUMNS}
    for col in SHAPE_COLUMNS[1:]:
        if values[col] is not None:
            c.integer(col)  # sequence, hidden size and layers are whole numbers
    if any(v is None for v in values.values()):
        if known is None:
            empty = next(col for col in SHAPE_COLUMNS if values[col] is None)
            raise c.fail(empty, f"is empty and model {name!r} has no fitted shape to take it from")
        return known if all(v is None for v in values.values()) else _merge(c, name, values, known)
    params_m, seq, hidden, layers = (values[col] for col in SHAPE_COLUMNS)
    assert params_m is not None and seq is not None and hidden is not None and layers is not None
    try:
        return ModelShape(
            name=name,
            params=params_m * 1e6,
            seq_len=int(seq),
            hidden=int(hidden),
            layers=int(layers),
            heads=c.integer("heads"),
        )
    except InputError as e:  # the shape's own checks (e.g. a count beyond 64 bits)
        raise InputError(f"{c.where}: {e}") from None


def _merge(c: _Cells, name: str, values: Mapping[str, float | None], known: ModelShape) -> ModelShape:
    """A partly filled shape: the given cells must agree with the fitted shape."""
    fitted = {
        "params_m": known.params / 1e6,
        "seq_len": known.seq_len,
        "hidden": known.hidden,
        "layers": known.layers,
    }
    for col, value in values.items():
        if value is not None and not math.isclose(value, fitted[col], rel_tol=1e-9):
            raise c.fail(col, f"{value:g} differs from the fitted shape of {name!r} ({fitted[col]:g})")
    return known


def format_table(header: Sequence[str], rows: Sequence[Mapping[str, str]]) -> str:
    """CSV text with ``header``'s columns, in order (cells missing from a row are empty)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(header), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in header})
    return out.getvalue()
