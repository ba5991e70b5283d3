"""The closed loop on a live Slurm test cluster: measure, decide, run.

1. ``mosaic profile`` measures the two CPU examples (``image-cnn``: JPEG decode and
   augmentation in one loader worker per CPU; ``text-transformer``: one torch thread) under
   ``srun`` on the cluster's unmanaged ``other`` partition, at the CPU counts the runs can be
   pinned to (this machine's cores).
2. Their batch scripts (``contrib/examples/image_cnn.sh``, ``text_transformer.sh``; their
   ``#MOSAIC --model`` names the profiled models) are submitted together with ``mosaic
   submit``, and ``mosaic controller --scheduler synergy-tune --profiles IMAGE.json
   --profiles TEXT.json`` runs them to the end: ``STEPS`` optimizer steps each. Every second
   the benchmark records the CPUs Slurm gave each job (``squeue``), and afterwards each job's
   heartbeats (``samples_per_s`` and the CPUs the job saw) and its JCT (submission to
   ``COMPLETED``, from this process's clock, polled every 0.5 s).
3. The same pair under ``synergy-proportional``, on the same profiles.

What "CPUs" are here: the test cluster's nodes are ``slurmd`` processes on this machine
with a configured CPU count (``CPUs=`` in ``slurm.conf``) and ``TaskPlugin=task/none``, so
Slurm binds nothing: a "CPU" is a unit Slurm allocates, and a job turns its count into
processes (``image-cnn`` starts one loader worker per CPU, at most the cores it may run
on; the language job computes on one thread whatever it gets). A profile run is pinned to
C of this machine's cores, so C is at most 2 here. The homogeneous shape's nodes have 16
CPUs for 4 GPUs: a proportional share of 4 CPUs per GPU, beyond any measured point, so
Synergy-Tune has nothing to give there. The benchmark runs the one-node shape
``cpu-scarce`` (``mosaic testcluster up --shape cpu-scarce``): 4 GPUs, 4 CPUs and 128 GB,
a share of 1 CPU and 32 GB per GPU, so a measured gain from 1 to 2 CPUs is worth a CPU
beyond the share (and 32 GB holds the 20.83 GB of Synergy's smallest memory grid point,
which a profile's demand asks for). Both jobs share that node, and this machine's 2 cores
with whatever else runs on it: the load average is recorded before and after each part.

    .venv/bin/python -m benchmarks.soak.closed_loop --steps 500 --run-s 15 --repeats 2   # root; ~12 min

Writes ``benchmarks/results/closed_loop.json``: the commands, the profiles' curves, per
preset and job the CPU timeline, the heartbeats and the JCT, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from planner.policies.synergy.demand import best_case_per_gpu
from profiles.document import profiles_from_document
from slurm_plugin import planfile
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.store import Store
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import shape_named

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

SHAPE = "cpu-scarce"
"""One node, 4 GPUs, 4 CPUs, 128 GB: a GPU's proportional share is 1 CPU and 32 GB."""

JOBS = {
    "image-cnn": "contrib/examples/image_cnn.sh",
    "text-transformer": "contrib/examples/text_transformer.sh",
}
PRESETS = ("synergy-tune", "synergy-proportional")
DATA = Path(tempfile.gettempdir()) / "mosaic-closed-loop-data"


@dataclass(frozen=True)
class Settings:
    steps: int = 600
    cpus: str = "1,2"
    run_s: float = 15.0
    heartbeat_s: float = 1.0
    round_s: float = 3.0
    timeout_s: float = 900.0


def load_average() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _mosaic(args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "mosaic"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done


# -- 1. profiles --------------------------------------------------------------------------


def profile(cluster: lifecycle.Cluster, example: str, out: Path, data: Path, s: Settings) -> dict[str, Any]:
    """``mosaic profile --example EXAMPLE`` under srun on the cluster; its summary and command."""
    args = [
        "profile", "--example", example, "--slurm-conf", str(cluster.layout.conf), "--partition", "other",
        "--cpus", s.cpus, "--run-s", f"{s.run_s:g}", "--heartbeat-s", f"{s.heartbeat_s:g}",
        "--data-dir", str(data), "--out", str(out), "--json",
    ]  # fmt: skip
    started = time.monotonic()
    load_before = load_average()
    summary = json.loads(_mosaic(args).stdout)
    document = json.loads(out.read_text())
    model = document["models"][example]
    return {
        "command": "mosaic " + " ".join(args),
        "demand_cpus_per_gpu": demand_cpus(out, example),
        "load_before": load_before,
        "load_after": load_average(),
        "elapsed_s": round(time.monotonic() - started, 1),
        "cpu_samples_per_s": model["optimistic"]["cpu_samples_per_s"],
        "source": model.get("source"),
        "summary": summary,
    }


def demand_cpus(path: Path, model: str) -> int:
    """The CPUs per GPU Synergy asks for ``model`` by the profile in ``path``: the fewest
    reaching 95 % of its peak (``best_case_per_gpu``, the schedulers' demand rule)."""
    matrix = profiles_from_document(json.loads(path.read_text()))[model].sensitivity
    if matrix is None:
        raise ValueError(f"{path}: {model} has no CPU curve")
    return best_case_per_gpu(matrix).cpus


# -- 2./3. the pair under one preset --------------------------------------------------------


def _config(work: Path, cluster: lifecycle.Cluster, s: Settings) -> Path:
    path = work / "mosaic.toml"
    path.write_text(
        "[controller]\n"
        f'spool_dir = "{work / "spool"}"\n'
        f'slurm_conf = "{cluster.layout.conf}"\n'
        f"round_s = {s.round_s}\n"
        "checkpoint_grace_s = 20\n"
        "stop_timeout_s = 30\n"
    )
    return path


def run_pair(
    cluster: lifecycle.Cluster,
    work: Path,
    preset: str,
    profiles: Sequence[Path],
    data: Path,
    s: Settings,
) -> dict[str, Any]:
    """Submit both jobs, run ``mosaic controller`` under ``preset`` until both complete."""
    work.mkdir(parents=True)
    config = _config(work, cluster, s)
    client = CliSlurm({"SLURM_CONF": str(cluster.layout.conf)})
    job_env = _env(STEPS=str(s.steps), DATA=str(data), MOSAIC_HEARTBEAT_S=f"{s.heartbeat_s:g}")
    submitted: dict[str, tuple[str, float]] = {}
    commands = []
    for model, script in JOBS.items():
        args = ["submit", "--config", str(config), script, "--", f"--chdir={work}"]
        job_id = _mosaic(args, env=job_env).stdout.strip()
        submitted[model] = (job_id, time.time())
        commands.append(
            f"STEPS={s.steps} DATA={data} MOSAIC_HEARTBEAT_S={s.heartbeat_s:g} mosaic " + " ".join(args)
        )
    controller_args = ["controller", "--config", str(config), "--scheduler", preset]
    for p in profiles:
        controller_args += ["--profiles", str(p)]
    commands.append("mosaic " + " ".join(controller_args))
    log_file = (work / "controller.log").open("w")
    controller = subprocess.Popen(
        [str(BIN / "mosaic"), *controller_args],
        cwd=ROOT,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    load_before = load_average()
    timeline: dict[str, list[dict[str, Any]]] = {m: [] for m in JOBS}
    finished: dict[str, float] = {}
    states: dict[str, str] = {}
    deadline = time.monotonic() + s.timeout_s
    try:
        while len(finished) < len(JOBS):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{preset}: jobs not done after {s.timeout_s:g} s: {states}")
            if controller.poll() is not None:
                raise RuntimeError(
                    f"{preset}: the controller exited {controller.returncode} (see {log_file.name})"
                )
            now = time.time()
            queue: dict[str, SlurmJob] = {j.id: j for j in client.jobs()}
            for model, (job_id, _) in submitted.items():
                job = queue.get(job_id)
                state = job.state if job is not None else "GONE"
                states[model] = state
                if job is not None and state == "RUNNING":
                    entry = {"t": round(now, 2), "cpus": job.cpus, "nodes": list(job.nodes)}
                    last = timeline[model][-1] if timeline[model] else None
                    if last is None or last["cpus"] != job.cpus:
                        timeline[model].append(entry)
                # COMPLETED alone is not the end: a job the controller stops exits after its
                # checkpoint (COMPLETED) until the requeue; the last step's heartbeat is.
                if model not in finished and state == "COMPLETED" and _last_step(work, job_id) >= s.steps:
                    finished[model] = now
                elif state in {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}:
                    raise RuntimeError(f"{preset}: job {job_id} ({model}) ended {state}; see {work}")
            time.sleep(0.5)
    finally:
        controller.send_signal(signal.SIGTERM)
        try:
            controller.wait(timeout=30)
        except subprocess.TimeoutExpired:
            controller.kill()
            controller.wait()
        log_file.close()
    jobs: dict[str, Any] = {}
    for model, (job_id, submit_t) in submitted.items():
        beats = [
            r
            for r in planfile.read_heartbeats(work / "spool", job_id)
            if r.get("event") == "heartbeat" and r.get("samples_per_s") is not None
        ]
        jobs[model] = {
            "job_id": job_id,
            "state": states[model],
            "jct_s": round(finished[model] - submit_t, 1),
            "cpus_given": [
                {"t_s": round(e["t"] - submit_t, 1), "cpus": e["cpus"], "nodes": e["nodes"]}
                for e in timeline[model]
            ],
            "heartbeats": [
                {
                    "t_s": round(float(b["time"]) - submit_t, 1),
                    "step": b.get("step"),
                    "cpus": b.get("cpus"),
                    "workers": b.get("loader_workers"),
                    "plan_version": b.get("plan_version"),
                    "samples_per_s": b["samples_per_s"],
                }
                for b in beats
            ],
        }
        jobs[model]["samples_per_s_by_cpus"] = rates_by_cpus(beats)
    store = Store(work / "spool" / "mosaic.db")
    try:
        observed = [
            {
                "job_id": p.job_id,
                "model": p.model,
                "cpus_per_gpu": p.cpus_per_gpu,
                "samples_per_s_per_gpu": round(p.samples_per_s_per_gpu, 1),
                "t_s": round(p.time_s - min(t for _, t in submitted.values()), 1),
            }
            for p in store.observations()
        ]
    finally:
        store.close()
    first_submit = min(t for _, t in submitted.values())
    return {
        "preset": preset,
        "commands": commands,
        "load_before": load_before,
        "load_after": load_average(),
        "jobs": jobs,
        "observed_by_controller": observed,
        "pair": {
            "makespan_s": round(max(finished.values()) - first_submit, 1),
            "mean_jct_s": round(statistics.mean(j["jct_s"] for j in jobs.values()), 1),
        },
    }


def _last_step(work: Path, job_id: str) -> int:
    steps = [r.get("step") for r in planfile.read_heartbeats(work / "spool", job_id)]
    return max((k for k in steps if isinstance(k, int)), default=0)


def rates_by_cpus(beats: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median and count of a job's heartbeat rates per CPU count it reported, the first rate
    of each run (plan version) left out: it spans the start-up."""
    seen: set[Any] = set()
    by: dict[int, list[float]] = {}
    for b in beats:
        version = b.get("plan_version")
        if version not in seen:
            seen.add(version)
            continue
        cpus = b.get("cpus")
        if isinstance(cpus, int):
            by.setdefault(cpus, []).append(float(b["samples_per_s"]))
    return {
        str(c): {"median": round(statistics.median(v), 1), "beats": len(v)} for c, v in sorted(by.items())
    }


def max_cpus(result: dict[str, Any], model: str) -> int:
    """The most CPUs Slurm gave ``model``'s job during the run (0: never seen running)."""
    return max((e["cpus"] for e in result["jobs"][model]["cpus_given"]), default=0)


def bench(root: Path, s: Settings, data: Path, repeats: int) -> dict[str, Any]:
    """Profile once, then run the pair ``repeats`` times per preset, alternating the order
    (tune, proportional, proportional, tune, ...) so a drift in the machine's load falls on both."""
    cluster = lifecycle.up(shape_named(SHAPE), root / "cluster")
    try:
        profiles = {}
        paths = []
        for example in JOBS:
            out = root / f"{example}.json"
            profiles[example] = profile(cluster, example, out, data, s)
            paths.append(out)
            print(f"profiled {example}: {profiles[example]['cpu_samples_per_s']}", flush=True)
        runs = []
        for k in range(repeats):
            for preset in PRESETS if k % 2 == 0 else PRESETS[::-1]:
                run = run_pair(cluster, root / f"{preset}-{k}", preset, paths, data, s)
                runs.append({"repeat": k, **run})
                print(f"{preset} #{k}: {json.dumps(run['pair'])}", flush=True)
    finally:
        lifecycle.down(root / "cluster")
    return {"profiles": profiles, "comparison": compare(profiles, runs), "runs": runs}


def compare(profiles: dict[str, Any], runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per preset: each job's CPUs, its heartbeat rate (median over its runs' beats, each
    run's first left out), its restarts (plan versions beyond the first) and JCTs; the pair's
    makespan and mean JCT. Beside them, the profiled rates at the same CPU counts."""
    out: dict[str, Any] = {}
    for preset in PRESETS:
        mine = [r for r in runs if r["preset"] == preset]
        jobs = {}
        for model in JOBS:
            rates: list[float] = []
            cpus: set[int] = set()
            restarts = []
            for r in mine:
                j = r["jobs"][model]
                cpus |= {e["cpus"] for e in j["cpus_given"]}
                versions = []
                for b in j["heartbeats"]:
                    if b["plan_version"] not in versions:
                        versions.append(b["plan_version"])
                        continue
                    rates.append(b["samples_per_s"])
                restarts.append(max(0, len(versions) - 1))
            curve = profiles[model]["cpu_samples_per_s"]
            jobs[model] = {
                "cpus_given": sorted(cpus),
                "samples_per_s_median": round(statistics.median(rates), 1) if rates else None,
                "profiled_samples_per_s": {str(c): curve.get(str(c)) for c in sorted(cpus)},
                "restarts": restarts,
                "jct_s": [r["jobs"][model]["jct_s"] for r in mine],
            }
        out[preset] = {
            "jobs": jobs,
            "makespan_s": [r["pair"]["makespan_s"] for r in mine],
            "mean_jct_s": [r["pair"]["mean_jct_s"] for r in mine],
            "load_before": [r["load_before"] for r in mine],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=Settings.steps, help="optimizer steps of each job")
    parser.add_argument("--cpus", default=Settings.cpus, help="CPU counts to profile")
    parser.add_argument(
        "--run-s", type=float, default=Settings.run_s, help="seconds measured per profile run"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help=f"image-cnn's data directory, kept between runs (default {DATA})",
    )
    parser.add_argument("--repeats", type=int, default=1, help="pair runs per preset (alternating order)")
    parser.add_argument("--out", default="closed_loop", help="result name under benchmarks/results/")
    args = parser.parse_args()
    s = Settings(steps=args.steps, cpus=args.cpus, run_s=args.run_s)
    with tempfile.TemporaryDirectory(prefix="mosaic-closed-loop-") as tmp:
        root = Path(tmp)
        result = bench(root, s, args.data, args.repeats)
    result["settings"] = {
        "steps": s.steps,
        "profile_cpus": s.cpus,
        "run_s": s.run_s,
        "heartbeat_s": s.heartbeat_s,
        "round_s": s.round_s,
        "shape": "cpu-scarce: 1 node, 4 GPUs (a100), 4 CPUs, 128 GB; TaskPlugin=task/none; 2-core machine",
    }
    result["command"] = "python -m benchmarks.soak.closed_loop " + " ".join(sys.argv[1:])
    write_result(args.out, result)


if __name__ == "__main__":
    main()
