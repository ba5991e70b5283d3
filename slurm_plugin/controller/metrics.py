"""Prometheus text-format metrics, rewritten atomically after every tick.

Point node_exporter's textfile collector (or any scraper of files) at the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurm_plugin.files import write_atomic
from slurm_plugin.store import Store

if TYPE_CHECKING:
    from slurm_plugin.controller.loop import TickReport


def render(store: Store, report: TickReport) -> str:
    ticks, failed = store.tick_counts()
    done = len(report.result.done) if report.result else 0
    skipped = len(report.result.skipped) if report.result else 0
    failed_actions = len(report.result.failed) if report.result else 0
    lines = [
        "# HELP mosaic_ticks_total Controller ticks since the state store was created.",
        "# TYPE mosaic_ticks_total counter",
        f"mosaic_ticks_total {ticks}",
        "# HELP mosaic_tick_failures_total Ticks that could not read Slurm or failed.",
        "# TYPE mosaic_tick_failures_total counter",
        f"mosaic_tick_failures_total {failed}",
        "# HELP mosaic_last_tick_ok 1 when the last tick observed Slurm and applied its round.",
        "# TYPE mosaic_last_tick_ok gauge",
        f"mosaic_last_tick_ok {int(report.ok)}",
        "# HELP mosaic_last_tick_timestamp_seconds When the last tick started.",
        "# TYPE mosaic_last_tick_timestamp_seconds gauge",
        f"mosaic_last_tick_timestamp_seconds {report.time_s:.3f}",
        "# HELP mosaic_managed_jobs Jobs pending or running in the managed partitions.",
        "# TYPE mosaic_managed_jobs gauge",
        f"mosaic_managed_jobs {report.jobs}",
        "# HELP mosaic_round_actions Actions of the last round by outcome.",
        "# TYPE mosaic_round_actions gauge",
        f'mosaic_round_actions{{outcome="done"}} {done}',
        f'mosaic_round_actions{{outcome="skipped"}} {skipped}',
        f'mosaic_round_actions{{outcome="failed"}} {failed_actions}',
    ]
    if report.decision_time_s is not None:
        lines += [
            "# HELP mosaic_decision_seconds Planner time of the last round.",
            "# TYPE mosaic_decision_seconds gauge",
            f"mosaic_decision_seconds {report.decision_time_s:.6f}",
        ]
    return "\n".join(lines) + "\n"


def write(path: Path, store: Store, report: TickReport) -> None:
    write_atomic(path, render(store, report))
