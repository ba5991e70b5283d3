"""The trace CSV format (docs/reference.md "Trace CSV").

Required columns: ``job_id,submit_time_s,num_gpus,duration_s,model``. Optional:
``batch_size, iterations, gpu_type, tenant, guaranteed, deadline_s, time_limit_s, plan,
plans, min_gpus, max_gpus, gpu_types`` (``time_limit_s`` is the run time the job declared,
seconds > 0, ``plan`` is a JSON object, ``plans`` a JSON list of the plans the job allows
Mosaic to choose from, ``gpu_types`` the ``;``-separated GPU types the job accepts). Other
columns are carried by the file but ignored here. Empty optional cells mean "not given".
Every error names the source, the line and the column.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

from planner.core.errors import TraceError
from planner.core.execplan import PlanError, plan_from_mapping
from planner.core.fields import loads_json
from planner.core.model import demand_problem
from planner.traces.records import TraceJob

REQUIRED_COLUMNS = ("job_id", "submit_time_s", "num_gpus", "duration_s", "model")
OPTIONAL_COLUMNS = (
    "batch_size",
    "iterations",
    "gpu_type",
    "tenant",
    "guaranteed",
    "deadline_s",
    "time_limit_s",
    "plan",
    "plans",
    "min_gpus",
    "max_gpus",
    "gpu_types",
)
TRACE_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


class _Row:
    __slots__ = ("line", "row", "source")

    def __init__(self, row: dict[str, str | None], source: str, line: int) -> None:
        self.row = row
        self.source = source
        self.line = line

    def fail(self, column: str, message: str) -> TraceError:
        return TraceError(f"{self.source}:{self.line}: column '{column}': {message}")

    def cell(self, column: str) -> str:
        value = self.row.get(column)
        return "" if value is None else value.strip()

    def required(self, column: str) -> str:
        value = self.cell(column)
        if not value:
            raise self.fail(column, "is empty")
        return value

    def number(self, column: str, *, required: bool, minimum: float | None = None) -> float | None:
        text = self.required(column) if required else self.cell(column)
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise self.fail(column, f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise self.fail(column, f"expected a finite number, got {text!r}")
        if minimum is not None and value < minimum:
            raise self.fail(column, f"expected a number >= {minimum:g}, got {text!r}")
        return value

    def integer(self, column: str, *, required: bool, minimum: int) -> int | None:
        value = self.number(column, required=required)
        if value is None:
            return None
        if not value.is_integer() or value < minimum:
            raise self.fail(column, f"expected an integer >= {minimum}, got {self.cell(column)!r}")
        return int(value)


def parse_trace(text: str, source: str = "trace") -> tuple[TraceJob, ...]:
    """Parse trace CSV text. Rows keep their file order; job ids must be unique."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames
    except csv.Error as e:
        raise TraceError(f"{source}:1: not valid CSV: {e}") from None
    if not header:
        raise TraceError(f"{source}: empty file (expected a header with {', '.join(REQUIRED_COLUMNS)})")
    header = [h.strip() for h in header]
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(
            f"{source}:1: missing required column(s) {', '.join(missing)}; the header has {', '.join(header)}"
        )
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in _rows(reader, source):
        line = reader.line_num
        if None in row:  # more cells than header columns
            raise TraceError(f"{source}:{line}: more cells than the header has columns")
        r = _Row(row, source, line)
        job_id = r.required("job_id")
        if job_id in seen:
            raise r.fail("job_id", f"duplicate job id {job_id!r} (first on line {seen[job_id]})")
        seen[job_id] = line
        duration = r.number("duration_s", required=True, minimum=0.0)
        assert duration is not None
        if duration <= 0:
            raise r.fail("duration_s", f"expected a positive duration, got {r.cell('duration_s')!r}")
        num_gpus = r.integer("num_gpus", required=True, minimum=1) or 1
        gpu_type = r.cell("gpu_type").lower() or None
        min_gpus = r.integer("min_gpus", required=False, minimum=1)
        max_gpus = r.integer("max_gpus", required=False, minimum=1)
        gpu_types = _parse_gpu_types(r)
        problem = demand_problem(num_gpus, min_gpus, max_gpus, gpu_type, gpu_types)
        if problem is not None:
            raise r.fail(*problem)
        jobs.append(
            TraceJob(
                job_id=job_id,
                submit_time_s=r.number("submit_time_s", required=True, minimum=0.0) or 0.0,
                num_gpus=num_gpus,
                duration_s=duration,
                model=r.required("model"),
                batch_size=r.integer("batch_size", required=False, minimum=1),
                iterations=r.integer("iterations", required=False, minimum=1),
                gpu_type=gpu_type,
                tenant=r.cell("tenant") or None,
                guaranteed=_parse_bool(r, "guaranteed"),
                deadline_s=r.number("deadline_s", required=False),
                time_limit_s=_parse_time_limit(r),
                plan=_parse_plan(r),
                plans=_parse_plans(r),
                min_gpus=min_gpus,
                max_gpus=max_gpus,
                gpu_types=gpu_types,
            )
        )
    return tuple(jobs)


def _rows(reader: csv.DictReader[str], source: str) -> Iterator[dict[str, str | None]]:
    """The reader's rows; what the csv module cannot split is an error naming the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceError(f"{source}:{reader.line_num}: not valid CSV: {e}") from None
        yield row


def _parse_time_limit(r: _Row) -> float | None:
    """The declared run time in seconds (> 0); an empty cell: none declared."""
    value = r.number("time_limit_s", required=False)
    if value is not None and value <= 0:
        raise r.fail("time_limit_s", f"expected a positive number of seconds, got {r.cell('time_limit_s')!r}")
    return value


def _parse_gpu_types(r: _Row) -> tuple[str, ...]:
    """``a100;v100`` -> ``("a100", "v100")``, lower-cased like ``gpu_type``."""
    text = r.cell("gpu_types")
    if not text:
        return ()
    names = tuple(name.strip().lower() for name in text.split(";"))
    if not all(names):
        raise r.fail("gpu_types", f"expected GPU type names separated by ';', got {text!r}")
    return names


def _parse_bool(r: _Row, column: str) -> bool:
    text = r.cell(column).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise r.fail(column, f"expected true/false, got {r.cell(column)!r}")


def _parse_plan(r: _Row) -> dict[str, Any] | None:
    text = r.cell("plan")
    if not text:
        return None
    try:
        plan = loads_json(text)
    except ValueError as e:
        raise r.fail("plan", f"not a JSON object: {e}") from None
    if not isinstance(plan, dict):
        raise r.fail("plan", f"expected a JSON object, got {text!r}")
    _check_plan(r, "plan", plan)
    return plan


def _parse_plans(r: _Row) -> tuple[dict[str, Any], ...]:
    text = r.cell("plans")
    if not text:
        return ()
    try:
        plans = loads_json(text)
    except ValueError as e:
        raise r.fail("plans", f"not a JSON list: {e}") from None
    if not isinstance(plans, list) or not all(isinstance(p, dict) for p in plans):
        raise r.fail("plans", f"expected a JSON list of objects, got {text!r}")
    for k, plan in enumerate(plans, start=1):
        _check_plan(r, "plans", plan, f"plan {k}")
    return tuple(plans)


def _check_plan(r: _Row, column: str, plan: dict[str, Any], where: str = "plan") -> None:
    """A plan no framework can run (``zero_stage`` 9, an unknown key) is the row's error."""
    try:
        plan_from_mapping(plan, where)
    except PlanError as e:
        message = str(e)
        raise r.fail(column, message.removeprefix("plan: ") if where == "plan" else message) from None


def format_trace(jobs: Iterable[TraceJob]) -> str:
    """Render jobs as trace CSV; optional columns appear only when some job uses them."""
    rows = list(jobs)
    used = [c for c in OPTIONAL_COLUMNS if any(_optional_value(j, c) != "" for j in rows)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(REQUIRED_COLUMNS) + used)
    for j in rows:
        writer.writerow(
            [j.job_id, _num(j.submit_time_s), j.num_gpus, _num(j.duration_s), j.model]
            + [_optional_value(j, c) for c in used]
        )
    return out.getvalue()


def _num(value: float) -> str:
    """Seconds to the millisecond, the way traces are written; a value with finer digits in
    full (the shortest text that reads back as the same float), so no trace loses them."""
    if float(value).is_integer():
        return str(int(value))
    short = f"{value:.3f}".rstrip("0").rstrip(".")
    return short if float(short) == value else repr(float(value))


def _optional_value(job: TraceJob, column: str) -> str:
    value = getattr(job, column)
    if column == "guaranteed":
        return "true" if value else ""
    if column == "plan":
        return json.dumps(dict(value), sort_keys=True) if value is not None else ""
    if column == "plans":
        return json.dumps([dict(p) for p in value], sort_keys=True) if value else ""
    if column == "gpu_types":
        return ";".join(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return _num(value)
    return str(value)
