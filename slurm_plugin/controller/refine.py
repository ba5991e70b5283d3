"""Online refinement: running jobs' heartbeats correct their models' profiles, round by round.

Each tick, before planning, the controller reads every running managed job's newest
heartbeats (``<spool>/status/<job id>/heartbeat.jsonl``, :mod:`wrapper.status`): the
``samples_per_s`` a job reports at the allocation it holds now (GPU type and count, CPUs
and memory per GPU, execution plan). It keeps one :class:`~profiles.observed.ObservedPoint`
per run of a job (job id, plan version) in the state store, the newest ``keep`` per model,
shape and CPU count, so a controller restart keeps them; then builds the scheduler for this round
on a :class:`~profiles.store.ProfileStore` refined by every stored point
(:func:`profiles.observed.refine_store`). The planner stays pure: it only ever sees a
profile store.

Which heartbeats count: ``event`` ``heartbeat`` records of the run the controller
started last (their ``plan_version`` is the job's current one in the state store), written
after Slurm started the job, with a finite positive ``samples_per_s``; the first rated
one of a run is skipped (it spans start-up: imports, data loader warm-up, compilation),
and of the rest the median of the newest :data:`HEARTBEATS_USED` is the run's rate. Jobs
sharing their GPUs are skipped (the rate then measures the pair, not the allocation), and
so are jobs that name no model (``#MOSAIC --model``): black boxes scheduled under the
default model name are different programs, whose rates must not make one curve.

Heartbeats are written by the job, in a directory the job owns: they are untrusted. A
status directory that is a link, not a directory, or owned by another user than the job's
(squeue's ``UserId``, when known) is ignored; only the last :data:`TAIL_BYTES` of the file
are read (never a FIFO or a device, :func:`wrapper.status.read_job_file`) and, from its
end, at most :data:`MAX_LINES` lines parsed (:func:`newest_run_records`); lines that are not
JSON objects, and rates that are not positive finite numbers or exceed
:data:`MAX_SAMPLES_PER_S`, are skipped. Bad rates are logged once per job run, an ignored
directory once per job and reason (with the tick's other readers,
:func:`slurm_plugin.planfile.log_status_ignored`); none fails the tick.
"""

from __future__ import annotations

import logging
import math
import stat
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.fields import loads_json
from planner.core.model import Job
from planner.pipeline import Scheduler
from profiles.observed import ObservedPoint, Shape, refine_store
from profiles.schema import plan_key
from profiles.store import ProfileStore
from slurm_plugin import planfile
from slurm_plugin.controller.observe import Observation
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.store import Store
from wrapper import status

log = logging.getLogger(__name__)

KEEP_PER_SHAPE = 16
"""Observations kept per (model, shape, CPUs per GPU): the newest runs' rates."""
HEARTBEATS_USED = 5
"""The newest rated heartbeats of a run whose median is its rate."""
TAIL_BYTES = 64 << 10
"""How much of the end of a heartbeat log is read (a heartbeat is a few hundred bytes)."""
MAX_LINES = 64
"""The most lines of a heartbeat log parsed per job and tick (from the end)."""
MAX_SAMPLES_PER_S = 1e9
"""A rate above this is not a measurement (a billion samples per second)."""


class HeartbeatError(InputError):
    """A job's status directory cannot be trusted (names the directory)."""


def read_heartbeat_lines(spool: str | Path, job_id: str, owner_uid: int | None = None) -> list[bytes]:
    """The whole lines at the end of the job's heartbeat log (the last :data:`TAIL_BYTES`),
    oldest first.

    Raises :class:`HeartbeatError` (an :class:`InputError`) for a job id that cannot name a
    directory, a status path that is not a directory (a link included) or, with
    ``owner_uid``, a directory another user owns. No directory, no file: no lines.
    """
    try:
        directory = status.status_dir(spool, job_id)
    except InputError as e:
        raise HeartbeatError(str(e)) from e
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise HeartbeatError(f"{directory}: {e.strerror}") from e
    if not stat.S_ISDIR(info.st_mode):
        raise HeartbeatError(f"{directory}: not a directory")
    if owner_uid is not None and info.st_uid != owner_uid:
        raise HeartbeatError(f"{directory}: owned by uid {info.st_uid}, not the job's user {owner_uid}")
    data = status.read_job_file(directory / status.HEARTBEATS, TAIL_BYTES)
    if data is None:
        return []
    lines = data.splitlines()
    return lines[1:] if len(data) >= TAIL_BYTES else lines  # the tail starts inside a line


def newest_run_records(lines: Sequence[bytes], plan_version: int) -> list[dict[str, Any]]:
    """The JSON-object records at the end of ``lines`` that may belong to the run
    ``plan_version``, oldest first; pure.

    Read from the end, and only as far as needed: at most :data:`MAX_LINES` lines, up to a
    record of an earlier run (a lower ``plan_version``), or once :data:`HEARTBEATS_USED`
    + 1 heartbeats of this run with a ``samples_per_s`` are in (then the oldest of them,
    which :func:`run_rate` skips as if it were the run's first, is not among the newest
    :data:`HEARTBEATS_USED` anyway). Parsing every line of every job's log each tick would
    cost more than the rest of the tick.
    """
    out: list[dict[str, Any]] = []
    rated = 0
    for raw in reversed(lines[-MAX_LINES:]):
        try:
            record = loads_json(raw)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        version = record.get("plan_version")
        if isinstance(version, int) and not isinstance(version, bool) and version < plan_version:
            break
        out.append(record)
        if (
            record.get("event") == "heartbeat"
            and version == plan_version
            and record.get("samples_per_s") is not None
        ):
            rated += 1
            if rated > HEARTBEATS_USED:
                break
    out.reverse()
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def run_rate(
    records: Iterable[Mapping[str, Any]], plan_version: int, started_s: float | None
) -> tuple[float | None, int]:
    """(the run's samples/s, how many of its heartbeats had a bad rate); pure.

    The run's heartbeats are those with ``event`` ``heartbeat``, this ``plan_version`` and
    a ``time`` not before ``started_s``; the first with a rate is skipped (start-up) and the
    median of the newest :data:`HEARTBEATS_USED` good rates is the answer (``None``: none).
    """
    rates: list[float] = []
    bad = 0
    skipped_first = False
    for r in records:
        if r.get("event") != "heartbeat" or r.get("plan_version") != plan_version:
            continue
        if isinstance(r.get("plan_version"), bool):
            continue
        when = _number(r.get("time"))
        if when is None or (started_s is not None and when < started_s):
            continue
        raw = r.get("samples_per_s")
        if raw is None:
            continue  # the first heartbeat of a run has no rate yet
        rate = _number(raw)
        if rate is None or not 0 < rate <= MAX_SAMPLES_PER_S:
            bad += 1
            continue
        if not skipped_first:
            skipped_first = True
            continue
        rates.append(rate)
    if not rates:
        return None, bad
    return statistics.median(rates[-HEARTBEATS_USED:]), bad


def _job_user(sj: SlurmJob) -> int | None:
    return sj.user_id


class Refiner:
    """Records observed throughput each tick and builds the round's scheduler on it.

    ``build`` makes a scheduler for a profile store (``build_scheduler(config, store)``);
    ``base`` is the store without observations (built-in plus the site's documents);
    ``owner_uid(job)`` is the uid that must own a job's status directory (``None``: not
    checked); by default the job's user as squeue shows it (:attr:`SlurmJob.user_id`), so a
    directory another user created for the job's id before it ran is ignored.
    """

    def __init__(
        self,
        store: Store,
        base: ProfileStore,
        build: Callable[[ProfileStore], Scheduler],
        spool: str | Path,
        *,
        keep: int = KEEP_PER_SHAPE,
        owner_uid: Callable[[SlurmJob], int | None] | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.store = store
        self.base = base
        self.build = build
        self.spool = Path(spool)
        self.keep = keep
        self.owner_uid = owner_uid or _job_user
        self.profiles = base
        self._scheduler: Scheduler | None = None
        self._basis: tuple[ObservedPoint, ...] | None = None
        self._logged: set[tuple[str, int, str]] = set()

    def scheduler(self, obs: Observation) -> Scheduler:
        """Record what the running jobs report now; the scheduler on the refined profiles
        (rebuilt only when the stored observations changed)."""
        self.store.record_observations(self.observe(obs), self.keep)
        points = tuple(self.store.observations())
        if self._scheduler is None or points != self._basis:
            self.profiles = refine_store(self.base, points)
            self._scheduler = self.build(self.profiles)
            self._basis = points
        return self._scheduler

    def observe(self, obs: Observation) -> list[tuple[int, ObservedPoint]]:
        """(plan version, point) for each running managed job whose current run reported a rate."""
        jobs = {j.id: j for j in obs.snapshot.jobs}
        gpu_types = {n.name: n.gpu_type for n in obs.snapshot.nodes}
        self._logged = {k for k in self._logged if k[0] in obs.running}
        out = []
        for job_id, sj in sorted(obs.running.items()):
            job = jobs.get(job_id)
            record = self.store.job(job_id)
            if job is None or record is None or record.plan_version < 1:
                continue
            if not isinstance((record.meta or {}).get("model"), str):
                continue  # no #MOSAIC --model: a black box, whose rate says nothing about others
            point = self._point(sj, job, record.plan_version, gpu_types, obs.time_s)
            if point is not None:
                out.append((record.plan_version, point))
        return out

    def _point(
        self, sj: SlurmJob, job: Job, version: int, gpu_types: Mapping[str, str], now: float
    ) -> ObservedPoint | None:
        a = job.assignment
        if a is None or a.num_gpus == 0 or a.cpus <= 0 or a.shares_with or sj.start_time is None:
            return None
        types = {gpu_types.get(node) for node, _ in a.gpus}
        if len(types) != 1 or None in types:
            return None
        try:
            lines = read_heartbeat_lines(self.spool, sj.id, self.owner_uid(sj))
        except HeartbeatError as e:
            planfile.log_status_ignored(self.spool, sj.id, e)  # once per job and reason
            return None
        records = newest_run_records(lines, version)
        rate, bad = run_rate(records, version, sj.start_time)
        if bad:
            self._log_once(
                sj.id, version, "rates", "job %s: %d heartbeat(s) with a samples_per_s that is not "
                "a positive finite number ignored", sj.id, bad,
            )  # fmt: skip
        if rate is None:
            return None
        return ObservedPoint(
            model=self.base.model_key(job.model),
            shape=Shape(
                str(types.pop()),
                a.num_gpus,
                job.batch_size,
                plan_key(a.plan),
                len({node for node, _ in a.gpus}),
            ),
            cpus_per_gpu=a.cpus / a.num_gpus,
            mem_gb_per_gpu=a.mem_gb / a.num_gpus,
            samples_per_s_per_gpu=rate / a.num_gpus,
            time_s=now,  # the controller's clock, not the job's: which points are newest
            job_id=sj.id,
        )

    def _log_once(self, job_id: str, version: int, what: str, message: str, *args: Any) -> None:
        key = (job_id, version, what)
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)
