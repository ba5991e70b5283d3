"""``mosaic explain JOB``: why a job waits, and what the scheduler did to it and for whom.

Live (the default), from the controller's state store (its rounds, newest ``--rounds``) and
Slurm (the job's state, user and requeue count; the nodes and every job's request, as the
controller observes them); with ``--run DIR``, from a simulation recorded with ``mosaic sim
--record-rounds``. The explanation itself is :func:`planner.explain.explain`.
"""

from __future__ import annotations

import argparse
import json
import logging
import pwd
import time
from dataclasses import replace
from pathlib import Path

from planner.core.codec import round_plan_from_json
from planner.core.errors import InputError, MosaicError, SnapshotError
from planner.core.model import Job
from planner.explain import ROUNDS_FILE, Explanation, JobFacts, Round, explain, read_recorded
from slurm_plugin.cli.controller_cmd import _live_args, load_config
from slurm_plugin.cli.report_cmd import _quotas
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.files import read_text
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import SlurmError
from slurm_plugin.store import Store

log = logging.getLogger(__name__)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "explain",
        parents=[common],
        help="why a job waits, what it was given, and its history of decisions with their reasons",
    )
    p.add_argument("job", help="the Slurm job id (or, with --run, the trace's job id)")
    p.add_argument(
        "--run", dest="run_dir", metavar="DIR", help=f"a simulation's output directory with {ROUNDS_FILE}"
    )
    _live_args(p)
    p.add_argument("--rounds", type=int, default=200, help="live: the newest rounds read (default 200)")
    p.add_argument("--json", action="store_true", help="the explanation as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    got = _simulated(args) if args.run_dir else _live(args)
    print(json.dumps(got.to_json(), indent=2) if args.json else "\n".join(got.lines))
    return 0


def _simulated(args: argparse.Namespace) -> Explanation:
    path = Path(args.run_dir) / ROUNDS_FILE
    if not path.exists():
        raise InputError(f"{path}: no recorded rounds (run mosaic sim with --record-rounds)")
    recorded = read_recorded(read_text(str(path)), str(path))
    job = recorded.jobs.get(args.job)
    if job is None:
        raise InputError(f"{path}: no job {args.job!r} in the simulated trace")
    # The simulated job's state: what the last round it appears in did with it.
    seen = [r for r in recorded.rounds if args.job in r.plan.reasons or args.job in r.plan.assignments]
    if not seen:
        state = "not yet arrived, or finished before any round"
    elif args.job in seen[-1].plan.assignments:
        state = "RUNNING" if seen[-1] is recorded.rounds[-1] else "finished (after its last round)"
    else:
        state = "PENDING"
    facts = replace(job, state=state)
    return explain(facts, recorded.rounds, recorded.jobs, recorded.nodes, recorded.quotas)


def _live(args: argparse.Namespace) -> Explanation:
    config = load_config(args)
    store = Store(config.store_path)
    try:
        records = store.jobs()
        stored = [r for r in reversed(store.rounds(max(1, args.rounds))) if r.status != "dry-run"]
    finally:
        store.close()
    rounds = []
    for r in stored:
        try:
            rounds.append(Round(r.round_id, r.time_s, round_plan_from_json(r.plan, f"round {r.round_id}")))
        except SnapshotError as e:  # a round written by another version: explain from the rest
            log.warning("%s; skipped", e)
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    nodes: dict[str, tuple[str, int]] = {}
    facts: dict[str, JobFacts] = {}
    try:
        slurm_jobs = client.jobs()
        obs = build_observation(time.time(), slurm_jobs, client.nodes(), records, config)
    except (SlurmError, MosaicError) as e:
        log.warning("Slurm not read (%s): the explanation is the state store's alone", e)
        slurm_jobs, obs = [], None
    if obs is not None:
        nodes = {n.name: (n.gpu_type, n.gpus) for n in obs.snapshot.nodes}
        by_id = {sj.id: sj for sj in slurm_jobs}
        for j in obs.snapshot.jobs:
            sj = by_id.get(j.id)
            facts[j.id] = _facts(j, sj.state if sj else None, _user(sj.user_id if sj else None))
            if sj is not None:
                facts[j.id] = replace(facts[j.id], requeues=sj.requeues)
    for job_id, record in records.items():  # jobs Slurm no longer lists: the store's request
        if job_id not in facts:
            meta = record.meta or {}
            facts[job_id] = JobFacts(
                job_id,
                record.num_gpus,
                tuple(meta.get("gpu_types") or ()),
                meta.get("min_gpus"),
                meta.get("max_gpus"),
                meta.get("plan"),
                meta.get("tenant"),
                bool(meta.get("guaranteed")),
                "finished" if record.finished_s is not None else None,
            )
    job = facts.get(args.job)
    if job is None:
        raise InputError(f"job {args.job!r}: neither Slurm's managed partitions nor the state store know it")
    return explain(job, rounds, facts, nodes, _quotas(args.config) or {})


def _facts(job: Job, state: str | None, user: str | None) -> JobFacts:
    return JobFacts(
        job.id,
        job.num_gpus,
        tuple(job.gpu_types) or ((job.gpu_type,) if job.gpu_type else ()),
        job.min_gpus,
        job.max_gpus,
        dict(job.plan) if job.plan is not None else None,
        job.tenant,
        job.guaranteed,
        state,
        user,
    )


def _user(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
