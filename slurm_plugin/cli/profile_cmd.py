"""``mosaic profile``: measure a real job's throughput and write its profile.

::

    mosaic profile JOB.sh|--example NAME [--cpus LIST] [--plans [auto|JSON]] [--pairs PARTNER...]
                   [--budget-min M] [--local] --out PROFILE.json

Short real runs of the job (``srun`` on the cluster, or with ``--local`` plain processes
pinned to the given number of cores), each measured from the heartbeats it reports
through the runtime API. Synergy's optimistic CPU search (§3.1) gives the CPU curve of the
document's ``optimistic`` block; ``--plans`` adds Rubick's sampled runs (§4.3), written as
perfmodel CSV rows (``PROFILE.samples.csv``) and fitted (``PROFILE.perfmodel.json``, Rubick's
model; ``PROFILE.cpu-step.json``, the step model of ranks of CPU threads, which describes the
profiler's own runs: :mod:`profiles.perfmodel.cpu_step`); ``--repeat N`` measures each
sample N times, going round the samples, and fits each one's median;
``--pairs`` adds each partner's co-location slowdown (the ``colocation`` block). The state
(``PROFILE.json.state.json``) is saved after every run: the same command resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from profiles.perfmodel.query import ModelShape
from profiles.profiler.output import (
    CacheSpec,
    cpu_curve_points,
    fit_cpu_samples,
    fit_samples,
    profile_document,
    repeat_spread,
    sample_rows,
    samples_csv,
    slowdowns,
)
from profiles.profiler.runs import (
    PlanSample,
    Request,
    check_samples_fit,
    default_plan_samples,
    parse_plan_samples,
)
from profiles.profiler.search import curve_error, search_points
from slurm_plugin import profiler
from wrapper import examples

log = logging.getLogger(__name__)

DEFAULT_STORAGE_MB_S = 200.0


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "profile",
        parents=[common],
        help="measure a job's throughput by CPUs, plans and partners; write its profile",
        description="Runs short real runs of a job (srun, or --local processes pinned to N cores), reads the "
        "throughput it reports in its heartbeats, and writes a mosaic-profiles/1 document: the CPU curve "
        "(Synergy's optimistic search), Rubick's plan samples fitted into the performance model, and "
        "co-location slowdowns. Resumable; a budget lists what it skipped.",
    )
    p.add_argument(
        "job", nargs="?", metavar="JOB.sh", help="the batch script to profile (run as 'bash JOB.sh')"
    )
    p.add_argument(
        "--example", metavar="NAME", help=f"profile a bundled example ({', '.join(examples.example_names())})"
    )
    p.add_argument("--out", required=True, metavar="PROFILE.json", help="the profile document to write")
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="CPU counts to search, e.g. 1,2,4,8 or 1-8 (default: 1..the CPUs "
        "this machine gives the profiler with --local; the script's -c with srun)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="bisect only where throughput grows by more "
        "than this across an interval (default %(default)s, Synergy §3.1)",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also measure every other CPU count (a full sweep, to "
        "check the search: the summary gives the search's error against it)",
    )
    p.add_argument(
        "--plans",
        nargs="?",
        const="auto",
        metavar="auto|JSON",
        help="Rubick's plan samples: 'auto' (7, "
        "three ZeRO-Offload for a DeepSpeed job) or a JSON list of {ranks, threads, plan}",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="measure each plan sample N times, going round the samples N times, and fit each "
        "one's median step time (default %(default)s; on a shared machine single runs of one "
        "configuration can differ by a fifth)",
    )
    p.add_argument(
        "--model-shape",
        metavar="PARAMS_M,SEQ,HIDDEN,LAYERS",
        help="the model's shape for the performance model (needed with --plans)",
    )
    p.add_argument(
        "--framework",
        choices=("torch", "deepspeed"),
        help="the job's framework (default: the "
        "script's #MOSAIC --framework, else torch); deepspeed samples include ZeRO-Offload",
    )
    p.add_argument(
        "--global-batch",
        type=int,
        metavar="N",
        help="the job's global batch (default: #MOSAIC --global-batch-size, or the example's batch)",
    )
    p.add_argument(
        "--pairs",
        nargs="+",
        default=[],
        metavar="PARTNER",
        help="jobs to co-locate with this one: "
        "a script path or example:NAME (each measured alone, then together)",
    )
    p.add_argument(
        "--pair-cpus",
        type=int,
        metavar="C",
        help="CPUs of each job of a pair (default: the largest of --cpus)",
    )
    p.add_argument(
        "--budget-min",
        type=float,
        metavar="M",
        help="stop before a run that would pass M minutes of "
        "runs in all (the skipped runs are listed; the same command resumes)",
    )
    p.add_argument("--local", action="store_true", help="plain processes on this machine, no Slurm")
    p.add_argument(
        "--partition",
        metavar="P",
        help="srun's partition (a partition Mosaic manages holds jobs "
        "submitted outside 'mosaic submit': profile on another one)",
    )
    p.add_argument(
        "--srun-arg", action="append", default=[], metavar="ARG", help="one more srun argument (repeatable)"
    )
    p.add_argument(
        "--slurm-conf", metavar="FILE", help="SLURM_CONF for srun (the test cluster's etc/slurm.conf)"
    )
    p.add_argument(
        "--mem-gb",
        type=float,
        metavar="GB",
        help="srun's --mem for each run (default: the script's --mem, else 4; --local sets no memory limit)",
    )
    p.add_argument(
        "--run-s",
        type=float,
        default=20.0,
        help="seconds of heartbeats measured per run (default %(default)s)",
    )
    p.add_argument(
        "--heartbeat-s", type=float, default=2.0, help="MOSAIC_HEARTBEAT_S of the runs (default %(default)s)"
    )
    p.add_argument(
        "--warmup", type=int, default=1, help="first heartbeats of a run not measured (default %(default)s)"
    )
    p.add_argument(
        "--start-timeout-s",
        type=float,
        default=180.0,
        help="a run without any heartbeat after this is an error (default %(default)s)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=1_000_000,
        help="an example's --steps (the profiler stops each run once measured; default %(default)s)",
    )
    p.add_argument("--data-dir", metavar="DIR", help="the image example's data cache")
    p.add_argument(
        "--model",
        metavar="NAME",
        help="the profile's model name (default: #MOSAIC --model, the "
        "example's name, or the script's file name)",
    )
    p.add_argument("--task", help="the model's task (image, language, ...)")
    p.add_argument(
        "--gpu-type", default="cpu", help="the gpu_type the pairs are recorded for (default %(default)s)"
    )
    p.add_argument(
        "--dataset-gb",
        type=float,
        help="the job's data set size (the cache model; measured from the example's data)",
    )
    p.add_argument("--sample-kb", type=float, help="mean size of one sample (the cache model)")
    p.add_argument(
        "--storage-mb-s",
        type=float,
        default=None,
        help=f"storage bandwidth per job, MB/s (not measured; default {DEFAULT_STORAGE_MB_S:g})",
    )
    p.add_argument(
        "--reference",
        metavar="CPUS,MEM_GB",
        help="the allocation the matrix is normalised at (the document's default: 3,62.5)",
    )
    p.add_argument("--restart", action="store_true", help="discard the saved state and measure again")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run_profile)


def parse_cpus(text: str) -> tuple[int, ...]:
    """``1,2,4`` or ``1-8`` or ``1-4,8`` into sorted CPU counts."""
    out: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        lo, dash, hi = part.partition("-")
        try:
            values = range(int(lo), int(hi) + 1) if dash else range(int(part), int(part) + 1)
        except ValueError:
            raise InputError(f"--cpus {text!r}: expected counts like 1,2,4 or 1-8, got {part!r}") from None
        if not values or values.start < 1:
            raise InputError(f"--cpus {text!r}: counts are integers >= 1 (in {part!r})")
        out.update(values)
    return tuple(sorted(out))


def _shape(text: str | None, model: str) -> ModelShape:
    if not text:
        raise InputError(
            "--plans needs --model-shape PARAMS_M,SEQ,HIDDEN,LAYERS (the performance model's inputs)"
        )
    parts = text.split(",")
    try:
        params_m, seq, hidden, layers = (float(parts[0]), *(int(x) for x in parts[1:]))
        if len(parts) != 4:
            raise ValueError
    except ValueError:
        raise InputError(f"--model-shape {text!r}: expected PARAMS_M,SEQ,HIDDEN,LAYERS (numbers)") from None
    return ModelShape(name=model, params=params_m * 1e6, seq_len=seq, hidden=hidden, layers=layers)


def _pair(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError(f"--reference {text!r}: expected CPUS,MEM_GB") from None
    return a, b


def run_profile(args: argparse.Namespace) -> int:
    if (args.job is None) == (args.example is None):
        raise InputError("give the job to profile: JOB.sh or --example NAME (one of them)")
    out = Path(args.out)
    profiler.check_writable(out)
    data_dir = Path(args.data_dir) if args.data_dir else None
    if args.example:
        target = profiler.example_target(args.example, args.steps, data_dir, args.framework or "torch")
    else:
        target = profiler.script_target(args.job)
    model = args.model or target.model
    launcher: profiler.LocalLauncher | profiler.SrunLauncher
    if args.local:
        launcher = profiler.LocalLauncher()
    else:
        env = {"SLURM_CONF": str(Path(args.slurm_conf).resolve())} if args.slurm_conf else {}
        launcher = profiler.SrunLauncher(env, args.partition, tuple(args.srun_arg))
    if args.cpus:
        cpus = parse_cpus(args.cpus)
    elif args.local:
        cpus = tuple(range(1, len(os.sched_getaffinity(0)) + 1))
    elif target.default_cpus:
        cpus = tuple(range(1, target.default_cpus + 1))
    else:
        raise InputError("--cpus: give the CPU counts to search (the script has no -c/--cpus-per-task)")
    launcher.check_cpus(cpus)
    global_batch = args.global_batch or target.global_batch
    if global_batch != target.global_batch:
        target = replace(target, global_batch=global_batch)
    framework = args.framework or target.framework
    if args.repeat != 1 and not args.plans:
        raise InputError(f"--repeat {args.repeat}: it repeats the plan samples; give --plans too")
    samples: tuple[PlanSample, ...] = ()
    shape = None
    if args.plans:
        samples = (
            default_plan_samples(max(cpus), offload=framework == "deepspeed")
            if args.plans == "auto"
            else parse_plan_samples(args.plans)
        )
        check_samples_fit(samples, global_batch)
        launcher.check_cpus([s.cpus for s in samples])
        shape = _shape(args.model_shape, model)
    partners = {}
    for spec in args.pairs:
        partners[spec] = profiler.target_from(spec, args.steps, data_dir)
    pair_cpus = args.pair_cpus or (max(cpus) if args.pairs else None)
    request = Request(
        cpus=cpus,
        threshold=args.threshold,
        plans=samples,
        pairs=tuple(args.pairs),
        pair_cpus=pair_cpus,
        sweep=args.sweep,
        repeat=args.repeat,
    )
    mem_gb = args.mem_gb or target.mem_gb or 4.0
    cache = _cache(args, target)
    window = profiler.Window(
        run_s=args.run_s,
        heartbeat_s=args.heartbeat_s,
        warmup=args.warmup,
        start_timeout_s=args.start_timeout_s,
    )
    prepared = out.with_name(out.name + ".runs")
    prepared.mkdir(exist_ok=True)
    for t in (target, *partners.values()):
        profiler.run_prepare(t, prepared / f"prepare-{t.model}.log")
    if cache is None:
        cache = _cache(args, target, measure_data=True)
    assert cache is not None
    budget_s = args.budget_min * 60 if args.budget_min is not None else None
    run = profiler.Profiler(
        target,
        request,
        launcher,
        window,
        state_path=out.with_name(out.name + ".state.json"),
        runs_dir=prepared,
        mem_gb=mem_gb,
        partners=partners,
        budget_s=budget_s,
        progress=profiler.Progress(budget_s=budget_s),
        restart=args.restart,
    ).run()
    runs = run.state.runs
    summary: dict[str, Any] = {
        "model": model,
        "launcher": launcher.name,
        "complete": run.complete,
        "runs": len(runs),
        "runs_this_time": run.runs_now,
        "elapsed_s": round(run.state.elapsed_s, 1),
        "skipped": run.skipped,
    }
    files: dict[Path, str] = {}
    points = cpu_curve_points(request, runs)
    if points:
        measured = {c: r.samples_per_s for c in cpus if (r := runs.get(f"cpu-{c}")) is not None}
        searched = search_points(cpus, measured, args.threshold)
        summary["cpu_samples_per_s"] = {str(c): round(v, 3) for c, v in sorted(points.items())}
        summary["search_runs"] = len(searched)
        if args.sweep and run.complete:
            err = curve_error(searched, measured)
            summary["sweep_runs"] = len(measured)
            summary["search_error"] = {
                "mean": round(err.mean_rel, 4),
                "max": round(err.max_rel, 4),
                "worst_cpus": err.worst_cpus,
            }
        document = profile_document(
            model,
            request,
            runs,
            cache,
            task=args.task or target.task,
            gpu_type=args.gpu_type.lower(),
            partner_models={k: t.model for k, t in partners.items()},
            source=f"profiled: mosaic profile ({launcher.name}, CPUs {','.join(map(str, sorted(points)))})",
        )
        files[out] = json.dumps(document, indent=2) + "\n"
    if request.pairs:
        summary["slowdowns"] = slowdowns(request, runs)
    if samples and shape is not None and global_batch is not None:
        rows = sample_rows(shape, samples, runs, global_batch, request.repeat)
        summary["plan_samples"] = len(rows)
        spread = repeat_spread(samples, runs, request.repeat)
        if spread:
            summary["plan_repeat_spread"] = {k: round(v, 4) for k, v in spread.items()}
        if rows:
            csv_path = out.with_name(out.stem + ".samples.csv")
            text = samples_csv(rows)
            files[csv_path] = text
            if len(rows) >= len(samples):
                fitted, perf_doc = fit_samples(text, str(csv_path))
                files[out.with_name(out.stem + ".perfmodel.json")] = json.dumps(perf_doc, indent=2) + "\n"
                summary["perfmodel_rmsle"] = round(fitted.rmsle or 0.0, 4)
                cpu_fitted, cpu_doc = fit_cpu_samples(text, str(csv_path))
                files[out.with_name(out.stem + ".cpu-step.json")] = json.dumps(cpu_doc, indent=2) + "\n"
                summary["cpu_step_rmsle"] = round(cpu_fitted.rmsle or 0.0, 4)
    profiler.write_outputs(files)
    summary["wrote"] = [str(p) for p in files]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return 0 if run.complete else 3


def _cache(args: argparse.Namespace, target: profiler.Target, measure_data: bool = False) -> CacheSpec | None:
    dataset, sample = args.dataset_gb, args.sample_kb
    if (dataset is None or sample is None) and measure_data and target.data_dir is not None:
        size = profiler.data_size(target.data_dir)
        if size is not None:
            dataset = dataset if dataset is not None else size[0]
            sample = sample if sample is not None else size[1]
    if dataset is None or sample is None:
        if measure_data and target.prepare is not None:
            raise InputError(
                f"{target.label}: its data set size is unknown: give --dataset-gb and --sample-kb"
            )
        if not measure_data and target.prepare is not None:
            return None  # measured from the example's data once it is prepared
        if dataset is None and sample is None and target.prepare is None:
            # A job without a data set on disk (synthetic data): memory never limits it.
            dataset, sample = 1e-6, 1.0
        else:
            raise InputError(
                "give both --dataset-gb and --sample-kb (the job's data set, for the memory axis)"
            )
    storage = args.storage_mb_s if args.storage_mb_s is not None else DEFAULT_STORAGE_MB_S
    return CacheSpec(
        dataset_gb=dataset, sample_kb=sample, storage_mb_per_s=storage, reference=_pair(args.reference)
    )


def _print_summary(summary: dict[str, Any]) -> None:
    print(
        f"{summary['model']}: {summary['runs']} run(s) ({summary['runs_this_time']} now), "
        f"{summary['elapsed_s']:.0f} s of runs, {'complete' if summary['complete'] else 'INCOMPLETE'}"
    )
    if "cpu_samples_per_s" in summary:
        curve = ", ".join(f"{c} CPU: {v:g}" for c, v in summary["cpu_samples_per_s"].items())
        print(f"  samples/s by CPUs: {curve}")
    if "search_error" in summary:
        e = summary["search_error"]
        print(
            f"  search: {summary['search_runs']} runs vs {summary['sweep_runs']} for the sweep; "
            f"error {e['mean']:.1%} mean, {e['max']:.1%} max (at {e['worst_cpus']} CPUs)"
        )
    for partner, s in summary.get("slowdowns", {}).items():
        print(f"  with {partner}: {s['self']:.2f}x own throughput, partner {s['partner']:.2f}x")
    if "plan_samples" in summary:
        print(
            f"  plan samples: {summary['plan_samples']}, "
            f"fit RMSLE {summary.get('perfmodel_rmsle', 'not fitted')}"
        )
    if "plan_repeat_spread" in summary:
        label, worst = max(summary["plan_repeat_spread"].items(), key=lambda kv: kv[1])
        print(
            f"  repeated measurements differ by up to {worst:.1%} ({label}); the fit used each one's median"
        )
    for line in summary["skipped"]:
        print(f"  skipped: {line}")
    for path in summary["wrote"]:
        print(f"wrote {path}")
