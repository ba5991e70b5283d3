"""The Slurm backend behind a small protocol, and its CLI implementation.

:class:`SlurmClient` is what the observer, the actuator, ``mosaic submit`` and
``mosaic report`` need from Slurm. :class:`CliSlurm` implements it with Slurm's
commands (argv builders + parsers + one runner); tests can put a fake behind the same
protocol. (pyslurm would be a second implementation where it matches the installed
Slurm; it does not for Debian 12's 22.05.)
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

from slurm_plugin.slurm import commands, parse
from slurm_plugin.slurm.runner import DEFAULT_TIMEOUT_S, SlurmCommandError, run

DETAIL_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED"})
"""States whose ``squeue --json`` record carries ``gres_detail`` (the GPU indices)."""

DETAIL_CALLS_MAX = 32
"""Running jobs not seen before read one by one with ``scontrol`` up to this many."""
UPDATE_BUSY = "try again in a bit"
"""What scontrol update says while a restarted slurmctld has not yet had a job's accounting
index from slurmdbd ("Job update not available right now, the DB index is being set, try
again in a bit"): the update is refused for seconds, then accepted."""
UPDATE_BUSY_TRIES = 10  # one second apart
UPDATE_BUSY_QUIET_S = 60.0
"""After an update was refused as busy :data:`UPDATE_BUSY_TRIES` times, other updates refused
as busy within this many seconds are not tried again (each refusal takes slurmctld up to 5 s):
a restarted slurmctld would otherwise hold a round for a minute per job. The next round plans
them again."""

RunKey = tuple[str, float | None, tuple[str, ...]]


def _run_key(job: parse.SlurmJob) -> RunKey:
    """One run of a job: a requeued job starts again with a new start time."""
    return (job.id, job.start_time, job.nodes)


class SlurmClient(Protocol):
    def jobs(self) -> list[parse.SlurmJob]: ...

    def nodes(self) -> list[parse.SlurmNode]: ...

    def update(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> None: ...

    def requeue_hold(self, job_ids: Sequence[str]) -> None: ...

    def hold(self, job_ids: Sequence[str]) -> None: ...

    def release(self, job_ids: Sequence[str]) -> None: ...

    def signal(self, job_id: str, name: str) -> None: ...

    def submit(
        self, script: str, extra: Sequence[str], comment: str | None, env: Mapping[str, str]
    ) -> str: ...

    def sacct_runs(self, since: str, until: str | None) -> list[dict[str, str]]: ...


class CliSlurm:
    """Slurm through its commands. ``env`` points them at a cluster (``SLURM_CONF``)."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.env = dict(env or {})
        self.timeout_s = timeout_s
        self._indices: dict[RunKey, tuple[tuple[str, tuple[int, ...]], ...]] = {}
        self._parsed: dict[tuple[str, ...], parse.SlurmJob] = {}  # parse_squeue_text's reuse
        self.sleep: Callable[[float], None] = time.sleep
        self.clock: Callable[[], float] = time.monotonic
        self._busy_gave_up_at: float | None = None

    def _run(self, argv: list[str], extra_env: Mapping[str, str] | None = None) -> str:
        env = {**self.env, **(extra_env or {})}
        return run(argv, env=env, timeout_s=self.timeout_s).stdout

    def jobs(self) -> list[parse.SlurmJob]:
        """Every job, as ``squeue --json`` shows it, read with ``squeue --Format`` (far cheaper)
        and, for running jobs, the GPU indices from ``scontrol -d show job``, remembered for the
        run (Slurm does not move a running job's GPUs). More than :data:`DETAIL_CALLS_MAX`
        running jobs not seen before (a controller's first tick on a busy cluster) take their
        indices from one ``squeue --json`` instead."""
        separator = "~" + secrets.token_hex(12) + "~"
        text = self._run(commands.squeue_text(separator), commands.SQUEUE_TEXT_ENV)
        jobs = parse.parse_squeue_text(text, separator, self._parsed)
        running = {j.id: j for j in jobs if j.state in DETAIL_STATES and j.nodes}
        fresh = [j for j in running.values() if _run_key(j) not in self._indices]
        if 0 < len(fresh) <= DETAIL_CALLS_MAX:
            with ThreadPoolExecutor(max_workers=min(8, len(fresh))) as pool:
                found = list(pool.map(self._job_indices, fresh))
            for j, indices in zip(fresh, found, strict=True):
                if indices is not None:
                    self._indices[_run_key(j)] = indices
            # scontrol showed no GRES line for each node: what --json says.
            fresh = [j for j, indices in zip(fresh, found, strict=True) if indices is None]
        if fresh:
            by_id = {j.id: j for j in self.jobs_json()}
            for j in fresh:
                seen = by_id.get(j.id)
                if seen is not None and _run_key(seen) == _run_key(j):
                    self._indices[_run_key(j)] = seen.gpu_indices
        self._indices = {key: v for key, v in self._indices.items() if key[0] in running}
        return [
            replace(j, gpu_indices=self._indices.get(_run_key(j), ())) if j.id in running else j for j in jobs
        ]

    def jobs_json(self) -> list[parse.SlurmJob]:
        """Every job from ``squeue --json`` (what :meth:`jobs` reproduces, at several times the cost)."""
        return parse.parse_squeue_json(self._run(commands.squeue_json()))

    def _job_indices(self, job: parse.SlurmJob) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
        """The job's GPU indices per node; ``None`` where scontrol's output has no GRES line for
        each of the job's nodes."""
        try:
            text = self._run(commands.job_detail(job.id))
        except SlurmCommandError as e:
            if "Invalid job id" in e.stderr:
                return ()  # it ended since squeue looked: no GPUs to place
            raise
        details = parse.parse_scontrol_gres_detail(text, job)
        return None if details is None else parse.with_gres_detail(job, details).gpu_indices

    def nodes(self) -> list[parse.SlurmNode]:
        return parse.parse_sinfo_json(self._run(commands.sinfo_json()))

    def update(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> None:
        """``scontrol update``; refused as busy (:data:`UPDATE_BUSY`), it is tried again up to
        :data:`UPDATE_BUSY_TRIES` times: the same update, so trying again changes nothing else.
        Not tried again within :data:`UPDATE_BUSY_QUIET_S` of an update that was."""
        for attempt in range(UPDATE_BUSY_TRIES):
            try:
                self._run(commands.update_job(job_ids, fields))
                self._busy_gave_up_at = None
                return
            except SlurmCommandError as e:
                if UPDATE_BUSY not in e.stderr:
                    raise
                gave_up = self._busy_gave_up_at
                if gave_up is not None and self.clock() - gave_up < UPDATE_BUSY_QUIET_S:
                    raise
                if attempt == UPDATE_BUSY_TRIES - 1:
                    self._busy_gave_up_at = self.clock()
                    raise
                self.sleep(1.0)

    def requeue_hold(self, job_ids: Sequence[str]) -> None:
        self._run(commands.requeue_hold(job_ids))

    def hold(self, job_ids: Sequence[str]) -> None:
        self._run(commands.hold(job_ids))

    def release(self, job_ids: Sequence[str]) -> None:
        self._run(commands.release(job_ids))

    def signal(self, job_id: str, name: str) -> None:
        self._run(commands.signal(job_id, name))

    def submit(self, script: str, extra: Sequence[str], comment: str | None, env: Mapping[str, str]) -> str:
        return parse.parse_sbatch_id(self._run(commands.sbatch(script, extra, comment), env))

    def sacct_trace_text(self, since: str, until: str | None, partitions: Sequence[str]) -> tuple[str, str]:
        """What ``mosaic trace from-sacct`` reads (:func:`commands.sacct_trace`), and the
        separator between its fields: a random token, as in :meth:`sacct_runs`."""
        separator = "~" + secrets.token_hex(12) + "~"
        argv = commands.sacct_trace(since, until, partitions, delimiter=separator)
        return self._run(argv, commands.SACCT_TRACE_ENV), separator

    def sacct_runs(self, since: str, until: str | None) -> list[dict[str, str]]:
        """Every run since ``since``. Fields are separated by a random token, not ``|``: a
        user's ``--comment`` or job name may hold ``|`` (or a line break), and one such job
        must not break every report."""
        separator = "~" + secrets.token_hex(12) + "~"
        text = self._run(commands.sacct_runs(since, until, delimiter=separator))
        return parse.parse_parsable(text, "sacct -P", separator)
