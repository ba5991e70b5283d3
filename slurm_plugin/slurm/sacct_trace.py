"""A site's ``sacct`` history as a simulator trace (``mosaic trace from-sacct``), and its
nodes as a cluster file (``mosaic cluster from-slurm``). Pure: text and records in, trace
rows and TOML out; the commands run in :mod:`slurm_plugin.cli.trace_cmd`.

The sacct text is what :func:`slurm_plugin.slurm.commands.sacct_trace` prints
(``--parsable2 --noheader --allusers --duplicates --allocations``, the fields of
:data:`~slurm_plugin.slurm.commands.SACCT_TRACE_FIELDS`), captured from Slurm 22.05 in
``tests/data/slurm/sacct_trace.txt``. The rules:

* one trace job per ``JobID``: the runs of a requeued job (one record each with
  ``--duplicates``) are one job whose run time is the sum of its runs' ``ElapsedRaw``, first
  submitted at its earliest ``Submit``; array tasks (``123_4``) are jobs of their own;
* a job none of whose records has both a ``Start`` and an ``AllocTRES`` never ran (a job
  cancelled while pending has a ``Start``, the time it was cancelled, and no allocation):
  skipped and counted, as are jobs not finished (running, or requeued and waiting to run
  again: their run time is not known yet) and jobs that held no GPU; a failed,
  cancelled or timed-out run keeps the time it ran; a run shorter than Slurm's one-second
  resolution counts as one second (a trace's run times are positive);
* ``submit_time_s`` counts from the earliest submission kept; GPUs and their type come from
  ``AllocTRES`` (``gres/gpu=4``, ``gres/gpu:a100=4``; several types: no type), CPUs and
  memory too (extra columns ``cpus``, ``mem_gb``, which the trace reader ignores);
  ``time_limit_s`` from ``Timelimit`` (``UNLIMITED``, ``Partition_Limit``, ``INVALID``, and
  the year Slurm's backfill writes to a job without a limit, :data:`BACKFILL_NO_LIMIT_S`: none);
  ``tenant`` is the ``Account``; ``guaranteed`` when the job's ``QOS`` is one of the given
  ones or its Mosaic metadata says so;
* ``model``, ``batch_size``, ``plan`` and ``plans`` come from the metadata ``mosaic
  submit`` writes into the job's comment (:func:`slurm_plugin.directives.decode_comment`);
  other jobs (and metadata the trace reader would refuse) get :data:`NEUTRAL_MODEL`, which
  the simulator runs with the neutral profile.

Times are epoch seconds (``SLURM_TIME_FORMAT=%s``) or sacct's ISO local time. Every value
this does not understand is a :class:`~slurm_plugin.slurm.parse.SlurmParseError` naming the
source, line and field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.core.execplan import PlanError, plan_from_mapping
from planner.traces.csvio import format_trace
from planner.traces.records import TraceJob
from slurm_plugin.directives import decode_comment
from slurm_plugin.slurm import parse
from slurm_plugin.slurm.commands import SACCT_TRACE_FIELDS
from slurm_plugin.slurm.parse import SlurmParseError, parsable_records

NEUTRAL_MODEL = "unknown"
"""The model of a job without Mosaic's metadata: no profile has this name, so the simulator
runs it with the neutral profile (and lists it in ``unknown_models``)."""

EXTRA_COLUMNS = ("user", "state", "runs", "cpus", "mem_gb")
"""Columns :func:`format_site_trace` adds after the trace's own (the trace reader ignores them)."""

SKIP_NEVER_STARTED = "never started"
SKIP_UNFINISHED = "not finished"
SKIP_NO_GPU = "held no GPU"

_EMPTY = frozenset({"", "Unknown", "None", "N/A", "(null)"})
_NO_LIMIT = frozenset({"UNLIMITED", "Partition_Limit", "INVALID", "NOT_SET"}) | _EMPTY
_JOB_ID = re.compile(r"\d{1,12}(?:_(?:\d{1,9}|\[[^\]]*\]))?(?:\+\d{1,6})?")
_EPOCH = re.compile(r"\d{1,12}")
_GPU_KEY = re.compile(r"gres/gpu(?::([^=,]+))?")
_UNFINISHED = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "PENDING"}
)
"""A job whose last record is in one of these states may run (again): not in the trace yet."""
MAX_ELAPSED_S = 100 * 365 * 86400
"""A longer run is not one Slurm measured."""
BACKFILL_NO_LIMIT_S = parse.MAX_TIME_LIMIT_MIN * 60.0
"""The limit Slurm's backfill pass writes to a job it starts that declared none, in a partition
without one (a year, ``YEAR_MINUTES``): no limit, as the same job started by the main
scheduler (``UNLIMITED``) and as a longer one (:func:`parse._text_time_limit`)."""


@dataclass(frozen=True)
class SiteJob:
    """One trace job and what sacct said about it beyond the trace's columns."""

    trace: TraceJob
    user: str
    state: str  # the last run's state (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...)
    runs: int  # runs that started (more than one: requeued)
    cpus: int | None
    mem_mb: int | None


@dataclass(frozen=True)
class SacctTrace:
    jobs: tuple[SiteJob, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> jobs
    requeued: int = 0  # jobs kept with more than one run
    array_tasks: int = 0
    unread_comments: int = 0  # Mosaic comments whose metadata a trace cannot carry

    @property
    def trace_jobs(self) -> list[TraceJob]:
        return [j.trace for j in self.jobs]


@dataclass(frozen=True)
class _Record:
    line: int
    job_id: str
    user: str
    account: str
    qos: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    elapsed: float | None
    time_limit_s: float | None
    gpus: int
    gpu_type: str | None
    cpus: int | None
    mem_mb: int | None
    comment: str
    allocated: bool  # AllocTRES names something: Slurm gave the job resources

    @property
    def ran(self) -> bool:
        """Whether this record is a run. A job cancelled while pending has a ``Start`` (the
        time it was cancelled, as its ``End``) but no allocation (captured from Slurm 22.05)."""
        return self.start is not None and self.allocated


def split_records(
    text: str, fields: Sequence[str] = SACCT_TRACE_FIELDS, delimiter: str = "|", source: str = "sacct"
) -> list[tuple[int, dict[str, str]]]:
    """``sacct --parsable2 --noheader`` text -> (line, row by field) per record.

    A record with fewer fields than ``fields`` goes on after a line break (a comment's), which
    works as the last field never holds one; more fields than ``fields`` is an error."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def wrong(start: int, cells: list[str]) -> SlurmParseError:
        return SlurmParseError(f"{source}:{start}: {len(cells)} fields, expected {len(fields)}")

    return [
        (start, dict(zip(fields, cells, strict=True)))
        for start, cells in parsable_records(lines, len(fields), delimiter, wrong)
    ]


class _Fields:
    def __init__(self, row: Mapping[str, str], source: str, line: int) -> None:
        self.row = row
        self.source = source
        self.line = line

    def fail(self, name: str, message: str) -> SlurmParseError:
        return SlurmParseError(f"{self.source}:{self.line}: field {name!r}: {message}")

    def text(self, name: str) -> str:
        try:
            return self.row[name].strip()
        except KeyError:
            raise SlurmParseError(f"{self.source}:{self.line}: no field {name!r} (sacct --format)") from None

    def time(self, name: str) -> float | None:
        value = self.text(name)
        if value in _EMPTY:
            return None
        if _EPOCH.fullmatch(value):
            return float(value) if 0 < int(value) <= parse.MAX_EPOCH_S else None
        try:
            when = parse.parse_time(value)
        except SlurmParseError:
            raise self.fail(name, f"{value[:40]!r} is not a time (epoch seconds or ISO)") from None
        except (OverflowError, OSError, ValueError):
            raise self.fail(name, f"{value[:40]!r} is out of range") from None
        return when

    def seconds(self, name: str) -> float | None:
        value = self.text(name)
        if value in _EMPTY or value == "INVALID":
            return None
        if not _EPOCH.fullmatch(value) or int(value) > MAX_ELAPSED_S:
            raise self.fail(name, f"{value[:40]!r} is not a number of seconds")
        return float(value)

    def time_limit(self, name: str) -> float | None:
        value = self.text(name)
        if value in _NO_LIMIT:
            return None
        limit = parse._text_time_limit(value, f"{self.source}:{self.line}: field {name!r}")
        return None if limit == BACKFILL_NO_LIMIT_S else limit

    def tres(self, name: str) -> tuple[int, str | None, int | None, int | None]:
        """(GPUs, their type or ``None``, CPUs, memory MB) of a TRES list."""
        value = self.text(name)
        if value in _EMPTY:
            return 0, None, None, None
        untyped: int | None = None
        typed: dict[str, int] = {}
        cpus: int | None = None
        mem_mb: int | None = None
        for item in value.split(","):
            key, sep, amount = item.partition("=")
            key, amount = key.strip(), amount.strip()
            if not sep or not key:
                raise self.fail(name, f"{item[:40]!r} is not KEY=VALUE")
            gpu = _GPU_KEY.fullmatch(key)
            if gpu is not None or key == "cpu":
                if not amount.isdigit() or len(amount) > 9:
                    raise self.fail(name, f"{key}={amount[:40]!r} is not a count")
                if key == "cpu":
                    cpus = int(amount)
                elif gpu is not None and gpu.group(1):
                    typed[gpu.group(1).lower()] = typed.get(gpu.group(1).lower(), 0) + int(amount)
                else:
                    untyped = int(amount)
            elif key == "mem":
                try:
                    mem_mb = parse.parse_memory_mb(amount)
                except SlurmParseError as e:
                    raise self.fail(name, str(e)) from None
        gpus = untyped if untyped is not None else sum(typed.values())
        gpu_type = next(iter(typed)) if len(typed) == 1 else None
        return gpus, gpu_type, cpus, mem_mb


def _record(line: int, row: Mapping[str, str], source: str) -> _Record:
    f = _Fields(row, source, line)
    job_id = f.text("JobID")
    if not _JOB_ID.fullmatch(job_id):
        raise f.fail("JobID", f"{job_id[:40]!r} is not a job or array task id (a step? use --allocations)")
    state = f.text("State").split(" ")[0]
    if not state:
        raise f.fail("State", "is empty")
    gpus, gpu_type, cpus, mem_mb = f.tres("AllocTRES")
    return _Record(
        line=line,
        job_id=job_id,
        user=f.text("User"),
        account=f.text("Account"),
        qos=f.text("QOS"),
        state=state,
        submit=f.time("Submit"),
        start=f.time("Start"),
        end=f.time("End"),
        elapsed=f.seconds("ElapsedRaw"),
        time_limit_s=f.time_limit("Timelimit"),
        gpus=gpus,
        gpu_type=gpu_type,
        cpus=cpus,
        mem_mb=mem_mb,
        comment=row.get("Comment", ""),
        allocated=f.text("AllocTRES") not in _EMPTY,
    )


def anonymous(kind: str, name: str) -> str:
    """A stable stand-in for a user or account name (the same name, the same stand-in)."""
    if not name:
        return ""
    return kind + hashlib.sha256(f"mosaic:{kind}:{name}".encode("utf-8", "surrogatepass")).hexdigest()[:10]


def _metadata(comment: str) -> tuple[dict[str, Any], bool]:
    """The trace columns a Mosaic comment gives, and whether the comment was Mosaic's but
    unusable (its metadata would not pass the trace reader)."""
    meta = decode_comment(comment.strip())
    if meta is None:
        return {}, False
    out: dict[str, Any] = {}
    model = meta.get("model")
    if isinstance(model, str) and model.strip() and "\n" not in model:
        out["model"] = model.strip()
    batch = meta.get("batch_size")
    if batch is not None:
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            return {}, True
        out["batch_size"] = batch
    try:
        plan = meta.get("plan")
        if plan is not None:
            if not isinstance(plan, dict):
                return {}, True
            plan_from_mapping(plan, "plan")
            out["plan"] = plan
        plans = meta.get("plans")
        if plans is not None:
            if not isinstance(plans, list) or not all(isinstance(p, dict) for p in plans):
                return {}, True
            for k, p in enumerate(plans):
                plan_from_mapping(p, f"plan {k}")
            out["plans"] = tuple(plans)
    except PlanError:
        return {}, True
    if meta.get("guaranteed") is True:
        out["guaranteed"] = True
    return out, False


def trace_from_sacct(
    text: str,
    *,
    fields: Sequence[str] = SACCT_TRACE_FIELDS,
    delimiter: str = "|",
    guaranteed_qos: Iterable[str] = (),
    anonymise: bool = False,
    source: str = "sacct",
) -> SacctTrace:
    """sacct's text (see the module's docstring) -> the site's trace."""
    by_id: dict[str, list[_Record]] = {}
    for line, row in split_records(text, fields, delimiter, source):
        record = _record(line, row, source)
        by_id.setdefault(record.job_id, []).append(record)
    guaranteed_qos = frozenset(q.strip() for q in guaranteed_qos if q.strip())
    skipped: Counter[str] = Counter()
    kept: list[tuple[float, _Record, list[_Record]]] = []
    for records in by_id.values():
        ran = [r for r in records if r.ran]
        last = records[-1]
        if not ran:
            skipped[SKIP_NEVER_STARTED] += 1
            continue
        if last.state in _UNFINISHED or (last.ran and last.end is None):
            skipped[SKIP_UNFINISHED] += 1
            continue
        if ran[-1].gpus < 1:
            skipped[SKIP_NO_GPU] += 1
            continue
        submits = [r.submit for r in records if r.submit is not None]
        first = min(submits) if submits else min(r.start for r in ran if r.start is not None)
        kept.append((first, last, ran))
    origin = min((k[0] for k in kept), default=0.0)
    jobs: list[SiteJob] = []
    unread = 0
    for first, last, ran in sorted(kept, key=lambda k: (k[0], k[2][0].line)):
        run_s = sum(_run_time(r) for r in ran)
        alloc = ran[-1]
        meta, bad = _metadata(last.comment)
        unread += bad
        user, account = last.user, last.account
        if anonymise:
            user, account = anonymous("u", user), anonymous("a", account)
        trace = TraceJob(
            job_id=last.job_id,
            submit_time_s=float(round(first - origin, 3)),
            num_gpus=alloc.gpus,
            duration_s=float(max(1.0, run_s)),
            model=meta.get("model", NEUTRAL_MODEL),
            batch_size=meta.get("batch_size"),
            gpu_type=alloc.gpu_type,
            tenant=account or None,
            guaranteed=last.qos in guaranteed_qos or meta.get("guaranteed", False),
            time_limit_s=last.time_limit_s,
            plan=meta.get("plan"),
            plans=meta.get("plans", ()),
        )
        jobs.append(SiteJob(trace, user, last.state, len(ran), alloc.cpus, alloc.mem_mb))
    return SacctTrace(
        jobs=tuple(jobs),
        skipped=dict(skipped),
        requeued=sum(1 for j in jobs if j.runs > 1),
        array_tasks=sum(1 for j in jobs if "_" in j.trace.job_id),
        unread_comments=unread,
    )


def _run_time(r: _Record) -> float:
    """One run's seconds: ``ElapsedRaw``, else End - Start."""
    if r.elapsed is not None:
        return r.elapsed
    if r.start is not None and r.end is not None:
        return max(0.0, r.end - r.start)
    return 0.0


def format_site_trace(jobs: Sequence[SiteJob]) -> str:
    """The trace CSV (:func:`planner.traces.csvio.format_trace`) with :data:`EXTRA_COLUMNS`."""
    rows = list(csv.reader(io.StringIO(format_trace([j.trace for j in jobs]))))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*rows[0], *EXTRA_COLUMNS])
    for row, job in zip(rows[1:], jobs, strict=True):
        mem_gb = "" if job.mem_mb is None else f"{job.mem_mb / 1024:g}"
        cpus = "" if job.cpus is None else str(job.cpus)
        writer.writerow([*row, job.user, job.state, job.runs, cpus, mem_gb])
    return out.getvalue()


# -- the cluster ------------------------------------------------------------------------------

DEFAULT_GPU_TYPE = "gpu"
"""The type of a node whose GRES names none and whose features name no GPU type."""


@dataclass(frozen=True)
class NodeShape:
    gpus: int
    gpu_type: str
    cpus: int
    mem_gb: float
    gpu_mem_gb: float | None = None


_GB = re.compile(r"^(\d+(?:\.\d+)?)gb?$")


def named_gpu_mem_gb(node: parse.SlurmNode) -> float | None:
    """GPU memory in GB where Slurm names it: a word ``<N>gb`` or ``<N>g`` of the GRES type (as
    NVML autodetection names GPUs, ``gpu:nvidia_a100-sxm4-80gb:8`` -> 80; or ``gpu:a100_80g:8``);
    ``None`` when it names none, or two different sizes. Slurm reports no GPU memory otherwise,
    and node features are not read for it (``100g`` there is as likely a network)."""
    words = re.split(r"[^a-z0-9.]+", node.gres_gpu_type.lower())
    sizes = {float(m.group(1)) for w in words if (m := _GB.match(w)) is not None}
    size = sizes.pop() if len(sizes) == 1 else None
    return size if size is not None and size > 0 else None


def node_gpu_type(node: parse.SlurmNode, known_types: Iterable[str], default: str = DEFAULT_GPU_TYPE) -> str:
    """The node's GPU type: its GRES's (``gpu:a100:4``), else the one feature that names a known
    GPU type (the test cluster's way), else its only feature, else ``default``."""
    if node.gres_gpu_type:
        return node.gres_gpu_type.lower()
    known = {t.lower() for t in known_types}
    named = [f.lower() for f in node.features if f.lower() in known]
    if len(named) == 1:
        return named[0]
    if len(node.features) == 1 and node.features[0].strip():
        return node.features[0].strip().lower()
    return default


def cluster_toml(
    nodes: Iterable[parse.SlurmNode],
    known_types: Iterable[str] = (),
    default_gpu_type: str = DEFAULT_GPU_TYPE,
    source: str = "sinfo",
) -> tuple[str, Counter[str]]:
    """Nodes with GPUs as the ``[[nodes]]`` TOML :func:`planner.cluster.cluster_from_toml` reads,
    identical ones grouped (``count``), groups in the order their first node comes; and how
    many nodes were left out, by reason (no GPU)."""
    known = tuple(known_types)
    groups: dict[NodeShape, list[str]] = {}
    left_out: Counter[str] = Counter()
    for node in nodes:
        if node.gpus < 1:
            left_out["no GPU"] += 1
            continue
        shape = NodeShape(
            node.gpus,
            node_gpu_type(node, known, default_gpu_type),
            max(1, node.cpus),
            round(node.mem_mb / 1024, 3),
            named_gpu_mem_gb(node),
        )
        groups.setdefault(shape, []).append(node.name)
    lines = [f"# From {source}: {sum(len(v) for v in groups.values())} GPU nodes in {len(groups)} group(s)."]
    for shape, names in groups.items():
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        shown = "".join(c if c.isprintable() else "?" for c in shown)
        lines += [
            "",
            f"# {shown}",
            "[[nodes]]",
            f"count = {len(names)}",
            f"gpus = {shape.gpus}",
            f"gpu_type = {_toml_string(shape.gpu_type)}",
            f"cpus = {shape.cpus}",
            f"mem_gb = {shape.mem_gb:g}",
        ]
        if shape.gpu_mem_gb is not None:
            lines.append(f"gpu_mem_gb = {shape.gpu_mem_gb:g}")
    return "\n".join(lines) + "\n", left_out


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string (a lone surrogate, which TOML cannot hold, as U+FFFD)."""
    text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else f"\\U{ord(c):08x}" for c in escaped) + '"'


__all__ = [
    "NEUTRAL_MODEL",
    "SacctTrace",
    "SiteJob",
    "cluster_toml",
    "format_site_trace",
    "split_records",
    "trace_from_sacct",
]
