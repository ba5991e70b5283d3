"""`mosaic-run` on a real GPU: the example jobs on CUDA, stopped by the checkpoint signal and
resumed, also from a checkpoint written on another device and world size.

Needs a machine where torch sees a CUDA GPU (and DeepSpeed for the DeepSpeed cases); it is not
part of CI. Each case runs the bundled examples (``contrib/examples/train_torch.py`` and
``train_deepspeed.py``) under ``mosaic-run --launcher local`` from a plan file written with the
controller's own writer, as the controller would. A stopped job gets ``SIGUSR1`` after a few
logged steps, checkpoints, exits, and is started again with the next plan; its loss per step is
compared with a run never stopped (relative error). With one GPU, the world-size changes go
between CPU ranks (gloo; ``DS_ACCELERATOR=cpu``) and the one CUDA rank (NCCL):

* ``torch-cuda``: DDP on 1 GPU, stopped and resumed on it;
* ``torch-cpu2-to-cuda1``: DDP on 2 CPU ranks, stopped, resumed on 1 GPU (torch.distributed.checkpoint
  reshards the optimizer state);
* ``deepspeed-cuda``: ZeRO-2 on 1 GPU, stopped and resumed on it;
* ``deepspeed-cpu2-to-cuda1``: ZeRO-1 on 2 CPU ranks, stopped, resumed as ZeRO-2 on 1 GPU (a
  DP-size change: mosaic-run converts to DeepSpeed's universal checkpoint);
* ``deepspeed-offload-cuda``: ZeRO-2 with the optimizer offloaded to the CPU, on 1 GPU, against
  the ``deepspeed-cuda`` reference.

The heartbeats the GPU runs wrote are read back for their ``gpus`` telemetry (pynvml).

    python -m benchmarks.tools.gpu_wrapper            # -> benchmarks/results/gpu_wrapper.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from planner.core.model import Assignment
from slurm_plugin import planfile
from wrapper import status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "contrib" / "examples"
GLOBAL_BATCH = 16
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}


def losses(log: Path) -> dict[int, float]:
    if not log.exists():
        return {}
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in records}


def shapes(log: Path) -> list[tuple[int, str]]:
    """The (world size, device) pairs the job's steps ran with, in order of first use."""
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    seen: list[tuple[int, str]] = []
    for r in records:
        shape = (r["world_size"], r.get("device", "?"))
        if shape not in seen:
            seen.append(shape)
    return seen


class Jobs:
    """Runs example jobs under mosaic-run in one scratch directory."""

    def __init__(self, work: Path, steps: int) -> None:
        self.work, self.steps = work, steps
        self.spool = work / "spool"

    def run(
        self,
        job_id: str,
        framework: str,
        workers: int,
        plan: dict[str, Any],
        env: dict[str, str] | None = None,
        signal_after: int | None = None,
        step_sleep: float = 0.0,
    ) -> dict[str, Any]:
        """One launch of job ``job_id`` with ``plan`` on ``workers`` ranks; returns what it did."""
        planfile.write_plan(
            self.spool,
            job_id,
            None,
            Assignment(
                tuple(("gpu-node", k) for k in range(workers)),
                4,
                16.0,
                {"global_batch": GLOBAL_BATCH, **plan},
            ),
        )
        script = EXAMPLES / ("train_torch.py" if framework == "torch" else "train_deepspeed.py")
        log = self.work / f"{job_id}.loss.jsonl"
        argv = [sys.executable, "-m", "wrapper.cli", "--framework", framework, "--launcher", "local"]
        argv += ["--checkpoint-dir", str(self.work / f"ckpt-{job_id}"), "--", sys.executable, str(script)]
        argv += ["--steps", str(self.steps), "--loss-log", str(log), "--step-sleep", str(step_sleep)]
        full_env = {
            **os.environ,
            "SLURM_JOB_ID": job_id,
            "MOSAIC_SPOOL": str(self.spool),
            "MOSAIC_HEARTBEAT_S": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if signal_after is not None:
            deadline = time.monotonic() + 300
            while len(losses(log)) < signal_after and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        marker = status.read_marker(status.status_dir(self.spool, job_id) / status.CHECKPOINT_MARKER)
        return {
            "returncode": proc.returncode,
            "wall_s": round(time.monotonic() - started, 2),
            "checkpoint_step": marker.get("step") if marker else None,
            "stderr_tail": err[-1500:] if proc.returncode else "",
            "universal": "to a universal checkpoint" in err,
        }

    def gpu_heartbeats(self, job_id: str) -> list[dict[str, Any]]:
        """The heartbeat records of the job that carry GPU telemetry."""
        found = []
        for path in sorted(status.status_dir(self.spool, job_id).glob("*")):
            if not path.is_file():
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("gpus"):
                    found.append(record)
        return found


def compare(reference: dict[int, float], resumed: dict[int, float]) -> dict[str, Any]:
    """Largest relative difference over the steps both logged, and whether every step was logged."""
    common = sorted(set(reference) & set(resumed))
    rel = [abs(resumed[s] - reference[s]) / abs(reference[s]) for s in common if reference[s]]
    return {"steps_compared": len(common), "max_rel_diff": max(rel) if rel else None}


def case(
    jobs: Jobs,
    index: int,
    name: str,
    framework: str,
    reference: tuple[int, dict[str, Any], dict[str, str] | None],
    before: tuple[int, dict[str, Any], dict[str, str] | None],
    after: tuple[int, dict[str, Any], dict[str, str] | None],
    signal_after: int,
) -> dict[str, Any]:
    """A reference run never stopped, then a job stopped in ``before``'s shape and resumed in
    ``after``'s; the resumed loss curve against the reference's."""
    ref_id, job_id = str(1000 + index), str(2000 + index)
    ref = jobs.run(ref_id, framework, reference[0], reference[1], reference[2])
    first = jobs.run(job_id, framework, before[0], before[1], before[2], signal_after, step_sleep=0.2)
    second = jobs.run(job_id, framework, after[0], after[1], after[2])
    log = jobs.work / f"{job_id}.loss.jsonl"
    resumed = losses(log)
    result = {
        "case": name,
        "reference_run": ref,
        "stopped_run": first,
        "resumed_run": second,
        "steps_logged": sorted(resumed) == list(range(1, jobs.steps + 1)),
        "ranks_device_before_after": shapes(log) if log.exists() else [],
        **compare(losses(jobs.work / f"{ref_id}.loss.jsonl"), resumed),
        "gpu_heartbeats": len(jobs.gpu_heartbeats(job_id)),
    }
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_run")}), flush=True)
    return result


def gpu_name() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "none (nvidia-smi not found)"
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--signal-after", type=int, default=8, help="logged steps before SIGUSR1")
    parser.add_argument("--cases", default="all", help="comma-separated case names, or all")
    parser.add_argument("--out", default="gpu_wrapper")
    parser.add_argument("--cpu-rehearsal", action="store_true",
                        help="no GPU: every rank on the CPU (the cases' mechanics only)")  # fmt: skip
    args = parser.parse_args()

    import torch  # only here: the module docstring is readable without torch

    if not torch.cuda.is_available() and not args.cpu_rehearsal:
        raise SystemExit("gpu_wrapper: torch sees no CUDA device (--cpu-rehearsal runs the cases on the CPU)")
    cpu, cuda = CPU_ONLY, None
    torch_plan = {"micro_batch": 4}
    cases = {
        "torch-cuda": ("torch", (1, torch_plan, cuda), (1, torch_plan, cuda), (1, torch_plan, cuda)),
        "torch-cpu2-to-cuda1": ("torch", (2, torch_plan, cpu), (2, torch_plan, cpu), (1, torch_plan, cuda)),
        "deepspeed-cuda": (
            "deepspeed",
            (1, {"micro_batch": 4, "zero_stage": 2}, cuda),
            (1, {"micro_batch": 4, "zero_stage": 2}, cuda),
            (1, {"micro_batch": 4, "zero_stage": 2}, cuda),
        ),
        "deepspeed-cpu2-to-cuda1": (
            "deepspeed",
            (2, {"micro_batch": 4, "zero_stage": 1}, cpu),
            (2, {"micro_batch": 4, "zero_stage": 1}, cpu),
            (1, {"micro_batch": 4, "zero_stage": 2}, cuda),
        ),
        "deepspeed-offload-cuda": (
            "deepspeed",
            (1, {"micro_batch": 4, "zero_stage": 2}, cuda),
            (1, {"micro_batch": 4, "zero_stage": 2, "offload_optimizer": True}, cuda),
            (1, {"micro_batch": 4, "zero_stage": 2, "offload_optimizer": True}, cuda),
        ),
    }
    wanted = list(cases) if args.cases == "all" else args.cases.split(",")
    unknown = [name for name in wanted if name not in cases]
    if unknown:
        raise SystemExit(f"gpu_wrapper: unknown case(s) {', '.join(unknown)}; the cases: {', '.join(cases)}")
    if any(cases[name][0] == "deepspeed" for name in wanted) and _version("deepspeed") is None:
        raise SystemExit(
            "gpu_wrapper: DeepSpeed is not installed (extra 'deepspeed'); "
            "--cases torch-cuda,torch-cpu2-to-cuda1 runs without it"
        )
    results, telemetry = [], None
    with tempfile.TemporaryDirectory(prefix="mosaic-gpu-") as tmp:
        for index, name in enumerate(wanted):
            framework, reference, before, after = cases[name]
            jobs = Jobs(Path(tmp) / name, args.steps)
            jobs.work.mkdir()
            results.append(case(jobs, index, name, framework, reference, before, after, args.signal_after))
            beats = jobs.gpu_heartbeats(str(2000 + index))
            telemetry = telemetry or (beats[-1] if beats else None)
    write_result(
        args.out,
        {
            "command": "python -m benchmarks.tools.gpu_wrapper " + " ".join(sys.argv[1:]),
            "gpu": gpu_name(),
            "torch": torch.__version__,
            "deepspeed": _version("deepspeed"),
            "steps": args.steps,
            "global_batch": GLOBAL_BATCH,
            "cases": results,
            "cpu_rehearsal": args.cpu_rehearsal,
            "heartbeat_with_gpu_telemetry": telemetry,
        },
    )


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:  # a missing or broken package is reported as absent
        return None


if __name__ == "__main__":
    main()
