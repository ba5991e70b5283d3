"""The simulator's picture: cluster occupancy over time and the JCT distribution."""

from __future__ import annotations

import importlib.util
import io
import logging
from pathlib import Path
from typing import Any

from planner.sim import SimResult
from slurm_plugin.files import write_atomic

log = logging.getLogger(__name__)


def can_plot(path: Path) -> bool:
    """Is matplotlib there (the ``plots`` extra)? Without it the plot is skipped, with a word."""
    if importlib.util.find_spec("matplotlib") is not None:
        return True
    log.warning("%s not written: matplotlib is not installed (pip install 'slurm-mosaic[plots]')", path)
    return False


def save_png(fig: Any, path: Path, dpi: int) -> None:
    """Render ``fig`` as PNG into ``path`` atomically, and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    write_atomic(path, buffer.getvalue())


def write_sim_plot(result: SimResult, path: Path, title: str, total_gpus: int) -> None:
    if not can_plot(path):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (occupancy, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    if result.timeline:
        hours = np.array([p.time_s for p in result.timeline]) / 3600.0
        occupancy.step(hours, [p.busy_gpus for p in result.timeline], where="post", label="busy GPUs")
        occupancy.step(hours, [p.pending for p in result.timeline], where="post", label="waiting jobs")
        occupancy.axhline(total_gpus, color="grey", linestyle=":", label=f"{total_gpus} GPUs")
    occupancy.set_xlabel("time (h)")
    occupancy.set_title("cluster over time")
    occupancy.legend(loc="upper right")
    jcts = np.sort([r.jct_s for r in result.records if r.jct_s is not None]) / 3600.0
    if len(jcts):
        cdf.plot(jcts, np.arange(1, len(jcts) + 1) / len(jcts))
        cdf.set_xscale("log")
    cdf.set_xlabel("job completion time (h)")
    cdf.set_ylabel("fraction of finished jobs")
    cdf.set_title("JCT CDF")
    fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path, dpi=110)
