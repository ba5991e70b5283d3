"""``mosaic demo``: a small trace of emulated jobs through the whole live path.

Brings up a private test cluster (with accounting), submits the bundled trace's jobs
through ``mosaic submit`` at their (time-compressed) arrival times, runs the controller
one tick per round until every job has finished, reads what happened back from
``sacct`` (``mosaic report``'s code) and tears the cluster down. It also simulates the
same trace with the same scheduler and round length, so the two summaries can be put
side by side (``mosaic sim``'s keys both).

Times: the trace is in emulated seconds; ``time_scale`` emulated seconds pass per real
second (the emulated jobs advance that fast), so every time in the summaries is real
seconds and the simulation runs on the trace divided by ``time_scale``.

Speed: each emulated job advances at the simulator's speed (:class:`planner.sim.progress.SpeedModel`)
for its model on the resources Slurm gave it, read inside the job; the demo writes the
test cluster's shape as a cluster TOML next to the job scripts (``scripts/cluster.toml``)
and passes it, with the model, on the job's ``emulate`` command line. So a job the
controller gives fewer CPUs, less memory, another GPU type, a plan with gradient
accumulation or a GPU partner runs live as much slower as the simulator says.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from planner.cluster import cluster_from_toml
from planner.config import SchedulerConfig, build_scheduler
from planner.core.errors import TraceError
from planner.sim import SimConfig, Simulator
from planner.traces.csvio import parse_trace
from planner.traces.records import TraceJob
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.directives import encode_comment
from slurm_plugin.report import Report, build_report, shards_per_gpu_by_node, summary
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import ClusterShape, shape_named

log = logging.getLogger(__name__)

# (id, arrival s, GPUs, duration s, model), emulated seconds: a burst that overfills the
# 16-GPU cluster, so the scheduler has to order, preempt and pack jobs onto nodes.
BUNDLED_TRACE: tuple[tuple[str, float, int, float, str], ...] = (
    ("d1", 0, 4, 900, "resnet50"),
    ("d2", 0, 2, 600, "resnet18"),
    ("d3", 30, 4, 1200, "transformer"),
    ("d4", 60, 1, 300, "lstm"),
    ("d5", 60, 4, 600, "vgg19"),
    ("d6", 120, 2, 900, "gnmt"),
    ("d7", 180, 4, 300, "resnet50"),
    ("d8", 240, 1, 600, "dcgan"),
    ("d9", 300, 2, 300, "bert"),
    ("d10", 360, 4, 600, "resnet18"),
)


# The fidelity trace (24 jobs, the requirement's ">= 20 emulated jobs on >= 16 fake GPUs"),
# written by hand, deterministically: the ten demo jobs' GPU counts (4, 2, 4, 1, 4, 2, 4, 1, 2,
# 4) and models cycle with durations 300-1,200 emulated s in 150 s steps; arrivals every 30 s
# for the first 300 s, then every 60 s up to 960 s. 39,000 GPU-seconds in all, so the 16 GPUs
# stay contended (>= 2,440 s of full-cluster work against arrivals over 16 minutes).
FIDELITY_TRACE: tuple[tuple[str, float, int, float, str], ...] = (
    ("e1", 0, 4, 900, "resnet50"),
    ("e2", 0, 2, 600, "resnet18"),
    ("e3", 0, 4, 1200, "transformer"),
    ("e4", 30, 1, 300, "lstm"),
    ("e5", 60, 4, 600, "vgg19"),
    ("e6", 90, 2, 900, "gnmt"),
    ("e7", 120, 4, 300, "resnet50"),
    ("e8", 150, 1, 600, "dcgan"),
    ("e9", 180, 2, 300, "bert"),
    ("e10", 210, 4, 600, "resnet18"),
    ("e11", 240, 1, 1200, "lstm"),
    ("e12", 270, 2, 450, "transformer"),
    ("e13", 300, 4, 750, "vgg19"),
    ("e14", 360, 1, 450, "dcgan"),
    ("e15", 420, 2, 1050, "gnmt"),
    ("e16", 480, 4, 450, "bert"),
    ("e17", 540, 1, 900, "resnet50"),
    ("e18", 600, 2, 300, "resnet18"),
    ("e19", 660, 4, 900, "transformer"),
    ("e20", 720, 1, 750, "lstm"),
    ("e21", 780, 2, 600, "vgg19"),
    ("e22", 840, 4, 300, "dcgan"),
    ("e23", 900, 1, 600, "gnmt"),
    ("e24", 960, 2, 900, "bert"),
)

# Named traces for ``--trace`` (anything else is a trace CSV path).
NAMED_TRACES = {"demo": BUNDLED_TRACE, "fidelity24": FIDELITY_TRACE}


LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"})


def bundled_trace(name: str = "demo") -> list[TraceJob]:
    return [TraceJob(j, float(t), g, float(d), m) for j, t, g, d, m in NAMED_TRACES[name]]


def load_trace(spec: str) -> list[TraceJob]:
    """A named bundled trace (``demo``, ``fidelity24``) or a trace CSV (docs/reference.md "Trace CSV")."""
    if spec in NAMED_TRACES:
        return bundled_trace(spec)
    path = Path(spec)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(
            f"--trace {spec!r}: neither a bundled trace ({', '.join(NAMED_TRACES)}) nor a readable "
            f"trace CSV ({exc.strerror})"
        ) from exc
    jobs = list(parse_trace(text, source=str(path)))
    if not jobs:
        raise TraceError(f"{path}: the trace has no jobs")
    return jobs


@dataclass(frozen=True)
class DemoResult:
    live: dict[str, Any]
    sim: dict[str, Any]
    report: Report
    slurm_ids: dict[str, str]


def _script(directory: Path, job: TraceJob, time_scale: float, python: str, cluster_file: Path) -> Path:
    """The job's batch script: the emulated job runs at the simulator's speed for the model on
    whatever Slurm gives it (``--model``, ``--cluster``: :mod:`slurm_plugin.emulate_speed`)."""
    path = directory / f"{job.job_id}.sh"
    speed_args = f"--model {shlex.quote(job.model)} --cluster {shlex.quote(str(cluster_file))}"
    if job.batch_size is not None:
        speed_args += f" --batch-size {job.batch_size}"
    if job.gpu_type is not None:
        speed_args += f" --gpu-type {shlex.quote(job.gpu_type)}"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J {job.job_id} --gres=gpu:{job.num_gpus} -c {job.num_gpus} --mem={job.num_gpus}G\n"
        "#SBATCH -o /dev/null\n"
        f"#MOSAIC --model {job.model} --duration-s {job.duration_s / time_scale:g}\n"
        "trap '' USR1  # until the job's own handler is installed, a checkpoint signal must not kill it\n"
        f"exec {python} -m slurm_plugin.emulate --duration-s {job.duration_s:g} --time-scale {time_scale:g} "
        f"{speed_args}\n"
    )
    return path


def shape_toml(shape: ClusterShape) -> str:
    """The test cluster as a cluster TOML (the simulator's nodes and the emulated jobs' node shapes)."""
    return "\n".join(
        f'[[nodes]]\ncount = {g.count}\ngpus = {g.gpus}\ngpu_type = "{g.gpu_type}"\n'
        f'cpus = {g.cpus}\nmem_gb = {g.mem_gb}\nname_prefix = "{g.prefix}"\n'
        for g in shape.groups
    )


def run_demo(
    root: Path,
    scheduler_config: SchedulerConfig,
    *,
    python: str,
    trace: Sequence[TraceJob] | None = None,
    time_scale: float = 60.0,
    round_s: float = 2.0,
    shape: ClusterShape | None = None,
    timeout_s: float = 600.0,
    trace_name: str = "bundled demo trace",
    on_tick: Callable[[float, int, int], None] | None = None,
) -> DemoResult:
    """Run the trace live (``round_s`` real seconds per round), then simulate it."""
    jobs = sorted(trace if trace is not None else bundled_trace(), key=lambda j: j.submit_time_s)
    shape = shape or shape_named("homogeneous", accounting=True)
    cluster = lifecycle.up(shape, root / "cluster")
    # A fresh cluster numbers jobs from 1 again: an old spool would hand the new jobs the
    # old jobs' plans and checkpoints.
    shutil.rmtree(root / "spool", ignore_errors=True)
    try:
        config = ControllerConfig(
            spool_dir=root / "spool",
            slurm_conf=str(cluster.layout.conf),
            round_s=round_s,
            checkpoint_grace_s=5.0,
            stop_timeout_s=30.0,
            max_restarts_per_hour=1000,
        )
        client = CliSlurm(config.slurm_env)
        scheduler = build_scheduler(scheduler_config)
        quotas = {t.name: float(t.gpu_quota) for t in scheduler_config.tenants}
        controller = Controller(client, Store(config.store_path), config, scheduler, quotas=quotas)
        scripts = root / "scripts"
        scripts.mkdir(parents=True, exist_ok=True)
        cluster_file = scripts / "cluster.toml"
        cluster_file.write_text(shape_toml(shape))
        started = time.time()
        since = datetime.fromtimestamp(started - 1).strftime("%Y-%m-%dT%H:%M:%S")
        slurm_ids: dict[str, str] = {}
        queue = list(jobs)

        def submit_arrivals(now: float) -> None:
            while queue and queue[0].submit_time_s / time_scale <= now - started:
                job = queue.pop(0)
                script = _script(scripts, job, time_scale, python, cluster_file)
                meta = {"model": job.model, "duration_s": job.duration_s / time_scale}
                env = {"MOSAIC_SPOOL": str(config.spool_dir)}
                slurm_ids[job.job_id] = client.submit(str(script), [], encode_comment(meta), env)

        def finished() -> bool:
            states = {j.id: j.state for j in client.jobs()}
            done = sum(1 for s in slurm_ids.values() if states.get(s) == "COMPLETED")
            ended = sum(1 for s in slurm_ids.values() if states.get(s, "GONE") not in LIVE_STATES)
            elapsed = time.time() - started
            if on_tick is not None:
                on_tick(elapsed, done, len(jobs))
            if not queue and ended == len(jobs):
                if done < len(jobs):
                    log.warning("demo: %d of %d jobs did not complete", len(jobs) - done, len(jobs))
                return True
            if elapsed > timeout_s:
                log.warning(
                    "demo: %d of %d jobs unfinished after %g s", len(jobs) - done, len(jobs), timeout_s
                )
                return True
            return False

        # The controller's own loop, one round every round_s, as `mosaic controller` runs it.
        controller.run_forever(before_tick=submit_arrivals, done=finished)
        end = time.time()
        rows = _wait_for_accounting(client, since, len(jobs))
        nodes = [n for n in client.nodes() if "gpu" in n.partitions]
        report = build_report(rows, config.partitions, end, shards_per_gpu_by_node(nodes))
        decisions = Store(config.store_path).decision_times()
        live = summary(
            report,
            cluster_gpus=sum(n.gpus for n in nodes),
            cluster_cpus=sum(n.cpus for n in nodes),
            decision_times_s=decisions,
            end_time_s=end,
        )
    finally:
        lifecycle.down(root / "cluster")
    live.update(
        scheduler=scheduler.name,
        trace=trace_name,
        time_scale=time_scale,
        round_s=round_s,
        rounds=len(decisions),  # rounds the controller planned (a slow tick plans fewer than the clock's)
    )
    # The simulation gets the live run's limit too: a schedule that never finishes (a job
    # restarted every round makes no progress) ends at the same bound, with ``finished`` short.
    sim = simulate(jobs, shape, scheduler_config, time_scale, round_s, horizon_s=timeout_s)
    return DemoResult(live, sim, report, slurm_ids)


def _wait_for_accounting(
    client: CliSlurm, since: str, expected: int, timeout_s: float = 30.0
) -> list[dict[str, str]]:
    """sacct rows once every job's final run reached the database (slurmdbd is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        rows = client.sacct_runs(since, None)
        final = {
            r["JobID"] for r in rows if r.get("State", "").split(" ")[0] not in LIVE_STATES | {"REQUEUED"}
        }
        if len(final) >= expected:
            break
        time.sleep(0.5)
    return rows


def simulate(
    jobs: Sequence[TraceJob],
    shape: ClusterShape,
    scheduler_config: SchedulerConfig,
    time_scale: float,
    round_s: float,
    restart_s: float = 2.0,
    horizon_s: float | None = None,
) -> dict[str, Any]:
    """The same trace in the simulator, in real seconds (divided by ``time_scale``).

    ``restart_s`` is the live path's stop-to-running time (checkpoint + requeue +
    relaunch, ~2 s on the test cluster).
    """
    nodes = cluster_from_toml(shape_toml(shape), source=f"test cluster {shape.name}")
    scaled = [
        replace(j, submit_time_s=j.submit_time_s / time_scale, duration_s=j.duration_s / time_scale)
        for j in jobs
    ]
    config = SimConfig(round_s=round_s, checkpoint_s=0.0, relaunch_s=restart_s, horizon_s=horizon_s)
    scheduler = build_scheduler(scheduler_config)
    result = Simulator(nodes, scaled, scheduler, config, clock=time.perf_counter).run()
    return {
        **result.summary,
        "gpus": sum(n.gpus for n in nodes),
        "round_s": round_s,
        "restart_cost_s": restart_s,
        "rounds": len(result.decision_times_s),
    }
