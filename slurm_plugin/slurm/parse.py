"""Pure parsers of Slurm 22.05's output: ``squeue --json``, ``sinfo --json``,
``scontrol show job|node -o``, ``sacct -P`` and ``sbatch --parsable``.

They take text and return frozen records; a malformed document raises
:class:`SlurmParseError` naming the command and the field. Field meanings were checked
against captured real output (``tests/data/slurm/``): ``squeue --json``'s
``cpus_per_task`` is always null in 22.05, so ``cpus`` (the job's total) is used;
``gres_detail`` (running jobs only) lists, per allocated node in ``nodes`` order, the
GPU indices Slurm chose (``gpu:2(IDX:1-2)``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from planner.core import hostlist
from planner.core.errors import MosaicError
from planner.core.fields import loads_json


class SlurmParseError(MosaicError):
    """Slurm printed something the parser does not understand."""


# -- small pieces -----------------------------------------------------------------------

# Index and count fields are short numbers; a longer digit run is garbage, not a GPU (and
# int() refuses more than 4,300 digits anyway).
_RANGE = re.compile(r"^(\d{1,9})(?:-(\d{1,9}))?$")
# More GPU indices than any node has: a range like 0-100000000000 is refused, not built.
MAX_GPU_INDICES = 4096
MAX_UID = 0xFFFFFFFF
MAX_EPOCH_S = 253_402_300_799  # 9999-12-31T23:59:59Z: a later "time" is not one Slurm wrote
"""uid_t is 32 bits and ``(uid_t) -1`` is no user: a user id is below this."""
MAX_TIME_LIMIT_MIN = 365 * 24 * 60  # the longest time limit squeue --Format prints (minutes)


def expand_hostlist(text: str) -> tuple[str, ...]:
    """``n[1-3,5],m2`` -> ``(n1, n2, n3, n5, m2)`` (:mod:`planner.core.hostlist`, as a parse error)."""
    try:
        return hostlist.expand_hostlist(text)
    except hostlist.HostlistError as e:
        raise SlurmParseError(str(e)) from e


def expand_indices(text: str) -> tuple[int, ...]:
    """``0-1,3`` -> ``(0, 1, 3)``."""
    out: list[int] = []
    for item in text.split(","):
        r = _RANGE.match(item.strip())
        if r is None:
            raise SlurmParseError(f"GPU index list {text!r}: bad item {item!r}")
        lo, hi = int(r.group(1)), int(r.group(2) or r.group(1))
        if hi - lo >= MAX_GPU_INDICES or len(out) + hi - lo >= MAX_GPU_INDICES:
            raise SlurmParseError(f"GPU index list {text!r}: more than {MAX_GPU_INDICES} indices")
        out += range(lo, hi + 1)
    return tuple(out)


def gres_gpu_type(text: str) -> str:
    """The GPU type a node's GRES names (``gpu:a100:4`` -> ``a100``; ``gpu:4``: ``""``).

    Several typed entries (``gpu:a100:2,gpu:v100:2``) name them all, joined by ``+``."""
    types: list[str] = []
    for raw in text.split(","):
        item = re.sub(r"\(.*?\)", "", raw.strip())
        if item.startswith(("gres:", "gres/")):
            item = item[5:]
        fields = item.split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and not fields[1].isdigit() and fields[1] not in types:
            types.append(fields[1])
    return "+".join(types)


def gres_counts(text: str) -> dict[str, int]:
    """Count per GRES name in ``gres:gpu:2,gres:shard:1`` / ``gpu:a100:4`` / ``gpu:4(S:0)``."""
    counts: dict[str, int] = {}
    for raw in text.split(","):
        item = re.sub(r"\(.*?\)", "", raw.strip())
        if not item or item == "(null)":
            continue
        if item.startswith(("gres:", "gres/")):
            item = item[5:]
        fields = item.split(":")
        name = fields[0]
        count = 1
        if len(fields) > 1 and fields[-1].isdigit():
            if len(fields[-1]) > 9:
                raise SlurmParseError(f"GRES {text!r}: count {fields[-1][:20]}... is not a GRES count")
            count = int(fields[-1])
        counts[name] = counts.get(name, 0) + count
    return counts


# A shard job's entry names the GPU its shards belong to the same way (``shard:1(IDX:0)``,
# captured from Slurm 22.05 in tests/data/slurm/squeue_shard.json).
_GPU_DETAIL = re.compile(r"(?:gpu|shard)(?::[^:(,]+)?:(\d+)\(IDX:([^)]*)\)")


def gpu_indices(detail: str) -> tuple[int, ...]:
    """GPU indices in one ``gres_detail`` entry (``gpu:2(IDX:1-2)``, ``shard:1(IDX:0)``; none: ``()``)."""
    m = _GPU_DETAIL.search(detail)
    if m is None or m.group(2) in {"", "N/A"}:
        return ()
    return expand_indices(m.group(2))


def parse_memory_mb(text: str) -> int:
    """``8G`` / ``4096M`` / ``1T`` / ``512`` (MB) -> MB."""
    # At most 15 integer digits (a petabyte in MB is 10 digits): a longer run is garbage, and
    # float() of 400 digits is infinity, which round() cannot make an int of.
    m = re.fullmatch(r"(\d{1,15}(?:\.\d{1,15})?)([KMGT]?)", text.strip())
    if m is None:
        raise SlurmParseError(f"memory size {text!r} not understood")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    return round(float(m.group(1)) * scale)


def parse_time(text: str) -> float | None:
    """``2026-11-21T23:38:02`` (the controller's local time) -> epoch seconds."""
    text = text.strip()
    if text in {"", "Unknown", "None", "N/A"}:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as e:
        raise SlurmParseError(f"time {text!r} not understood") from e


def parse_sbatch_id(text: str) -> str:
    """``sbatch --parsable`` output (``123`` or ``123;cluster``) -> ``"123"``."""
    job_id = text.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmParseError(f"sbatch --parsable printed {text.strip()!r}, not a job id")
    return job_id


# -- JSON documents ---------------------------------------------------------------------


def _document(text: str, command: str, key: str) -> list[Mapping[str, Any]]:
    try:
        doc = loads_json(text)
    except json.JSONDecodeError as e:
        raise SlurmParseError(f"{command}: not valid JSON: {e.msg} at line {e.lineno}") from e
    except ValueError as e:  # nested too deeply, a number of more digits than Python converts
        raise SlurmParseError(f"{command}: not valid JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise SlurmParseError(f"{command}: no '{key}' list in the output")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"{command}: Slurm reported errors: {errors}")
    return [item for item in doc[key] if isinstance(item, dict)]


class _Reader:
    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SlurmParseError(f"{self.where}: '{key}' is {value!r}, expected {kind}")
        return value

    def req(self, key: str, kind: type | tuple[type, ...]) -> Any:
        if self.raw.get(key) is None:
            raise SlurmParseError(f"{self.where}: '{key}' missing")
        return self.get(key, kind)


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it (the fields Mosaic uses).

    ``requeues`` is Slurm's ``RestartCnt``: how often the job was requeued, one for each
    stop the controller applied (a preemption counts at its stop, before any resume) and
    for each requeue Mosaic did not ask for (a node lost, an operator's ``scontrol
    requeue``). It is what the planner is told as :attr:`Job.restarts
    <planner.core.model.Job.restarts>` of a live job; it is neither the simulator's restarts
    (:func:`planner.relaunch.classify`) nor the stops the restart rate limit counts.
    """

    id: str
    name: str
    partition: str
    state: str  # PENDING, RUNNING, COMPLETING, CANCELLED, ...
    reason: str
    priority: int  # 0: held
    gpus_per_node: int
    shards_per_node: int
    cpus: int  # total CPUs (requested while pending, allocated while running)
    mem_mb_per_node: int | None
    mem_mb_per_cpu: int | None
    num_nodes: int
    nodes: tuple[str, ...]  # allocated nodes (running)
    gpu_indices: tuple[tuple[str, tuple[int, ...]], ...]  # per allocated node (running)
    required_nodes: tuple[str, ...]
    features: str
    submit_time: float
    start_time: float | None
    requeues: int  # Slurm's RestartCnt: see the class docstring
    comment: str
    admin_comment: str
    tasks: int = 1  # the job's task count (Slurm fills it in when the user did not ask)
    tasks_per_node: int = 0  # --ntasks-per-node (0: not asked)
    gpus_per_task: int = 0  # --gpus-per-task (Slurm then refuses GPU updates)
    gpus_per_job: int = 0  # --gpus (likewise)
    user_id: int | None = None  # the job's user (None: not known); must own its status directory
    time_limit_s: float | None = None  # the job's time limit (--time) in seconds; None: unlimited

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.priority == 0

    @property
    def gpus_held_per_node(self) -> int:
        """GPUs the job occupies on each node: its ``gpu`` count, 1 for a shard job (Slurm
        22.05 puts all of a job's shards on a node on one GPU), or its share of the GPUs it
        asked per task or per job."""
        if self.gpus_per_node or self.shards_per_node:
            return self.gpus_per_node or 1
        # --gpus-per-task / --gpus: squeue shows no per-node count; tasks spread evenly.
        total = self.gpus_per_task * self.tasks or self.gpus_per_job
        return total // max(1, self.num_nodes)

    @property
    def is_pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def holds_resources(self) -> bool:
        """Running, or still releasing what it ran on."""
        return self.state in {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED"}

    def memory_mb_per_node(self) -> int | None:
        if self.mem_mb_per_node is not None:
            return self.mem_mb_per_node
        if self.mem_mb_per_cpu is not None:
            return self.mem_mb_per_cpu * max(1, self.cpus // max(1, self.num_nodes))
        return None


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """``squeue --json`` -> jobs in Slurm's order."""
    return [_job(raw) for raw in _document(text, "squeue --json", "jobs")]


def _job(raw: Mapping[str, Any]) -> SlurmJob:
    r = _Reader(raw, "squeue --json: job")
    number = r.req("job_id", int)
    if not 0 < number < 2**63:  # Slurm's job ids are 32-bit; str() of a longer one may raise
        raise SlurmParseError(f"{r.where}: 'job_id' is out of range for a job id")
    job_id = str(number)
    r.where = f"squeue --json: job {job_id}"
    state = r.req("job_state", str)
    tres = gres_counts(r.get("tres_per_node", str, ""))
    nodes = expand_hostlist(r.get("nodes", str, "")) if state != "PENDING" else ()
    details = [d for d in r.get("gres_detail", list, []) if isinstance(d, str)]
    indices: tuple[tuple[str, tuple[int, ...]], ...] = ()
    if details and len(details) == len(nodes):
        indices = tuple((node, gpu_indices(d)) for node, d in zip(nodes, details, strict=True))
    start = r.get("start_time", int, 0)
    return SlurmJob(
        id=job_id,
        name=r.get("name", str, ""),
        partition=r.get("partition", str, ""),
        state=state,
        reason=r.get("state_reason", str, ""),
        priority=r.get("priority", int, 0),
        gpus_per_node=tres.get("gpu", 0),
        shards_per_node=tres.get("shard", 0),
        cpus=r.get("cpus", int, 0),
        mem_mb_per_node=r.get("memory_per_node", int),
        mem_mb_per_cpu=r.get("memory_per_cpu", int),
        num_nodes=_requested_nodes(r, state),
        nodes=nodes,
        gpu_indices=indices,
        required_nodes=expand_hostlist(r.get("required_nodes", str, "")),
        features=r.get("features", str, ""),
        submit_time=_epoch(r.req("submit_time", int), "submit_time", r.where),
        start_time=_epoch(start, "start_time", r.where) if start and state != "PENDING" else None,
        requeues=r.get("restart_cnt", int, 0),
        comment=r.get("comment", str, ""),
        admin_comment=r.get("admin_comment", str, ""),
        tasks=r.get("tasks", int, 1),
        tasks_per_node=r.get("tasks_per_node", int, 0),
        gpus_per_task=gres_counts(r.get("tres_per_task", str, "")).get("gpu", 0),
        gpus_per_job=gres_counts(r.get("tres_per_job", str, "")).get("gpu", 0),
        user_id=_json_uid(r),
        time_limit_s=_json_time_limit(r),
    )


def _epoch(value: int, key: str, where: str) -> float:
    """A Unix time Slurm reported, in seconds (``float`` of a larger integer overflows)."""
    if not 0 <= value <= MAX_EPOCH_S:
        raise SlurmParseError(f"{where}: '{key}' is out of range for a Unix time")
    return float(value)


def _json_time_limit(r: _Reader) -> float | None:
    """``time_limit`` (minutes) in seconds; ``None``: no limit.

    Slurm 22.05 prints the number of minutes, or null for none (``--time`` not given and the
    partition's ``MaxTime=INFINITE``); later versions print ``{"set": bool, "infinite": bool,
    "number": minutes}``, where ``infinite`` or not ``set`` means none.
    """
    value = r.raw.get("time_limit")
    if isinstance(value, Mapping):
        inner = _Reader(value, f"{r.where}: 'time_limit'")
        if inner.get("infinite", bool, False) or not inner.get("set", bool, False):
            return None
        value = inner.req("number", int)
    elif value is not None:
        value = r.get("time_limit", int)
    return _minutes(value, "time_limit", r.where)


def _minutes(value: int | None, key: str, where: str) -> float | None:
    """A time limit Slurm reported in minutes, in seconds. ``None``, 0 (``--time=0``: no limit),
    Slurm's NO_VAL / INFINITE (uint32 0xfffffffe / 0xffffffff) and more than 365 days (which
    ``squeue --Format`` prints as ``INVALID``: read as no limit by both parsers) are no limit."""
    if value is None or value == 0 or MAX_TIME_LIMIT_MIN < value <= 0xFFFFFFFF:
        return None
    if not 0 < value <= MAX_TIME_LIMIT_MIN:
        raise SlurmParseError(f"{where}: '{key}' is {value}, not a time limit in minutes")
    return value * 60.0


def _json_uid(r: _Reader) -> int | None:
    uid: int | None = r.get("user_id", int)
    if uid is not None and not 0 <= uid < MAX_UID:
        raise SlurmParseError(f"{r.where}: 'user_id' is {uid}, not a user id")
    return uid


# -- squeue --noheader --Format text ------------------------------------------------------

SQUEUE_FIELDS = (
    "JobID",
    "Partition",
    "State",
    "Reason",
    "PriorityLong",
    "tres-per-node",
    "tres-per-task",
    "tres-per-job",
    "NumCPUs",
    "MinMemory",
    "tres-alloc",
    "NumNodes",
    "NodeList",
    "ReqNodes",
    "Feature",
    "SubmitTime",
    "StartTime",
    "TimeLimit",
    "RestartCnt",
    "NumTasks",
    "NTPerNode",
    "UserId",
    "Name",
    "Comment",
    "admin_comment",
)
"""What ``squeue --Format`` prints for each job (:func:`parse_squeue_text`), in this order."""


def parse_squeue_text(
    text: str, separator: str, reuse: dict[tuple[str, ...], SlurmJob] | None = None
) -> list[SlurmJob]:
    """``squeue --noheader --array --Format`` of :data:`SQUEUE_FIELDS`, each field followed by
    ``separator`` -> jobs by job id, as :func:`parse_squeue_json` reads them (but ``gpu_indices``,
    which squeue does not print: :func:`parse_scontrol_gres_detail`).

    Free text (names, comments) may hold any character, newlines and ``|`` included, so the
    separator is a random token chosen for each call: user text cannot contain it. Times must
    be epoch seconds (``SLURM_TIME_FORMAT=%s``). ``--array`` prints each array task; tasks still
    sharing one record print its job id, and only the first is kept (``--json`` lists the record
    once). An empty comment and the comment ``(null)`` both read as empty.

    ``reuse`` (the caller keeps it between calls) maps each record's fields to its job: a
    record printed exactly as last time is not parsed again; it then holds this call's records.
    """
    if len(separator) < 8:
        raise SlurmParseError(f"squeue text: separator {separator!r} is too short to be unguessable")
    width = len(SQUEUE_FIELDS)
    jobs: dict[str, SlurmJob] = {}
    known = reuse if reuse is not None else {}
    current: dict[tuple[str, ...], SlurmJob] = {}
    records = text.split(separator + "\n")
    if records[-1].strip():
        raise SlurmParseError(f"squeue text: output ends inside a record: {records[-1][:80]!r}")
    for k, record in enumerate(records[:-1], start=1):
        cells = record.split(separator)
        if len(cells) != width:
            raise SlurmParseError(f"squeue text: record {k} has {len(cells)} fields, expected {width}")
        job_id = cells[0].strip()
        if job_id in jobs:
            continue
        key = tuple(cells)
        job = known.get(key)
        if job is None:
            if not job_id.isdigit() or len(job_id) > 20:  # Slurm's job ids are 32-bit
                raise SlurmParseError(f"squeue text: record {k}: JobID {job_id[:40]!r} is not a job id")
            job = _text_job(job_id, cells)
        jobs[job_id] = current[key] = job
    if reuse is not None:
        reuse.clear()
        reuse.update(current)
    return sorted(jobs.values(), key=lambda j: int(j.id))


_EMPTY = frozenset({"", "(null)", "N/A"})
_NO_VAL = 0xFFFFFFFE
_UID = re.compile(r"[0-9]{1,10}")
_COUNTS = frozenset({"NumTasks", "NTPerNode", "NumCPUs", "NumNodes", "RestartCnt"})
_F = {name: k for k, name in enumerate(SQUEUE_FIELDS)}


def _text_job(job_id: str, cells: list[str]) -> SlurmJob:
    where = f"squeue text: job {job_id}"

    def text(key: str) -> str:
        value = cells[_F[key]]
        return "" if value in _EMPTY else value

    def integer(key: str, default: int = 0) -> int:
        value = cells[_F[key]].strip()
        if value in _EMPTY:
            return default
        if not value.isdigit() or len(value) > 20:  # Slurm writes 64-bit numbers at most
            raise SlurmParseError(f"{where}: {key} is {value[:40]!r}, expected a number")
        number = int(value)
        # Slurm's NO_VAL / INFINITE (uint32 0xfffffffe / 0xffffffff): a count it has not
        # worked out yet, e.g. NumTasks of a job submitted an instant ago (``--json`` omits it).
        return default if key in _COUNTS and number >= _NO_VAL else number

    state = cells[_F["State"]].strip()
    if not state:
        raise SlurmParseError(f"{where}: no State")
    submit = integer("SubmitTime", -1)
    if submit < 0:
        raise SlurmParseError(f"{where}: no SubmitTime")
    nodes = expand_hostlist(text("NodeList")) if state != "PENDING" else ()
    tres = _tres(text("tres-alloc"))
    num_nodes = integer("NumNodes", 1)
    if state == "PENDING" and tres.get("node", "").isdigit() and int(tres["node"]) > 0:
        num_nodes = int(tres["node"])  # what the job asked (see _requested_nodes)
    cpus = integer("NumCPUs")
    per_node, per_cpu = _text_memory(text("MinMemory"), tres.get("mem", ""), num_nodes, cpus)
    start = integer("StartTime")
    gpus, shards = _gres(text("tres-per-node"))
    return SlurmJob(
        id=job_id,
        name=cells[_F["Name"]],
        partition=text("Partition"),
        state=state,
        reason=text("Reason"),
        priority=integer("PriorityLong"),
        gpus_per_node=gpus,
        shards_per_node=shards,
        cpus=cpus,
        mem_mb_per_node=per_node,
        mem_mb_per_cpu=per_cpu,
        num_nodes=num_nodes,
        nodes=nodes,
        gpu_indices=(),
        required_nodes=expand_hostlist(text("ReqNodes")),
        features=text("Feature"),
        submit_time=_epoch(submit, "SubmitTime", where),
        start_time=_epoch(start, "StartTime", where) if start and state != "PENDING" else None,
        requeues=integer("RestartCnt"),
        comment=text("Comment"),
        admin_comment=text("admin_comment"),
        tasks=integer("NumTasks", 1),
        tasks_per_node=integer("NTPerNode"),
        gpus_per_task=_gres(text("tres-per-task"))[0],
        gpus_per_job=_gres(text("tres-per-job"))[0],
        user_id=_text_uid(cells[_F["UserId"]], where),
        time_limit_s=_text_time_limit(cells[_F["TimeLimit"]].strip(), where),
    )


# squeue's TimeLimit: [days-][hours:]minutes:seconds, e.g. 5:00, 1:30:00, 2-03:04:00.
_DURATION = re.compile(r"(?:([0-9]{1,6})-)?(?:([0-9]{1,2}):)?([0-9]{1,2}):([0-9]{2})")
# No limit: INFINITE, NO_VAL, or (squeue prints it for a limit beyond 365 days) INVALID.
# --json gives those long limits in minutes; both parsers read them as no limit.
_NO_LIMIT = _EMPTY | {"UNLIMITED", "NOT_SET", "INVALID"}


def _text_time_limit(value: str, where: str) -> float | None:
    """squeue's ``TimeLimit`` in seconds (``--json``'s ``time_limit`` gives it in minutes);
    ``None``: no limit."""
    if value in _NO_LIMIT:
        return None
    match = _DURATION.fullmatch(value)
    if match is None:
        raise SlurmParseError(
            f"{where}: TimeLimit is {value[:40]!r}, expected [days-][hours:]minutes:seconds"
        )
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return float(total) if 0 < total <= MAX_TIME_LIMIT_MIN * 60 else None


def _text_uid(value: str, where: str) -> int:
    """squeue 22.05's ``UserId`` column: the bare number (``1001``; scontrol's ``name(1001)``
    form is not what squeue prints). Anything else is refused: this number decides whose
    status directory the controller trusts."""
    uid = _uid(value)
    if uid is None:
        raise SlurmParseError(f"{where}: UserId is {value[:40]!r}, expected a numeric user id")
    return uid


@lru_cache(maxsize=1024)
def _uid(value: str) -> int | None:
    """A cluster has few users, hence the cache (a parse of a new queue reads every job)."""
    if _UID.fullmatch(value) is None or int(value) >= MAX_UID:
        return None
    return int(value)


@lru_cache(maxsize=1024)
def _gres(text: str) -> tuple[int, int]:
    """(GPUs, shards) in a TRES-per-x string; a cluster has few distinct ones, hence the cache."""
    counts = gres_counts(text)
    return counts.get("gpu", 0), counts.get("shard", 0)


@lru_cache(maxsize=1024)
def _tres(text: str) -> Mapping[str, str]:
    return MappingProxyType(tres_map(text))


@lru_cache(maxsize=1024)
def _text_memory(minimum: str, total: str, num_nodes: int, cpus: int) -> tuple[int | None, int | None]:
    """(per node, per CPU) MB, as ``--json``'s ``memory_per_node`` / ``memory_per_cpu``.

    squeue prints the job's memory request without saying whether it is per node or per
    CPU; the job's memory TRES (``mem=`` in ``tres-alloc``: the request times the CPUs or
    the nodes) tells them apart. Where both products agree (one CPU per node) the job's
    memory per node is the same either way and it reads as per node.
    """
    mb = parse_memory_mb(minimum) if minimum else 0
    if mb == 0:
        return None, None  # --json: neither (no request, or --mem=0)
    if total and cpus and mb * cpus != mb * max(1, num_nodes) and parse_memory_mb(total) == mb * cpus:
        return None, mb
    return mb, None


_DETAIL_LINE = re.compile(r"^     Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(.*)$")


def parse_scontrol_gres_detail(text: str, job: SlurmJob) -> tuple[str, ...] | None:
    """``scontrol -d show job ID`` -> the job's ``gres_detail`` per node, in ``job.nodes`` order,
    as ``squeue --json`` lists it (``gpu:2(IDX:1-2)``); ``None`` where the output does not show
    one GRES entry for each of the job's nodes.

    The per-node lines (``     Nodes=n[1-2] CPU_IDs=0-3 Mem=8192 GRES=gpu:2(IDX:0-1)``) follow
    the ``JOB_GRES=`` line. The job's name, the only free text printed before them, is
    skipped by its exact value (from squeue), so a name cannot fake these lines.
    """
    head = f"JobId={job.id} "
    if not text.startswith(head):
        raise SlurmParseError(f"scontrol show job {job.id}: output does not start with {head.strip()!r}")
    at = text.find("JobName=")
    marker = f"JobName={job.name}\n"
    if at < 0 or "\n" in text[:at] or not text.startswith(marker, at):
        raise SlurmParseError(
            f"scontrol show job {job.id}: its first line does not end in JobName={job.name!r}"
        )
    lines = text[at + len(marker) :].split("\n")
    try:
        start = next(k for k, line in enumerate(lines) if line.startswith("   JOB_GRES="))
    except StopIteration:
        return None
    per_node: dict[str, str] = {}
    for line in lines[start + 1 :]:
        m = _DETAIL_LINE.match(line)
        if m is None:
            break
        for node in expand_hostlist(m.group(1)):
            per_node[node] = m.group(2)
    if set(per_node) != set(job.nodes):
        return None
    if not any(per_node.values()):
        return ()  # no GRES on any node (``JOB_GRES=(null)``): --json lists none
    return tuple(per_node[node] for node in job.nodes)


def with_gres_detail(job: SlurmJob, details: tuple[str, ...] | None) -> SlurmJob:
    """``job`` with the GPU indices of its ``gres_detail`` (``squeue --json``'s rule: one entry per node)."""
    if not details or len(details) != len(job.nodes):
        return replace(job, gpu_indices=())
    return replace(
        job, gpu_indices=tuple((n, gpu_indices(d)) for n, d in zip(job.nodes, details, strict=True))
    )


def _requested_nodes(r: _Reader, state: str) -> int:
    """The job's node count. For a pending job ``node_count`` is slurmctld's estimate, which
    can exceed what the job asked (``--ntasks=2 -c 2 --gres=gpu:2`` reads 2 and runs on 1
    node, doubling its apparent GPUs); the requested TRES (``node=1``) is what it asked."""
    count: int = r.get("node_count", int, 1)
    if state == "PENDING":
        requested = tres_map(r.get("tres_req_str", str, "")).get("node", "")
        if requested.isdigit() and int(requested) > 0:
            return int(requested)
    return count


UNUSABLE_NODE_STATES = frozenset({"down", "drained", "draining", "fail", "failing", "future", "unknown"})
UNUSABLE_NODE_FLAGS = frozenset({"DRAIN", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED", "NOT_RESPONDING"})


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` shows it."""

    name: str
    state: str  # idle, mixed, allocated, down, ...
    flags: tuple[str, ...]  # DRAIN, COMPLETING, ...
    cpus: int
    mem_mb: int
    gpus: int
    shards: int
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    alloc_cpus: int
    alloc_mem_mb: int
    gpus_used: int
    reason: str
    gres_gpu_type: str = ""  # the type its GRES names (``gpu:a100:4``); "" when untyped

    @property
    def shards_per_gpu(self) -> int:
        """``gres/shard`` per GPU (0: the node offers no shards)."""
        return self.shards // self.gpus if self.gpus else 0

    @property
    def usable(self) -> bool:
        """Capacity the planner may count: not down, drained, draining or failing."""
        return self.state not in UNUSABLE_NODE_STATES and not (set(self.flags) & UNUSABLE_NODE_FLAGS)


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """``sinfo --json`` -> one record per node (sinfo repeats a node per partition)."""
    seen: dict[str, SlurmNode] = {}
    for raw in _document(text, "sinfo --json", "nodes"):
        node = _node(raw)
        seen.setdefault(node.name, node)
    return list(seen.values())


def _node(raw: Mapping[str, Any]) -> SlurmNode:
    r = _Reader(raw, "sinfo --json: node")
    name = r.req("name", str)
    r.where = f"sinfo --json: node {name}"
    gres_text = r.get("gres", str, "")
    gres = gres_counts(gres_text)
    used = gres_counts(r.get("gres_used", str, ""))
    features = r.get("active_features", str, "") or r.get("features", str, "")
    return SlurmNode(
        name=name,
        state=r.req("state", str).lower(),
        flags=tuple(f for f in r.get("state_flags", list, []) if isinstance(f, str)),
        cpus=r.req("cpus", int),
        mem_mb=r.req("real_memory", int),
        gpus=gres.get("gpu", 0),
        shards=gres.get("shard", 0),
        features=tuple(f for f in features.split(",") if f),
        partitions=tuple(p for p in r.get("partitions", list, []) if isinstance(p, str)),
        alloc_cpus=r.get("alloc_cpus", int, 0),
        alloc_mem_mb=r.get("alloc_memory", int, 0),
        gpus_used=used.get("gpu", 0),
        reason=r.get("reason", str, ""),
        gres_gpu_type=gres_gpu_type(gres_text),
    )


# -- key=value and parsable text ----------------------------------------------------------

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/]*=")


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """``scontrol show job|node -o``: one ``Key=Value ...`` record per line.

    A token without ``Key=`` continues the previous value (``OS=Linux 6.1 #1 SMP``).
    """
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record: dict[str, str] = {}
        last: str | None = None
        for token in line.split(" "):
            if _KEY.match(token):
                key, value = token.split("=", 1)
                record[key] = value
                last = key
            elif last is not None and token:
                record[last] += " " + token
        records.append(record)
    return records


def parse_parsable(text: str, command: str = "sacct -P", delimiter: str = "|") -> list[dict[str, str]]:
    """``sacct -P`` / ``squeue -o`` output (fields separated by ``delimiter``, a header row)
    -> rows by column.

    A field may hold a line break (a job's comment): a line with fewer fields than the
    header continues on the next one, which works when the last column is one that never
    holds a line break (:data:`~slurm_plugin.slurm.commands.SACCT_FIELDS` ends with
    ``NodeList``). A row with more fields than the header (a field holding the delimiter)
    is an error."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return []
    header = lines[0].split(delimiter)

    def wrong(start: int, cells: list[str]) -> SlurmParseError:
        return SlurmParseError(f"{command}: line {start} has {len(cells)} fields, the header {len(header)}")

    return [
        dict(zip(header, cells, strict=True))
        for _, cells in parsable_records(lines[1:], len(header), delimiter, wrong, first_line=2)
    ]


def parsable_records(
    lines: Sequence[str],
    width: int,
    delimiter: str,
    wrong: Callable[[int, list[str]], SlurmParseError],
    first_line: int = 1,
) -> list[tuple[int, list[str]]]:
    """Parsable lines (``sacct -P``'s, no header) -> (first line number, ``width`` fields) per
    record. A field may hold a line break (a job's comment): a line with fewer fields goes on
    on the next one, which works when the last field never holds one. ``wrong(line, fields)``
    is the error for a record with more fields than ``width``, or one cut off at the end."""
    records: list[tuple[int, list[str]]] = []
    pending: list[str] | None = None  # a record whose last field goes on after a line break
    start = 0
    for k, line in enumerate(lines, start=first_line):
        if pending is None:
            if not line.strip():
                continue
            cells, start = line.split(delimiter), k
        else:
            more = line.split(delimiter)
            cells = [*pending[:-1], pending[-1] + "\n" + more[0], *more[1:]]
        if len(cells) > width:
            raise wrong(start, cells)
        if len(cells) < width:
            pending = cells
            continue
        pending = None
        records.append((start, cells))
    if pending is not None:
        raise wrong(start, pending)
    return records


def tres_map(text: str) -> dict[str, str]:
    """``billing=4,cpu=4,gres/gpu=2,mem=8G,node=1`` -> ``{"cpu": "4", "gres/gpu": "2", ...}``."""
    out = {}
    for item in text.split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            out[key.strip()] = value.strip()
    return out
