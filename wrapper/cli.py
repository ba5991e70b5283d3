"""``mosaic-run [OPTIONS] -- COMMAND ...``: run a job's training the way Mosaic planned it.

Without a plan file and without ``--framework`` (a job that never declared itself to
Mosaic), ``mosaic-run`` replaces itself with the command: signals, exit status and output
are the command's own, exactly as submitted.

Otherwise it reads the job's plan (``--plan-file``, ``MOSAIC_PLAN_FILE``, or
``$MOSAIC_SPOOL/plans/$SLURM_JOB_ID.json``; absent: the submitted ``--plan`` on
``--workers`` ranks), resolves it for the global batch, finds the newest complete
checkpoint, renders the plan for the framework (a DeepSpeed config, Megatron arguments, or
the torch environment), starts one rank per GPU (srun inside Slurm, local processes
otherwise), forwards the checkpoint signals, and after a signalled stop writes the
checkpoint marker the controller waits for (:mod:`wrapper.status`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from planner.core.errors import InputError
from planner.core.execplan import PlanError, check_transition, plan_from_mapping, plan_to_mapping, resolve
from planner.core.plandoc import JobPlan
from wrapper import checkpoint, render, status
from wrapper.allocation import adapt, mismatch, slurm_allocation
from wrapper.deepspeed_resume import prepare_deepspeed_resume
from wrapper.launch import TASK_SHIM, Supervisor, free_port, start_local, start_srun
from wrapper.planfile import find_plan_file, read_plan_file

log = logging.getLogger("mosaic-run")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosaic-run",
        description="Run a training command as Mosaic planned it (as submitted when there is no plan).",
        usage="mosaic-run [-h] [OPTIONS] -- COMMAND [ARG ...]",
    )
    parser.add_argument(
        "--framework", choices=render.FRAMEWORKS, help="what the training uses (declares the job)"
    )
    parser.add_argument(
        "--plan-file", help="the plan file (default: $MOSAIC_PLAN_FILE or $MOSAIC_SPOOL/plans/JOB.json)"
    )
    parser.add_argument("--plan", help="the submitted execution plan as JSON, used while no plan file exists")
    parser.add_argument(
        "--workers", type=int, help="ranks to run without a plan file (default: $SLURM_NTASKS or 1)"
    )
    parser.add_argument(
        "--global-batch",
        type=int,
        help="the job's global batch (examples per optimizer step; default: $MOSAIC_GLOBAL_BATCH, "
        "which mosaic submit sets from #MOSAIC --global-batch-size)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        help="where checkpoints go (default: $MOSAIC_CHECKPOINT_DIR or ./mosaic-ckpt/JOB, or "
        "./mosaic-ckpt/JOB-TOKEN when an earlier job with the same id left its checkpoints there)",
    )
    parser.add_argument(
        "--deepspeed-config",
        help="the job's own DeepSpeed config; its path in COMMAND is replaced by the rendered one",
    )
    parser.add_argument(
        "--launcher",
        choices=("auto", "srun", "local"),
        default="auto",
        help="how ranks start (auto: srun inside Slurm)",
    )
    parser.add_argument(
        "--grace-s",
        type=float,
        default=25.0,
        help="seconds ranks get to checkpoint after a signal (below Slurm's KillWait)",
    )
    parser.add_argument("--output", help="append every rank's output to this file (kept across restarts)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("mosaic-run: error: no command given (usage: mosaic-run -- COMMAND [ARG ...])", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:
        print(f"mosaic-run: error: command not found: {command[0]}", file=sys.stderr)
        return 127
    logging.basicConfig(level=logging.INFO, format="mosaic-run: %(message)s", stream=sys.stderr)
    env = dict(os.environ)
    try:
        plan_path = find_plan_file(env, args.plan_file)
        job_plan = read_plan_file(plan_path) if plan_path is not None else None
        if job_plan is None and args.framework is None and args.plan is None:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execvp(command[0], command)  # as submitted: replaces this process, never returns
        return _run(args, command, env, job_plan)
    except InputError as e:
        print(f"mosaic-run: error: {e}", file=sys.stderr)
        return 2


def _global_batch(given: int | None, env: dict[str, str]) -> int | None:
    """``--global-batch``, else the job's ``#MOSAIC --global-batch-size`` (``mosaic submit``
    exports it as ``MOSAIC_GLOBAL_BATCH``); the flag wins, with a warning when they differ."""
    raw = env.get("MOSAIC_GLOBAL_BATCH", "").strip()
    if raw and not raw.isdigit():
        raise InputError(f"MOSAIC_GLOBAL_BATCH: expected a positive integer, got {raw!r}")
    declared = int(raw) if raw else None
    if given is not None and declared is not None and given != declared:
        log.warning(
            "--global-batch %d overrides the job's #MOSAIC --global-batch-size %d for this launch",
            given,
            declared,
        )
    return given if given is not None else declared


def _run(args: argparse.Namespace, command: list[str], env: dict[str, str], job_plan: JobPlan | None) -> int:
    job_id = env.get("SLURM_JOB_ID") or "local"
    framework = args.framework or "torch"
    args.global_batch = _global_batch(args.global_batch, env)
    mismatched = None
    alloc = slurm_allocation(env) if job_plan is not None else None
    if job_plan is not None and alloc is not None:
        mismatched = mismatch(job_plan.assignment, alloc)
        if mismatched is not None:
            # Stale or hand-changed: run what Slurm really gave, loudly (wrapper.allocation).
            log.warning(
                "job %s: plan file version %d does not match what Slurm gave the job (%s); "
                "running on %s instead",
                job_id,
                job_plan.version,
                mismatched,
                alloc.describe(),
            )
            job_plan = adapt(job_plan, alloc, args.global_batch)
    if job_plan is not None:
        workers, submitted, version = job_plan.workers, job_plan.exec_plan, job_plan.version
    else:
        workers = args.workers or int(env.get("SLURM_NTASKS", "1"))
        submitted = plan_from_mapping(json.loads(args.plan) if args.plan else None, "--plan")
        version = None
    plan = resolve(submitted, workers, args.global_batch, f"job {job_id}: plan")
    submission = checkpoint.submission_token(env)
    given = args.checkpoint_dir or env.get("MOSAIC_CHECKPOINT_DIR")
    ckpt_root = Path(given or checkpoint.job_root(job_id, submission)).resolve()
    if given and (owner := checkpoint.foreign_owner(ckpt_root, submission)) is not None:
        log.warning(
            "job %s: checkpoint directory %s was written by another submission (%s): resuming from it "
            "as asked",
            job_id,
            ckpt_root,
            f"job {owner.get('job_id')}, submission {owner.get('submission')}" if owner else "no owner",
        )
    elif not given and ckpt_root != checkpoint.default_root(job_id).resolve():
        log.info(
            "job %s: %s belongs to an earlier job with the same id; this submission's checkpoints go to %s",
            job_id,
            checkpoint.default_root(job_id),
            ckpt_root,
        )
    ckpt_root.mkdir(parents=True, exist_ok=True)
    checkpoint.claim(ckpt_root, job_id, submission)
    latest = checkpoint.latest_complete(ckpt_root)
    if latest is not None:
        previous = plan_from_mapping(latest.record.get("plan") or None, f"{latest.path}: plan")
        check_transition(previous, plan, f"job {job_id}: resuming {latest.path.name}")
    done_dir = ckpt_root / ".mosaic" / f"done-{os.getpid()}-{time.time_ns()}"
    spool = status.spool_dir(env)
    status_dir = Path(env.get("MOSAIC_STATUS_DIR") or status.status_dir(spool, job_id))
    squatter = status.foreign_owner(status_dir)
    if squatter is not None:
        log.warning(
            "job %s: status directory %s belongs to uid %d, not to this job's user (uid %d): the "
            "controller will ignore this job's heartbeats and checkpoint markers (it cannot "
            "checkpoint the job before a preemption); ask the administrator to remove the directory",
            job_id,
            status_dir,
            squatter,
            os.getuid(),
        )
    child_env = {
        **env,
        **render.torch_plan_environment(plan, version),
        "MOSAIC_JOB_ID": job_id,
        "MOSAIC_FRAMEWORK": framework,
        "MOSAIC_CHECKPOINT_DIR": str(ckpt_root),
        "MOSAIC_STATUS_DIR": str(status_dir),
        # Where each rank says its work is done (Runtime.done): one directory per launch, on
        # the checkpoint directory's file system, which every node of the job sees.
        "MOSAIC_DONE_DIR": str(done_dir),
        # A port free on this node (the launch node, home of rank 0) beats one derived from the job
        # id, which two jobs on one node can share; every rank inherits it (srun --export=ALL).
        "MOSAIC_MASTER_PORT": env.get("MOSAIC_MASTER_PORT") or str(free_port()),
    }
    resume_path = latest.path if latest is not None else None
    if framework == "deepspeed":
        base = json.loads(Path(args.deepspeed_config).read_text()) if args.deepspeed_config else None
        resume_path, universal = prepare_deepspeed_resume(latest, plan, ckpt_root)
        config = render.deepspeed_config(plan, base, load_universal=universal)
        config_path = ckpt_root / ".mosaic" / f"deepspeed-config.{version or 0}.json"
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        child_env["MOSAIC_DEEPSPEED_CONFIG"] = str(config_path)
        if args.deepspeed_config:
            command = [str(config_path) if a == args.deepspeed_config else a for a in command]
    elif framework == "megatron":
        command = [*command, *render.megatron_args(plan)]
    if resume_path is not None and latest is not None:
        child_env["MOSAIC_RESUME_FROM"] = str(resume_path)
        child_env["MOSAIC_RESUME_STEP"] = str(latest.step)
    else:
        child_env.pop("MOSAIC_RESUME_FROM", None)
        child_env.pop("MOSAIC_RESUME_STEP", None)
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    log.info(
        "job %s (restart %s): plan version %s, %d ranks, %s, %s",
        job_id,
        restarts,
        version if version is not None else "none (as submitted)",
        workers,
        framework,
        f"resuming from {latest.path.name}" if latest is not None else "no checkpoint: starting fresh",
    )
    status.append_record(
        status_dir / status.HEARTBEATS,
        {
            "event": "start",
            "time": round(time.time(), 3),
            "job_id": job_id,
            "plan_version": version,
            "step": latest.step if latest is not None else 0,
            "world_size": workers,
            "restarts": int(restarts) if restarts.isdigit() else 0,
            "plan": plan_to_mapping(plan),
            **({"plan_mismatch": mismatched} if mismatched else {}),
        },
    )
    use_srun = args.launcher == "srun" or (
        args.launcher == "auto"
        and job_plan is not None
        and "SLURM_JOB_ID" in env
        and shutil.which("srun") is not None
    )
    output = open(args.output, "ab") if args.output else None  # noqa: SIM115 - lives as long as the ranks
    try:
        if use_srun:
            if job_plan is None:
                raise PlanError("--launcher srun needs a plan file (the assignment names the nodes)")
            argv, hostfile = render.srun_argv(job_plan.assignment, [*TASK_SHIM, *command], output=args.output)
            if hostfile is not None:
                hostfile_path = ckpt_root / ".mosaic" / "hostfile"
                hostfile_path.parent.mkdir(parents=True, exist_ok=True)
                hostfile_path.write_text(hostfile)
                child_env["SLURM_HOSTFILE"] = str(hostfile_path)
            procs = start_srun(argv, child_env)
        else:
            procs = start_local(command, workers, job_id, child_env, output)
        outcome = Supervisor(args.grace_s, srun=use_srun, done_dir=done_dir, world_size=workers).run(procs)
    finally:
        if output is not None:
            output.close()
        shutil.rmtree(done_dir, ignore_errors=True)
    if outcome.stop_signal is not None:
        done = checkpoint.latest_complete(ckpt_root)
        status.write_marker(
            status_dir / status.CHECKPOINT_MARKER,
            {
                "job_id": job_id,
                "time": round(time.time(), 3),
                "signal": outcome.stop_signal,
                "plan_version": version,
                "step": done.step if done is not None else None,
                "path": str(done.path) if done is not None else None,
                "killed_ranks": outcome.killed,
                "returncode": outcome.returncode,
            },
        )
        log.info(
            "stopped on %s: newest complete checkpoint %s",
            outcome.stop_signal,
            done.path.name if done else "none",
        )
    return outcome.returncode


if __name__ == "__main__":
    sys.exit(main())
