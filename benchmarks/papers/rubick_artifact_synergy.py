"""The Rubick artifact's two Synergy policies run on its own simulator loop (issue 41).

BENCHMARKS.md compares ``synergy-tune`` with the artifact's Synergy at 1.90 h (issue 41's
run). No published tree of the artifact (AlibabaPAI/reconfigurable-dl-scheduler) runs a
Synergy on ``workload-base.csv``: ``main``'s ``simulator/simulator.py`` builds jobs only for
``--policy morphling``; the ``rubick-artifact`` branch has ``simulator/synergy.py`` and a
``simulator.py`` that maps ``synergy``, but not the ``job.py``, ``applications.py``, model
files or traces they import, and its loop reads another workload format (``submit_time``,
``runtime``, ``strategy``; no LLaMA models). This script splices the smallest set of parts
that runs: ``main``'s ``simulator/job.py`` (the Job the Morphling run uses: 260 s at every
placement change, ``steps + 1`` iterations at ``sched/applications.py``'s
``get_throughput``), ``sched/`` and traces, ``main``'s ``workload-base.csv``, the
``rubick-artifact`` loop (Cluster.step, re-stated: its CPU/memory demand setup, and its
``if len(alloc) == 0: continue``) and either Synergy:

* ``rubick-artifact``'s ``simulator/synergy.py``: each round the queue is every pending job
  plus every running job whose ``lease_time`` reached 300 s (they give up their GPUs), in
  submission order; a job is admitted when the free GPUs still cover its count (the count
  goes down as jobs are admitted), and the admitted are placed largest first, one GPU at a
  time on the node with the fewest free GPUs (the nodes with the fewest free GPUs fill
  first; a job splits over as many nodes as that takes);
* ``main``'s ``sched/morphling_sched/policy/synergy.py`` (the Morphling paper's Synergy,
  its resource keys renamed): every pending job whose count the round's free GPUs cover,
  in submission order, placed if it fits: whole on the node with the fewest free GPUs that
  holds it, else over the nodes with the most free GPUs (also a job of 8 GPUs or fewer);
  a LLaMA / 3D plan only in its model's ``avail_placement`` shapes (e.g. 8 x 5 for plan
  524); lease 3,600 s.

Edits to the artifact's code, all explicit below: ``job.py`` advances a job for any policy
(``main``'s only for Morphling) and takes its lease-counter period from ``LEASE_ALLOC``
(``main``'s 60: the counter restarts every 120 s, so a 300 s lease never expires; 300: it
expires at 300 and 360 s, then restarts); where ``get_throughput`` is NaN (a placement
outside its interpolation, where the artifact's job fails ``assert delta <= seconds``:
LLaMA-30B's 24-GPU plan 641 on other than 6 nodes) the plan's own measured row nearest in
node count, then GPUs per node, is used; ``RA_PLACE=consolidated`` replaces
``rubick-artifact``'s GPU-by-GPU placement by ``main``'s whole-node rule (a job admitted by its
count that then has no such placement stays queued); ``NOSPLIT=1``
keeps ``main``'s jobs of 8 GPUs or fewer on one node (Mosaic's rule); ``SHAPES=0`` places
``main``'s 3D plans as any other job (Mosaic's rule); ``ZOMBIE=0`` stops a running job the
policy leaves without GPUs (``main``'s loop), where ``rubick-artifact``'s loop (``ZOMBIE=1``)
never tells it, so it computes on without GPUs.

For the variant nearest Mosaic's rules (``main``'s Synergy, ``NOSPLIT=1 SHAPES=0``) it also
reports where its schedule first parts from Mosaic's ``fifo`` preset on the artifact's truth
(the same settings as ``rubick_truth.py``).

Usage: ``.venv/bin/python benchmarks/papers/rubick_artifact_synergy.py --artifact-git DIR
--python PY``: DIR the artifact's bare git directory (the ``fetch`` tool's), PY a Python with
``pandas``, ``numpy`` and ``scipy`` (the artifact's own dependencies; not Mosaic's venv).
About 30 s per run on 2 cores, ten runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "planner").is_dir())
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_result  # noqa: E402

# (label, environment of the driver)
VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (
    ("rubick-artifact synergy.py, lease never expires", {"POLICY": "ra", "LEASE_ALLOC": "60"}),
    (
        "rubick-artifact synergy.py, 300 s lease, requeued job computes on",
        {"POLICY": "ra", "LEASE_ALLOC": "300"},
    ),
    (
        "rubick-artifact synergy.py, 300 s lease, requeued job stops",
        {"POLICY": "ra", "LEASE_ALLOC": "300", "ZOMBIE": "0"},
    ),
    (
        "rubick-artifact synergy.py, whole-node placement, lease never expires",
        {"POLICY": "ra", "LEASE_ALLOC": "60", "RA_PLACE": "consolidated"},
    ),
    (
        "rubick-artifact synergy.py, whole-node placement, 300 s lease, requeued job computes on",
        {"POLICY": "ra", "LEASE_ALLOC": "300", "RA_PLACE": "consolidated"},
    ),
    (
        "rubick-artifact synergy.py, whole-node placement, 300 s lease, requeued job stops",
        {"POLICY": "ra", "LEASE_ALLOC": "300", "RA_PLACE": "consolidated", "ZOMBIE": "0"},
    ),
    ("main synergy.py", {"POLICY": "main"}),
    ("main synergy.py, jobs of <= 8 GPUs on one node", {"POLICY": "main", "NOSPLIT": "1"}),
    ("main synergy.py, 3D plans on any placement", {"POLICY": "main", "SHAPES": "0"}),
    (
        "main synergy.py, jobs of <= 8 GPUs on one node, 3D plans on any placement",
        {"POLICY": "main", "NOSPLIT": "1", "SHAPES": "0"},
    ),
)
NEAREST_MOSAIC = VARIANTS[-1][0]


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True
    ).stdout


def replace_once(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"{what}: the artifact's code is not the one this script patches ({old[:60]!r})")
    return text.replace(old, new)


def build_tree(gitdir: str, dest: Path) -> dict[str, str]:
    """The artifact's main simulator/ and sched/ plus the patched files; their commits."""
    commits = {b: git(gitdir, "rev-parse", b).strip() for b in ("main", "rubick-artifact")}
    for path in git(
        gitdir, "ls-tree", "-r", "--name-only", commits["main"], "simulator", "sched"
    ).splitlines():
        if path.endswith((".py", ".csv")):
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_text(git(gitdir, "show", f"{commits['main']}:{path}"))
    sim = dest / "simulator"
    job = (sim / "job.py").read_text()
    job = replace_once(
        job,
        "lease_time_alloc = 60\n",
        'lease_time_alloc = int(os.environ.get("LEASE_ALLOC", "60"))\n',
        "job.py",
    )
    job = replace_once(
        job,
        "        self.attained_service += delay * sum(self.placement)\n"
        "        if isinstance(self.policy, MorphlingPolicy):\n",
        "        self.attained_service += delay * sum(self.placement)\n        if True:  # any policy\n",
        "job.py",
    )
    (sim / "syn_job.py").write_text(job)

    ra = git(gitdir, "show", f"{commits['rubick-artifact']}:simulator/synergy.py")
    ra = replace_once(
        ra,
        "lease_allocation_time = 300\n",
        "lease_allocation_time = 300\nimport os\nRA_PLACE = os.environ.get('RA_PLACE', 'fullest')\n",
        "synergy.py",
    )
    ra = replace_once(
        ra,
        "                execution_plan, free_rsc = self.allocate(job_infos, node_infos,\n",
        "                if RA_PLACE == 'consolidated':\n"
        "                    norm = self.gpu_normalized_vector(job_infos[job].job_demand_vector)\n"
        "                    add, free_tmp = _consolidated(norm, job_gpu_deficit, copy.deepcopy(free_rsc))\n"
        "                    if add is None:\n"
        "                        continue\n"
        "                    free_rsc = free_tmp\n"
        "                    for k in range(len(rsc_type)):\n"
        "                        for i, n in add.items():\n"
        "                            execution_plan[rsc_type[k]][job].extend([i] * n * int(norm[k]))\n"
        "                    self._status[job] = 'RUNNING'\n"
        "                    continue\n"
        "                execution_plan, free_rsc = self.allocate(job_infos, node_infos,\n",
        "synergy.py",
    )
    ra += '''

def _consolidated(norm, num_gpus, free_rsc):
    """main's synergy.py's rule: best fit on one node; else (over 8 GPUs only) most free first."""
    free = free_rsc["gpu"]
    one = [(free[i], i) for i in free if free[i] >= num_gpus]
    if one:
        add = {min(one)[1]: num_gpus}
    elif num_gpus <= 8:
        return None, None
    else:
        add, need = {}, num_gpus
        for f, i in sorted((-free[i], i) for i in free):
            if need == 0 or f == 0:
                break
            add[i] = min(-f, need)
            need -= add[i]
        if need:
            return None, None
    for i, n in add.items():
        for k in range(len(rsc_type)):
            free_rsc[rsc_type[k]][i] -= norm[k] * n
    return add, free_rsc
'''
    (sim / "synergy_ra.py").write_text(ra)

    mn = (dest / "sched" / "morphling_sched" / "policy" / "synergy.py").read_text()
    mn = replace_once(
        mn,
        "lease_allocation_time = 3600\n",
        "lease_allocation_time = 3600\nimport os\n"
        "SHAPES = os.environ.get('SHAPES', '1') == '1'\nNOSPLIT = os.environ.get('NOSPLIT') == '1'\n",
        "morphling_sched/policy/synergy.py",
    )
    mn = replace_once(
        mn,
        '            if job_infos[job].strategy not in ["ga", "zero-offload", "zero-dp", "gc"]:',
        '            if SHAPES and job_infos[job].strategy not in ["ga", "zero-offload", "zero-dp", "gc"]:',
        "morphling_sched/policy/synergy.py",
    )
    mn = replace_once(
        mn,
        "        if not is_alloc:\n            pq = [\n",
        "        if not is_alloc and NOSPLIT and num_gpus <= 8:\n            return None, None\n"
        "        if not is_alloc:\n            pq = [\n",
        "morphling_sched/policy/synergy.py",
    )
    (sim / "synergy_main.py").write_text(mn)
    (sim / "syn_sim.py").write_text(DRIVER)
    return commits


DRIVER = r'''"""The rubick-artifact loop with either Synergy (rubick_artifact_synergy.py)."""
import builtins
import collections
import json
import os
import sys

import pandas

import syn_job  # sets sys.path to ../sched
from syn_job import Job
from applications import APPLICATIONS
from model import MODELS
from job_info import JobInfo, NodeInfo
import synergy_ra
import synergy_main

POLICY = os.environ.get("POLICY", "ra")
ZOMBIE = os.environ.get("ZOMBIE", "1") == "1"
K = {"gpu": "nvidia.com/gpu", "mem": "memory"}
UNK = {v: k for k, v in K.items()}
NAN_FALLBACKS = set()


class MainSynergy:
    """main's sched/morphling_sched/policy/synergy.py, its resource keys renamed."""

    def __init__(self):
        self.p = synergy_main.SynergyPolicy()

    def optimize(self, job_infos, node_infos, prev, template):
        prev = {K.get(k, k): v for k, v in prev.items()}
        for n in node_infos.values():
            n.resources = {K.get(k, k): v for k, v in n.resources.items()}
        plan, d = self.p.optimize(job_infos, node_infos, prev)
        return {UNK.get(k, k): v for k, v in plan.items()}, d


def with_fallback(app):
    """Where get_throughput is NaN: the plan's own measured row nearest in nodes, then GPUs per node."""
    original = app.get_throughput

    def get_throughput(placement, exec_plan, num_cpus=1):
        ret = original(placement, exec_plan, num_cpus)
        if ret[2] == ret[2]:
            return ret
        p = tuple(filter(None, placement))
        rows = app.placements[app.placements.exec_plan.astype(str) == str(exec_plan)]
        best = min(
            rows.itertuples(),
            key=lambda r: (
                abs(len(str(r.placement)) - len(p)),
                abs(sum(map(int, str(r.placement))) / len(str(r.placement)) - sum(p) / len(p)),
            ),
        )
        NAN_FALLBACKS.add((app.name, str(exec_plan)))
        return (best.overlap_sync, best.optimize, best.iter_time)

    app.get_throughput = get_throughput


for _app in APPLICATIONS.values():
    with_fallback(_app)


class Cluster:
    """rubick-artifact's simulator.py Cluster for SynergyPolicy (8 x 8 GPUs, main's 96 CPUs, 1,600 GB)."""

    def __init__(self, workload, policy, num_nodes=8, num_gpus=8, num_cpus=96, mem=1600, sspeed=64):
        self.policy, self.num_nodes, self.num_gpus, self.num_cpus = policy, num_nodes, num_gpus, num_cpus
        self.mem, self.sspeed = mem, sspeed
        self.current_time = 0
        self.jobs = [
            Job(policy, r.name, r.submission_time, r.duration, APPLICATIONS[r.application],
                MODELS[r.application],
                r.num_gpus, r.exec_plan, r.steps, False, is_sla=r.is_sla)
            for r in workload.itertuples()
        ]
        for job in self.jobs:
            for attr, cap in (("cpu", num_cpus), ("mem", mem), ("sspeed", sspeed)):
                orig = getattr(job, f"job_{attr}_demand_orig")
                if orig > cap:
                    orig = cap if job.gpu_demand <= num_gpus else job.gpu_demand * (cap / num_gpus)
                setattr(job, f"job_{attr}_demand", orig)
        self.execution_plan = {"gpu": {}, "cpu": {}, "mem": {}, "sspeed": {}, "network": {}}
        self.first_start, self.starts, self.zombie_rounds = {}, [], collections.Counter()

    def step(self, interval=60):
        for job in self.jobs:
            gpus = self.execution_plan["gpu"].get(job.name, [])
            job.step(interval, gpus, self.execution_plan["cpu"].get(job.name, []), [])
        self.current_time += interval
        infos = {}
        for job in self.jobs:
            if self.current_time >= job.submission_time and job.completion_time is None:
                info = JobInfo(job_gpu_demand=job.gpu_demand, restarts=job.num_restarts or 0)
                info.lease_time, info.num_restarts = job.lease_time, job.num_restarts or 0
                info.age = self.current_time - job.submission_time
                info.strategy, info.avail_placement = job.exec_plan, job.avail_placement
                info.job_demand_vector = [
                    job.gpu_demand, job.job_cpu_demand, job.job_mem_demand, job.job_sspeed_demand, 0
                ]
                infos[job.name] = info
        if not infos:
            return
        nodes = {
            i: NodeInfo({"gpu": self.num_gpus, "cpu": self.num_cpus, "mem": self.mem, "sspeed": self.sspeed,
                         "network": 40}, preemptible=False)
            for i in range(self.num_nodes)
        }
        for rsc in ("gpu", "cpu"):
            self.execution_plan[rsc] = {k: v for k, v in self.execution_plan[rsc].items() if k in infos}
        plan, _ = self.policy.optimize(infos, nodes, self.execution_plan, nodes[0])
        assert all(v <= self.num_gpus for v in collections.Counter(sum(plan["gpu"].values(), [])).values())
        for job in self.jobs:
            alloc = plan["gpu"].get(job.name, [])
            if not alloc and job.name in infos and job.placement:
                self.zombie_rounds[job.name] += 1  # ZOMBIE=1: a round computed without GPUs; 0: a stop
            if not alloc and ZOMBIE:
                continue  # rubick-artifact's loop: the job is not told
            placement = []
            for i in range(len(alloc)):
                if i == 0 or alloc[i] != alloc[i - 1]:
                    placement.append(1)
                else:
                    placement[-1] += 1
            before = job.placement
            job.reallocate(placement, alloc != self.execution_plan["gpu"].get(job.name), exec_plan=None)
            if placement and tuple(placement) != before:
                self.first_start.setdefault(job.name, self.current_time)
                self.starts.append((self.current_time, job.name, placement))
            if len(placement) > 1:
                job.is_distributed = True
        self.execution_plan = plan


def main():
    _print = builtins.print
    builtins.print = lambda *a, **k: None  # main's synergy.py prints every decision
    workload = pandas.read_csv(sys.argv[1])
    policy = synergy_ra.SynergyPolicy() if POLICY == "ra" else MainSynergy()
    cluster = Cluster(workload, policy)
    while not all(j.completion_time is not None for j in cluster.jobs):
        cluster.step(60)
    jobs = {
        j.name: {"submit": j.submission_time, "first_start": cluster.first_start[j.name],
                 "finish": j.completion_time,
                 "gpus": int(j.gpu_demand), "restarts": j.num_restarts or 0}
        for j in cluster.jobs
    }
    out = {
        "jobs": jobs,
        "starts": cluster.starts,
        "zombie_job_rounds": sum(cluster.zombie_rounds.values()),
        "nan_fallbacks": sorted(NAN_FALLBACKS),
        "makespan_s": cluster.current_time,
    }
    builtins.print = _print
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
'''


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    jobs = raw["jobs"]
    by_model: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for name, j in jobs.items():
        by_model[name.split("-")[0]].append((j["first_start"] - j["submit"], j["finish"] - j["first_start"]))
    n = len(jobs)
    split = sum(1 for _, _, p in raw["starts"] if len(p) > -(-sum(p) // 8))
    return {
        "avg_jct_h": sum(j["finish"] - j["submit"] for j in jobs.values()) / n / 3600,
        "avg_first_wait_h": sum(w for v in by_model.values() for w, _ in v) / n / 3600,
        # from the first start to the end: the 260 s start, restarts, and the computing
        "avg_run_h": sum(r for v in by_model.values() for _, r in v) / n / 3600,
        "makespan_h": raw["makespan_s"] / 3600,
        "restarts": sum(j["restarts"] for j in jobs.values()),
        "starts": len(raw["starts"]),
        "starts_over_more_nodes_than_needed": split,
        # ZOMBIE=1: job-rounds a requeued job computed on without GPUs; ZOMBIE=0: such stops
        "left_without_gpus": raw["zombie_job_rounds"],
        "nan_fallbacks": raw["nan_fallbacks"],
        "by_model_h": {
            m: {
                "first_wait": sum(w for w, _ in v) / len(v) / 3600,
                "run": sum(r for _, r in v) / len(v) / 3600,
            }
            for m, v in sorted(by_model.items())
        },
    }


def mosaic_fifo_starts() -> dict[str, tuple[float, float, float]]:
    """Mosaic's ``fifo`` preset on the artifact's truth at rubick_truth.py's settings:
    job -> (submit, start, finish)."""
    from dataclasses import replace

    from benchmarks.papers.rubick import CLUSTER, TRACES
    from planner.cluster import cluster_from_toml
    from planner.config import PRESETS, build_scheduler
    from planner.sim import SimConfig, simulate
    from planner.traces.csvio import parse_trace
    from profiles.store import ProfileStore

    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    trace = parse_trace((TRACES / "rubick_base.csv").read_text(), "rubick_base.csv")
    profiles = ProfileStore.builtin()
    config = SimConfig(
        round_s=60.0, checkpoint_s=0.0, relaunch_s=260.0, launch_s=260.0, truth="rubick-artifact"
    )
    scheduler = build_scheduler(replace(PRESETS["fifo"], restart_cost_s=260.0), profiles)
    result = simulate(nodes, trace, scheduler, config, profiles=profiles)
    return {
        r.job_id: (r.submit_time_s, r.start_time_s or 0.0, r.finish_time_s or 0.0) for r in result.records
    }


def first_divergence(raw: dict[str, Any], mosaic: dict[str, tuple[float, float, float]]) -> dict[str, Any]:
    """The first job (by the earlier of its two starts) whose start or run differs by over a round."""
    jobs = raw["jobs"]
    rows = sorted(jobs, key=lambda n: min(jobs[n]["first_start"], mosaic[n][1]))
    same = 0
    for name in rows:
        j, (_, start, finish) = jobs[name], mosaic[name]
        if (
            abs(j["first_start"] - start) > 60
            or abs((j["finish"] - j["first_start"]) - (finish - start)) > 60
        ):
            return {
                "job": name,
                "gpus": j["gpus"],
                "artifact_start_s": j["first_start"],
                "mosaic_start_s": start,
                "jobs_started_alike_before": same,
            }
        same += 1
    return {"job": None, "jobs_started_alike_before": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact-git", required=True, help="the artifact's bare git directory")
    parser.add_argument("--python", default=sys.executable, help="a Python with pandas, numpy and scipy")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rubick-artifact-") as tmp:
        commits = build_tree(args.artifact_git, Path(tmp))
        sim = Path(tmp) / "simulator"
        rows = []
        raws = {}
        for label, env in VARIANTS:
            out = Path(tmp) / "out.json"
            t0 = time.perf_counter()
            subprocess.run(
                [args.python, "syn_sim.py", "workloads/workload-base.csv", str(out)],
                cwd=sim,
                env={**os.environ, **env},
                check=True,
                stdout=subprocess.DEVNULL,
            )
            raw = json.loads(out.read_text())
            raws[label] = raw
            row = {"variant": label, "env": env, **summarise(raw), "wall_s": time.perf_counter() - t0}
            print(
                {k: row[k] for k in ("variant", "avg_jct_h", "avg_first_wait_h", "avg_run_h", "restarts")},
                flush=True,
            )
            rows.append(row)
    mosaic = mosaic_fifo_starts()
    payload = {
        "command": "benchmarks/papers/rubick_artifact_synergy.py --artifact-git DIR --python PY",
        "artifact_commits": commits,
        "workload": "main:simulator/workloads/workload-base.csv",
        "rows": rows,
        "nearest_mosaic_variant": NEAREST_MOSAIC,
        "first_divergence_from_mosaic_fifo": first_divergence(raws[NEAREST_MOSAIC], mosaic),
        "mosaic_fifo_avg_jct_h": sum(f - s for s, _, f in mosaic.values()) / len(mosaic) / 3600,
        "wall_s": time.perf_counter() - started,
    }
    write_result("rubick_artifact_synergy", payload)


if __name__ == "__main__":
    main()
