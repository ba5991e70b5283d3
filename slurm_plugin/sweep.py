"""A sweep's definition and its directory: which cells (preset x trace x seed) it has, which are
done, failed or missing, and ``results.csv``.

The directory is a contract (``mosaic compare`` reads it)::

    DIR/sweep.json          the definition: presets, traces (absolute paths), seeds, cluster, config,
                            sim options, the cells in index order, and the Slurm array job if any
    DIR/cells/<cell>/       one ``mosaic sim --out`` directory; cell = f"{preset}__{trace_stem}__s{seed}"
    DIR/cells/<cell>.error  why the cell's last run failed (removed when it succeeds)
    DIR/results.csv         cell,preset,trace,seed,status, then every numeric summary.json key
    DIR/.lock               the fcntl lock every writer of results.csv and sweep.json holds
    DIR/.tmp/               cells being run; a finished one is renamed to cells/<cell>/

A cell is *done* when ``cells/<cell>/summary.json`` is a JSON object: the directory appears by one
rename once everything in it is written, so a cell directory is always complete. It is *failed*
when ``cells/<cell>.error`` exists, else *missing*. Running a sweep again runs the failed and
missing cells only.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.metrics import SUMMARY_KEYS
from slurm_plugin.files import write_atomic, write_json

SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.csv"
CELLS_DIR = "cells"
TMP_DIR = ".tmp"
LOCK_FILE = ".lock"
ERROR_SUFFIX = ".error"
RESULT_COLUMNS = ("cell", "preset", "trace", "seed", "status")
STATES = ("done", "failed", "missing")
# What sweep.json must hold the same for a directory to be run again with a definition.
DEFINITION_KEYS = ("presets", "traces", "seeds", "cluster", "config", "sim_options")

_SEEDS_PART = re.compile(r"^\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?$")


class SweepError(InputError):
    """A sweep's flags or its directory are not usable as given."""


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"1-5,7"`` -> ``(1, 2, 3, 4, 5, 7)``: comma-separated integers and inclusive ranges.

    >>> parse_seeds("1-3,7")
    (1, 2, 3, 7)
    """
    seeds: list[int] = []
    for part in text.split(","):
        match = _SEEDS_PART.match(part)
        if not match:
            raise SweepError(f"--seeds {text!r}: {part.strip()!r} is not a seed or a range like 1-5")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise SweepError(f"--seeds {text!r}: the range {part.strip()!r} runs backwards")
        seeds += range(low, high + 1)
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise SweepError(f"--seeds {text!r}: seed {', '.join(map(str, repeated))} given twice")
    return tuple(seeds)


@dataclass(frozen=True)
class Cell:
    """One ``mosaic sim`` run of a sweep."""

    index: int
    preset: str
    trace: str  # the trace file's absolute path
    seed: int

    @property
    def trace_stem(self) -> str:
        return Path(self.trace).stem.removesuffix(".csv")  # t.csv.gz -> t

    @property
    def id(self) -> str:
        return f"{self.preset}__{self.trace_stem}__s{self.seed}"


@dataclass(frozen=True)
class Sweep:
    """A sweep's definition: every preset on every trace with every seed, and how to simulate."""

    presets: tuple[str, ...]
    traces: tuple[str, ...]
    seeds: tuple[int, ...]
    cluster: str
    config: str | None
    sim_options: Mapping[str, Any]
    # Each sim option's default: a sweep.json written before an option existed lacks it,
    # and its cells ran with the default (not part of the definition written).
    option_defaults: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def cells(self) -> tuple[Cell, ...]:
        """Preset-major, then trace, then seed: the index is the Slurm array task id."""
        combos = [(p, t, s) for p in self.presets for t in self.traces for s in self.seeds]
        return tuple(Cell(i, p, t, s) for i, (p, t, s) in enumerate(combos))

    def definition(self) -> dict[str, Any]:
        return {
            "presets": list(self.presets),
            "traces": list(self.traces),
            "seeds": list(self.seeds),
            "cluster": self.cluster,
            "config": self.config,
            "sim_options": dict(self.sim_options),
        }

    def check(self) -> None:
        """Refuse a sweep whose cells would share a directory."""
        stems: dict[str, str] = {}
        for trace in self.traces:
            stem = Cell(0, "", trace, 0).trace_stem
            if stem in stems:
                raise SweepError(f"--traces: {stems[stem]} and {trace} have the same name {stem!r}")
            stems[stem] = trace
        for name, values in (("--presets", self.presets), ("--traces", self.traces)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise SweepError(f"{name}: {', '.join(repeated)} given twice")


def from_document(doc: Any, source: str) -> Sweep:
    if not isinstance(doc, dict) or any(k not in doc for k in DEFINITION_KEYS):
        missing = [k for k in DEFINITION_KEYS if not isinstance(doc, dict) or k not in doc]
        raise SweepError(f"{source}: not a sweep definition (no {', '.join(missing)})")
    try:
        return Sweep(
            presets=tuple(str(p) for p in doc["presets"]),
            traces=tuple(str(t) for t in doc["traces"]),
            seeds=tuple(int(s) for s in doc["seeds"]),
            cluster=str(doc["cluster"]),
            config=None if doc["config"] is None else str(doc["config"]),
            sim_options=dict(doc["sim_options"]),
        )
    except (TypeError, ValueError) as e:
        raise SweepError(f"{source}: malformed sweep definition: {e}") from e


def load(directory: Path) -> tuple[Sweep, dict[str, Any]]:
    """The sweep in ``directory`` and its whole ``sweep.json`` document."""
    path = directory / SWEEP_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SweepError(f"{directory}: not a sweep directory (no {SWEEP_FILE})") from None
    except (OSError, ValueError) as e:
        raise SweepError(f"{path}: cannot read: {e}") from e
    return from_document(doc, str(path)), doc


def differences(
    old: Mapping[str, Any], new: Mapping[str, Any], option_defaults: Mapping[str, Any] | None = None
) -> list[str]:
    """What differs between two definitions, one phrase per key (per sim option). A sim option
    missing on one side counts as its default in ``option_defaults`` (an option added to
    ``mosaic sim`` after the sweep was written: its cells ran with the default)."""
    found: list[str] = []
    defaults = option_defaults or {}
    for key in DEFINITION_KEYS:
        was, now = old.get(key), new.get(key)
        if isinstance(was, dict) and isinstance(now, dict):
            for k in sorted(was.keys() | now.keys()):
                a, b = was.get(k, defaults.get(k)), now.get(k, defaults.get(k))
                if a != b:
                    found.append(f"{key}.{k}: {a!r} in {SWEEP_FILE}, {b!r} now")
        elif was != now:
            found.append(f"{key}: {was!r} in {SWEEP_FILE}, {now!r} now")
    return found


def check_same(directory: Path, sweep: Sweep) -> dict[str, Any]:
    """``directory``'s sweep.json document ({} when there is none); an error naming what differs
    when it holds another sweep."""
    if not (directory / SWEEP_FILE).exists():
        return {}
    _, doc = load(directory)
    changed = differences(doc, sweep.definition(), sweep.option_defaults)
    if changed:
        raise SweepError(
            f"{directory} holds a different sweep ({'; '.join(changed)}): "
            "run it with the same flags, or give another --out"
        )
    return doc


def save(directory: Path, sweep: Sweep, slurm_job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write (or keep) ``sweep.json``; a different definition already there is an error.

    ``slurm_job`` (job id, array spec, partition) is recorded as ``slurm_job_id`` and appended
    to ``slurm_jobs``. Returns the document written.
    """
    with locked(directory):
        path = directory / SWEEP_FILE
        doc = check_same(directory, sweep)
        doc.update(sweep.definition())
        doc["cells"] = [
            {"cell": c.id, "preset": c.preset, "trace": c.trace_stem, "seed": c.seed} for c in sweep.cells
        ]
        if slurm_job is not None:
            doc["slurm_job_id"] = slurm_job["job_id"]
            doc["slurm_jobs"] = [*doc.get("slurm_jobs", []), dict(slurm_job)]
        write_json(path, doc)
        return doc


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``DIR/.lock`` exclusively: one writer of sweep.json and results.csv at a time."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def cell_dir(directory: Path, cell: Cell) -> Path:
    return directory / CELLS_DIR / cell.id


def error_path(directory: Path, cell: Cell) -> Path:
    return directory / CELLS_DIR / f"{cell.id}{ERROR_SUFFIX}"


def read_summary(directory: Path, cell: Cell) -> dict[str, Any] | None:
    """The cell's summary.json, or ``None`` when the cell is not done."""
    try:
        doc = json.loads((cell_dir(directory, cell) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def state(directory: Path, cell: Cell) -> str:
    """``done``, ``failed`` or ``missing`` (see the module docstring)."""
    if read_summary(directory, cell) is not None:
        return "done"
    return "failed" if error_path(directory, cell).is_file() else "missing"


def states(directory: Path, sweep: Sweep) -> dict[Cell, str]:
    return {cell: state(directory, cell) for cell in sweep.cells}


def error_text(directory: Path, cell: Cell) -> str:
    try:
        return error_path(directory, cell).read_text()
    except OSError:
        return ""


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def results_csv(
    sweep: Sweep, summaries: Mapping[Cell, dict[str, Any] | None], status: Mapping[Cell, str]
) -> str:
    """``results.csv``: one row per cell; after RESULT_COLUMNS the summary keys in SUMMARY_KEYS'
    order, then any other numeric key in the order the cells first show it. A value a cell lacks
    is empty."""
    seen: dict[str, None] = {}
    for cell in sweep.cells:
        for key, value in (summaries.get(cell) or {}).items():
            if _numeric(value) and key not in RESULT_COLUMNS:  # summary's seed is the row's
                seen[key] = None
    keys = [k for k in SUMMARY_KEYS if k in seen or not seen]
    keys += [k for k in seen if k not in keys]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*RESULT_COLUMNS, *keys])
    for cell in sweep.cells:
        summary = summaries.get(cell) or {}
        values = [summary[k] if _numeric(summary.get(k)) else "" for k in keys]
        writer.writerow([cell.id, cell.preset, cell.trace_stem, cell.seed, status[cell], *values])
    return buffer.getvalue()


def write_results(directory: Path, sweep: Sweep) -> dict[Cell, str]:
    """Regenerate ``DIR/results.csv`` from the cells' directories, under the lock; the states."""
    with locked(directory):
        summaries = {cell: read_summary(directory, cell) for cell in sweep.cells}
        status = {
            cell: "done" if summaries[cell] is not None else state(directory, cell) for cell in sweep.cells
        }
        write_atomic(directory / RESULTS_FILE, results_csv(sweep, summaries, status))
    return status


def array_spec(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``: sbatch's --array list."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)
