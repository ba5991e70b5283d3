"""The Rubick artifact simulator's throughput rule: its iteration time of a job at a placement.

The artifact of the Rubick paper (GitHub ``AlibabaPAI/reconfigurable-dl-scheduler``, commit
80e85248; ``builtin/data/rubick/README.md`` has the provenance) simulates a job's progress
at the iteration time ``Application.get_throughput`` in ``sched/applications.py`` reads from
``simulator/traces/<model>/placements.csv``. :func:`artifact_time` re-states that rule (own
code, written from reading theirs):

Source: ``sched/applications.py``, ``Application.__init__`` (reads
``simulator/traces/<model>/placements.csv`` with pandas; adds ``num_nodes`` = digits of the
placement code, ``num_gpus`` = their sum) and ``Application.get_throughput(placement,
exec_plan)``:

1. the placement is normalised to its lexicographically smallest rotation (node order
   kept, not sorted) and read as an integer code;
2. if that code is in the table: the FIRST row (file order) of that placement whose
   ``exec_plan`` is the job's plan label; none: the first row of that placement with plan
   ``ga``; a row found is the answer;
3. otherwise (or no row in 2.): scipy's ``LinearNDInterpolator`` over the
   ``(num_nodes, num_gpus)`` means of ``iter_time`` over ALL rows (every plan) of the
   model, queried at ``(min(nodes, 16), gpus)``; NaN outside the measured points' convex
   hull (where the artifact's job would fail an assertion).

pandas reads the ``exec_plan`` column as int64 when every label is a number (llama30's, all
Megatron "PTD" codes: pp, tp, dp digits); then a label given as text (``"344"``, the
workload's and Morphling's) matches no row, nor does ``ga``, so step 3 answers.

The tables come from the bundled ``placements_decoded.csv`` (the same rows, plan and
placement codes as the artifact writes them; :func:`builtin_artifact_tables`) or from the
artifact's own files (:func:`parse_artifact_placements`). Mosaic's simulator takes this rule
as its truth for the seven models with ``SimConfig(truth="rubick-artifact")`` (``mosaic sim
--truth rubick-artifact``; :mod:`planner.sim.progress`). Mosaic's own truth for them is
:mod:`profiles.perfmodel.rubick_measured`, which agrees with this rule wherever both read a
measured row.

Pure code: the bundled file is read as package data.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan
from profiles.perfmodel.rubick_measured import MODELS, plan_family

ArtifactHow = Literal["measured", "ga", "interpolated", "outside"]
_DATA = ("builtin", "data", "rubick")
# The artifact caps the node count it interpolates at (get_throughput: min(num_nodes, 16)).
MAX_NODES = 16


@dataclass(frozen=True)
class ArtifactRow:
    """One row of a model's ``placements.csv``: plan label, placement code, seconds per iteration."""

    plan: str
    placement: str
    time_s: float


@dataclass(frozen=True)
class ArtifactTable:
    """One model's ``placements.csv``, as the artifact's ``Application`` holds it."""

    rows: tuple[ArtifactRow, ...]
    numeric_plans: bool  # pandas' int64 column: no text label matches
    interpolator: Any  # LinearNDInterpolator over (num_nodes, num_gpus) -> mean iter_time

    @classmethod
    def of(cls, rows: Iterable[ArtifactRow]) -> ArtifactTable:
        from scipy.interpolate import LinearNDInterpolator  # only where a table is built
        from scipy.spatial import QhullError

        rows = tuple(rows)
        if not rows:
            raise InputError("an artifact table needs at least one row")
        sums: dict[tuple[int, int], list[float]] = {}
        for r in rows:
            sums.setdefault((len(r.placement), sum(map(int, r.placement))), []).append(r.time_s)
        points = sorted(sums)
        values = [sum(sums[p]) / len(sums[p]) for p in points]
        numeric = all(r.plan.isdigit() for r in rows)
        try:
            interpolator = LinearNDInterpolator(points, values)
        except (QhullError, ValueError) as e:  # as the artifact's Application would fail
            raise InputError(
                f"an artifact table's (nodes, GPUs) points {points} span no triangle to interpolate "
                f"over ({type(e).__name__})"
            ) from None
        return cls(rows, numeric, interpolator)


def rotation_code(placement: Sequence[int]) -> str:
    """The artifact's placement id: GPUs per node, empty nodes dropped, smallest rotation, as
    digits (``(2, 1, 3)`` -> ``"132"``)."""
    p = tuple(c for c in placement if c)
    return "".join(map(str, min(p[i:] + p[:i] for i in range(len(p)))))


def artifact_time(
    table: ArtifactTable, placement: Sequence[int], label: str | None
) -> tuple[float, ArtifactHow]:
    """(seconds per iteration, how) of ``get_throughput`` at ``placement`` (GPUs per node, in
    node order) for the plan ``label`` (:func:`artifact_label`; ``None``: no label, only the
    ``ga`` row or the interpolation can answer): ``measured`` (the plan's row), ``ga`` (the
    placement's ``ga`` row), ``interpolated``, or ``outside`` (NaN: the artifact's job would
    fail)."""
    code = rotation_code(placement)
    here = [r for r in table.rows if int(r.placement) == int(code)]
    if here and not table.numeric_plans:
        if label is not None:
            for r in here:
                if r.plan == label:
                    return r.time_s, "measured"
        for r in here:
            if r.plan == "ga":
                return r.time_s, "ga"
    nodes, gpus = min(len(code), MAX_NODES), sum(map(int, code))
    value = float(table.interpolator([nodes, gpus])[0])
    return value, ("interpolated" if math.isfinite(value) else "outside")


def artifact_label(plan: ExecPlan) -> str | None:
    """The artifact's plan label of a resolved plan: its kind (``ga``, ``gc``, ``zero-dp``,
    ``zero-offload``) for a data-parallel plan, the ``pp tp dp`` digits for a 3D one;
    ``None`` when the artifact has no such label (a plan family it never measured, or a 3D
    plan whose sizes do not fit three digits)."""
    family = plan_family(plan)
    if family is None:
        return None
    kind, dp, tp, pp = family
    if tp * pp == 1:
        return kind
    code = f"{pp}{tp}{dp}"
    return code if len(code) == 3 else None


# -- reading the tables ----------------------------------------------------------------------


def _rows(
    text: str, source: str, columns: tuple[str, str, str], model_column: str | None
) -> dict[str | None, list[ArtifactRow]]:
    reader = csv.DictReader(io.StringIO(text))
    needed = columns + ((model_column,) if model_column else ())
    missing = [c for c in needed if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{source}:1: missing column(s) {', '.join(missing)}")
    plan_col, placement_col, time_col = columns
    out: dict[str | None, list[ArtifactRow]] = {}
    for cells in reader:
        where = f"{source}:{reader.line_num}"
        model = (cells[model_column] or "").strip() if model_column else None
        if model_column and model not in MODELS:
            continue
        code = (cells[placement_col] or "").strip()
        if not code.isdigit():
            raise InputError(
                f"{where}: column '{placement_col}': expected digits (GPUs per node), got {code!r}"
            )
        try:
            time_s = float(cells[time_col] or "")
        except ValueError:
            raise InputError(
                f"{where}: column '{time_col}': expected a number, got {cells[time_col]!r}"
            ) from None
        out.setdefault(model, []).append(ArtifactRow((cells[plan_col] or "").strip(), code, time_s))
    return out


def parse_decoded(text: str, source: str) -> dict[str, ArtifactTable]:
    """``placements_decoded.csv`` -> one table per model of the seven (``MODELS``), rows in
    file order (other models' rows skipped)."""
    rows = _rows(text, source, ("exec_plan_code", "placement_code", "iter_time_s"), "model")
    return {m: ArtifactTable.of(r) for m, r in rows.items() if m is not None}


def parse_artifact_placements(text: str, source: str) -> ArtifactTable:
    """The artifact's own ``simulator/traces/<model>/placements.csv`` (columns ``exec_plan``,
    ``placement``, ``iter_time``) -> its table."""
    rows = _rows(text, source, ("exec_plan", "placement", "iter_time"), None)
    return ArtifactTable.of(rows.get(None, ()))


@cache
def builtin_artifact_tables() -> Mapping[str, ArtifactTable]:
    """The seven models' tables from the bundled ``placements_decoded.csv`` (cached)."""
    text = resources.files("profiles").joinpath(*_DATA, "placements_decoded.csv").read_text(encoding="utf-8")
    return parse_decoded(text, "placements_decoded.csv")
