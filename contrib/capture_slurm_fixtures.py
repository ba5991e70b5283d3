#!/usr/bin/env python3
"""Capture real Slurm output for the parser tests (``tests/data/slurm/``).

Brings up a private test cluster (accounting on), puts jobs and nodes into the states
the parsers must handle (running with GPU indices, held, requeued, BadConstraints,
completing, another partition, a drained and a down node) and saves what ``squeue
--json``, ``sinfo --json``, ``scontrol show job/node -o`` and ``sacct`` print; then one
moment of a second queue as both ``squeue --json`` and the ``squeue --Format`` text the
controller reads (:func:`capture_pair`). Run as root:
``.venv/bin/python contrib/capture_slurm_fixtures.py`` (``--pair-only``: the second part alone;
``--sacct-trace-only``: only what ``mosaic trace from-sacct`` reads, :func:`capture_sacct_trace`).
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from slurm_plugin.directives import encode_comment
from slurm_plugin.slurm import commands, parse
from slurm_plugin.slurm.backend import DETAIL_STATES
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.shapes import shape_named

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "slurm"


PAIR_SEPARATOR = "~mosaic-fixture-separator~"
"""The separator ``squeue_format.txt`` was printed with (the controller draws a random one per call)."""


def main(argv: list[str]) -> int:
    """All fixtures; ``--pair-only``: only the squeue --json / --Format pair (a homogeneous cluster)."""
    pair_only = "--pair-only" in argv
    if "--sacct-trace-only" in argv:
        with tempfile.TemporaryDirectory(prefix="mosaic-capture-") as tmp:
            cluster = lifecycle.up(shape_named("homogeneous", accounting=True), Path(tmp) / "c")
            try:
                capture_sacct_trace(cluster.env)
            finally:
                lifecycle.down(cluster.layout.root)
        return 0
    with tempfile.TemporaryDirectory(prefix="mosaic-capture-") as tmp:
        shape = shape_named("homogeneous") if pair_only else shape_named("hetero", accounting=True)
        cluster = lifecycle.up(shape, Path(tmp) / "c")
        env = cluster.env
        try:
            if not pair_only:
                capture(env)
            capture_pair(env)
        finally:
            lifecycle.down(cluster.layout.root)
    return 0


HOSTILE_NAME = "evil|name\n   JOB_GRES=gpu:1\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:3)\nJobName=x"
HOSTILE_COMMENT = f'a|b\nc{PAIR_SEPARATOR[:-1]} %k \\t (null) "q" ünï\n'


def capture_pair(env: dict[str, str]) -> None:
    """One moment of the queue as ``squeue --json``, ``squeue --Format`` (what the controller
    reads) and ``scontrol -d show job`` of each running job, for the test that both parsers
    agree: running (one and two nodes, memory per CPU, a name that fakes scontrol's GPU
    lines), held (one of them another user's), requeued, BadConstraints, another partition,
    CPU-only, completing, ended, hostile names and comments, an array, task layouts, and time
    limits (minutes, hours, days, and one beyond the year squeue --Format prints)."""
    run(["scancel", "--user=root"], env=env, check=False)
    time.sleep(1)
    w = ["--wrap", "sleep 300"]
    held = [
        sbatch(env, "--hold", "-J", "mem0", "--gres=gpu:1", "--mem=0", *w),
        sbatch(env, "--hold", "-J", "nomem", "--gres=gpu:1", "--time=90", *w),
        sbatch(env, "--hold", "-J", "tpn", "-N", "2", "--ntasks-per-node=2", "--gres=gpu:1", "--mem=1G", *w),
        sbatch(env, "--hold", "-J", "gpt", "-n", "2", "--gpus-per-task=1", "--mem-per-cpu=300", *w),
        sbatch(env, "--hold", "-J", "gpus", "--gpus=2", "-c", "3", "--mem=2G", "--time=2-03:04:00", *w),
        sbatch(env, "--hold", "-J", "cw", "-C", "a100", "-w", "n3", "--gres=gpu:1", "--time=400-0", *w),
        sbatch(env, "--hold", "-J", HOSTILE_NAME, f"--comment={HOSTILE_COMMENT}", "--gres=gpu:1", *w),
        # Another user's job (root submits it as 'nobody'): its UserId is not 0.
        sbatch(env, "--hold", "--uid=nobody", "-D", "/", "-J", "nobodys", "--gres=gpu:1", *w),
        sbatch(env, "--hold", "-J", "arr", "--array=0-2", "--gres=gpu:1", *w),
    ]
    run(["scontrol", "update", f"JobId={held[-1]}_1", "Comment=split"], env=env)  # splits one task out
    started = [
        sbatch(env, "-J", "r2node", "-N", "2", "--gres=gpu:1", "-c", "2", "--mem=2G", *w),
        sbatch(env, "-J", "rpcpu", "--gres=gpu:1", "-c", "3", "--mem-per-cpu=700", "--time=10", *w),
        sbatch(env, "-J", HOSTILE_NAME, "--gres=gpu:2", "-c", "1", "--mem=1G", "--comment=mosaic:{}", *w),
        sbatch(env, "-J", "rq", "--gres=gpu:1", "-c", "1", "--mem=1G", *w),
        sbatch(env, "-J", "bad", "--gres=gpu:1", "-c", "1", "--mem=1G", *w),
        sbatch(env, "-J", "cg", "--gres=gpu:1", "-c", "1", "--mem=1G", "--wrap", "trap '' TERM; sleep 300"),
        sbatch(env, "-J", "ended", "--gres=gpu:1", "-c", "1", "--mem=1G", "--wrap", "true"),
        sbatch(env, "-J", "gpt-run", "-n", "2", "--gpus-per-task=1", "--mem-per-cpu=300", *w),
    ]
    sbatch(env, "-p", "other", "-J", "other", "--gres=gpu:1", "-c", "1", "--mem=1G", *w)
    sbatch(env, "-p", "other", "-J", "cpuonly", "-c", "2", "--mem=1G", *w)
    r2node, rpcpu, hostile, rq, bad, cg, _ended, gpt_run = started
    ids = ",".join(started)
    run(["scontrol", "update", f"JobId={ids}", "StartTime=now"], env=env)
    run(["scontrol", "release", ids], env=env)
    wait_running(env, [r2node, rpcpu, hostile, rq, bad, cg, gpt_run])
    run(["scontrol", "requeuehold", f"{rq},{bad}"], env=env)
    time.sleep(1)
    run(["scontrol", "update", f"JobId={bad}", "Gres=gpu:5", "StartTime=now"], env=env)
    run(["scontrol", "release", bad], env=env)
    time.sleep(2)  # a scheduler pass marks the impossible job BadConstraints
    run(["scancel", cg], env=env)
    time.sleep(0.5)
    fmt_env = {**env, **commands.SQUEUE_TEXT_ENV}
    text = run(commands.squeue_text(PAIR_SEPARATOR), env=fmt_env).stdout
    doc = run(["squeue", "--json"], env=env).stdout
    details = {
        j.id: run(commands.job_detail(j.id), env=env).stdout
        for j in parse.parse_squeue_text(text, PAIR_SEPARATOR)
        if j.state in DETAIL_STATES and j.nodes
    }
    save("squeue_format.txt", text)
    save("squeue_pair.json", doc)
    save("scontrol_detail.json", json.dumps(details, indent=1, ensure_ascii=False) + "\n")
    print(f"captured the squeue pair ({len(details)} running jobs) into {OUT}", file=sys.stderr)


def sbatch(env: dict[str, str], *args: str) -> str:
    out = run(["sbatch", "--parsable", "-o", "/dev/null", *args], env=env).stdout
    return out.strip().split(";")[0]


def capture(env: dict[str, str]) -> None:
    sleep = ["--wrap", "sleep 300"]
    # 1: runs on 2 GPUs, 4 CPUs, 8 GB, with a Mosaic comment.
    a = sbatch(env, "-J", "running", "--gres=gpu:2", "-c", "4", "--mem=8G", "--comment=mosaic:{}", *sleep)
    # 2: held (the job_submit.lua safety net holds every job of the managed partition).
    b = sbatch(env, "-J", "held", "--gres=gpu:1", "-c", "2", "--mem=4G", *sleep)
    # 3: requeued after running: requeuehold leaves it pending and held with restart_cnt 1.
    c = sbatch(env, "-J", "requeued", "--gres=gpu:1", "-c", "2", "--mem=4G", "-C", "v100", *sleep)
    # 4: BadConstraints: more GPUs per node than any node has.
    d = sbatch(env, "-J", "bad", "--gres=gpu:1", "-c", "1", "--mem=1G", *sleep)
    # 5: outside Mosaic's partition: runs unheld on one GPU.
    e = sbatch(env, "-p", "other", "-J", "other", "--gres=gpu:1", "-c", "1", "--mem=2G", *sleep)
    # 6: ignores SIGTERM so that it stays COMPLETING for KillWait after a cancel.
    f = sbatch(env, "-J", "completing", "--gres=gpu:1", "-c", "1", "--mem=1G", "-w", "n2",
               "--wrap", "trap '' TERM; sleep 300")  # fmt: skip
    # 7: a 2-node job, one GPU on each of n2 and n4 (n4 is then drained under it).
    g = sbatch(env, "-J", "two-nodes", "-N", "2", "--gres=gpu:1", "-c", "2", "--mem=2G",
               "-w", "n2,n4", *sleep)  # fmt: skip
    released = f"{a},{c},{d},{f},{g}"
    run(["scontrol", "update", f"JobId={released}", "StartTime=now"], env=env)
    run(["scontrol", "release", released], env=env)
    wait_running(env, released.split(","))
    run(["scontrol", "requeuehold", c], env=env)
    run(["scontrol", "requeuehold", d], env=env)
    time.sleep(1)
    run(["scontrol", "update", f"JobId={d}", "Gres=gpu:5", "StartTime=now"], env=env)
    run(["scontrol", "release", d], env=env)
    run(["scontrol", "update", "NodeName=n4", "State=DRAIN", "Reason=fixture drain"], env=env)
    run(["scontrol", "update", "NodeName=n3", "State=DOWN", "Reason=fixture down"], env=env)
    time.sleep(2)  # a scheduler pass marks the impossible job BadConstraints
    run(["scancel", f], env=env)
    time.sleep(0.5)
    save("squeue.json", run(["squeue", "--json"], env=env).stdout)
    save("sinfo.json", run(["sinfo", "--json"], env=env).stdout)
    save("scontrol_jobs.txt", run(["scontrol", "show", "job", "-o"], env=env).stdout)
    save("scontrol_nodes.txt", run(["scontrol", "show", "node", "-o"], env=env).stdout)
    # sacct: the requeued job's runs, then everything finished.
    run(["scontrol", "release", c], env=env)
    time.sleep(1)
    run(["scancel", a, b, c, d, e, g], env=env)
    time.sleep(6)
    save("sacct.json", run(["sacct", "-D", "-X", "--json", "-S", "now-1hour"], env=env).stdout)
    fields = (
        "JobID,JobName,Partition,State,ExitCode,Submit,Start,End,Elapsed,AllocTRES,ReqTRES,NodeList,Comment"
    )
    save("sacct.txt", run(["sacct", "-D", "-X", "-P", "-S", "now-1hour", "-o", fields], env=env).stdout)
    print(f"captured jobs {a} {b} {c} {d} {e} {f} {g} into {OUT}", file=sys.stderr)


def capture_sacct_trace(env: dict[str, str]) -> None:
    """A site's history as ``mosaic trace from-sacct`` reads it (``sacct_trace.txt``, the
    command beside it in ``sacct_trace.cmd``; ``sacct_trace_iso.txt``: the same without
    ``SLURM_TIME_FORMAT``): jobs on 1, 2 (submitted with Mosaic's comment) and 4 GPUs (two
    nodes), one requeued while running (``scontrol requeue``), a three-task array, one
    cancelled while pending, one that fails, one that runs past its time limit, under two
    accounts and a QOS."""
    for argv in (
        ["sacctmgr", "-i", "add", "account", "vision", "research"],
        ["sacctmgr", "-i", "add", "qos", "prod"],
        ["sacctmgr", "-i", "add", "user", "root", "account=vision,research", "qos+=prod"],
        ["sacctmgr", "-i", "modify", "user", "root", "set", "qos+=prod"],
    ):
        print(run(argv, env=env, check=False).stdout, file=sys.stderr)
    time.sleep(1)
    meta = {"model": "resnet50", "batch_size": 64, "plan": {"zero_stage": 1}, "submission": "0123abcd"}
    jobs = {
        "one": sbatch(env, "-J", "one", "-A", "vision", "--gres=gpu:1", "-c", "2", "--mem=2G",
                      "--time=10", "--wrap", "sleep 3"),
        "mosaic": sbatch(env, "-J", "mosaic", "-A", "research", "--qos=prod", "--gres=gpu:2", "-c", "4",
                         "--mem=8G", f"--comment={encode_comment(meta)}", "--wrap", "sleep 4"),
        "four": sbatch(env, "-J", "four", "-A", "vision", "-N", "2", "--gres=gpu:2", "-c", "2", "--mem=1G",
                       "--time=1-00:00:00", "--wrap", "sleep 3"),
        "requeued": sbatch(env, "-J", "requeued", "-A", "research", "--gres=gpu:1", "-c", "1", "--mem=1G",
                           "--wrap", "sleep 6"),
        "array": sbatch(env, "-J", "array", "-A", "vision", "--array=0-2", "--gres=gpu:1", "-c", "1",
                        "--mem=1G", "--wrap", "sleep 2"),
        "failed": sbatch(env, "-J", "failed", "-A", "vision", "--gres=gpu:1", "-c", "1", "--mem=1G",
                         "--wrap", "sleep 1; exit 3"),
        "timeout": sbatch(env, "-J", "timeout", "-A", "research", "--gres=gpu:1", "-c", "1", "--mem=1G",
                          "--time=1", "--wrap", "sleep 300"),
    }  # fmt: skip
    ids = ",".join(jobs.values())
    run(["scontrol", "update", f"JobId={ids}", "StartTime=now"], env=env, check=False)
    run(["scontrol", "release", ids], env=env, check=False)
    wait_running(env, [jobs["requeued"]])
    # Eligible but waiting for every GPU (a held job never becomes eligible, and sacct's
    # time window leaves such a job out), then cancelled before it starts.
    pending = sbatch(env, "-p", "other", "-J", "cancelled", "-A", "vision", "-N", "4", "--gres=gpu:4",
                     "--wrap", "sleep 5")  # fmt: skip
    time.sleep(1)
    time.sleep(2)
    run(["scontrol", "requeue", jobs["requeued"]], env=env)
    run(["scancel", pending], env=env)
    time.sleep(1)
    run(["scontrol", "update", f"JobId={jobs['requeued']}", "StartTime=now"], env=env, check=False)
    run(["scontrol", "release", jobs["requeued"]], env=env, check=False)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if not run(["squeue", "-h", "-o", "%i"], env=env).stdout.strip():
            break
        time.sleep(1)
    else:
        print(run(["squeue", "-o", "%i %j %T %r"], env=env).stdout, file=sys.stderr)
        raise RuntimeError("the jobs did not end")
    time.sleep(3)  # slurmdbd records the last ends
    argv = commands.sacct_trace("now-1hour")
    save("sacct_trace.txt", run(argv, env={**env, **commands.SACCT_TRACE_ENV}).stdout)
    save("sacct_trace_iso.txt", run(argv, env=env).stdout)
    env_words = " ".join(f"{k}={v}" for k, v in commands.SACCT_TRACE_ENV.items())
    save(
        "sacct_trace.cmd",
        f"# sacct_trace.txt (sacct_trace_iso.txt: without {env_words}); Slurm "
        f"{run(['sacct', '--version'], env=env).stdout.strip()}\n{env_words} {shlex.join(argv)}\n",
    )
    print(f"captured jobs {jobs} and {pending} (cancelled while pending) into {OUT}", file=sys.stderr)


def wait_running(env: dict[str, str], jobs: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%T"], env=env).stdout.split()
        if out and all(state == "RUNNING" for state in out):
            return
        time.sleep(0.1)
    table = run(["squeue", "-o", "%i %j %T %r %N"], env=env).stdout
    raise RuntimeError(f"jobs {jobs} not running after {timeout_s} s:\n{table}")


def save(name: str, text: str) -> None:
    (OUT / name).write_text(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
