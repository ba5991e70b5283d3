"""An emulated training job: runs under Slurm like a real one, without a GPU.

``mosaic emulate --duration-s D [--time-scale F]`` advances ``progress`` from 0 to 1 in
``D`` emulated seconds at its reference allocation (``D / F`` real seconds), checkpoints
its progress when the controller's checkpoint signal arrives (and answers with the
checkpoint marker the controller waits for), resumes from that checkpoint after a
requeue (``--exit-on-checkpoint``: it exits after the checkpoint, as ``mosaic-run``
does, and the controller requeues the finished job), and exits 0 when done. It speaks
the job side of the plan-file protocol (:mod:`slurm_plugin.planfile`): heartbeats with
``progress`` in
``<spool>/status/<job>/heartbeat.jsonl``, the marker ``checkpoint.json`` there.

Its first heartbeat records what Slurm gave it (``CUDA_VISIBLE_DEVICES``,
``SLURM_CPUS_ON_NODE``, ``SLURM_MEM_PER_NODE``, the node), which is how the integration
tests check from inside the job that it runs with exactly the planned resources.

Speed, with ``--model M --cluster FILE`` (what ``mosaic demo`` passes): the simulator's
:class:`planner.sim.progress.SpeedModel` for the assignment Slurm gave the job, so a
trace runs live at the pace ``mosaic sim`` assumes (GPU type, Synergy CPU/memory
sensitivity, gradient accumulation in the plan, co-location). The assignment is read
from inside the job (:mod:`slurm_plugin.emulate_speed`): nodes from
``SLURM_JOB_NODELIST``, GPUs from ``SLURM_JOB_GPUS``/``CUDA_VISIBLE_DEVICES``, CPUs and
memory from ``SLURM_CPUS_ON_NODE``/``SLURM_MEM_PER_NODE``, the execution plan and GPU
partners from the job's plan file; the node shapes from the cluster TOML. ``--duration-s``
is then the run time at the reference allocation, as a trace's ``duration_s``. The speed
is computed once per run (a new plan means a requeue, hence a new run). The planner's
imports take about a second; the job installs its signal handlers first and counts
progress from its own start, so that second does not stretch the emulated run.

Without ``--model``/``--cluster``: 1.0 at the GPU count the job asked for; with another
GPU count it scales linearly (``--scaling linear``, the emulated job is perfectly data
parallel) or not at all (``--scaling none``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from wrapper.atomic import write_atomic  # imports nothing heavy either

# The job side imports nothing heavy (no planner, numpy or scipy): it starts in a tenth
# of a second, so a checkpoint signal rarely finds it without its handler, and the
# emulated run time is not stretched by start-up. The file names are the plan-file
# protocol's (:mod:`slurm_plugin.planfile`; docs/user-guide.md "Status directory").
HEARTBEATS = "heartbeat.jsonl"
CHECKPOINT_MARKER = "checkpoint.json"

STATE_FILE = "emulator.json"  # the emulated checkpoint: progress so far
ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_GPUS",
    "SLURM_CPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURMD_NODENAME",
    "SLURM_JOB_NODELIST",
    "SLURM_RESTART_COUNT",
)


class EmulatedJob:
    def __init__(
        self,
        job_id: str,
        spool: Path,
        duration_s: float,
        time_scale: float,
        requested_gpus: int,
        scaling: str = "linear",
        clock: Any = time.monotonic,
        exit_on_checkpoint: bool = False,
    ) -> None:
        self.exit_on_checkpoint = exit_on_checkpoint
        self.job_id = job_id
        self.spool = spool
        self.status = spool / "status" / job_id
        self.duration_s = duration_s
        self.time_scale = time_scale
        self.requested_gpus = requested_gpus
        self.scaling = scaling
        self.clock = clock
        self.progress = self._load()
        self.checkpoint_requested = False
        self.terminate = False

    def _load(self) -> float:
        try:
            value = json.loads((self.status / STATE_FILE).read_text()).get("progress", 0.0)
        except (OSError, json.JSONDecodeError, AttributeError):
            return 0.0
        return float(value) if isinstance(value, int | float) else 0.0

    def speed(self, gpus: int) -> float:
        if self.scaling == "none" or gpus <= 0:
            return 1.0
        return gpus / self.requested_gpus

    def heartbeat(self, event: str, extra: Mapping[str, Any] | None = None) -> None:
        record = {"event": event, "time": time.time(), "job_id": self.job_id, "progress": self.progress}
        record.update(extra or {})
        self.status.mkdir(parents=True, exist_ok=True)
        with open(self.status / HEARTBEATS, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def checkpoint(self) -> None:
        write_atomic(self.status / STATE_FILE, json.dumps({"progress": self.progress}) + "\n", parents=False)
        marker = {"job_id": self.job_id, "time": time.time(), "progress": self.progress}
        write_atomic(self.status / CHECKPOINT_MARKER, json.dumps(marker) + "\n", parents=False)
        self.heartbeat("checkpoint")

    def run(
        self,
        env: Mapping[str, str],
        gpus: int,
        tick_s: float = 0.1,
        speed: float | None = None,
        started: float | None = None,
    ) -> int:
        """Run to the end; ``speed`` overrides the GPU-count rule, progress counts from ``started``."""
        speed = self.speed(gpus) if speed is None else speed
        self.heartbeat("start", {"env": {k: env.get(k) for k in ENV_KEYS}, "gpus": gpus, "speed": speed})
        rate = speed * self.time_scale / self.duration_s  # progress per real second
        last = self.clock() if started is None else started
        last_beat = last
        while self.progress < 1.0:
            if self.checkpoint_requested:
                self.checkpoint_requested = False
                self.checkpoint()
                if self.exit_on_checkpoint:
                    return 0  # as mosaic-run does: the controller requeues the finished job
                while not self.terminate:  # or stay up until the requeue's SIGTERM
                    time.sleep(tick_s)
            if self.terminate:
                self.checkpoint()
                return 143
            time.sleep(tick_s)
            now = self.clock()
            self.progress = min(1.0, self.progress + (now - last) * rate)
            last = now
            if now - last_beat >= 1.0:
                self.heartbeat("heartbeat")
                last_beat = now
        self.checkpoint()
        self.heartbeat("done")
        return 0

    def install_handlers(self, checkpoint_signal: int = signal.SIGUSR1) -> None:
        def on_checkpoint(signum: int, frame: FrameType | None) -> None:
            self.checkpoint_requested = True

        def on_term(signum: int, frame: FrameType | None) -> None:
            self.terminate = True

        signal.signal(checkpoint_signal, on_checkpoint)
        signal.signal(signal.SIGTERM, on_term)


def gpus_in(env: Mapping[str, str]) -> int:
    devices = env.get("CUDA_VISIBLE_DEVICES") or ""
    return len([d for d in devices.split(",") if d.strip()])


def main(
    duration_s: float,
    time_scale: float,
    scaling: str,
    requested_gpus: int | None,
    exit_on_checkpoint: bool = False,
    model: str | None = None,
    cluster_file: str | None = None,
    batch_size: int | None = None,
    gpu_type: str | None = None,
) -> int:
    started = time.monotonic()
    env = dict(os.environ)
    job_id = env.get("SLURM_JOB_ID") or "local"
    spool = Path(env.get("MOSAIC_SPOOL") or "/var/spool/mosaic")
    gpus = gpus_in(env)
    job = EmulatedJob(
        job_id,
        spool,
        duration_s,
        time_scale,
        requested_gpus or max(1, gpus),
        scaling,
        exit_on_checkpoint=exit_on_checkpoint,
    )
    job.install_handlers()  # before the planner's imports: a checkpoint signal only sets a flag
    speed = None
    if model is not None or cluster_file is not None:
        if model is None or cluster_file is None:
            raise SystemExit("mosaic emulate: --model and --cluster go together (the speed model needs both)")
        from planner.traces.records import TraceJob
        from slurm_plugin import emulate_speed

        trace_job = TraceJob(job_id, 0.0, max(1, gpus), duration_s, model, batch_size, gpu_type=gpu_type)
        emulate_speed.write_identity(job.status, trace_job)
        speed, _ = emulate_speed.job_speed(
            env, spool, trace_job, emulate_speed.nodes_from_cluster_file(cluster_file), None, requested_gpus
        )
    return job.run(env, gpus, speed=speed, started=started)


def add_arguments(parser: Any) -> None:
    """The options of ``mosaic emulate`` and ``python -m slurm_plugin.emulate``."""
    parser.add_argument("--duration-s", type=float, required=True, help="emulated run time (see --model)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="emulated seconds per real second")
    parser.add_argument("--scaling", choices=("linear", "none"), default="linear")
    parser.add_argument("--requested-gpus", type=int, help="the GPU count --duration-s refers to")
    parser.add_argument(
        "--exit-on-checkpoint", action="store_true", help="exit after the checkpoint (as mosaic-run does)"
    )
    parser.add_argument(
        "--model",
        help="run at the simulator's speed for this model on the job's Slurm resources "
        "(--duration-s is then the run time at the reference allocation; needs --cluster)",
    )
    parser.add_argument("--cluster", dest="cluster_file", help="cluster TOML naming the job's nodes' shapes")
    parser.add_argument("--batch-size", type=int, help="global batch size (the profile's, when omitted)")
    parser.add_argument("--gpu-type", help="GPU type --duration-s was measured on (any, when omitted)")


def main_from_args(a: Any) -> int:
    return main(
        a.duration_s,
        a.time_scale,
        a.scaling,
        a.requested_gpus,
        a.exit_on_checkpoint,
        a.model,
        a.cluster_file,
        a.batch_size,
        a.gpu_type,
    )


if __name__ == "__main__":
    # ``python -m slurm_plugin.emulate --duration-s D [--time-scale F] [--exit-on-checkpoint]
    # [--model M --cluster FILE]``: the fast entry for job scripts (``mosaic emulate`` loads the
    # whole CLI first).
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m slurm_plugin.emulate")
    add_arguments(parser)
    sys.exit(main_from_args(parser.parse_args()))
