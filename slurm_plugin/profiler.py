"""``mosaic profile``'s side effects: start real runs of a job, read their heartbeats, keep state.

The decisions (which run next, when the search stops, what the document says) are pure,
in :mod:`profiles.profiler`; what runs and how a run starts (targets, launchers: local
processes pinned to ``C`` cores, or ``srun``) is :mod:`slurm_plugin.profile_launch`. This
module carries the runs out:

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
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from planner.core.errors import InputError
from profiles.profiler.measure import Throughput, heartbeats, throughput
from profiles.profiler.runs import PlanSample, Request, RunSpec, next_run, remaining
from profiles.profiler.state import RunResult, State, check_identity, state_from_json
from slurm_plugin.files import read_text, write_atomic, write_json
from slurm_plugin.profile_launch import (
    Launcher,
    LocalLauncher,
    ProfilerError,
    RunSetup,
    SrunLauncher,
    Target,
    example_target,
    safe_name,
    script_target,
    target_from,
)
from wrapper import status

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0
POLL_S = 0.5


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
    # mosaic-run starts each local rank in its own session, and a rank's own children (DataLoader
    # or process-pool workers) in the rank's: killing the run's group, or mosaic-run's death
    # signal to its ranks, does not reach them, and they would outlive the run. So every
    # descendant is collected first and killed with the group.
    descendants = _descendants(proc.pid)
    if proc.poll() is None and graceful:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE_S)
    # Also what outlived the group's leader (a rank left behind by mosaic-run).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in [*descendants, *_descendants(proc.pid)]:
        with contextlib.suppress(psutil.Error):
            child.kill()
    proc.wait()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


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
            directory=self.runs_dir / safe_name(key),
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
                        self.runs_dir / safe_name(spec.key) / "self",
                        self.mem_gb,
                        self.window.heartbeat_s,
                        cores=cores,
                    ),
                    RunSetup(
                        partner,
                        spec.cpus,
                        self.runs_dir / safe_name(spec.key) / "partner",
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


__all__ = [
    "Launcher",
    "LocalLauncher",
    "Profiler",
    "ProfilerError",
    "Progress",
    "RunSetup",
    "SrunLauncher",
    "Target",
    "Window",
    "check_writable",
    "data_size",
    "example_target",
    "measure",
    "run_prepare",
    "script_target",
    "target_from",
]
