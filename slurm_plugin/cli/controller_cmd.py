"""``mosaic controller``, ``mosaic submit``, ``mosaic status`` and ``mosaic snapshot``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import pwd
from pathlib import Path
from typing import Any

from planner.config import build_scheduler
from planner.core.codec import snapshot_to_json
from planner.core.errors import ConfigError, InputError
from slurm_plugin import statusview
from slurm_plugin.cli.scheduler_args import add_scheduler_args, scheduler_config
from slurm_plugin.controller.config import ControllerConfig, controller_config
from slurm_plugin.controller.loop import Controller, Observer
from slurm_plugin.controller.observe import OUTSIDE_PREFIX, sharing_notice
from slurm_plugin.controller.refine import Refiner
from slurm_plugin.controller.resize import apply_resize
from slurm_plugin.files import read_toml, write_json
from slurm_plugin.profiles_file import load_profile_store
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode
from slurm_plugin.slurm.runner import SlurmError
from slurm_plugin.store import Store
from slurm_plugin.submit import split_arguments, submit

log = logging.getLogger(__name__)


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    c = sub.add_parser(
        "controller",
        parents=[common],
        help="run the scheduling controller on the live Slurm cluster",
        description="Every round: read Slurm, plan with the configured scheduler, apply the "
        "difference with scontrol (checkpoint signal + requeuehold, update + release). "
        "--once runs one tick (cron); --dry-run prints the actions without applying them.",
    )
    _live_args(c, config=False)
    c.add_argument("--once", action="store_true", help="one tick, print its report as JSON, exit")
    c.add_argument("--dry-run", action="store_true", help="plan and print the actions; change nothing")
    c.add_argument("--profiles", action="append", default=[], metavar="JSON", help="extra profile file(s)")
    add_scheduler_args(c, default_preset="mosaic")
    c.set_defaults(run=run_controller)

    s = sub.add_parser(
        "submit",
        parents=[common],
        help="submit a batch script with #MOSAIC directives (held, for the controller)",
        description="Validates the script's #MOSAIC directives (errors name the line), then runs "
        "sbatch --hold with the metadata in the job's comment. sbatch options go after the script "
        "and '--' (mosaic submit job.sh -- --gres=gpu:2), or after '--' and before the script, "
        "as sbatch takes them (mosaic submit -- --gres=gpu:2 job.sh).",
        usage="mosaic submit [OPTIONS] SCRIPT [-- SBATCH_OPTIONS...]\n"
        "       mosaic submit [OPTIONS] -- SBATCH_OPTIONS... SCRIPT",
    )
    _live_args(s)
    s.add_argument("script", help="the batch script (or, after --, the first sbatch option)")
    s.add_argument("sbatch_args", nargs=argparse.REMAINDER, help="options passed to sbatch")
    s.set_defaults(run=run_submit)

    r = sub.add_parser(
        "resize",
        parents=[common],
        help="resize a running job now (checkpoint, requeue, update, plan file, release)",
        description="Gives a running managed job another GPU count (and CPUs, memory, execution "
        "plan) through the controller's actuator: checkpoint signal, requeuehold, update, a new "
        "plan file, a credential-safe release. The new count becomes the job's request, so the "
        "controller keeps it. CPUs and memory default to the GPU-proportional share; the plan to "
        "the job's own, re-made for the new GPU count.",
    )
    _live_args(r)
    r.add_argument("job", help="the Slurm job id")
    r.add_argument("--gpus", type=int, required=True, help="the new GPU count")
    r.add_argument("--cpus", type=int, help="total CPUs (default: the GPU-proportional share)")
    r.add_argument("--mem-gb", type=float, help="total memory in GB (default: the GPU-proportional share)")
    r.add_argument("--plan", help="the execution plan as JSON (default: the job's own, for the new count)")
    r.add_argument("--dry-run", action="store_true", help="print the target and the actions; change nothing")
    r.set_defaults(run=run_resize)

    st = sub.add_parser(
        "status",
        parents=[common],
        help="the managed jobs as a table (squeue's view with Mosaic's request, plan and reason), "
        "tenants' quota use and the cluster's GPUs in use; --json: the last rounds and actions",
    )
    _live_args(st)
    st.add_argument("--rounds", type=int, default=5, help="rounds in --json (default %(default)s)")
    st.add_argument(
        "--json", action="store_true", help="the last rounds, their actions and the jobs, as JSON"
    )
    st.set_defaults(run=run_status)

    sn = sub.add_parser(
        "snapshot",
        parents=[common],
        help="capture the live cluster's Snapshot JSON (replay it with 'mosaic plan')",
    )
    _live_args(sn)
    sn.add_argument("--out", help="write here instead of stdout")
    sn.set_defaults(run=run_snapshot)


def _live_args(p: argparse.ArgumentParser, config: bool = True) -> None:
    if config:  # the controller gets --config from the scheduler flags
        p.add_argument("--config", metavar="TOML", help="mosaic.toml: its [controller] table")
    p.add_argument("--spool", type=Path, help="spool directory (overrides [controller] spool_dir)")
    p.add_argument("--slurm-conf", help="slurm.conf of the cluster (overrides [controller] slurm_conf)")
    p.add_argument("--partition", action="append", help="a managed partition (overrides the config)")


def load_config(args: argparse.Namespace) -> ControllerConfig:
    table: Any = {}
    if args.config:
        document = read_toml(args.config)
        table = document.get("controller", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{args.config}: [controller] must be a table")
    source = f"{args.config}: [controller]" if args.config else "[controller]"
    return controller_config(
        table,
        source,
        spool_dir=args.spool,
        slurm_conf=args.slurm_conf,
        partitions=args.partition,
    )


def spool_ready(spool: Path) -> None:
    """The spool exists (created if its parent lets us) and this process may write in it;
    otherwise a :class:`ConfigError` naming the directory, the account and the fix (the
    controller runs as an ordinary account: see the systemd unit in etc/)."""
    import pwd

    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    fix = f"create it for the controller's account: install -d -o {user} -m 0755 {spool}"
    try:
        spool.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{spool}: cannot create the spool directory as {user}: {e.strerror}; {fix}") from e
    if not spool.is_dir():
        raise ConfigError(f"{spool}: the spool is not a directory")
    if not os.access(spool, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{spool}: the spool directory is not writable by {user} (uid {os.getuid()}); {fix}"
        )


def _client(config: ControllerConfig) -> CliSlurm:
    return CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)


def run_controller(args: argparse.Namespace) -> int:
    config = load_config(args)
    sched_config = scheduler_config(args)
    profiles = load_profile_store(args.profiles)
    scheduler = build_scheduler(sched_config, profiles)
    spool_ready(config.spool_dir)
    if scheduler.next_wakeup_s(0.0) is not None:
        log.warning(
            "scheduler %s backfills only at set times (placement.backfill_interval_s), which mosaic sim "
            "plans at; the controller plans every %g s, so its rounds backfill only when one falls on one",
            scheduler.name,
            config.round_s,
        )
    if scheduler.max_jobs_per_gpu > 1:
        try:
            log.warning("%s", sharing_notice(scheduler.name, _client(config).nodes(), config.partitions))
        except SlurmError as e:
            log.warning("scheduler %s shares GPUs; nodes not read (%s)", scheduler.name, e)
    store = Store(config.store_path)
    try:
        # Each round plans on the profiles refined by running jobs' heartbeats (refine.py).
        refiner = Refiner(store, profiles, lambda p: build_scheduler(sched_config, p), config.spool_dir)
        quotas = {t.name: float(t.gpu_quota) for t in sched_config.tenants}
        # An event-driven preset (crius, sjf-bsbf: trigger = "event") plans at each arrival and
        # completion as well as every round, as it was published; a single tick cannot wait for one.
        controller = Controller(
            _client(config),
            store,
            config,
            scheduler,
            refiner=refiner,
            quotas=quotas,
            trigger=sched_config.trigger,
        )
        if sched_config.trigger == "event" and (args.once or args.dry_run):
            log.warning(
                "scheduler %s is event-driven: the daemon (without --once/--dry-run) plans at each "
                "arrival and completion; this single tick plans once, now",
                scheduler.name,
            )
        if args.once or args.dry_run:
            report = controller.tick(dry_run=args.dry_run)
            print(json.dumps(report.to_json(), indent=2))
            return 0 if report.ok else 1
        log.info(
            "controller: scheduler %s, round %g s%s, spool %s",
            scheduler.name,
            config.round_s,
            f" and at arrivals and completions (polled every {config.event_poll_s:g} s)"
            if controller.trigger == "event"
            else "",
            config.spool_dir,
        )
        controller.run_forever()
        return 0
    finally:
        store.close()


def run_submit(args: argparse.Namespace) -> int:
    config = load_config(args)
    script, extra = split_arguments([args.script, *args.sbatch_args])
    job_id = submit(_client(config), script, extra, config.spool_dir)
    print(job_id)
    return 0


def run_resize(args: argparse.Namespace) -> int:
    config = load_config(args)
    plan = None
    if args.plan is not None:
        try:
            plan = json.loads(args.plan)
        except json.JSONDecodeError as e:
            raise InputError(f"--plan is not valid JSON: {e.msg}") from e
        if not isinstance(plan, dict):
            raise InputError("--plan must be a JSON object")
    spool_ready(config.spool_dir)
    store = Store(config.store_path)
    try:
        report = apply_resize(
            _client(config),
            store,
            config,
            args.job,
            args.gpus,
            cpus=args.cpus,
            mem_gb=args.mem_gb,
            plan=plan,
            dry_run=args.dry_run,
        )
    finally:
        store.close()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


def run_status(args: argparse.Namespace) -> int:
    config = load_config(args)
    if not args.json:
        return _status_table(args, config)
    store = Store(config.store_path)
    try:
        ticks, failed = store.tick_counts()
        rounds = []
        for r in store.rounds(args.rounds):
            actions = [
                {"request_id": a[0], "job": a[2], "kind": a[3], "status": a[4], "detail": a[5]}
                for a in store.actions(r.round_id)
            ]
            # A planned job whose start failed or was refused does not run (it is held again).
            not_started = {
                a["job"] for a in actions if a["kind"] == "start" and a["status"] in {"failed", "skipped"}
            }
            planned = sorted(j for j in r.plan.get("assignments", {}) if not j.startswith(OUTSIDE_PREFIX))
            rounds.append(
                {
                    "round": r.round_id,
                    "time_s": r.time_s,
                    "status": r.status,
                    "actions": actions,
                    "planned": planned,
                    "running": [j for j in planned if j not in not_started],
                }
            )
        jobs = {
            j.job_id: {
                "num_gpus": j.num_gpus,
                "attained_gpu_s": round(j.attained_gpu_s, 1),
                "progress": j.progress,
                "finished": j.finished_s is not None,
            }
            for j in store.jobs().values()
        }
        print(json.dumps({"ticks": ticks, "failed_ticks": failed, "rounds": rounds, "jobs": jobs}, indent=2))
        return 0
    finally:
        store.close()


def _status_table(args: argparse.Namespace, config: ControllerConfig) -> int:
    from slurm_plugin.cli.report_cmd import _quotas

    quotas = _quotas(args.config)
    store = Store(config.store_path)
    try:
        ticks, failed = store.tick_counts()
        records = store.jobs()
        last = next(iter(store.rounds(1)), None)
        actions = (
            [{"job": a[2], "kind": a[3], "status": a[4]} for a in store.actions(last.round_id)]
            if last is not None
            else []
        )
    finally:
        store.close()
    client = _client(config)
    slurm_error = None
    try:
        slurm_jobs: list[SlurmJob] | None = client.jobs()
        nodes: list[SlurmNode] | None = client.nodes()
    except SlurmError as e:  # the store's view alone: what the last round did
        slurm_jobs = nodes = None
        slurm_error = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(
        statusview.render(
            records,
            last,
            actions,
            slurm_jobs,
            nodes,
            config.partitions,
            ticks=ticks,
            failed_ticks=failed,
            quotas=quotas,
            slurm_error=slurm_error,
            user_name=_user_name,
        )
    )
    return 0


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def run_snapshot(args: argparse.Namespace) -> int:
    config = load_config(args)
    spool_ready(config.spool_dir)
    store = Store(config.store_path)
    try:
        # Observing also records new jobs and accounts service, as a tick would.
        document = snapshot_to_json(Observer(_client(config), store, config).observe().snapshot)
    finally:
        store.close()
    if args.out:
        write_json(args.out, document)
    else:
        print(json.dumps(document, indent=2))
    return 0
