"""A day of load on the local Slurm test cluster: ~10,000 queued jobs plus churn for hours of ticks.

The issue-15 load test. A private 16-GPU test cluster (with accounting, so the fate of every
job can be read back) is filled with ``--jobs`` held jobs (1, 2 or 4 GPUs, each with its own
Mosaic comment), then the controller ticks back to back, time-compressed: each tick stands
for ``--tick-s`` seconds of controller time (the controller's clock advances that much per
tick: attained service, pending times and the store's rounds see an hour of ticks as an
hour; Slurm's submit and start times are put on that clock too, ``--slurm-times``), ``--hours``
x 3600 / ``--tick-s`` ticks in all. Jobs are short (``sleep`` of
``--run-s`` seconds, real time; a tick and its churn last at least ``--pace-s``), so they
finish within a few ticks. Between ticks, the churn:
``--cancels`` random queued jobs are cancelled, and new jobs arrive to bring the queue back
to ``--jobs`` (replacing the completed and the cancelled).

The controller runs in its own process (spawned, nothing else in it): each tick's wall time
and that process's resident memory (``VmRSS``) after the tick are sampled; a least-squares
slope of RSS per (controller) hour is reported, over all ticks and over the second half.
At the end every submitted job is accounted for from ``squeue``, ``sacct`` and the last state
``squeue`` showed during the run (a held job cancelled never reaches accounting; squeue lists
an ended job for ``MinJobAge``, 600 s, longer than a tick): finished (``COMPLETED``),
cancelled by the churn, or still queued/running; anything else (failed, missing) is lost.

    .venv/bin/python -m benchmarks.soak.day_of_load --jobs 10000 --hours 1 --tick-s 60
    # benchmarks/results/day_of_load.json and day_of_load.png (matplotlib: the 'plots' extra)
"""

from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import statistics
import tempfile
import time
from array import array
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, write_result
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import shape_named

SUBMITTERS = 8  # parallel sbatch processes
GPU_CHOICES = (1, 1, 1, 1, 1, 1, 2, 2, 4)  # mostly 1-GPU jobs, some 2 and 4
LIVE_STATES = frozenset({"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "SUSPENDED"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10000, help="queued jobs kept on the cluster")
    parser.add_argument("--hours", type=float, default=1.0, help="controller hours of ticks")
    parser.add_argument("--tick-s", type=float, default=60.0, help="controller seconds one tick stands for")
    parser.add_argument("--cancels", type=int, default=10, help="queued jobs cancelled between two ticks")
    parser.add_argument("--run-s", type=float, nargs=2, default=(5.0, 30.0), metavar=("MIN", "MAX"),
                        help="a job's real run time, uniform in [MIN, MAX] seconds")  # fmt: skip
    parser.add_argument("--pace-s", type=float, default=5.0,
                        help="a tick and its churn last at least this long (real s)")  # fmt: skip
    parser.add_argument("--max-wall-s", type=float, default=None,
                        help="stop ticking after this long (real s)")  # fmt: skip
    parser.add_argument("--preset", default="tiresias")
    parser.add_argument("--slurm-times", choices=("compressed", "wall"), default="compressed",
                        help="the start and submit times the controller reads from Slurm: put on "
                             "its compressed clock (a job that ran 20 s of a ~8 s tick standing "
                             "for 60 s ran 150 s), or as Slurm gives them (wall time: attained "
                             "service then grows with how far the compressed clock has run ahead, "
                             "and nearly every started job is demoted)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--round-plans-kept", type=int, default=None, metavar="N",
                        help="the controller's round_plans_kept (default: its own default)")  # fmt: skip
    parser.add_argument("--spool-keep-s", type=float, default=None, metavar="S",
                        help="the controller's spool_keep_s (wall seconds an ended job's spool "
                             "entries are kept; default: its own, a day: a compressed run sweeps "
                             "none)")  # fmt: skip
    parser.add_argument("--out", default="day_of_load", help="result name under benchmarks/results/")
    parser.add_argument("--diagnose", action="store_true",
                        help="also sample the controller's Python heap (tracemalloc), glibc's "
                             "malloc state and smaps each tick; diff the heap from the tick "
                             "squeue's MinJobAge window filled (an early one if it never does) "
                             "to the last")  # fmt: skip
    parser.add_argument("--diagnose-light", action="store_true",
                        help="--diagnose without tracemalloc (no heap diff): Python's block and "
                             "object counts, glibc's malloc state and smaps each tick, cheap "
                             "enough for 10,000 jobs")  # fmt: skip
    parser.add_argument("--diagnose-from-tick", type=int, default=None, metavar="N",
                        help="with --diagnose-light: after tick N, start tracemalloc; five ticks "
                             "later, snapshot the heap and take a census of the controller's "
                             "containers; at the end, name the allocations that grew since and "
                             "the containers that grew, with who holds them")  # fmt: skip
    args = parser.parse_args()
    if args.diagnose and args.diagnose_light:
        parser.error("--diagnose or --diagnose-light, not both")
    if args.diagnose_from_tick is not None and (not args.diagnose_light or args.diagnose_from_tick < 1):
        parser.error("--diagnose-from-tick N needs --diagnose-light and N >= 1")
    if args.jobs < 1 or args.hours <= 0 or not 1 <= args.tick_s <= 3600 or args.cancels < 0:
        parser.error("--jobs >= 1, --hours > 0, --tick-s in [1, 3600], --cancels >= 0")
    if not 0 < args.run_s[0] <= args.run_s[1]:
        parser.error("--run-s MIN MAX with 0 < MIN <= MAX")
    with tempfile.TemporaryDirectory(prefix="mosaic-day-") as tmp:
        root = Path(tmp)
        cluster = lifecycle.up(shape_named("homogeneous", accounting=True), root / "cluster")
        try:
            result = bench(cluster, root, args)
        finally:
            lifecycle.down(root / "cluster")
    write_result(args.out, result)
    plot(result, RESULTS / f"{args.out}.png")


# -- the controller's process ----------------------------------------------------------


def _file_mb(path: Path) -> float:
    """The state store on disk: the database file and its WAL."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file()) / 1e6


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _jobs_with_service(store: Path) -> int | None:
    """Jobs the store has not seen end that have attained GPU service (they ran before): the
    state a queue accumulates as its jobs run and wait again (Tiresias keeps a promotion wait
    for each demoted one). Read by the benchmark's process, not the controller's."""
    try:
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5.0)) as db:
            row = db.execute(
                "SELECT COUNT(*) FROM jobs WHERE finished_s IS NULL AND attained_gpu_s > 0"
            ).fetchone()
    except sqlite3.Error:
        return None
    return int(row[0])


def _entries(directory: Path) -> int:
    """How many entries a directory holds (0 if it does not exist yet)."""
    try:
        with os.scandir(directory) as it:
            return sum(1 for _ in it)
    except FileNotFoundError:
        return 0


TRACE_SETTLE_TICKS = 5  # --diagnose-from-tick: the heap baseline is taken this many ticks later


def controller_worker(
    conn: Connection,
    conf: str,
    spool: str,
    preset_name: str,
    tick_s: float,
    diagnose: bool = False,
    trace: bool = True,
    round_plans_kept: int | None = None,
    spool_keep_s: float | None = None,
    trace_from_tick: int | None = None,
    compress_slurm_times: bool = True,
) -> None:
    """Runs in the spawned child: one tick per message, as ``mosaic controller`` builds it."""
    import resource

    from benchmarks.soak import memory_probe
    from slurm_plugin.controller.memory import sqlite_memory_mb

    probe = memory_probe.Probe(trace=trace) if diagnose else None

    from planner.config import build_scheduler, preset
    from slurm_plugin.controller.actuate import Actuator
    from slurm_plugin.controller.config import ControllerConfig
    from slurm_plugin.controller.loop import Controller
    from slurm_plugin.slurm.backend import CliSlurm, SlurmClient
    from slurm_plugin.store import Store

    config = ControllerConfig(
        spool_dir=Path(spool), slurm_conf=conf, round_s=tick_s, checkpoint_grace_s=3.0, stop_timeout_s=30.0
    )
    if round_plans_kept is not None:
        config = replace(config, round_plans_kept=round_plans_kept)
    if spool_keep_s is not None:
        config = replace(config, spool_keep_s=spool_keep_s)
    start = time.time()
    virtual = {"now": start}
    times = CompressedTimes(start, start)
    cli = CliSlurm(config.slurm_env, timeout_s=120)
    client: SlurmClient = CompressedSlurm(cli, times) if compress_slurm_times else cli
    store = Store(config.store_path)
    # The controller's clock advances tick_s per tick; the actuator's waits stay in real time.
    controller = Controller(
        client,
        store,
        config,
        build_scheduler(preset(preset_name)),
        clock=lambda: virtual["now"],
        actuator=Actuator(client, store, config),
    )
    conn.send({"rss_mb": _rss_mb()})
    while True:
        k = conn.recv()
        if k is None:
            break
        if k == "heap-diff":
            conn.send(probe.diff() if probe is not None else {})
            continue
        if k == "heap-baseline":
            if probe is not None:
                probe.baseline()
            continue
        virtual["now"] = start + k * tick_s
        times.anchor(time.time(), virtual["now"])
        t0 = time.perf_counter()
        report = controller.tick()
        total_s = time.perf_counter() - t0
        failed = report.result.failed if report.result is not None else []
        memory = probe.sample(k) if probe is not None else {}
        if probe is not None and k == trace_from_tick:
            probe.start_trace()
        elif probe is not None and trace_from_tick is not None and k == trace_from_tick + TRACE_SETTLE_TICKS:
            probe.baseline()  # what every tick rebuilds has been rebuilt under tracing
        conn.send(
            {
                **memory,
                "tick": k,
                "total_s": round(total_s, 3),
                "plan_s": round(report.decision_time_s or 0.0, 4),
                "ok": report.ok,
                "managed_jobs": report.jobs,
                "actions": len(report.actions),
                "failed": len(failed),
                "rss_mb": round(_rss_mb(), 2),
                "sqlite_mb": sqlite_memory_mb(),
                "store_file_mb": round(_file_mb(config.store_path), 2),
                "spool_plan_entries": _entries(config.spool_dir / "plans"),
                "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 2),
            }
        )
    store.close()


class CompressedTimes:
    """Wall-clock times on the controller's compressed clock: tick k starts at wall time w_k and
    controller time v_k, and a time between two tick starts is put proportionally between their
    controller times. Before the first anchor and after the last, a second is a second.

    Every anchor is kept (two doubles a tick), so a time once between two anchors always maps
    to the same value: the controller keys a requeued job by its submit time."""

    def __init__(self, wall: float, virtual: float) -> None:
        self.walls = array("d", [wall])
        self.virtuals = array("d", [virtual])

    def anchor(self, wall: float, virtual: float) -> None:
        if wall > self.walls[-1] and virtual >= self.virtuals[-1]:
            self.walls.append(wall)
            self.virtuals.append(virtual)

    def __call__(self, t: float) -> float:
        i = bisect.bisect_right(self.walls, t)
        if i == 0:
            return self.virtuals[0] - (self.walls[0] - t)
        if i == len(self.walls):
            return self.virtuals[-1] + (t - self.walls[-1])
        w0, w1, v0, v1 = self.walls[i - 1], self.walls[i], self.virtuals[i - 1], self.virtuals[i]
        return v0 + (t - w0) * (v1 - v0) / (w1 - w0)


class CompressedSlurm:
    """A :class:`SlurmClient` whose jobs carry their submit and start times on the controller's
    compressed clock (:class:`CompressedTimes`); everything else is the wrapped client's.

    The wrapped client hands back the same job object for an unchanged squeue line; so does
    this one (the mapped copy is made once per such object), so the controller's caches see
    what they see without compression."""

    def __init__(self, client: Any, times: CompressedTimes) -> None:
        self.client = client
        self.times = times
        self._mapped: dict[int, tuple[Any, Any]] = {}  # id(original): (original, mapped)

    def jobs(self) -> list[Any]:
        mapped: dict[int, tuple[Any, Any]] = {}
        out = []
        for job in self.client.jobs():
            seen = self._mapped.get(id(job))
            if seen is None or seen[0] is not job:
                start = None if job.start_time is None else self.times(job.start_time)
                seen = (job, replace(job, submit_time=self.times(job.submit_time), start_time=start))
            mapped[id(job)] = seen
            out.append(seen[1])
        self._mapped = mapped
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


# -- the load ----------------------------------------------------------------------------


class Load:
    """Submits, cancels and accounts for the benchmark's jobs."""

    def __init__(self, cluster: lifecycle.Cluster, rng: random.Random, run_s: Sequence[float]) -> None:
        self.cluster = cluster
        self.rng = rng
        self.run_s = run_s
        self.submitted: list[str] = []
        self.cancelled: set[str] = set()
        # The last state squeue showed for each job: a job that ends stays listed for
        # MinJobAge (600 s), longer than a tick, while sacct never hears of a job cancelled
        # before it was ever eligible (held), so this is how such a job's end is known.
        self.last_seen: dict[str, str] = {}
        self._next = 0

    def submit(self, count: int) -> None:
        specs = []
        for _ in range(count):
            self._next += 1
            gpus = self.rng.choice(GPU_CHOICES)
            seconds = round(self.rng.uniform(*self.run_s), 1)
            specs.append((self._next, gpus, seconds))
        with ThreadPoolExecutor(SUBMITTERS) as pool:
            self.submitted.extend(pool.map(self._submit_one, specs))

    def _submit_one(self, spec: tuple[int, int, float]) -> str:
        k, gpus, seconds = spec
        comment = "mosaic:" + json.dumps({"model": "resnet18", "duration_s": seconds}, separators=(",", ":"))
        out = run(
            ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-D", "/", "-J", f"d{k}",
             f"--gres=gpu:{gpus}", "-c", str(gpus), f"--mem={gpus}G", f"--comment={comment}",
             # A checkpoint signal (a preemption) is ignored: the stop then waits the grace.
             "--wrap", f"trap '' USR1; sleep {seconds}"],
            env=self.cluster.env,
            timeout_s=120,
        ).stdout  # fmt: skip
        return out.strip().split(";")[0]

    def queue(self) -> dict[str, str]:
        """Every job squeue still lists, by id: its state (%T)."""
        out = run(["squeue", "-h", "-t", "all", "-o", "%i %T"], env=self.cluster.env, timeout_s=120).stdout
        states = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
        self.last_seen.update(states)
        return states

    def cancel(self, queue: dict[str, str], count: int) -> int:
        pending = sorted((j for j, s in queue.items() if s == "PENDING"), key=int)
        victims = self.rng.sample(pending, min(count, len(pending)))
        if victims:
            run(["scancel", *victims], env=self.cluster.env, timeout_s=120, check=False)
            self.cancelled.update(victims)
        return len(victims)

    def sacct_states(self) -> dict[str, str]:
        out = run(
            ["sacct", "-X", "-a", "-n", "-P", "-S", "now-7days", "-o", "JobIDRaw,State"],
            env=self.cluster.env,
            timeout_s=300,
        ).stdout
        states = {}
        for line in out.splitlines():
            if "|" in line:
                job_id, state = line.split("|", 1)
                states[job_id] = state.split()[0] if state else ""  # 'CANCELLED by 0'
        return states

    def account(self, timeout_s: float = 300.0) -> dict[str, Any]:
        """The fate of every submitted job; retried while slurmdbd catches up on the last ends."""
        deadline = time.monotonic() + timeout_s
        while True:
            fates = self._fates(self.queue(), self.sacct_states())
            if not fates["lost"] or time.monotonic() >= deadline:
                return fates
            time.sleep(5.0)

    def _fates(self, queue: dict[str, str], sacct: dict[str, str]) -> dict[str, Any]:
        counts = {"finished": 0, "cancelled_by_churn": 0, "queued": 0, "running": 0}
        lost: dict[str, str] = {}
        for job_id in self.submitted:
            state = queue.get(job_id) or sacct.get(job_id) or self.last_seen.get(job_id) or "MISSING"
            if state == "PENDING":
                counts["queued"] += 1
            elif state in LIVE_STATES:
                counts["running"] += 1
            elif state == "COMPLETED":
                counts["finished"] += 1
            elif state == "CANCELLED" and job_id in self.cancelled:
                counts["cancelled_by_churn"] += 1
            else:
                lost[job_id] = state
        return {
            "submitted": len(self.submitted),
            **counts,
            "lost": len(lost),
            "lost_jobs": dict(sorted(lost.items())[:50]),
        }


def bench(cluster: lifecycle.Cluster, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    load = Load(cluster, rng, args.run_s)
    n_ticks = max(1, round(args.hours * 3600 / args.tick_s))
    t0 = time.perf_counter()
    load.submit(args.jobs)
    submit_s = time.perf_counter() - t0
    print(f"submitted {args.jobs} held jobs in {submit_s:.0f} s; {n_ticks} ticks of {args.tick_s:g} s follow")

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    worker = ctx.Process(
        target=controller_worker,
        args=(
            child,
            str(cluster.layout.conf),
            str(root / "spool"),
            args.preset,
            args.tick_s,
            args.diagnose or args.diagnose_light,
            not args.diagnose_light,
            args.round_plans_kept,
            args.spool_keep_s,
            args.diagnose_from_tick,
            args.slurm_times == "compressed",
        ),
        daemon=True,
    )
    worker.start()
    rss_start = parent.recv()["rss_mb"]
    # The heap diff starts once squeue's MinJobAge window has filled (before, every tick lists
    # more ended jobs than the last, and their records are what grows).
    min_job_age_s = _min_job_age_s(cluster)
    baseline_sent = False
    ticks: list[dict[str, Any]] = []
    started = time.perf_counter()
    stop = {"why": ""}

    def interrupted(signum: int, frame: object) -> None:
        stop["why"] = "interrupted (SIGINT)"

    signal.signal(signal.SIGINT, interrupted)  # the next tick is not run; the jobs are still accounted
    try:
        for k in range(1, n_ticks + 1):
            if args.max_wall_s is not None and time.perf_counter() - started >= args.max_wall_s:
                stop["why"] = f"--max-wall-s {args.max_wall_s:g} reached"
            if stop["why"]:
                print(f"stopped after {k - 1} ticks: {stop['why']}")
                break
            cycle = time.perf_counter()
            parent.send(k)
            tick = parent.recv()
            tick["jobs_with_service"] = _jobs_with_service(root / "spool" / "mosaic.db")
            queue = load.queue()
            live = [s for s in queue.values() if s in LIVE_STATES]
            tick["queued"] = sum(s == "PENDING" for s in live)
            tick["listed"] = len(queue)  # live + ended jobs squeue still shows (MinJobAge)
            tick["running"] = len(live) - tick["queued"]
            tick["cancelled"] = load.cancel(queue, args.cancels)
            arrivals = max(0, args.jobs - (len(live) - tick["cancelled"]))
            load.submit(arrivals)
            tick["arrived"] = arrivals
            tick["wall_s"] = round(time.perf_counter() - started, 1)
            ticks.append(tick)
            if args.diagnose and not baseline_sent and tick["wall_s"] >= min_job_age_s:
                parent.send("heap-baseline")
                baseline_sent = True
            print(json.dumps(tick), flush=True)
            time.sleep(max(0.0, args.pace_s - (time.perf_counter() - cycle)))
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        heap_diff = None
        if (args.diagnose or args.diagnose_from_tick is not None) and worker.is_alive():
            parent.send("heap-diff")
            heap_diff = parent.recv()
        parent.send(None)
        worker.join(60)
    wall_s = time.perf_counter() - started
    if not ticks:
        raise SystemExit("no tick ran")
    fates = load.account()
    print(f"fates: {json.dumps(fates)}")
    result = summarize(args, ticks, fates, len(ticks), submit_s, wall_s, rss_start, cluster)
    result["ticks_planned"] = n_ticks
    result["stopped_early"] = stop["why"] or None
    if heap_diff is not None:
        result["diagnosis"] = heap_diff
    return result


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys over xs (``None`` with fewer than two distinct xs)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def median_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Theil-Sen slope: the median of the slopes between every two points (``None`` with fewer
    than two distinct xs). A tick whose RSS spikes for a moment (glibc serves a large block,
    such as one squeue output, with mmap and returns it after) moves it far less than it
    moves least squares."""
    pairs = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    ]
    return statistics.median(pairs) if pairs else None


def summarize(
    args: argparse.Namespace,
    ticks: list[dict[str, Any]],
    fates: dict[str, Any],
    n_ticks: int,
    submit_s: float,
    wall_s: float,
    rss_start: float,
    cluster: lifecycle.Cluster,
) -> dict[str, Any]:
    hours = [t["tick"] * args.tick_s / 3600 for t in ticks]
    rss = [t["rss_mb"] for t in ticks]
    times = [t["total_s"] for t in ticks]
    half = len(ticks) // 2
    # squeue lists an ended job for MinJobAge seconds of real time: until the run's wall time
    # passes it, every tick lists more ended jobs than the last (and the controller parses them).
    min_job_age_s = _min_job_age_s(cluster)
    filled = next((i for i, t in enumerate(ticks) if t["wall_s"] >= min_job_age_s), len(ticks))

    def _round(x: float | None, digits: int = 3) -> float | None:
        return None if x is None else round(x, digits)

    return {
        "command": (
            f"python -m benchmarks.soak.day_of_load --jobs {args.jobs} --hours {args.hours:g} --tick-s "
            f"{args.tick_s:g} --cancels {args.cancels} --run-s {args.run_s[0]:g} {args.run_s[1]:g} "
            f"--pace-s {args.pace_s:g} --preset {args.preset} --seed {args.seed}"
            f" --slurm-times {args.slurm_times}"
            + (f" --max-wall-s {args.max_wall_s:g}" if args.max_wall_s is not None else "")
            + (" --diagnose" if args.diagnose else "")
            + (" --diagnose-light" if args.diagnose_light else "")
            + (
                f" --diagnose-from-tick {args.diagnose_from_tick}"
                if args.diagnose_from_tick is not None
                else ""
            )
            + (f" --round-plans-kept {args.round_plans_kept}" if args.round_plans_kept is not None else "")
            + (f" --spool-keep-s {args.spool_keep_s:g}" if args.spool_keep_s is not None else "")
        ),
        "cluster": "test cluster homogeneous + accounting: 4 nodes x 4 GPUs, 16 CPUs, 64 GB",
        "slurm": run(["squeue", "--version"], env=cluster.env).stdout.strip(),
        "jobs_target": args.jobs,
        "slurm_times": args.slurm_times,
        "ticks": n_ticks,
        "tick_s": args.tick_s,
        "controller_hours": round(n_ticks * args.tick_s / 3600, 3),
        "wall_s": round(wall_s, 1),
        "initial_submit_s": round(submit_s, 1),
        "submitted": fates["submitted"],
        "fates": fates,
        "arrivals": sum(t["arrived"] for t in ticks),
        "cancels": sum(t["cancelled"] for t in ticks),
        "failed_ticks": sum(not t["ok"] for t in ticks),
        "failed_actions": sum(t["failed"] for t in ticks),
        "tick_s_median": round(statistics.median(times), 3),
        "tick_s_p95": round(sorted(times)[min(len(times) - 1, int(0.95 * len(times)))], 3),
        "tick_s_max": max(times),
        "tick_time_slope_s_per_hour": _round(slope(hours, times)),
        "round_plans_kept": args.round_plans_kept,
        "spool_keep_s": args.spool_keep_s,
        "spool_plan_entries_last": ticks[-1].get("spool_plan_entries"),
        "store_file_mb_first": ticks[0].get("store_file_mb"),
        "store_file_mb_last": ticks[-1].get("store_file_mb"),
        "store_file_mb_max": max((t.get("store_file_mb") or 0.0) for t in ticks),
        "rss_mb_before_first_tick": round(rss_start, 1),
        "rss_mb_first": rss[0],
        "rss_mb_last": rss[-1],
        "rss_mb_max": max(rss),
        "rss_slope_mb_per_hour": _round(slope(hours, rss)),
        "rss_slope_mb_per_hour_second_half": _round(slope(hours[half:], rss[half:])),
        "slurm_min_job_age_s": min_job_age_s,
        "window_filled_at_tick": ticks[filled]["tick"] if filled < len(ticks) else None,
        "listed_first": ticks[0].get("listed"),
        "listed_at_window": ticks[filled].get("listed") if filled < len(ticks) else None,
        "listed_last": ticks[-1].get("listed"),
        "jobs_with_service_at_window": ticks[filled].get("jobs_with_service")
        if filled < len(ticks)
        else None,
        "jobs_with_service_last": ticks[-1].get("jobs_with_service"),
        "rss_slope_mb_per_hour_after_window": _round(slope(hours[filled:], rss[filled:])),
        "rss_median_slope_mb_per_hour_after_window": _round(median_slope(hours[filled:], rss[filled:])),
        "rss_mb_at_window": rss[filled] if filled < len(ticks) else None,
        "rss_mb_median_last_hour": _median_last(hours, rss, 1.0),
        "rss_mb_median_hour_before": _median_last(hours, rss, 2.0, 1.0),
        **_sqlite_summary(hours, ticks, filled),
        "per_tick": ticks,
    }


def _sqlite_summary(hours: Sequence[float], ticks: list[dict[str, Any]], filled: int) -> dict[str, Any]:
    """SQLite's memory at the first tick, when squeue's window filled and at the last, and the
    RSS slope after the window without it (what the store's page cache does not explain)."""
    if filled >= len(ticks) or any(t.get("sqlite_mb") is None for t in ticks):
        return {}
    sqlite = [float(t["sqlite_mb"]) for t in ticks]
    own = median_slope(hours[filled:], sqlite[filled:])
    rest = median_slope(hours[filled:], [t["rss_mb"] - t["sqlite_mb"] for t in ticks[filled:]])
    return {
        "sqlite_mb_first": sqlite[0],
        "sqlite_mb_at_window": sqlite[filled],
        "sqlite_mb_last": sqlite[-1],
        "sqlite_median_slope_mb_per_hour_after_window": None if own is None else round(own, 3),
        "rss_minus_sqlite_median_slope_mb_per_hour_after_window": None if rest is None else round(rest, 3),
    }


def _median_last(
    hours: Sequence[float], values: Sequence[float], span_h: float, skip_h: float = 0.0
) -> float | None:
    """The median of ``values`` over the ticks from ``span_h`` to ``skip_h`` controller hours
    before the last (``None`` when the run is shorter than ``span_h``)."""
    if not hours or hours[-1] - hours[0] < span_h:
        return None
    end = hours[-1]
    window = [v for h, v in zip(hours, values, strict=True) if end - span_h < h <= end - skip_h]
    return round(statistics.median(window), 2) if window else None


def _min_job_age_s(cluster: lifecycle.Cluster) -> float:
    """Slurm's ``MinJobAge`` (how long squeue keeps listing an ended job), from the running config."""
    for line in run(["scontrol", "show", "config"], env=cluster.env).stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MinJobAge":
            return float(value.split()[0])
    raise SystemExit("scontrol show config printed no MinJobAge")


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib, or the 'plots' extra)")
        return
    ticks = result["per_tick"]
    hours = [t["tick"] * result["tick_s"] / 3600 for t in ticks]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(hours, [t["total_s"] for t in ticks], ".-", lw=0.8, ms=3)
    top.set_ylabel("tick wall time (s)")
    top.set_ylim(bottom=0)
    top.set_title(
        f"A day of load: ~{result['jobs_target']:,} queued jobs + churn, {result['ticks']} ticks "
        f"of {result['tick_s']:g} s",
        fontsize=10,
    )
    rss = [t["rss_mb"] for t in ticks]
    bottom.plot(hours, rss, ".-", lw=0.8, ms=3, color="tab:red")
    s = result["rss_slope_mb_per_hour"]
    if s is not None:
        mx, my = statistics.fmean(hours), statistics.fmean(rss)
        bottom.plot(hours, [my + s * (h - mx) for h in hours], "--", color="k", lw=0.8,
                    label=f"least squares, all ticks: {s:+.2f} MB/h")  # fmt: skip
    after = result.get("rss_slope_mb_per_hour_after_window")
    filled = result.get("window_filled_at_tick")
    if filled is not None:
        at = filled * result["tick_s"] / 3600
        bottom.axvline(at, color="grey", lw=0.8, ls=":")
        steady = [(h, r) for h, r in zip(hours, rss, strict=True) if h >= at]
        if after is not None and len(steady) > 1:
            mx = statistics.fmean(h for h, _ in steady)
            my = statistics.fmean(r for _, r in steady)
            label = f"after squeue's MinJobAge window filled: {after:+.2f} MB/h"
            robust = result.get("rss_median_slope_mb_per_hour_after_window")
            if robust is not None:
                label += f" (Theil-Sen {robust:+.2f})"
            fit = [my + after * (h - mx) for h, _ in steady]
            bottom.plot([h for h, _ in steady], fit, "-", color="tab:green", lw=1.2, label=label)
    if all(t.get("sqlite_mb") is not None for t in ticks):
        first, last = ticks[0]["sqlite_mb"], ticks[-1]["sqlite_mb"]
        label = f"SQLite's own memory: {first:.1f} -> {last:.1f} MB"
        bottom.plot(hours, [t["sqlite_mb"] for t in ticks], lw=1.0, color="tab:purple", label=label)
    if all(t.get("store_file_mb") is not None for t in ticks):
        label = f"state store on disk: {ticks[0]['store_file_mb']:.0f} -> {ticks[-1]['store_file_mb']:.0f} MB"
        if result.get("round_plans_kept") is not None:
            label += f" (round_plans_kept {result['round_plans_kept']})"
        top.twinx().plot(hours, [t["store_file_mb"] for t in ticks], lw=1.0, color="tab:orange", label=label)
        top.plot([], [], lw=1.0, color="tab:orange", label=label)
        top.legend(fontsize=8, loc="lower right")
    if "listed" in ticks[0]:
        rows = bottom.twinx()
        rows.plot(hours, [t["listed"] for t in ticks], lw=0.8, color="tab:blue", alpha=0.6)
        rows.set_ylabel("jobs squeue lists (live + ended)", color="tab:blue")
        rows.set_ylim(bottom=0)
    bottom.legend(loc="lower right", fontsize=8)
    bottom.set_ylabel("controller RSS (MB)")
    bottom.set_xlabel("controller time (h): each tick stands for tick_s")
    bottom.set_ylim(bottom=0, top=max(rss) * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
