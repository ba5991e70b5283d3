"""Rubick Table 4: avg/p99 JCT and makespan on the 64-GPU A800 cluster, Base/BP/MT workloads.

Simulates Rubick's three bundled workloads (``planner/sim/bundled/rubick_{base,bp,mt}.csv``,
406 jobs each) on ``etc/clusters/rubick-64.toml`` with the simulator's A800 truth (Rubick's
measured iteration times, ``profiles/perfmodel/rubick_measured.py``), 6-minute rounds and a
30 s restart, for ``rubick``, ``sia``, ``synergy-tune``, ``rubick-e``, ``rubick-r`` and
``rubick-n`` (and ``antman`` on MT, where ``tenant-a`` has a 64-GPU quota as in §6.1). Prints
each row next to the paper's (Table 4, hours) and writes ``benchmarks/results/rubick_table4.json``.

    .venv/bin/python benchmarks/papers/rubick.py [--workloads base,bp,mt] [--presets rubick,sia,...]

``--plan-audit WORKLOAD`` lists, for each kind of elastic job of the workload and 1-8 GPUs, the
plan ``rubick`` picks against the simulator's truth (``results/rubick_plan_audit_WORKLOAD.json``).

``--two-jobs`` instead runs §7.2's micro-benchmark: a T5 and a RoBERTa job (elastic, 1-4 GPUs,
submitted as plain data parallelism) share 4 A800 GPUs; each job's speed is normalised by its
submitted plan on all 4 GPUs, and the sum is compared for Rubick's allocation and for an even
2 + 2 split with each job's best plan (the paper: 1.44 against 0.78). Speeds are the
simulator's truth (measured where Rubick measured, else its fitted model scaled by its error at
the nearest measured configuration), the decisions the planner's (its fitted model); writes
``benchmarks/results/rubick_two_jobs.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_result  # noqa: E402
from planner import Job, Node, Snapshot, plan_round  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.config import PRESETS, Tenant, build_scheduler  # noqa: E402
from planner.core.execplan import ExecPlan, plan_from_mapping, plan_to_mapping  # noqa: E402
from planner.policies.rubick.curves import job_curve  # noqa: E402
from planner.policies.rubick.policy import shared_book  # noqa: E402
from planner.sim import SimConfig, simulate  # noqa: E402
from planner.traces.csvio import parse_trace  # noqa: E402
from profiles.perfmodel.rubick_measured import builtin_rubick_measured  # noqa: E402
from profiles.store import ProfileStore  # noqa: E402

CLUSTER = ROOT / "etc" / "clusters" / "rubick-64.toml"
TRACES = ROOT / "planner" / "sim" / "bundled"
PRESET_NAMES = ("rubick", "sia", "synergy-tune", "rubick-e", "rubick-r", "rubick-n")
MT_TENANTS = (Tenant("tenant-a", 64),)
# Rubick Table 4 (hours): avg JCT, p99 JCT, makespan; MT also guaranteed / best-effort avg JCT.
PAPER: dict[str, dict[str, tuple[float, ...]]] = {
    "base": {
        "rubick": (0.96, 7.1, 15.3),
        "sia": (2.5, 12.2, 18.8),
        "synergy-tune": (3.1, 13.5, 21.5),
        "rubick-e": (2.4, 10.9, 20.2),
        "rubick-r": (1.6, 9.9, 19.8),
        "rubick-n": (3.1, 12.8, 22.0),
    },
    "bp": {"rubick": (0.96, 7.1, 15.3), "sia": (1.8, 9.0, 16.5), "synergy-tune": (2.3, 10.8, 20.5)},
    "mt": {"rubick": (1.1, 11.4, 17.9, 0.85, 1.34), "antman": (1.75, 13.4, 19.6, 1.41, 2.1)},
}


def run(workload: str, name: str, profiles: ProfileStore) -> dict[str, Any]:
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    trace = parse_trace((TRACES / f"rubick_{workload}.csv").read_text(), f"rubick_{workload}.csv")
    config = replace(PRESETS[name], tenants=MT_TENANTS if workload == "mt" else ())
    started = time.perf_counter()
    result = simulate(
        nodes,
        trace,
        build_scheduler(config, profiles),
        SimConfig(),
        profiles=profiles,
        clock=time.perf_counter,
    )
    s = result.summary
    hours = 3600.0
    row = {
        "workload": workload,
        "scheduler": name,
        "avg_jct_h": s["avg_jct_s"] / hours,
        "p99_jct_h": s["p99_jct_s"] / hours,
        "makespan_h": s["makespan_s"] / hours,
        "guaranteed_avg_jct_h": _h(s.get("guaranteed_avg_jct_s")),
        "best_effort_avg_jct_h": _h(s.get("best_effort_avg_jct_s")),
        "finished": s["finished"],
        "jobs": s["jobs"],
        "restarts": s["restarts"],
        "gpu_util": s["gpu_util"],
        "decision_ms_mean": 1000 * s["decision_time_s_mean"],
        "decision_ms_max": 1000 * s["decision_time_s_max"],
        "wall_s": time.perf_counter() - started,
        "paper": PAPER.get(workload, {}).get(name),
    }
    paper = row["paper"]
    ref = f"   paper {paper[0]:.2f} / {paper[1]:.1f} / {paper[2]:.1f}" if paper else ""
    print(
        f"{workload:<5}{name:<14} avg {row['avg_jct_h']:6.2f} h  p99 {row['p99_jct_h']:6.1f} h"
        f"  makespan {row['makespan_h']:6.1f} h  restarts {row['restarts']:>4}{ref}",
        flush=True,
    )
    return row


def _h(value: Any) -> float | None:
    return None if value is None else float(value) / 3600.0


def two_jobs() -> dict[str, Any]:
    truth = builtin_rubick_measured()
    node = Node("n0", 4, "a800", 48, 800.0)
    jobs = tuple(
        Job(str(k), 2, model, 0.0, batch_size=truth.batches[model], min_gpus=1, max_gpus=4)
        for k, model in enumerate(("t5", "roberta"))
    )
    snapshot = Snapshot(0.0, (node,), jobs)

    def speed(model: str, plan: ExecPlan | None, gpus: int) -> tuple[float, str]:
        found = truth.time_s(model, plan, (gpus,), cpus_per_gpu=12.0)
        assert found is not None, (model, plan, gpus)
        return truth.batches[model] / found.time_s, found.how

    out: dict[str, Any] = {}
    rubick = plan_round(snapshot, build_scheduler(PRESETS["rubick"]))
    even = {j.id: job_curve(shared_book(), j, snapshot, True) for j in jobs}
    for label, choice in (
        ("rubick", {j.id: (rubick.assignments[j.id].num_gpus, rubick.assignments[j.id].plan) for j in jobs}),
        ("even", {j.id: (2, _mapping(even[j.id], 2)) for j in jobs}),
    ):
        total, parts = 0.0, {}
        for j in jobs:
            gpus, plan = choice[j.id]
            base, _ = speed(j.model, None, 4)
            got, how = speed(j.model, plan_from_mapping(plan) if plan else None, gpus)
            total += got / base
            parts[j.model] = {"gpus": gpus, "plan": plan, "normalised": got / base, "truth": how}
        out[label] = {"total": total, "jobs": parts}
        print(f"{label:<7} total normalised speed {total:.2f}  {parts}")
    out["paper"] = {"rubick": 1.44, "even": 0.78}
    return out


def plan_audit(workload: str) -> dict[str, Any]:
    """For each kind of elastic job of a workload (model, batch, submitted plan) and each count
    of 1-8 GPUs on one node: the plan ``rubick`` picks (the fitted model's best), its predicted
    time, its time in the simulator's truth (measured, nearest or scaled) and the submitted
    plan's truth. Where the pick is unmeasured its truth is the fit scaled by its error at the
    nearest measured configuration, so the pick can run slower in the simulation than the
    submitted plan the model priced no faster."""
    truth = builtin_rubick_measured()
    trace = parse_trace((TRACES / f"rubick_{workload}.csv").read_text(), f"rubick_{workload}.csv")
    snapshot = Snapshot(0.0, tuple(cluster_from_toml(CLUSTER.read_text())), ())
    kinds: dict[tuple[str, int, str], Job] = {}
    for t in trace:
        if t.max_gpus is not None and t.max_gpus <= 8 and t.batch_size is not None:
            key = (t.model, t.batch_size, json.dumps(t.plan or {}, sort_keys=True))
            kinds.setdefault(key, Job(t.job_id, t.num_gpus, t.model, 0.0, batch_size=t.batch_size,
                                      plan=t.plan, min_gpus=t.min_gpus, max_gpus=t.max_gpus))  # fmt: skip
    rows = []
    for (model, batch, submitted), job in sorted(kinds.items()):
        curve = job_curve(shared_book(), job, snapshot, True)
        if curve is None:
            continue
        for g in (1, 2, 4, 8):
            point = curve.best(g)
            own = truth.time_s(model, plan_from_mapping(job.plan) if job.plan else None, (g,), batch, 12.0)
            if point is None:
                continue
            picked = truth.lookup(model, point.plan, (g,), 12.0)
            own_point = curve.own_at(g)
            rows.append(
                {
                    "model": model,
                    "batch": batch,
                    "submitted": json.loads(submitted),
                    "gpus": g,
                    "picked": plan_to_mapping(point.plan),
                    "picked_predicted_s": batch / point.throughput,
                    "picked_truth_s": None if picked is None else picked.time_s,
                    "picked_truth": None if picked is None else picked.how,
                    "submitted_predicted_s": None if own_point is None else batch / own_point.throughput,
                    "submitted_truth_s": None if own is None else own.time_s,
                    "submitted_truth": None if own is None else own.how,
                }
            )
    known = [r for r in rows if r["picked_truth_s"] and r["submitted_truth_s"]]
    slower = [r for r in known if r["picked_truth_s"] > 1.01 * r["submitted_truth_s"]]
    for r in rows:
        picked, own = r["picked_truth_s"] or float("nan"), r["submitted_truth_s"] or float("nan")
        print(
            f"{r['model']:<8} {json.dumps(r['submitted']):<40} {r['gpus']} GPUs: picked {picked:7.3f} s "
            f"({r['picked_truth']}, predicted {r['picked_predicted_s']:.3f}) against submitted "
            f"{own:7.3f} s ({r['submitted_truth']})"
        )
    print(f"{len(slower)} of {len(rows)} picks run more than 1 % slower in the truth than the submitted plan")
    return {"workload": workload, "rows": rows, "picked_slower_than_submitted": len(slower)}


def _mapping(curve: Any, gpus: int) -> dict[str, Any] | None:
    from planner.core.execplan import plan_to_mapping

    point = curve.best(gpus)
    return None if point is None else plan_to_mapping(point.plan)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", default="base,bp,mt")
    parser.add_argument("--presets", default=",".join(PRESET_NAMES))
    parser.add_argument("--two-jobs", action="store_true", help="the T5 + RoBERTa micro-benchmark")
    parser.add_argument("--plan-audit", metavar="WORKLOAD", help="rubick's plan picks against the truth")
    parser.add_argument("--name", default="rubick_table4", help="result file name (default rubick_table4)")
    args = parser.parse_args()
    if args.two_jobs:
        write_result("rubick_two_jobs", {"command": "benchmarks/papers/rubick.py --two-jobs", **two_jobs()})
        return
    if args.plan_audit:
        command = f"benchmarks/papers/rubick.py --plan-audit {args.plan_audit}"
        audit = plan_audit(args.plan_audit)
        write_result(f"rubick_plan_audit_{args.plan_audit}", {"command": command, **audit})
        return
    profiles = ProfileStore.builtin()
    rows = []
    for workload in args.workloads.split(","):
        names = list(args.presets.split(","))
        if workload == "mt" and "antman" not in names:
            names.append("antman")
        for name in names:
            rows.append(run(workload, name, profiles))
    for workload in args.workloads.split(","):
        base = next((r for r in rows if r["workload"] == workload and r["scheduler"] == "rubick"), None)
        if base is None:
            continue
        for r in rows:
            if r["workload"] == workload:
                r["vs_rubick"] = {
                    k: r[k] / base[k] for k in ("avg_jct_h", "p99_jct_h", "makespan_h") if base[k]
                }
    write_result(
        args.name,
        {
            "command": f"benchmarks/papers/rubick.py --workloads {args.workloads} --presets {args.presets}"
            + ("" if args.name == "rubick_table4" else f" --name {args.name}"),
            "cluster": "etc/clusters/rubick-64.toml",
            "sim": {"round_s": 360.0, "restart_cost_s": 30.0},
            "mt_tenants": {t.name: t.gpu_quota for t in MT_TENANTS},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
