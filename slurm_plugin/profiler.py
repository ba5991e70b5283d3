"""``mosaic profile``'s side effects: start real runs of a job, read their heartbeats, keep state.

The decisions (which run next, when the search stops, what the document says) are pure,
in :mod:`profiles.profiler`; this module carries them out:

* a :class:`Target` is the job: a batch script (``bash JOB.sh``, its ``#MOSAIC``
  directives read for the model, framework and global batch) or a named example
  (:mod:`wrapper.examples`);
* a :class:`Launcher` starts one run of it on ``C`` CPUs: :class:`LocalLauncher` as a plain
  process group pinned to ``C`` of this machine's cores (``os.sched_setaffinity``), or
  :class:`SrunLauncher` as ``srun --ntasks=1 --cpus-per-task=C --mem=...`` through
  :mod:`slurm_plugin.profile_task` (which pins the step where Slurm did not);
* :func:`measure` polls the run's ``heartbeat.jsonl`` (the runtime API) until the
  measurement window is full, stops the run (SIGTERM to its process group, SIGKILL after a
  grace) and returns its :class:`~profiles.profiler.measure.Throughput`;
* :class:`Profiler` loops: state file in, next run, measure, state file out (atomically,
  after every run, so an interrupted profile resumes with the next run), until the profile
  is complete or the budget would be exceeded; then the outputs.

Every run has its own directory ``<out>.runs/<run key>/`` (heartbeats, the job's output,
its plan file, a checkpoint directory that is removed after the run), so no run resumes
from another's checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol

from planner.errors import InputError, MosaicError
from planner.execplan import plan_to_mapping
from planner.model import Assignment
from profiles.profiler.measure import Throughput, heartbeats, throughput
from profiles.profiler.runs import PlanSample, Request, RunSpec, cpu_key, next_run, remaining
from profiles.profiler.state import RunResult, State, check_identity, state_from_json
from slurm_plugin.directives import parse_directives
from slurm_plugin.files import read_text, write_atomic, write_json
from wrapper import examples, status
from wrapper.plandoc import plan_document

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0
POLL_S = 0.5


class ProfilerError(MosaicError):
    """A run could not be measured (the job failed, wrote no heartbeats, never started)."""


# -- what runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One job to run: how to start it, and what it says about itself."""

    label: str  # the script path or ``example:NAME``
    model: str
    command: Callable[[int, PlanSample | None], list[str]]  # (cpus, plan sample) -> argv
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
        command=lambda cpus, sample: ["bash", str(absolute)],
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


def example_target(name: str, steps: int, data_dir: Path | None = None) -> Target:
    example = examples.get_example(name)
    examples.example_script(name)  # fails early, naming the path, outside a source checkout
    return Target(
        label=f"example:{name}",
        model=name,
        command=lambda cpus, sample: _example_argv(name, cpus, steps, data_dir, sample),
        identity={"example": name, "steps": steps},
        global_batch=example.batch,
        prepare=examples.prepare_command(name, data_dir),
        data_dir=data_dir,
        task="image" if example.cpu_sensitive else "language",
    )


def _example_argv(
    name: str, cpus: int, steps: int, data_dir: Path | None, sample: PlanSample | None
) -> list[str]:
    """A CPU run: the script plainly on ``cpus``. A plan sample: under ``mosaic-run`` (which
    reads the profiler's plan file and starts the ranks), each rank on ``--threads``."""
    if sample is None:
        return examples.example_command(name, cpus, steps, local=True, data_dir=data_dir)
    extra = ("--threads", str(sample.threads))
    return examples.example_command(name, cpus, steps, local=False, data_dir=data_dir, extra_args=extra)


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
        argv = setup.target.command(setup.cpus, setup.sample)
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
        return f"mosaic-profile-{os.getpid()}-{_safe(setup.directory.name)}"

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
        argv += ["--", *task, "--", *setup.target.command(setup.cpus, setup.sample)]
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


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


# -- one measurement ---------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """How long a run is measured: ``run_s`` seconds of heartbeats after ``warmup`` of them."""

    run_s: float = 20.0
    heartbeat_s: float = 2.0
    warmup: int = 1
    start_timeout_s: float = 180.0
    min_beats: int = 3

    @property
    def max_s(self) -> float:
        return self.start_timeout_s + 3 * self.run_s


def _stop(proc: subprocess.Popen[bytes], graceful: bool) -> None:
    """End a run's process group once it is measured.

    ``graceful`` (srun): SIGTERM first, which srun passes to the step before it cancels the
    job, then SIGKILL after a grace. A local run has nothing left worth saving: SIGKILL.
    """
    if proc.poll() is None and graceful:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE_S)
    # Also what outlived the group's leader (a rank left behind by mosaic-run).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n    ".join(tail) if tail else "(no output)"


def _records(directory: Path) -> list[dict[str, Any]]:
    return list(status.read_records(directory / status.HEARTBEATS))


def _window_done(records: list[dict[str, Any]], window: Window) -> bool:
    beats = heartbeats(records)[window.warmup :]
    return len(beats) >= window.min_beats and beats[-1].time - beats[0].time >= window.run_s


def measure(
    launcher: Launcher,
    setups: Sequence[RunSetup],
    window: Window,
    describe: str,
    tick: Callable[[float], None] | None = None,
) -> list[Throughput]:
    """Start the runs of ``setups`` together, measure each, stop them all; their throughputs.

    Several setups run at once (a co-located pair) are measured over the span in which all
    of them were past their warm-up.
    """
    procs: list[tuple[RunSetup, subprocess.Popen[bytes], Path]] = []
    outputs = []
    start = time.monotonic()
    try:
        for setup in setups:
            if setup.directory.exists():
                shutil.rmtree(setup.directory)
            setup.directory.mkdir(parents=True)
            setup.write_plan_file()
            log_path = setup.directory / "output.log"
            out = open(log_path, "wb")  # noqa: SIM115 - closed in finally, after the run
            outputs.append(out)
            procs.append((setup, launcher.start(setup, out), log_path))
        while True:
            elapsed = time.monotonic() - start
            if tick is not None:
                tick(elapsed)
            records = [_records(s.directory) for s, _, _ in procs]
            if all(_window_done(r, window) for r in records):
                break
            for (setup, proc, log_path), recs in zip(procs, records, strict=True):
                if proc.poll() is not None and not _window_done(recs, window):
                    beats = len(heartbeats(recs))
                    if throughput(recs, window.warmup) is not None and proc.returncode == 0:
                        continue  # finished on its own with a usable (shorter) window
                    raise ProfilerError(
                        f"{describe}: {setup.target.label} exited with status {proc.returncode} after "
                        f"{beats} heartbeat(s) ({window.warmup} warm-up + {window.min_beats} needed, "
                        f"{window.run_s:g} s apart at least); "
                        + (
                            "it must report through the runtime API (rt.report) under MOSAIC_STATUS_DIR"
                            if beats == 0
                            else "give it more steps, or lower --run-s"
                        )
                        + f"; its output ({log_path}):\n    {_tail(log_path)}"
                    )
            if all(p.poll() is not None for _, p, _ in procs):
                break
            if elapsed > window.start_timeout_s and any(not heartbeats(r) for r in records):
                silent = [
                    s.target.label for (s, _, _), r in zip(procs, records, strict=True) if not heartbeats(r)
                ]
                raise ProfilerError(
                    f"{describe}: no heartbeat from {', '.join(silent)} within {window.start_timeout_s:g} s "
                    f"(--start-timeout-s); a job still pending, or one that never calls rt.report; "
                    f"output: {procs[0][2]}:\n    {_tail(procs[0][2])}"
                )
            if elapsed > window.max_s:
                break
            time.sleep(POLL_S)
    finally:
        for setup, proc, _ in procs:
            _stop(proc, launcher.graceful_stop)
            launcher.cleanup(setup)
            shutil.rmtree(setup.directory / "ckpt", ignore_errors=True)
        for out in outputs:
            out.close()
    all_records = [_records(s.directory) for s, _, _ in procs]
    if len(all_records) > 1:
        # The span every run was past its warm-up in: co-located for all of it.
        starts = [
            heartbeats(r)[window.warmup].time for r in all_records if len(heartbeats(r)) > window.warmup
        ]
        if len(starts) == len(all_records):
            since = max(starts)
            all_records = [[x for x in r if _time(x) >= since] for r in all_records]
    results = []
    for (setup, _, log_path), recs in zip(procs, all_records, strict=True):
        rate = throughput(recs, window.warmup if len(procs) == 1 else 0)
        if rate is None:
            raise ProfilerError(
                f"{describe}: {setup.target.label} wrote too few heartbeats to measure "
                f"({len(heartbeats(recs))}) in {window.max_s:g} s; "
                f"output ({log_path}):\n    {_tail(log_path)}"
            )
        results.append(rate)
    return results


def _time(record: Mapping[str, Any]) -> float:
    value = record.get("time")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1.0


# -- the loop ----------------------------------------------------------------------------


@dataclass
class Progress:
    """One status line on stderr: redrawn in place on a terminal, a log line per run otherwise."""

    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    budget_s: float | None = None
    width: int = 24

    def line(self, done: int, total: int, elapsed_s: float, what: str) -> str:
        filled = round(self.width * done / total) if total else 0
        budget = f" of {_clock(self.budget_s)}" if self.budget_s is not None else ""
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {done}/{total} runs, {_clock(elapsed_s)}{budget}: {what}"

    def show(self, done: int, total: int, elapsed_s: float, what: str) -> None:
        if self.stream.isatty():
            self.stream.write("\r\033[K" + self.line(done, total, elapsed_s, what))
            self.stream.flush()

    def finish(self, done: int, total: int, elapsed_s: float, what: str) -> None:
        text = self.line(done, total, elapsed_s, what)
        if self.stream.isatty():
            self.stream.write("\r\033[K" + text + "\n")
            self.stream.flush()
        else:
            log.info("%s", text)


def _clock(seconds: float | None) -> str:
    s = int(seconds or 0)
    return f"{s // 60}m{s % 60:02d}s"


@dataclass
class Outcome:
    state: State
    complete: bool
    skipped: list[str]
    runs_now: int


class Profiler:
    """Runs the profile's runs one after another, saving the state after each."""

    def __init__(
        self,
        target: Target,
        request: Request,
        launcher: Launcher,
        window: Window,
        state_path: Path,
        runs_dir: Path,
        mem_gb: float,
        partners: Mapping[str, Target] | None = None,
        budget_s: float | None = None,
        progress: Progress | None = None,
        restart: bool = False,
    ) -> None:
        self.target = target
        self.request = request
        self.launcher = launcher
        self.window = window
        self.state_path = state_path
        self.runs_dir = runs_dir
        self.mem_gb = mem_gb
        self.partners = dict(partners or {})
        self.budget_s = budget_s
        self.progress = progress or Progress(budget_s=budget_s)
        self.identity = {
            "target": dict(target.identity),
            "request": request.to_json(),
            "launcher": launcher.name,
            "mem_gb": mem_gb,
            "window": {"run_s": window.run_s, "heartbeat_s": window.heartbeat_s, "warmup": window.warmup},
            "partners": {k: dict(t.identity) for k, t in sorted(self.partners.items())},
        }
        self.restart = restart

    def load_state(self) -> State:
        if self.restart or not self.state_path.exists():
            return State(self.identity)
        state = state_from_json(read_text(self.state_path), str(self.state_path))
        if not state.runs:  # nothing measured yet: nothing to mix up
            return State(self.identity)
        check_identity(state, self.identity, str(self.state_path))
        if state.runs:
            log.info("resuming %s: %d run(s) already measured", self.state_path, len(state.runs))
        return state

    def save_state(self, state: State) -> None:
        write_json(self.state_path, state.to_json())

    def _estimate_s(self, state: State, kind: str) -> float:
        same = [r.wall_s for r in state.runs.values() if r.kind == kind]
        walls = same or [r.wall_s for r in state.runs.values()]
        return sum(walls) / len(walls) if walls else self.window.run_s + 10.0

    def run(self) -> Outcome:
        state = self.load_state()
        self.save_state(state)
        count = 0
        while (spec := next_run(self.request, state.throughputs())) is not None:
            estimate = self._estimate_s(state, spec.kind)
            if self.budget_s is not None and state.elapsed_s + estimate > self.budget_s:
                skipped = remaining(self.request, state.throughputs())
                log.warning(
                    "budget of %s: %s measured, the next run would take about %.0f s; skipped:\n  %s",
                    _clock(self.budget_s),
                    _clock(state.elapsed_s),
                    estimate,
                    "\n  ".join(skipped),
                )
                return Outcome(state, False, skipped, count)
            done = len(state.runs)
            # The CPU search's length is known only when it ends: it counts as one run to go.
            total = done + len(remaining(self.request, state.throughputs()))
            result = self._one(spec, state, done, total)
            state = state.with_run(spec.key, result)
            self.save_state(state)
            count += 1
            self.progress.finish(
                done + 1, total, state.elapsed_s, f"{spec.describe()}: {result.samples_per_s:.2f} samples/s"
            )
        return Outcome(state, True, [], count)

    def _setup(self, target: Target, cpus: int, key: str, sample: PlanSample | None = None) -> RunSetup:
        return RunSetup(
            target=target,
            cpus=cpus,
            directory=self.runs_dir / _safe(key),
            mem_gb=self.mem_gb,
            heartbeat_s=self.window.heartbeat_s,
            sample=sample,
        )

    def _one(self, spec: RunSpec, state: State, done: int, total: int) -> RunResult:
        if spec.kind in {"cpu", "plan"}:
            setups = [self._setup(self.target, spec.cpus, spec.key, spec.sample)]
        else:
            assert spec.partner is not None
            partner = self.partners[spec.partner]
            if spec.kind == "solo":
                setups = [self._setup(partner, spec.cpus, spec.key)]
            else:  # both on the same cores: they compete for them, as two jobs on one GPU do
                cores = tuple(sorted(os.sched_getaffinity(0)))[: spec.cpus]
                setups = [
                    RunSetup(
                        self.target,
                        spec.cpus,
                        self.runs_dir / _safe(spec.key) / "self",
                        self.mem_gb,
                        self.window.heartbeat_s,
                        cores=cores,
                    ),
                    RunSetup(
                        partner,
                        spec.cpus,
                        self.runs_dir / _safe(spec.key) / "partner",
                        self.mem_gb,
                        self.window.heartbeat_s,
                        cores=cores,
                    ),
                ]
        started = time.monotonic()

        def tick(elapsed: float) -> None:
            self.progress.show(done, total, state.elapsed_s + elapsed, f"{spec.describe()} ({elapsed:.0f} s)")

        rates = measure(self.launcher, setups, self.window, f"run {spec.key} ({spec.describe()})", tick)
        wall = time.monotonic() - started
        first = rates[0]
        return RunResult(
            kind=spec.kind,
            cpus=spec.cpus,
            samples_per_s=first.samples_per_s,
            steps_per_s=first.steps_per_s,
            beats=first.beats,
            window_s=first.window_s,
            wall_s=wall,
            partner_samples_per_s=rates[1].samples_per_s if len(rates) > 1 else None,
            partner_steps_per_s=rates[1].steps_per_s if len(rates) > 1 else None,
        )


def check_writable(out: Path) -> None:
    """--out must be creatable: its directory exists and is writable (checked before any run)."""
    parent = out.resolve().parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: directory {parent} does not exist")
    if out.is_dir():
        raise InputError(f"--out {out}: is a directory")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise InputError(f"--out {out}: not writable")
    probe = parent / f".{out.name}.probe-{os.getpid()}"
    try:
        write_atomic(probe, "")
    except OSError as e:
        raise InputError(f"--out {out}: cannot write in {parent}: {e.strerror}") from e
    finally:
        probe.unlink(missing_ok=True)


def data_size(directory: Path) -> tuple[float, float, int] | None:
    """(GB, mean KB per file, files) of the regular files under ``directory``; ``None`` if empty."""
    sizes = [p.stat().st_size for p in directory.rglob("*") if p.is_file()]
    if not sizes:
        return None
    total = sum(sizes)
    return total / 1024**3, total / len(sizes) / 1024, len(sizes)


def run_prepare(target: Target, output: Path) -> None:
    """The target's one-time preparation (the image example's JPEG files), before any run."""
    if target.prepare is None:
        return
    log.info("preparing %s: %s", target.label, " ".join(target.prepare))
    with open(output, "wb") as out:
        proc = subprocess.run(target.prepare, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise ProfilerError(
            f"preparing {target.label} failed (exit {proc.returncode}); "
            f"output ({output}):\n    {_tail(output)}"
        )


def write_outputs(files: Mapping[Path, str]) -> None:
    for path, text in files.items():
        write_atomic(path, text)


def dumps(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


__all__ = [
    "LocalLauncher",
    "Profiler",
    "ProfilerError",
    "Progress",
    "RunSetup",
    "SrunLauncher",
    "Target",
    "Window",
    "check_writable",
    "cpu_key",
    "data_size",
    "example_target",
    "measure",
    "run_prepare",
    "script_target",
    "target_from",
]
