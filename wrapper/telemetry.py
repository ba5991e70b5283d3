"""Resource telemetry for heartbeats: CPU and memory (psutil), GPUs (pynvml) where there are any.

No GPU, no NVIDIA driver or no ``nvidia-ml-py`` installed all mean the same thing: the
``gpus`` key is left out. Telemetry must never stop a training job, so NVML failures are
treated as "no GPU" rather than raised.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

_GB = 1024.0**3


class Telemetry:
    """Samples this process (with its children) and the node; ``sample()`` is cheap."""

    def __init__(self, pid: int | None = None) -> None:
        self._process = psutil.Process(pid or os.getpid())
        self._seen: dict[tuple[int, float], float] = {}
        self._last = (time.monotonic(), self.cpu_seconds())
        self._nvml = _nvml_handles()

    def cpu_seconds(self) -> float:
        """CPU seconds used by this process and its descendants (DataLoader workers, pools)
        since this object was made: the processes alive now, plus what exited ones had
        used when last seen (a worker that ends between two samples loses only its last
        moments; psutil's ``children_user`` is not added, it would count those twice)."""
        try:
            processes = [self._process, *self._process.children(recursive=True)]
        except psutil.Error:
            processes = [self._process]
        for process in processes:
            try:
                times = process.cpu_times()
                key = (process.pid, process.create_time())  # a reused pid is another process
            except psutil.Error:
                continue
            self._seen[key] = times.user + times.system
        return sum(self._seen.values())

    def _cpu_percent(self) -> float:
        """Percent of one core used by the process tree since the previous sample."""
        now, used = time.monotonic(), self.cpu_seconds()
        then, before = self._last
        self._last = (now, used)
        return round(100.0 * max(0.0, used - before) / (now - then), 1) if now > then else 0.0

    def sample(self) -> dict[str, Any]:
        memory = psutil.virtual_memory()
        record: dict[str, Any] = {
            "cpu_percent": self._cpu_percent(),
            "rss_gb": round(self._process.memory_info().rss / _GB, 4),
            "node_cpu_percent": psutil.cpu_percent(None),
            "node_mem_used_gb": round((memory.total - memory.available) / _GB, 3),
            "node_mem_total_gb": round(memory.total / _GB, 3),
        }
        gpus = self._gpus()
        if gpus:
            record["gpus"] = gpus
        return record

    def _gpus(self) -> list[dict[str, Any]]:
        if not self._nvml:
            return []
        import pynvml

        out = []
        try:
            for index, handle in self._nvml:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle)
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
                out.append(
                    {
                        "index": index,
                        "util_percent": util.gpu,
                        "mem_used_gb": round(mem.used / _GB, 3),
                        "mem_total_gb": round(mem.total / _GB, 3),
                    }
                )
        except pynvml.NVMLError:
            return []
        return out


def _nvml_handles() -> list[tuple[int, Any]]:
    """(index, handle) of the GPUs this job sees; empty without NVML or GPUs."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    indices: list[int] = list(range(count))
    if visible is not None:  # "" hides every GPU; UUIDs (not indices) are read as "all"
        parts = [v.strip() for v in visible.split(",") if v.strip()]
        indices = [int(v) for v in parts] if all(v.isdigit() for v in parts) else indices
    return [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices if i < count]
