"""``mosaic compare``'s pictures and its one self-contained ``report.html``.

Per trace: the JCT and queueing-delay CDFs of every preset (each preset's jobs of all its seeds
pooled) and GPU utilisation over time (busy GPUs / GPUs, averaged over seeds on a common grid). The
HTML embeds the PNGs as data URIs and its CSS inline: it loads nothing, so it opens offline.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from slurm_plugin.compare import (
    METRICS,
    TENANT_METRICS,
    Interval,
    Row,
    Run,
    Runs,
    format_interval,
    trace_label,
)

GRID_POINTS = 400


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "trace"


def _pooled(runs: Sequence[Run], column: str) -> np.ndarray:
    values = [float(row[column]) for r in runs for row in r.jobs() if row.get(column)]
    return np.sort(np.asarray(values, dtype=float))


def busy_over_time(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """(times, busy GPUs) of one run: its timeline.csv, else its jobs held from first start to
    finish (which counts a preempted job's gaps as busy)."""
    timeline = run.timeline()
    if timeline:
        return (
            np.asarray([t for t, _ in timeline], dtype=float),
            np.asarray([b for _, b in timeline], dtype=float),
        )
    events: list[tuple[float, float]] = []
    for row in run.jobs():
        if not row.get("start_time_s"):
            continue
        gpus = float(row.get("num_gpus") or 0)
        events.append((float(row["start_time_s"]), gpus))
        if row.get("finish_time_s"):
            events.append((float(row["finish_time_s"]), -gpus))
    if not events:
        return None
    events.sort()
    return np.asarray([t for t, _ in events]), np.cumsum([d for _, d in events])


def utilisation_curve(runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray] | None:
    """Mean over seeds of busy GPUs / GPUs, on a grid from 0 to the longest run's last point."""
    curves = []
    for r in runs:
        gpus = r.summary.get("gpus")
        series = busy_over_time(r)
        if series is None or not gpus:
            continue
        curves.append((series[0], series[1] / float(gpus)))
    if not curves:
        return None
    end = max(float(t[-1]) for t, _ in curves)
    grid = np.linspace(0.0, end, GRID_POINTS)
    stacked = []
    for times, frac in curves:
        index = np.searchsorted(times, grid, side="right") - 1  # step function: value since last point
        values = np.where(index >= 0, frac[np.clip(index, 0, None)], 0.0)
        values[grid > times[-1]] = 0.0  # the run is over: its cluster is idle
        stacked.append(values)
    return grid, np.mean(stacked, axis=0)


def _figure_png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def trace_pngs(trace: str, groups: Mapping[str, Sequence[Run]]) -> dict[str, bytes]:
    """``{file name: PNG}`` for one trace: ``cdf-<trace>.png`` and ``util-<trace>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = trace_label(trace)
    fig, (jct_ax, queue_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for preset, runs in groups.items():
        for ax, column in ((jct_ax, "jct_s"), (queue_ax, "queue_s")):
            values = _pooled(runs, column) / 3600.0
            if len(values):
                ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=preset)
    jct_ax.set_xscale("log")
    jct_ax.set_xlabel("job completion time (h)")
    queue_ax.set_xscale("symlog", linthresh=0.01)
    queue_ax.set_xlabel("queueing delay (h)")
    for ax, title in ((jct_ax, "JCT CDF"), (queue_ax, "queueing-delay CDF")):
        ax.set_ylabel("fraction of jobs")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="lower right", fontsize="small")
    fig.suptitle(f"{label}: all seeds pooled")
    fig.tight_layout()
    out = {f"cdf-{slug(label)}.png": _figure_png(fig)}

    fig, ax = plt.subplots(figsize=(11, 3.5))
    for preset, runs in groups.items():
        curve = utilisation_curve(runs)
        if curve is not None:
            ax.plot(curve[0] / 3600.0, curve[1] * 100.0, label=preset, linewidth=1.2)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("busy GPUs (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{label}: GPU utilisation over time (mean over seeds)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    out[f"util-{slug(label)}.png"] = _figure_png(fig)
    return out


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }
th { white-space: normal; } td .ci { display: block; color: #666; font-size: 0.8em; }
th { background: #f0f3f7; } td.name { text-align: left; font-weight: 600; }
img { max-width: 100%; display: block; margin: 1em 0; }
.note { color: #555; font-size: 0.9em; }
"""


def _cell(stat: Interval | None, unit: str) -> str:
    """A table cell: the mean, then its interval (or "1 seed") in smaller type."""
    text = format_interval(stat, unit)
    mean, _, rest = text.partition(" ")
    extra = f' <span class="ci">{html.escape(rest)}</span>' if rest else ""
    return f"<td>{html.escape(mean)}{extra}</td>"


def _table(rows: Sequence[Row], metrics: Sequence[tuple[str, str, str]], first: str) -> str:
    head = "".join(
        f"<th>{html.escape(label)}{f' ({unit})' if unit else ''}</th>" for _, label, unit in metrics
    )
    body = []
    for row in rows:
        name = row.preset if row.tenant is None else f"{row.preset} / {row.tenant}"
        cells = "".join(_cell(row.stats.get(key), unit) for key, _, unit in metrics)
        body.append(f'<tr><td class="name">{html.escape(name)}</td><td>{len(row.seeds)}</td>{cells}</tr>')
    return (
        f"<table><thead><tr><th>{first}</th><th>seeds</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def report_html(rows: Sequence[Row], runs: Runs, images: Mapping[str, Mapping[str, bytes]]) -> str:
    """The whole report: per trace its table, its tenants' table and its pictures (``images``:
    per trace, file name to PNG)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mosaic compare</title>',
        f"<style>{CSS}</style></head><body>",
        "<h1>mosaic compare</h1>",
        f'<p class="note">{len(runs.runs)} runs from {html.escape(runs.source)}. Each cell is the mean '
        "over seeds and its bootstrap 95&nbsp;% interval [low, high]; “(1 seed)”: a single seed, no "
        "interval. Times in hours, utilisation in percent.</p>",
    ]
    if runs.skipped:
        skipped = ", ".join(f"{html.escape(c)} ({html.escape(why)})" for c, why in runs.skipped)
        parts.append(f'<p class="note">Skipped {len(runs.skipped)} cells: {skipped}.</p>')
    traces = list(dict.fromkeys(r.trace for r in rows))
    for trace in traces:
        mine = [r for r in rows if r.trace == trace]
        parts.append(f"<h2>{html.escape(trace_label(trace))}</h2>")
        parts.append(f'<p class="note">trace {html.escape(trace)}</p>')
        parts.append(_table([r for r in mine if r.tenant is None], METRICS, "preset"))
        tenants = [r for r in mine if r.tenant is not None]
        if tenants:
            parts.append("<h3>Per tenant</h3>")
            parts.append(_table(tenants, TENANT_METRICS, "preset / tenant"))
        for name, png in images.get(trace, {}).items():
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_pngs(out: Path, images: Mapping[str, Mapping[str, bytes]]) -> list[Path]:
    from slurm_plugin.files import write_atomic

    written = []
    for per_trace in images.values():
        for name, png in per_trace.items():
            write_atomic(out / name, png)
            written.append(out / name)
    return written
