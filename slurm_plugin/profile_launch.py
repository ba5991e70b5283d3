"""What ``mosaic profile`` runs and how it starts it (the runner is :mod:`slurm_plugin.profiler`).

* a :class:`Target` is the job: a batch script (``bash JOB.sh``, its ``#MOSAIC``
  directives read for the model, framework and global batch, its ``#SBATCH`` lines for
  CPUs and memory) or a named example (:mod:`wrapper.examples`);
* a :class:`RunSetup` is one process to start: the target on ``C`` CPUs in its own run
  directory (heartbeats, output, plan file, checkpoints), and for a plan sample its ranks,
  threads and plan (a plan file ``mosaic-run`` reads: one rank per "GPU" of the assignment);
* a :class:`Launcher` starts it: :class:`LocalLauncher` as a plain process group pinned to
  ``C`` of this machine's cores (``os.sched_setaffinity``), :class:`SrunLauncher` as
  ``srun --ntasks=1 --cpus-per-task=C --mem=...`` through :mod:`slurm_plugin.profile_task`
  (which pins the step where Slurm did not).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol

from planner.core.errors import InputError, MosaicError
from planner.core.execplan import plan_to_mapping
from planner.core.model import Assignment
from planner.core.plandoc import plan_document
from profiles.profiler.runs import PlanSample
from slurm_plugin.directives import parse_directives
from slurm_plugin.files import read_text, write_json
from wrapper import examples


class ProfilerError(MosaicError):
    """A run could not be made or measured (the job failed, wrote no heartbeats, never started)."""


# -- what runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One job to run: how to start it, and what it says about itself."""

    label: str  # the script path or ``example:NAME``
    model: str
    command: Callable[[int, PlanSample | None, int | None], list[str]]  # (cpus, sample, global batch)
    identity: Mapping[str, Any]
    framework: str = "torch"
    global_batch: int | None = None
    mem_gb: float | None = None
    default_cpus: int | None = None
    prepare: list[str] | None = None
    data_dir: Path | None = None
    task: str | None = None


def script_target(path: str | Path) -> Target:
    """A batch script, run as ``bash SCRIPT`` (its ``#SBATCH`` lines are not read by srun:
    the profiler sets CPUs and memory itself)."""
    p = Path(path)
    text = read_text(p)
    meta = parse_directives(text, str(p))
    sbatch = _sbatch_options(text)
    absolute = p.resolve()
    return Target(
        label=str(p),
        model=str(meta.get("model") or p.stem),
        command=lambda cpus, sample, batch: ["bash", str(absolute)],  # the batch: MOSAIC_GLOBAL_BATCH
        identity={"script": str(absolute), "sha256": hashlib.sha256(text.encode()).hexdigest()},
        framework=str(meta.get("framework") or "torch"),
        global_batch=meta.get("batch_size"),
        mem_gb=sbatch.get("mem_gb"),
        default_cpus=sbatch.get("cpus"),
    )


_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)B?$", re.IGNORECASE)


def _sbatch_options(text: str) -> dict[str, Any]:
    """``-c``/``--cpus-per-task`` and ``--mem`` of the script's ``#SBATCH`` lines."""
    out: dict[str, Any] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            break
        if not line.startswith("#SBATCH"):
            continue
        tokens = line.split()[1:]
        for k, token in enumerate(tokens):
            name, _, value = token.partition("=")
            if not value and k + 1 < len(tokens):
                value = tokens[k + 1]
            if name in {"-c", "--cpus-per-task"} and value.isdigit():
                out["cpus"] = int(value)
            elif name == "--mem" and (m := _MEM.match(value)):
                scale = {"": 1 / 1024, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}
                out["mem_gb"] = float(m.group(1)) * scale[m.group(2).upper()]
    return out


def example_target(name: str, steps: int, data_dir: Path | None = None, framework: str = "torch") -> Target:
    """A named example; its plan samples train with ``framework`` under mosaic-run (its CPU
    runs are plain torch either way). An example with data caches it in ``data_dir``
    (default :func:`wrapper.examples.default_data_dir`), where its size is measured."""
    example = examples.get_example(name)
    examples.example_script(name)  # fails early, naming the path or the missing extra
    if example.has_data and data_dir is None:
        data_dir = examples.default_data_dir(name)
    if framework not in example.frameworks:
        raise InputError(
            f"--framework {framework}: example {name!r} trains with {', '.join(example.frameworks)}"
        )
    identity: dict[str, Any] = {"example": name, "steps": steps}
    if framework != "torch":
        identity["framework"] = framework  # a torch profile's identity is as before
    return Target(
        label=f"example:{name}",
        model=name,
        command=lambda cpus, sample, batch: _example_argv(
            name, cpus, steps, data_dir, sample, batch, framework
        ),
        identity=identity,
        framework=framework,
        global_batch=example.batch,
        prepare=examples.prepare_command(name, data_dir),
        data_dir=data_dir,
        task="image" if example.cpu_sensitive else "language",
    )


def _example_argv(
    name: str,
    cpus: int,
    steps: int,
    data_dir: Path | None,
    sample: PlanSample | None,
    batch: int | None,
    framework: str = "torch",
) -> list[str]:
    """A CPU run: the script plainly on ``cpus``. A plan sample: under ``mosaic-run`` (which
    reads the profiler's plan file and starts the ranks), each rank on ``--threads``. Both
    with the profile's global batch (``--global-batch``; the example's own by default)."""
    if sample is None:
        return examples.example_command(name, cpus, steps, local=True, batch=batch, data_dir=data_dir)
    extra = ("--threads", str(sample.threads))
    return examples.example_command(
        name, cpus, steps, local=False, batch=batch, data_dir=data_dir, extra_args=extra, framework=framework
    )


def target_from(spec: str, steps: int, data_dir: Path | None = None) -> Target:
    """``example:NAME`` or a script path (the ``--pairs`` form)."""
    if spec.startswith("example:"):
        return example_target(spec.removeprefix("example:"), steps, data_dir)
    return script_target(spec)


# -- how it runs -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSetup:
    """One process to start: the target, CPUs, and for a plan sample its ranks and plan."""

    target: Target
    cpus: int
    directory: Path
    mem_gb: float
    heartbeat_s: float
    sample: PlanSample | None = None
    cores: tuple[int, ...] | None = None  # local: the cores to pin to

    def environment(self) -> dict[str, str]:
        env = {
            "MOSAIC_STATUS_DIR": str(self.directory),
            "MOSAIC_HEARTBEAT_S": f"{self.heartbeat_s:g}",
            "MOSAIC_CHECKPOINT_DIR": str(self.directory / "ckpt"),
            "MOSAIC_SPOOL": str(self.directory / "spool"),
        }
        if self.target.global_batch is not None:
            env["MOSAIC_GLOBAL_BATCH"] = str(self.target.global_batch)
        if self.sample is not None:
            env["MOSAIC_PLAN_FILE"] = str(self.directory / "plan.json")
            env["OMP_NUM_THREADS"] = str(self.sample.threads)
        return env

    def write_plan_file(self) -> None:
        if self.sample is None:
            return
        plan = self.sample.plan
        if self.target.global_batch is not None:
            plan = replace(plan, global_batch=self.target.global_batch)
        assignment = Assignment(
            gpus=tuple(("localhost", i) for i in range(self.sample.ranks)),
            cpus=self.sample.cpus,
            mem_gb=self.mem_gb,
            plan=plan_to_mapping(plan),
        )
        write_json(self.directory / "plan.json", plan_document("profile", 1, assignment))


class Launcher(Protocol):
    """Starts one run; the returned process leads its own process group."""

    name: str
    graceful_stop: bool

    def check_cpus(self, cpus: Sequence[int]) -> None: ...

    def start(self, setup: RunSetup, output: IO[bytes]) -> subprocess.Popen[bytes]: ...

    def cleanup(self, setup: RunSetup) -> None: ...


def _popen(
    argv: list[str], env: Mapping[str, str], output: IO[bytes], **kwargs: Any
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )
    except OSError as e:
        raise ProfilerError(f"cannot start {argv[0]}: {e.strerror}") from e


@dataclass
class LocalLauncher:
    """Plain processes on this machine, each run pinned to its own ``C`` cores (no Slurm)."""

    name: str = "local"
    graceful_stop: bool = False
    cores: tuple[int, ...] = field(default_factory=lambda: tuple(sorted(os.sched_getaffinity(0))))

    def check_cpus(self, cpus: Sequence[int]) -> None:
        too_many = [c for c in cpus if c > len(self.cores)]
        if too_many:
            raise InputError(
                f"--cpus {','.join(map(str, too_many))}: --local pins each run to its own cores, and "
                f"this machine lets mosaic profile use {len(self.cores)} "
                f"({','.join(map(str, self.cores))})"
            )

    def start(self, setup: RunSetup, output: IO[bytes]) -> subprocess.Popen[bytes]:
        cores = setup.cores or self.cores[: setup.cpus]
        env = {
            **setup.environment(),
            "SLURM_CPUS_PER_TASK": str(setup.cpus),
            "SLURM_CPUS_ON_NODE": str(setup.cpus),
            "SLURM_SUBMIT_DIR": os.getcwd(),
        }
        argv = setup.target.command(setup.cpus, setup.sample, setup.target.global_batch)
        # No Slurm job around a local run: a profiler started inside one must not make
        # mosaic-run launch with srun or read that job's plan file.
        clean = {k: v for k, v in os.environ.items() if k not in {"SLURM_JOB_ID", "SLURM_JOBID"}}
        try:
            return subprocess.Popen(
                argv,
                env={**clean, **env},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: os.sched_setaffinity(0, cores),  # noqa: PLW1509 - no threads started here
            )
        except OSError as e:
            raise ProfilerError(f"cannot start {argv[0]}: {e.strerror}") from e

    def cleanup(self, setup: RunSetup) -> None:
        return None


@dataclass
class SrunLauncher:
    """``srun --ntasks=1 --cpus-per-task=C --mem=M`` on the cluster (``slurm_env``: ``SLURM_CONF``)."""

    slurm_env: Mapping[str, str] = field(default_factory=dict)
    partition: str | None = None
    extra: tuple[str, ...] = ()
    name: str = "srun"
    graceful_stop: bool = True
    python: str = sys.executable

    def check_cpus(self, cpus: Sequence[int]) -> None:
        if shutil.which("srun") is None:
            raise InputError("srun not found on PATH (use --local to profile on this machine without Slurm)")

    def job_name(self, setup: RunSetup) -> str:
        return f"mosaic-profile-{os.getpid()}-{safe_name(setup.directory.name)}"

    def start(self, setup: RunSetup, output: IO[bytes]) -> subprocess.Popen[bytes]:
        argv = [
            "srun",
            "--ntasks=1",
            f"--cpus-per-task={setup.cpus}",
            f"--mem={max(1, round(setup.mem_gb * 1024))}M",
            f"--job-name={self.job_name(setup)}",
            "--kill-on-bad-exit=1",
            "--export=ALL",
        ]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        argv += list(self.extra)
        task = [self.python, "-m", "slurm_plugin.profile_task", "--cpus", str(setup.cpus)]
        if setup.sample is not None:
            task.append("--local-ranks")
        argv += [
            "--",
            *task,
            "--",
            *setup.target.command(setup.cpus, setup.sample, setup.target.global_batch),
        ]
        return _popen(argv, {**self.slurm_env, **setup.environment()}, output)

    def cleanup(self, setup: RunSetup) -> None:
        # srun cancels its job when it is terminated; this catches a run still pending or
        # an srun that was killed before it could.
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["scancel", f"--name={self.job_name(setup)}"],
                env={**os.environ, **self.slurm_env},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)
