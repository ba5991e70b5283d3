"""``mosaic compare``: presets side by side over seeds, from a sweep or from sim runs."""

from __future__ import annotations

import argparse
import logging
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from slurm_plugin.cli.plot import can_plot
from slurm_plugin.compare import METRICS, Row, Runs, format_interval, group, load, summarise, summary_csv
from slurm_plugin.compare import trace_label as label_of
from slurm_plugin.files import write_atomic

log = logging.getLogger(__name__)

# The stdout table's columns (all of them are in summary.csv and report.html).
SHORT = ("avg_jct_s", "p99_jct_s", "avg_queue_s", "gpu_util", "restarts")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "compare",
        parents=[common],
        help="compare presets over seeds (a sweep directory or sim runs)",
        description="Per preset and trace: the mean over seeds and a bootstrap 95% interval of JCT "
        "(average, p50, p99), queueing delay, makespan, GPU utilisation and restarts, also per "
        "tenant; JCT and queueing-delay CDFs and utilisation over time. Reads one `mosaic sweep` "
        "directory or several `mosaic sim --out` directories. Writes summary.csv, PNGs and one "
        "self-contained report.html.",
    )
    p.add_argument("runs", nargs="+", metavar="DIR|RUN", help="a sweep directory, or sim output directories")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="where to write (default: DIR/compare for a sweep directory, ./compare for runs)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.runs]
    runs = load(paths)
    for cell, why in runs.skipped:
        log.warning("skipped %s: %s", cell, why)
    out = Path(args.out) if args.out else (paths[0] / "compare" if len(paths) == 1 else Path("compare"))
    groups = group(runs.runs)
    rows = summarise(groups)
    write_atomic(out / "summary.csv", summary_csv(rows))
    written = [out / "summary.csv"]
    images: dict[str, dict[str, bytes]] = {}
    if can_plot(out / "report.html"):
        from slurm_plugin.compare_report import trace_pngs, write_pngs

        by_trace: dict[str, dict[str, list]] = defaultdict(dict)  # type: ignore[type-arg]
        for (trace, preset), members in groups.items():
            by_trace[trace][preset] = members
        images = {trace: trace_pngs(trace, presets) for trace, presets in by_trace.items()}
        written += write_pngs(out, images)
    from slurm_plugin.compare_report import report_html

    write_atomic(out / "report.html", report_html(rows, runs, images))
    written.append(out / "report.html")
    print(format_table(rows, runs))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def format_table(rows: Sequence[Row], runs: Runs) -> str:
    """Per trace, one line per preset: the :data:`SHORT` metrics as ``mean [low, high]``."""
    units = {key: (label, unit) for key, label, unit in METRICS}
    headers = ["preset", "seeds"] + [
        f"{units[k][0]}{f' ({units[k][1]})' if units[k][1] else ''}" for k in SHORT
    ]
    lines: list[str] = []
    for trace in dict.fromkeys(r.trace for r in rows):
        table = [headers]
        for row in rows:
            if row.trace == trace and row.tenant is None:
                table.append(
                    [row.preset, str(len(row.seeds))]
                    + [format_interval(row.stats.get(k), units[k][1]) for k in SHORT]
                )
        widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
        lines.append(f"{label_of(trace)}  (mean over seeds [bootstrap 95% interval])")
        for line in table:
            lines.append(
                "  ".join(
                    cell.ljust(w) if i == 0 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(line, widths, strict=True))
                )
            )
        lines.append("")
    if runs.skipped:
        lines.append(
            f"skipped {len(runs.skipped)} cells: " + ", ".join(f"{c} ({w})" for c, w in runs.skipped)
        )
    return "\n".join(lines).rstrip("\n")
