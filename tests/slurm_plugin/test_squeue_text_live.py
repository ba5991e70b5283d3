"""On the live test cluster: the controller's queue read (``squeue --Format`` + ``scontrol``)
gives what ``squeue --json`` gives, for running, held, requeued and ended jobs and for names
and comments holding any text."""

from __future__ import annotations

import dataclasses
import time

from slurm_plugin.controller.actuate import never_runnable
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster.lifecycle import Cluster

NASTY = 'a|b\n  JobName=x\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:3)\n%k (null) \\t "q" ünï'
LONG = "mosaic:" + "x" * 1000  # Slurm refuses much longer comments ("too long")


def sbatch(cluster: Cluster, *args: str) -> str:
    return run(["sbatch", "--parsable", "-o", "/dev/null", *args], env=cluster.env).stdout.strip()


def mismatches(text: list[SlurmJob], js: list[SlurmJob]) -> dict[str, dict[str, tuple[object, object]]]:
    by_id = {j.id: j for j in js}
    assert sorted(j.id for j in text) == sorted(by_id)
    out = {}
    for j in text:
        other = by_id[j.id]
        diff = {
            f.name: (getattr(j, f.name), getattr(other, f.name))
            for f in dataclasses.fields(SlurmJob)
            if getattr(j, f.name) != getattr(other, f.name)
        }
        # squeue prints the description Slurm set in place of the reason code (requeue hold).
        if "reason" in diff and " " in j.reason and never_runnable(j.reason) == never_runnable(other.reason):
            del diff["reason"]
        # A job that has no allocation (held, or ended without running): --json prints 0 CPUs
        # when slurmctld has not worked out its details, squeue --Format the CPUs it asked for.
        if "cpus" in diff and j.state != "RUNNING" and other.cpus == 0:
            del diff["cpus"]
        if diff:
            out[j.id] = diff
    return out


def test_text_queue_read_matches_json(live: Cluster) -> None:
    w = ["--wrap", "sleep 300"]
    held = sbatch(
        live, "--hold", "-J", NASTY, f"--comment={NASTY}", "--gres=gpu:1", "-c", "2", "--mem-per-cpu=512", *w
    )
    sbatch(
        live,
        "--hold",
        "-J",
        "long",
        f"--comment={LONG}",
        "-N",
        "2",
        "--ntasks-per-node=2",
        "--gres=gpu:1",
        *w,
    )
    started = [
        sbatch(live, "-J", NASTY, "-N", "2", "--gres=gpu:2", "-c", "2", "--mem=2G", *w),
        sbatch(live, "-J", "percpu", "--gres=gpu:1", "-c", "3", "--mem-per-cpu=700", "--time=1-2", *w),
        sbatch(live, "-J", "requeued", "--gres=gpu:1", "-c", "1", "--mem=1G", *w),
        sbatch(live, "-J", "ended", "--gres=gpu:1", "-c", "1", "--mem=1G", "--wrap", "true"),
    ]
    sbatch(live, "-p", "other", "-J", "cpu-only", "-c", "2", "--mem=1G", *w)
    cancelled = sbatch(live, "--hold", "-J", "cancelled", "--gres=gpu:1", "-c", "2", *w)
    run(["scancel", cancelled], env=live.env)
    ids = ",".join(started)
    run(["scontrol", "update", f"JobId={ids}", "StartTime=now"], env=live.env)
    run(["scontrol", "release", ids], env=live.env)
    client = CliSlurm(live.env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = {j.id: j.state for j in client.jobs()}
        if all(states.get(j) == "RUNNING" for j in started[:3]) and states.get(started[3]) == "COMPLETED":
            break
        time.sleep(0.2)
    run(["scontrol", "requeuehold", started[2]], env=live.env)
    time.sleep(1)
    text, js = client.jobs(), client.jobs_json()
    assert mismatches(text, js) == {}
    by_id = {j.id: j for j in text}
    assert by_id[held].name == by_id[held].comment == NASTY
    assert any(j.comment == LONG for j in text)
    two_nodes = by_id[started[0]]
    assert two_nodes.state == "RUNNING" and len(two_nodes.gpu_indices) == 2
    assert all(len(indices) == 2 for _, indices in two_nodes.gpu_indices)
    assert by_id[started[1]].mem_mb_per_cpu == 700
    assert by_id[started[1]].time_limit_s == 26 * 3600.0 and by_id[held].time_limit_s is None
    assert by_id[started[2]].requeues == 1 and by_id[started[2]].held
    # Read again: the running jobs' indices are remembered, and still right.
    assert mismatches(client.jobs(), client.jobs_json()) == {}
