"""``mosaic compare``'s data: runs read from disk, grouped by trace and preset, and summarised over
seeds with a bootstrap interval.

A *run* is one ``mosaic sim --out`` directory (``summary.json``, ``jobs.csv``, ``timeline.csv``).
Runs come from a sweep directory (``DIR/results.csv`` and ``DIR/cells/<cell>/``, or the cells alone)
or from run directories named on the command line. A group is every seed of one preset on one trace;
each metric is averaged over the group's seeds, with a percentile-bootstrap 95 % interval of that
mean (Efron & Tibshirani, ch. 13). One seed gives a degenerate interval (the value itself), marked
as such.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.core.errors import InputError

log = logging.getLogger(__name__)

# (summary key, label, unit): what the comparison shows, in order. Seconds are shown in hours.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("avg_jct_s", "avg JCT", "h"),
    ("p50_jct_s", "p50 JCT", "h"),
    ("p99_jct_s", "p99 JCT", "h"),
    ("avg_queue_s", "avg queueing delay", "h"),
    ("makespan_s", "makespan", "h"),
    ("gpu_util", "GPU utilisation", "%"),
    ("restarts", "restarts", ""),
)
# Per tenant: what jobs.csv's rows give (makespan and utilisation are the cluster's).
TENANT_METRICS: tuple[tuple[str, str, str], ...] = (
    ("avg_jct_s", "avg JCT", "h"),
    ("p50_jct_s", "p50 JCT", "h"),
    ("p99_jct_s", "p99 JCT", "h"),
    ("avg_queue_s", "avg queueing delay", "h"),
    ("restarts", "restarts", ""),
)
RESAMPLES = 10_000
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0


class CompareError(InputError):
    """The runs to compare are missing, malformed or not comparable."""


@dataclass(frozen=True)
class Interval:
    """The mean of one metric over seeds and its bootstrap interval.

    ``degenerate``: one seed, so ``low == high == mean`` and the interval says nothing about spread.
    """

    mean: float
    low: float
    high: float
    seeds: int

    @property
    def degenerate(self) -> bool:
        return self.seeds < 2


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Interval | None:
    """Mean of ``values`` and its percentile-bootstrap interval; ``None`` without values.

    Draws ``resamples`` samples of ``len(values)`` with replacement from a generator seeded with
    ``seed`` (so the same values always give the same interval) and takes the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of their means.

    >>> bootstrap_mean([3.0])
    Interval(mean=3.0, low=3.0, high=3.0, seeds=1)
    """
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        return None
    mean = float(data.mean())
    if data.size == 1:
        return Interval(mean, mean, mean, 1)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    # The percentile interval of the mean always holds the mean up to rounding; clamp that rounding.
    return Interval(mean, min(float(low), mean), max(float(high), mean), int(data.size))


@dataclass
class Run:
    """One simulation: where it came from and what it measured."""

    name: str  # the cell name or the directory
    preset: str
    trace: str
    seed: int
    summary: dict[str, Any]
    directory: Path | None = None
    cluster: str | None = None

    def jobs(self) -> list[dict[str, str]]:
        """``jobs.csv``'s rows (``[]`` when the run has none)."""
        if self.directory is None or not (self.directory / "jobs.csv").is_file():
            return []
        with (self.directory / "jobs.csv").open(newline="") as f:
            return list(csv.DictReader(f))

    def timeline(self) -> list[tuple[float, float]] | None:
        """(time, busy GPUs) from ``timeline.csv``; ``None`` when the run has none."""
        path = None if self.directory is None else self.directory / "timeline.csv"
        if path is None or not path.is_file():
            return None
        with path.open(newline="") as f:
            try:
                return [(float(r["time_s"]), float(r["busy_gpus"])) for r in csv.DictReader(f)]
            except (KeyError, ValueError) as e:
                raise CompareError(f"{path}: malformed row ({e})") from e


@dataclass
class Runs:
    """What was found: the runs, and the cells that were skipped with why."""

    runs: list[Run]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""


def trace_label(trace: str) -> str:
    """A trace's short name: ``bundled:demo_trace.csv`` and ``/x/demo_trace.csv`` are ``demo_trace``."""
    name = trace.removeprefix("bundled:").rsplit("/", 1)[-1]
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name or trace


def _number(value: Any, where: str, key: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise CompareError(f"{where}: {key!r} is {value!r}, not a number")
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise CompareError(f"{where}: {key!r} is {value!r}, not a number") from e


def read_summary(directory: Path) -> dict[str, Any]:
    """``directory/summary.json``, checked: an object whose metric keys are numbers or null."""
    path = directory / "summary.json"
    if not path.is_file():
        raise CompareError(f"{directory}: no summary.json (not a `mosaic sim --out` directory)")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CompareError(f"{path}: not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise CompareError(f"{path}: not a JSON object")
    for key, _, _ in METRICS:
        _number(doc.get(key), str(path), key)
    if "tenants" in doc and not isinstance(doc["tenants"], dict):
        raise CompareError(f"{path}: 'tenants' is not an object")
    return doc


def run_from_directory(directory: Path) -> Run:
    """A ``mosaic sim --out`` directory as a run: preset, trace and seed from its summary.json."""
    doc = read_summary(directory)
    path = directory / "summary.json"
    for key in ("scheduler", "trace"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise CompareError(f"{path}: no {key!r} key (a string)")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise CompareError(f"{path}: 'seed' is {seed!r}, not an integer")
    return Run(
        name=str(directory),
        preset=doc["scheduler"],
        trace=doc["trace"],
        seed=seed,
        summary=doc,
        directory=directory,
        cluster=doc.get("cluster") if isinstance(doc.get("cluster"), str) else None,
    )


def _sweep_cluster(directory: Path) -> str | None:
    path = directory / "sweep.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CompareError(f"{path}: not JSON ({e})") from e
    cluster = doc.get("cluster") if isinstance(doc, dict) else None
    return str(cluster) if cluster is not None else None


def read_sweep(directory: Path) -> Runs:
    """A ``mosaic sweep`` directory's runs: ``results.csv``'s done rows, or every ``cells/*``."""
    results = directory / "results.csv"
    cells = directory / "cells"
    sweep_cluster = _sweep_cluster(directory)
    found = Runs([], source=str(directory))
    if not results.is_file():
        for cell in sorted(p for p in cells.iterdir() if p.is_dir()):
            if (cell / "summary.json").is_file():
                found.runs.append(run_from_directory(cell))
            else:
                found.skipped.append((cell.name, "no summary.json"))
        return found
    with results.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"cell", "preset", "trace", "seed", "status"} - set(reader.fieldnames or ())
        if missing:
            raise CompareError(f"{results}: no column {', '.join(sorted(missing))}")
        rows = list(reader)
    for line, row in enumerate(rows, 2):
        where = f"{results} line {line}"
        if row["status"] != "done":
            found.skipped.append((row["cell"], row["status"] or "no status"))
            continue
        try:
            seed = int(row["seed"])
        except ValueError as e:
            raise CompareError(f"{where}: 'seed' is {row['seed']!r}, not an integer") from e
        summary: dict[str, Any] = {}
        cell_dir = cells / row["cell"]
        cluster = sweep_cluster
        if (cell_dir / "summary.json").is_file():
            summary = read_summary(cell_dir)
            cluster = summary.get("cluster") if isinstance(summary.get("cluster"), str) else cluster
        # results.csv is the sweep's record of the numbers; the cell's summary.json adds the rest.
        for key, _, _ in METRICS:
            if key in row:
                summary[key] = _number(row[key], where, key)
        found.runs.append(
            Run(
                name=row["cell"],
                preset=row["preset"],
                trace=row["trace"],
                seed=seed,
                summary=summary,
                directory=cell_dir if cell_dir.is_dir() else None,
                cluster=cluster,
            )
        )
    return found


def load(paths: Sequence[Path]) -> Runs:
    """The runs under ``paths``: one sweep directory, or run directories (each with summary.json).

    Raises :class:`CompareError` for a path that is neither, for runs of different clusters, and
    for the same preset, trace and seed twice.
    """
    if not paths:
        raise CompareError("nothing to compare: name a sweep directory or run directories")
    source = str(paths[0]) if len(paths) == 1 else f"{len(paths)} run directories"
    found = Runs([], source=source)
    for path in paths:
        if not path.is_dir():
            raise CompareError(f"{path}: not a directory")
        if (path / "results.csv").is_file() or (path / "cells").is_dir():
            sweep = read_sweep(path)
            found.runs += sweep.runs
            found.skipped += sweep.skipped
        else:
            found.runs.append(run_from_directory(path))
    if not found.runs:
        raise CompareError(f"{found.source}: no finished run to compare")
    clusters = {r.cluster for r in found.runs if r.cluster is not None}
    if len(clusters) > 1:
        by_cluster = {c: next(r.name for r in found.runs if r.cluster == c) for c in sorted(clusters)}
        raise CompareError(
            "runs of different clusters cannot be compared: "
            + "; ".join(f"{c} ({name})" for c, name in by_cluster.items())
        )
    seen: dict[tuple[str, str, int], str] = {}
    for r in found.runs:
        key = (r.preset, r.trace, r.seed)
        if key in seen:
            raise CompareError(
                f"{seen[key]} and {r.name} are both {r.preset} on {r.trace} with seed {r.seed}"
            )
        seen[key] = r.name
    return found


def group(runs: Iterable[Run]) -> dict[tuple[str, str], list[Run]]:
    """Runs by (trace, preset), in first-seen order of each, seeds ascending."""
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.trace, r.preset)].append(r)
    return {k: sorted(v, key=lambda r: r.seed) for k, v in groups.items()}


def tenant_values(run: Run) -> dict[str, dict[str, float | None]]:
    """Per tenant of one run: :data:`TENANT_METRICS` from jobs.csv's ``tenant`` column, else the
    average and p99 JCT from summary.json's ``tenants``; ``{}`` when jobs name no tenant."""
    rows = run.jobs()
    if rows and "tenant" in rows[0]:
        by_tenant: dict[str, list[dict[str, str]]] = defaultdict(list)
        for row in rows:
            if row["tenant"]:
                by_tenant[row["tenant"]].append(row)
        out: dict[str, dict[str, float | None]] = {}
        for name, mine in sorted(by_tenant.items()):
            jcts = [float(r["jct_s"]) for r in mine if r.get("jct_s")]
            queues = [float(r["queue_s"]) for r in mine if r.get("queue_s")]
            out[name] = {
                "avg_jct_s": float(np.mean(jcts)) if jcts else None,
                "p50_jct_s": float(np.percentile(jcts, 50)) if jcts else None,
                "p99_jct_s": float(np.percentile(jcts, 99)) if jcts else None,
                "avg_queue_s": float(np.mean(queues)) if queues else None,
                "restarts": float(sum(int(r.get("restarts") or 0) for r in mine)),
            }
        return out
    tenants = run.summary.get("tenants") or {}
    return {
        name: {"avg_jct_s": t.get("avg_jct_s"), "p99_jct_s": t.get("p99_jct_s")}
        for name, t in sorted(tenants.items())
        if isinstance(t, Mapping) and t.get("jobs")
    }


@dataclass
class Row:
    """One line of summary.csv: a preset on a trace (``tenant`` ``None``: all jobs)."""

    trace: str
    preset: str
    tenant: str | None
    seeds: list[int]
    stats: dict[str, Interval | None]


def summarise(groups: Mapping[tuple[str, str], list[Run]]) -> list[Row]:
    """Every group's :data:`METRICS`, then per tenant its :data:`TENANT_METRICS`."""
    rows: list[Row] = []
    for (trace, preset), runs in groups.items():
        seeds = [r.seed for r in runs]
        stats = {
            key: bootstrap_mean(
                [v for r in runs if (v := r.summary.get(key)) is not None], seed=BOOTSTRAP_SEED
            )
            for key, _, _ in METRICS
        }
        rows.append(Row(trace, preset, None, seeds, stats))
        per_run = [tenant_values(r) for r in runs]
        for name in sorted({n for values in per_run for n in values}):
            tenant_stats = {
                key: bootstrap_mean(
                    [v for values in per_run if (v := values.get(name, {}).get(key)) is not None],
                    seed=BOOTSTRAP_SEED,
                )
                for key, _, _ in TENANT_METRICS
            }
            rows.append(Row(trace, preset, name, seeds, tenant_stats))
    return rows


def summary_csv(rows: Sequence[Row]) -> str:
    """``summary.csv``: trace, preset, tenant (empty: all jobs), seeds, then per metric its mean
    and interval (``KEY``, ``KEY_lo``, ``KEY_hi``; seconds as seconds, utilisation as a fraction)."""
    header = ["trace", "preset", "tenant", "seeds"]
    for key, _, _ in METRICS:
        header += [key, f"{key}_lo", f"{key}_hi"]
    lines = [",".join(header)]
    for row in rows:
        cells = [row.trace, row.preset, row.tenant or "", " ".join(str(s) for s in row.seeds)]
        for key, _, _ in METRICS:
            stat = row.stats.get(key)
            cells += (
                ["", "", ""] if stat is None else [f"{stat.mean:.6g}", f"{stat.low:.6g}", f"{stat.high:.6g}"]
            )
        lines.append(",".join(_csv_cell(c) for c in cells))
    return "\n".join(lines) + "\n"


def _csv_cell(text: str) -> str:
    if any(c in text for c in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def format_value(value: float, unit: str) -> str:
    if unit == "h":
        return f"{value / 3600:.2f}"
    if unit == "%":
        return f"{value * 100:.1f}"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def format_interval(stat: Interval | None, unit: str) -> str:
    """``mean [low, high]`` in the metric's display unit; one seed: ``mean (1 seed)``."""
    if stat is None:
        return "-"
    if stat.degenerate:
        return f"{format_value(stat.mean, unit)} (1 seed)"
    return (
        f"{format_value(stat.mean, unit)} [{format_value(stat.low, unit)}, {format_value(stat.high, unit)}]"
    )
