"""The controller's state store: SQLite in WAL mode under the spool directory.

What Slurm does not remember for Mosaic lives here: each job's attained GPU service,
progress, original GPU request, Mosaic metadata and the policy state the planner hands
back every round (the planner keeps none between rounds); each round's plan and
whether it was fully applied; and an action log keyed by request id, so a controller
that crashed half-way through a round finds, on restart, which round to complete.

Every write is one transaction (``with self.db``), so a crash leaves the store at the
last committed state; WAL lets ``mosaic status`` read while the controller writes.

The file carries its schema version (SQLite's ``user_version``, :data:`SCHEMA_VERSION`). A
file that is not a SQLite database (garbage, truncated), another program's database, or a
store of a newer schema is refused when it is opened, and any SQLite failure later (a full
disk, a file damaged under the controller) is a :class:`StoreError` naming the file, so
the controller's tick reports it instead of crashing and takes no Slurm action on it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.core.errors import MosaicError
from profiles.observed import ObservedPoint, Shape
from slurm_plugin.controller.faults import crash_point

SCHEMA_VERSION = 1
"""The store's schema version (``PRAGMA user_version``). A store written before versions
were recorded reads 0 and is version 1 when its tables are Mosaic's."""
QUEUE_PARTS = ("order", "reasons", "policy_state")
"""The parts of a round plan with an entry per queued job: what :meth:`Store.compact_rounds`
drops from every round but the newest."""
_COMPACTED = '{"compacted": true'  # how a compacted plan's text starts (json.dumps keeps key order)
_IDS_PER_QUERY = 500  # job ids bound in one SELECT (SQLite allows 32,766 variables; older builds 999)
_SELECT_JOBS_BY_ID = f"SELECT * FROM jobs WHERE job_id IN ({','.join('?' * _IDS_PER_QUERY)})"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    num_gpus INTEGER NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    attained_gpu_s REAL NOT NULL DEFAULT 0,
    progress REAL,
    accounted_until_s REAL,
    pending_since_s REAL,
    policy_state TEXT,
    plan_version INTEGER NOT NULL DEFAULT 0,
    first_seen_s REAL NOT NULL,
    finished_s REAL
);
CREATE TABLE IF NOT EXISTS rounds (
    round_id INTEGER PRIMARY KEY,
    time_s REAL NOT NULL,
    status TEXT NOT NULL,           -- applying | done | dry-run
    plan TEXT NOT NULL,             -- the RoundPlan JSON
    actions INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS actions (
    request_id TEXT PRIMARY KEY,
    round_id INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,             -- stop | start | hold
    status TEXT NOT NULL,           -- planned | done | skipped | failed
    detail TEXT NOT NULL DEFAULT '',
    time_s REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_by_job ON actions (job_id, kind, status, time_s);
CREATE TABLE IF NOT EXISTS ticks (
    tick_id INTEGER PRIMARY KEY AUTOINCREMENT,
    time_s REAL NOT NULL,
    ok INTEGER NOT NULL,
    round_id INTEGER,
    error TEXT,
    duration_s REAL
);
CREATE TABLE IF NOT EXISTS observations (   -- measured throughput of running jobs (online refinement)
    job_id TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    model TEXT NOT NULL,
    shape TEXT NOT NULL,            -- JSON: gpu_type, num_gpus, batch_size, plan
    cpus_per_gpu REAL NOT NULL,
    mem_gb_per_gpu REAL NOT NULL,
    samples_per_s_per_gpu REAL NOT NULL,
    time_s REAL NOT NULL,
    PRIMARY KEY (job_id, plan_version)  -- one point per run, updated while it runs
);
CREATE INDEX IF NOT EXISTS observations_by_point ON observations (model, shape, cpus_per_gpu, time_s);
CREATE INDEX IF NOT EXISTS jobs_by_finish ON jobs (finished_s);   -- Store.prune_history
CREATE TABLE IF NOT EXISTS counters (       -- Prometheus counters (metrics file), kept across restarts
    name TEXT PRIMARY KEY,
    value REAL NOT NULL
);
"""


ALREADY_RUNNING = "(already running as planned)"
"""The end of an applied start's detail when Slurm already ran the job as planned: the start
made no new run (``mosaic report`` does not give it one)."""


@dataclass(frozen=True)
class HistoryPruned:
    """What :meth:`Store.prune_history` deleted, per table."""

    jobs: int
    rounds: int
    actions: int
    ticks: int


class StoreError(MosaicError):
    """The state store cannot be opened, read or written (names the file and what to do)."""


MOVE_AWAY = (
    "move it away (the controller then starts an empty store: attained service, policy state "
    "and round history are lost; jobs in Slurm are not) or restore it from a backup"
)


class _Cursor(sqlite3.Cursor):
    """A cursor whose SQLite errors are :class:`StoreError` (rows are read at C speed, as
    they come: a store damaged under a running controller can still raise ``sqlite3``'s
    own error while they are read, which the tick reports too)."""

    path = ""

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        with _named(self.path):
            super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        with _named(self.path):
            super().executemany(sql, seq)
        return self


class _Connection(sqlite3.Connection):
    """A connection whose SQLite errors, commits included, are :class:`StoreError`."""

    path = ""

    def cursor(self, factory: Any = None) -> Any:
        cur = super().cursor(factory or _Cursor)
        cur.path = self.path
        return cur

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> Any:
        return self.cursor().executemany(sql, seq)

    def executescript(self, script: str, /) -> Any:
        with _named(self.path):
            return super().executescript(script)

    def __exit__(self, *exc: Any) -> Any:
        with _named(self.path):
            return super().__exit__(*exc)


class _named:
    """Turns a SQLite error into a :class:`StoreError` naming the store's file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if isinstance(error, sqlite3.Error):
            raise StoreError(_describe(self.path, error)) from error


def _describe(path: str, error: sqlite3.Error) -> str:
    text = str(error)
    if isinstance(error, sqlite3.DatabaseError) and "not a database" in text:
        return f"{path}: not a Mosaic state store (not a SQLite database: {text}); {MOVE_AWAY}"
    if "malformed" in text or "corrupt" in text:
        return f"{path}: the state store is damaged ({text}); {MOVE_AWAY}"
    if "full" in text:
        return f"{path}: cannot write the state store ({text}): free space on its file system"
    return f"{path}: state store: {text}"


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    num_gpus: int
    meta: Mapping[str, Any]
    attained_gpu_s: float
    progress: float | None
    accounted_until_s: float | None
    pending_since_s: float | None
    policy_state: Mapping[str, Any] | None
    plan_version: int
    first_seen_s: float
    finished_s: float | None


@dataclass(frozen=True)
class RoundRecord:
    round_id: int
    time_s: float
    status: str
    plan: Mapping[str, Any]
    actions: int
    error: str | None


class Store:
    """One SQLite database file; safe to open from several processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _named(str(self.path)):
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, factory=_Connection)
        db.path = str(self.path)
        self.db = db
        try:
            self._check_schema()
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            self.db.close()
            raise
        self.db.isolation_level = "DEFERRED"
        self._seen: dict[str, tuple[tuple[Any, ...], JobRecord]] = {}
        self._compacted_upto = 0  # rounds up to this id were compacted by this process

    def _check_schema(self) -> None:
        """Refuse a database this Mosaic cannot read: a newer schema, or another program's."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: state store schema version {version}, written by a newer Mosaic (this "
                f"one reads version {SCHEMA_VERSION}): run that Mosaic's controller, or {MOVE_AWAY}"
            )
        problems = [" ".join(str(r[0]).split()) for r in self.db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            raise StoreError(f"{self.path}: the state store is damaged ({'; '.join(problems)}); {MOVE_AWAY}")
        tables = {
            str(r[0]): str(r[1])
            for r in self.db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return  # a new store
        ours = set(_TABLE_COLUMNS)
        missing = sorted(name for name in ("jobs", "rounds", "actions", "ticks") if name not in tables)
        if missing:
            raise StoreError(
                f"{self.path}: not a Mosaic state store (no table {', '.join(missing)}; "
                f"tables: {', '.join(sorted(tables)) or 'none'}); {MOVE_AWAY}"
            )
        for name in sorted(ours & set(tables)):
            columns = [str(r[1]) for r in self.db.execute(f"PRAGMA table_info({name})")]
            if columns != list(_TABLE_COLUMNS[name]):
                raise StoreError(
                    f"{self.path}: not a Mosaic state store of schema version {SCHEMA_VERSION} (table "
                    f"{name} has columns {', '.join(columns)}); {MOVE_AWAY}"
                )

    def close(self) -> None:
        self.db.close()

    # -- jobs -------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        row = self.db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else _job_record(row)

    def jobs(self, ids: Iterable[str] | None = None) -> dict[str, JobRecord]:
        """The records of the jobs ``ids`` that the store has (every job's when ``None``).

        The controller asks each tick for the jobs Slurm lists now, not for the whole history
        (which grows by every job ever seen: reading and caching it cost seconds and hundreds
        of MB at 100,000 rows). A row unchanged since the last call keeps its decoded record:
        most rows have not changed since the last tick.
        """
        seen, self._seen = self._seen, {}
        out = {}
        for row in self._job_rows(ids):
            known = seen.get(row[0])
            record = known[1] if known is not None and known[0] == row else _job_record(row)
            self._seen[row[0]] = (row, record)
            out[row[0]] = record
        return out

    def _job_rows(self, ids: Iterable[str] | None) -> Iterator[tuple[Any, ...]]:
        if ids is None:
            yield from self.db.execute("SELECT * FROM jobs")
            return
        wanted = list(dict.fromkeys(ids))
        for k in range(0, len(wanted), _IDS_PER_QUERY):
            chunk = wanted[k : k + _IDS_PER_QUERY]
            # Always _IDS_PER_QUERY variables (the last id repeated): one SQL text, so one
            # prepared statement. A text per chunk length filled the sqlite3 module's cache
            # (128 statements per connection) with up to 128 statements of ~80 KB each, and
            # the controller's RSS rose by ~10 MB over a day of ticks.
            chunk += [chunk[-1]] * (_IDS_PER_QUERY - len(chunk))
            yield from self.db.execute(_SELECT_JOBS_BY_ID, chunk)

    def add_job(self, job_id: str, num_gpus: int, meta: Mapping[str, Any], now: float) -> None:
        """Record a job on first sight (its original GPU request); later calls keep the first."""
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, num_gpus, meta, first_seen_s, pending_since_s) "
                "VALUES (?, ?, ?, ?, ?)",
                (job_id, num_gpus, json.dumps(dict(meta)), now, now),
            )

    def add_jobs(self, jobs: Sequence[tuple[str, int, Mapping[str, Any]]], now: float) -> None:
        """:meth:`add_job` for many jobs in one transaction."""
        with self.db:
            self.db.executemany(
                "INSERT OR IGNORE INTO jobs (job_id, num_gpus, meta, first_seen_s, pending_since_s) "
                "VALUES (?, ?, ?, ?, ?)",
                [(job_id, gpus, json.dumps(dict(meta)), now, now) for job_id, gpus, meta in jobs],
            )

    def forget_jobs(self, job_ids: Sequence[str]) -> None:
        """Drop the records of ``job_ids`` (an earlier job's, whose id a new job now has); the
        action log keeps their history."""
        with self.db:
            self.db.executemany("DELETE FROM jobs WHERE job_id = ?", [(j,) for j in job_ids])
        for job_id in job_ids:
            self._seen.pop(job_id, None)

    def set_request(self, job_id: str, num_gpus: int) -> None:
        """Replace the job's GPU request (``mosaic resize``: the controller keeps the new count)."""
        with self.db:
            self.db.execute("UPDATE jobs SET num_gpus = ? WHERE job_id = ?", (num_gpus, job_id))

    def account(self, updates: Mapping[str, tuple[float, float | None, float, float | None]]) -> None:
        """Per job: (attained GPU-s, progress, accounted until, pending since)."""
        with self.db:
            self.db.executemany(
                "UPDATE jobs SET attained_gpu_s = ?, progress = ?, accounted_until_s = ?, "
                "pending_since_s = ? WHERE job_id = ?",
                [(a, p, u, ps, job_id) for job_id, (a, p, u, ps) in updates.items()],
            )

    def set_policy_state(self, states: Mapping[str, Mapping[str, Any]]) -> None:
        """Write each job's policy state; a job whose row, as :meth:`jobs` last read it, holds
        this very state is not written again (the controller hands every job's state back
        each round, and most are unchanged)."""
        rows = []
        for job_id, state in states.items():
            text = json.dumps(dict(state))
            known = self._seen.get(job_id)
            if known is None or known[0][_POLICY_STATE] != text:
                rows.append((text, job_id))
        if rows:
            with self.db:
                self.db.executemany("UPDATE jobs SET policy_state = ? WHERE job_id = ?", rows)
            for text, job_id in rows:
                known = self._seen.get(job_id)
                if known is not None:
                    # The row as jobs() read it, with this state: if the table still holds
                    # exactly that, the next jobs() reuses the record without decoding its meta.
                    row = (*known[0][:_POLICY_STATE], text, *known[0][_POLICY_STATE + 1 :])
                    self._seen[job_id] = (row, replace(known[1], policy_state=json.loads(text)))

    def next_plan_version(self, job_id: str) -> int:
        with self.db:
            self.db.execute("UPDATE jobs SET plan_version = plan_version + 1 WHERE job_id = ?", (job_id,))
            crash_point("store.next_plan_version")
        row = self.db.execute("SELECT plan_version FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return int(row[0]) if row else 1

    def mark_finished(self, job_ids: list[str], now: float) -> None:
        with self.db:
            self.db.executemany(
                "UPDATE jobs SET finished_s = ? WHERE job_id = ? AND finished_s IS NULL",
                [(now, j) for j in job_ids],
            )

    # -- rounds -----------------------------------------------------------------------

    def begin_round(self, time_s: float, plan: Mapping[str, Any], dry_run: bool = False) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO rounds (time_s, status, plan) VALUES (?, ?, ?)",
                (time_s, "dry-run" if dry_run else "applying", json.dumps(dict(plan))),
            )
            crash_point("store.begin_round")
        return int(cur.lastrowid or 0)

    def finish_round(
        self,
        round_id: int,
        actions: int,
        error: str | None = None,
        counts: Mapping[str, float] | None = None,
    ) -> None:
        """Mark the round applied; ``counts`` are added to :meth:`counters` in the same
        transaction, so a round's starts, stops and decision time are counted once."""
        with self.db:
            self.db.execute(
                "UPDATE rounds SET status = 'done', actions = ?, error = ? WHERE round_id = ?",
                (actions, error, round_id),
            )
            if counts:
                self._add_counts(counts)
            crash_point("store.finish_round")

    def unfinished_round(self) -> RoundRecord | None:
        """The latest round whose actions were not all applied (a crash mid-round)."""
        row = self.db.execute(
            "SELECT * FROM rounds WHERE status = 'applying' ORDER BY round_id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else _round_record(row)

    def last_round(self) -> RoundRecord | None:
        row = self.db.execute(
            "SELECT * FROM rounds WHERE status != 'dry-run' ORDER BY round_id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else _round_record(row)

    def rounds(self, limit: int = 20) -> list[RoundRecord]:
        rows = self.db.execute("SELECT * FROM rounds ORDER BY round_id DESC LIMIT ?", (limit,))
        return [_round_record(r) for r in rows]

    def decision_times(self, since_s: float = float("-inf")) -> list[float]:
        """The planner's decision time of every round (not dry runs) from ``since_s`` on,
        oldest first; read by SQLite from each plan, not decoded here."""
        rows = self.db.execute(
            "SELECT COALESCE(json_extract(plan, '$.decision_time_s'), 0) FROM rounds "
            "WHERE time_s >= ? AND status != 'dry-run' ORDER BY round_id",
            (since_s,),
        )
        return [float(r[0]) for r in rows]

    def compact_rounds(self, keep: int, batch: int = 64) -> int:
        """Drop :data:`QUEUE_PARTS` from the plan of every round but the newest ``keep``.

        A plan lists every queued job in its order, reasons and policy state (661 KB a round
        at 10,000 queued jobs under ``tiresias``), so a store that kept them all grew by that
        much every round for as long as the controller ran. What a round decided (its
        assignments, starts, stops, migrations, reshapes) and its timings stay, with
        ``"compacted": true`` and the number of jobs it ordered. A round still being applied
        is left whole (a restarted controller completes it from its plan), and so is a plan
        that is not a JSON object (nothing here reads it). Returns how many rounds were
        compacted."""
        row = self.db.execute("SELECT MAX(round_id) FROM rounds").fetchone()
        if row is None or row[0] is None:
            return 0
        upto = int(row[0]) - keep
        done = 0
        while upto > self._compacted_upto:
            rows = self.db.execute(
                "SELECT round_id, plan FROM rounds WHERE round_id > ? AND round_id <= ? "
                "AND status != 'applying' AND substr(plan, 1, ?) != ? ORDER BY round_id LIMIT ?",
                (self._compacted_upto, upto, len(_COMPACTED), _COMPACTED, batch),
            ).fetchall()
            if not rows:
                self._compacted_upto = upto
                break
            compacted = [(c, round_id) for round_id, text in rows if (c := _compacted(text)) is not None]
            with self.db:
                self.db.executemany("UPDATE rounds SET plan = ? WHERE round_id = ?", compacted)
            done += len(compacted)
            if len(rows) < batch:
                self._compacted_upto = upto
                break
            self._compacted_upto = int(rows[-1][0])
        return done

    # -- history ----------------------------------------------------------------------

    def prune_history(self, before_s: float, batch: int = 2000) -> HistoryPruned:
        """Delete what ended before ``before_s``: the records of jobs that finished then, and
        the rounds, actions and successful ticks of that time (``history_days``; a site's
        retention, as slurmdbd's ``Purge*After``). Without it the store grows by a row per job,
        per action and per tick for as long as the controller runs.

        The newest round and every round still being applied stay, with their actions (a
        restarted controller completes such a round from them). Rounds, actions and ticks are
        walked from the oldest row and the walk stops at the first one from ``before_s`` on,
        so a prune that finds nothing reads a row per table; finished jobs are found through
        their index. Each batch is one transaction: a crash leaves the store consistent,
        with less pruned."""
        row = self.db.execute(
            "SELECT MIN(round_id) FROM rounds WHERE status = 'applying' "
            "UNION ALL SELECT MAX(round_id) FROM rounds"
        ).fetchall()
        bounds = [int(r[0]) for r in row if r[0] is not None]
        round_below = min(bounds) if bounds else 0  # rounds from this id on are kept
        rounds = self._prune_prefix(
            "rounds", "round_id", "time_s < ? AND round_id < ?", (before_s, round_below), batch
        )
        actions = self._prune_prefix(
            "actions", "rowid", "time_s < ? AND round_id < ?", (before_s, round_below), batch
        )
        ticks = self._prune_prefix("ticks", "tick_id", "time_s < ?", (before_s,), batch, keep="ok = 0")
        jobs = 0
        while True:
            with self.db:
                cur = self.db.execute(
                    "DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs WHERE finished_s < ? LIMIT ?)",
                    (before_s, batch),
                )
            jobs += max(cur.rowcount, 0)
            if cur.rowcount < batch:
                break
        return HistoryPruned(jobs, rounds, actions, ticks)

    def _prune_prefix(
        self, table: str, key: str, old: str, args: tuple[Any, ...], batch: int, keep: str = "0"
    ) -> int:
        """Delete the rows of ``table`` matching ``old`` from its oldest (``key`` order) up to
        the first that does not match, except those matching ``keep``."""
        deleted, after = 0, None
        while True:
            where, bind = ("", ()) if after is None else (f"WHERE {key} > ? ", (after,))
            rows = self.db.execute(
                f"SELECT {key}, ({old}) FROM {table} {where}ORDER BY {key} LIMIT ?", (*args, *bind, batch)
            ).fetchall()
            old_keys = []
            for k, is_old in rows:
                if not is_old:
                    break
                old_keys.append(k)
            if old_keys:
                with self.db:
                    cur = self.db.execute(
                        f"DELETE FROM {table} WHERE {key} >= ? AND {key} <= ? AND NOT ({keep})",
                        (old_keys[0], old_keys[-1]),
                    )
                deleted += max(cur.rowcount, 0)
            if len(old_keys) < batch:
                return deleted
            after = old_keys[-1]

    # -- actions ----------------------------------------------------------------------

    def log_action(
        self, request_id: str, round_id: int, job_id: str, kind: str, status: str, detail: str, now: float
    ) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO actions (request_id, round_id, job_id, kind, status, detail, time_s) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO UPDATE SET "
                "status = excluded.status, detail = excluded.detail, time_s = excluded.time_s",
                (request_id, round_id, job_id, kind, status, detail, now),
            )
            crash_point("store.log_action")

    def action_status(self, request_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM actions WHERE request_id = ?", (request_id,)).fetchone()
        return None if row is None else str(row[0])

    def stops_since(self, job_id: str, since_s: float) -> int:
        """Stops applied to ``job_id`` since ``since_s`` (the restart rate limit); not those of
        an earlier job with the same id (before the record's first sight)."""
        row = self.db.execute(
            "SELECT COUNT(*) FROM actions WHERE job_id = ? AND kind = 'stop' AND status = 'done' "
            "AND time_s >= ? AND time_s >= COALESCE((SELECT first_seen_s FROM jobs WHERE job_id = ?), 0)",
            (job_id, since_s, job_id),
        ).fetchone()
        return int(row[0])

    def starts_done(self, since_s: float) -> dict[str, list[tuple[float, str, str]]]:
        """The starts applied since ``since_s``, per job, oldest first: (time, request id,
        detail). ``mosaic report`` reads why each run started here when the controller could
        not write it into the job's AdminComment (an Operator's controller)."""
        out: dict[str, list[tuple[float, str, str]]] = {}
        query = (
            "SELECT job_id, time_s, request_id, detail FROM actions "
            "WHERE kind = 'start' AND status = 'done' AND time_s >= ? ORDER BY time_s"
        )
        for job_id, time_s, request, detail in self.db.execute(query, (since_s,)):
            out.setdefault(str(job_id), []).append((float(time_s), str(request), str(detail)))
        return out

    def actions(self, round_id: int | None = None) -> Iterator[tuple[str, int, str, str, str, str, float]]:
        if round_id is None:
            yield from self.db.execute("SELECT * FROM actions ORDER BY time_s")
        else:
            query = "SELECT * FROM actions WHERE round_id = ? ORDER BY time_s"
            yield from self.db.execute(query, (round_id,))

    # -- observations -----------------------------------------------------------------

    def record_observations(self, points: Sequence[tuple[int, ObservedPoint]], keep: int) -> None:
        """Store each (plan version, point): one per run of a job, the newest replacing the
        older; then only the ``keep`` newest of each (model, shape, CPUs per GPU) are kept
        (per CPU count: a curve needs its points at every count, however many runs one
        count had)."""
        if not points:
            return
        rows = [
            (
                p.job_id,
                version,
                p.model,
                _shape_text(p.shape),
                p.cpus_per_gpu,
                p.mem_gb_per_gpu,
                p.samples_per_s_per_gpu,
                p.time_s,
            )
            for version, p in points
        ]
        with self.db:
            self.db.executemany(
                "INSERT INTO observations (job_id, plan_version, model, shape, cpus_per_gpu, "
                "mem_gb_per_gpu, samples_per_s_per_gpu, time_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (job_id, plan_version) DO UPDATE SET model = excluded.model, "
                "shape = excluded.shape, cpus_per_gpu = excluded.cpus_per_gpu, "
                "mem_gb_per_gpu = excluded.mem_gb_per_gpu, "
                "samples_per_s_per_gpu = excluded.samples_per_s_per_gpu, time_s = excluded.time_s",
                rows,
            )
            for model, shape, cpus in {(r[2], r[3], r[4]) for r in rows}:
                self.db.execute(
                    "DELETE FROM observations WHERE rowid IN (SELECT rowid FROM observations "
                    "WHERE model = ? AND shape = ? AND cpus_per_gpu = ? "
                    "ORDER BY time_s DESC, rowid DESC LIMIT -1 OFFSET ?)",
                    (model, shape, cpus, keep),
                )

    def observations(self) -> list[ObservedPoint]:
        """Every stored observation, oldest first (a row that cannot be read back is skipped)."""
        out = []
        for row in self.db.execute(
            "SELECT job_id, model, shape, cpus_per_gpu, mem_gb_per_gpu, samples_per_s_per_gpu, time_s "
            "FROM observations ORDER BY time_s, rowid"
        ):
            try:
                shape = json.loads(row[2])
                out.append(
                    ObservedPoint(
                        model=row[1],
                        shape=Shape(
                            str(shape["gpu_type"]),
                            int(shape["num_gpus"]),
                            shape.get("batch_size"),
                            shape.get("plan"),
                            shape.get("nodes"),
                        ),
                        cpus_per_gpu=float(row[3]),
                        mem_gb_per_gpu=float(row[4]),
                        samples_per_s_per_gpu=float(row[5]),
                        time_s=float(row[6]),
                        job_id=row[0],
                    )
                )
            except (ValueError, TypeError, KeyError):
                continue
        return out

    # -- counters ---------------------------------------------------------------------

    def _add_counts(self, counts: Mapping[str, float]) -> None:
        self.db.executemany(
            "INSERT INTO counters (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            sorted(counts.items()),
        )

    def add_counts(self, counts: Mapping[str, float]) -> None:
        """Add to the named counters (created at 0)."""
        with self.db:
            self._add_counts(counts)

    def counters(self) -> dict[str, float]:
        """The counters the metrics file exports (starts, stops, decision-time histogram, ...):
        they only grow, across controller restarts and ``prune_history``, which leaves them be."""
        return {str(n): float(v) for n, v in self.db.execute("SELECT name, value FROM counters")}

    # -- ticks ------------------------------------------------------------------------

    def log_tick(
        self, time_s: float, ok: bool, round_id: int | None, error: str | None, duration_s: float
    ) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO ticks (time_s, ok, round_id, error, duration_s) VALUES (?, ?, ?, ?, ?)",
                (time_s, int(ok), round_id, error, duration_s),
            )

    def tick_counts(self) -> tuple[int, int]:
        """Ticks since the store was created, and how many failed. ``prune_history`` keeps
        failed ticks and the table's AUTOINCREMENT counter remembers the pruned ones, so both
        only grow (Prometheus counters)."""
        row = self.db.execute(
            "SELECT (SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'ticks'), "
            "(SELECT COUNT(*) FROM ticks WHERE ok = 0)"
        ).fetchone()
        return int(row[0]), int(row[1])


_POLICY_STATE = 7  # the jobs table's policy_state column (SCHEMA's order)

_TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "jobs": (
        "job_id",
        "num_gpus",
        "meta",
        "attained_gpu_s",
        "progress",
        "accounted_until_s",
        "pending_since_s",
        "policy_state",
        "plan_version",
        "first_seen_s",
        "finished_s",
    ),
    "rounds": ("round_id", "time_s", "status", "plan", "actions", "error"),
    "actions": ("request_id", "round_id", "job_id", "kind", "status", "detail", "time_s"),
    "ticks": ("tick_id", "time_s", "ok", "round_id", "error", "duration_s"),
    "counters": ("name", "value"),
    "observations": (
        "job_id",
        "plan_version",
        "model",
        "shape",
        "cpus_per_gpu",
        "mem_gb_per_gpu",
        "samples_per_s_per_gpu",
        "time_s",
    ),
}
"""Each table's columns in SCHEMA's order (the records are read by position)."""


def _job_record(row: tuple[Any, ...]) -> JobRecord:
    return JobRecord(
        job_id=row[0],
        num_gpus=int(row[1]),
        meta=json.loads(row[2]),
        attained_gpu_s=float(row[3]),
        progress=row[4],
        accounted_until_s=row[5],
        pending_since_s=row[6],
        policy_state=json.loads(row[7]) if row[7] else None,
        plan_version=int(row[8]),
        first_seen_s=float(row[9]),
        finished_s=row[10],
    )


def _shape_text(shape: Shape) -> str:
    fields: dict[str, Any] = {
        "gpu_type": shape.gpu_type,
        "num_gpus": shape.num_gpus,
        "batch_size": shape.batch_size,
        "plan": shape.plan,
    }
    if shape.nodes is not None:  # stores written before nodes were recorded keep their shape text
        fields["nodes"] = shape.nodes
    return json.dumps(fields, sort_keys=True)


def _compacted(text: str) -> str | None:
    """The compacted text of a stored plan; ``None`` for one that is not a JSON object."""
    try:
        plan = json.loads(text)
    except ValueError:
        return None
    if not isinstance(plan, dict):
        return None
    order = plan.get("order")
    kept = {k: v for k, v in plan.items() if k not in QUEUE_PARTS and k != "compacted"}
    return json.dumps(
        {"compacted": True, **kept, "jobs_ordered": len(order) if isinstance(order, list) else None}
    )


def _round_record(row: tuple[Any, ...]) -> RoundRecord:
    return RoundRecord(
        round_id=int(row[0]),
        time_s=float(row[1]),
        status=str(row[2]),
        plan=json.loads(row[3]),
        actions=int(row[4]),
        error=row[5],
    )
