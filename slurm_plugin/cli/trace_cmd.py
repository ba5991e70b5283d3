"""``mosaic trace``: generate traces from the papers' descriptions, import the real ones."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from collections.abc import Mapping

from planner.core.errors import ConfigError
from planner.traces import format_trace
from planner.traces.crius import divide_iterations, elastic, parse_crius_trace, random_types
from planner.traces.csvio import parse_trace
from planner.traces.generators import gavel_trace, shockwave_trace, synergy_trace
from planner.traces.mix import MixOptions, mix_cluster, mix_tenants, mix_trace, parse_mix
from planner.traces.philly import parse_philly, philly_trace, virtual_clusters
from planner.traces.records import TraceJob
from planner.traces.rubick import parse_workload
from slurm_plugin.files import bundled_text, read_text, write_atomic

PHILLY_FILE = "philly_derived_gavel_msr_all.csv.gz"
CRIUS_RAW = {"venus": "crius_simulate_trace_venus.csv", "pai": "crius_simulate_trace_pai.csv"}
log = logging.getLogger(__name__)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("trace", parents=[common], help="generate or import job traces")
    tsub = p.add_subparsers(
        dest="trace_command", required=True, metavar="{gen,philly,rubick,crius,mix,from-sacct}"
    )

    gen = tsub.add_parser(
        "gen",
        parents=[common],
        help="generate a seeded trace",
        description="synergy: Synergy's Philly-derived trace (§5.1); shockwave: Tesserae's default "
        "(§6.1); gavel: Gavel's generator (Tesserae §7).",
    )
    gen.add_argument("--kind", choices=("synergy", "shockwave", "gavel"), required=True)
    gen.add_argument("--jobs", type=int, required=True, help="number of jobs")
    arrivals = gen.add_mutually_exclusive_group(required=True)
    arrivals.add_argument("--rate", type=float, metavar="JOBS_PER_HOUR", help="Poisson arrival rate")
    arrivals.add_argument("--static", action="store_true", help="all jobs arrive at t=0")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--split", default="20,70,10", help="synergy: image,language,speech percentages")
    gen.add_argument("--single-gpu", action="store_true", help="synergy: every job asks for 1 GPU")
    gen.add_argument("--max-gpus", type=int, default=16, help="synergy: largest GPU demand kept (default 16)")
    gen.add_argument(
        "--models",
        choices=("tesserae", "gavel"),
        default="tesserae",
        help="shockwave: Tesserae's Table 1 models (default) or Gavel's job types",
    )
    gen.add_argument("--out", required=True, metavar="CSV", help="output file ('-' for stdout)")
    gen.set_defaults(run=run_gen)

    ph = tsub.add_parser(
        "philly",
        parents=[common],
        help="a window of the real Philly-derived trace (one virtual cluster)",
        description="Submit times restart at 0 in every virtual cluster (VC), so a trace is one VC "
        "(or a window of it), re-based to t=0. --list shows the VCs.",
    )
    ph.add_argument("--source", metavar="CSV", help="Philly-derived file (default: the bundled one)")
    ph.add_argument("--list", action="store_true", help="list virtual clusters and their job counts")
    ph.add_argument("--vc", help="virtual cluster id")
    ph.add_argument("--first", type=int, default=0, help="index of the first job of the window")
    ph.add_argument("--count", type=int, help="number of jobs (default: to the end)")
    ph.add_argument("--max-gpus", type=int, help="drop jobs asking for more GPUs")
    ph.add_argument(
        "--random-types",
        action="store_true",
        help="give each job a random Crius model, batch, GPU count and type as Crius does (§8.1; "
        "planner/traces/crius.py): run times stay, deadline = submission + 1.5 x duration",
    )
    ph.add_argument("--seed", type=int, default=0, help="--random-types: random seed (default 0)")
    ph.add_argument(
        "--elastic",
        action="store_true",
        help="--random-types: jobs accept 1/2 to 2x their GPUs (at most 16) on any Crius GPU type",
    )
    ph.add_argument("--out", metavar="CSV", help="output file ('-' for stdout)")
    ph.set_defaults(run=run_philly)

    rb = tsub.add_parser(
        "rubick",
        parents=[common],
        help="convert a Rubick (MLSys'25) artifact workload to a trace",
        description="Converts workload-{base,bp,mt}.csv of Rubick's artifact (name, submission_time, "
        "duration, application, num_gpus, num_cpus, bandwidth, exec_plan, steps, is_sla) to "
        "Mosaic's trace CSV for A800 GPUs (planner/traces/rubick.py says how). The three "
        "workloads come converted in planner/sim/bundled/ (rubick_{base,bp,mt}.csv).",
    )
    rb.add_argument("workload", metavar="WORKLOAD.csv", help="the artifact's workload file")
    rb.add_argument("--out", required=True, metavar="CSV", help="output file ('-' for stdout)")
    rb.set_defaults(run=run_rubick)

    cr = tsub.add_parser(
        "crius",
        parents=[common],
        help="convert a Crius (EuroSys'26) artifact trace (Venus, PAI) to a trace",
        description="Converts the Crius artifact's simulate_trace_{venus,pai}.csv (job_id, "
        "submission_time, num_iteration, model_name, deadline, batch_size, num_gpu, gpu_type) to "
        "Mosaic's trace CSV: duration = num_iteration x the measured best-plan iteration time at the "
        "requested GPU type and count, deadline_s on the submit_time_s clock "
        "(planner/traces/crius.py says how). The raw and converted files are bundled in "
        "planner/sim/bundled/ (crius_simulate_trace_*.csv, crius_{venus,pai}.csv).",
    )
    cr.add_argument("trace", choices=sorted(CRIUS_RAW), help="which of the artifact's traces")
    cr.add_argument("--source", metavar="CSV", help="the artifact's trace file (default: the bundled one)")
    cr.add_argument(
        "--iterations-divisor",
        type=int,
        default=1,
        metavar="N",
        help="run num_iteration // N iterations (5 = the artifact's simulator); deadlines stay",
    )
    cr.add_argument(
        "--elastic",
        action="store_true",
        help="jobs accept 1/2 to 2x their GPUs (at most 16) on any of the four GPU types",
    )
    cr.add_argument("--out", required=True, metavar="CSV", help="output file ('-' for stdout)")
    cr.set_defaults(run=run_crius)

    mx = tsub.add_parser(
        "mix",
        parents=[common],
        help="a mixed workload of every paper's kind of job, with a matching cluster and tenants",
        description="Composes Crius's elastic jobs on several GPU types, Synergy's CPU-sensitive "
        "single-GPU jobs, small rigid jobs of Gavel's types and Rubick's jobs with execution plans "
        "(the bundled Rubick Base workload), with tenants (prod has guaranteed jobs) and declared "
        "time limits (planner/traces/mix.py says how).",
    )
    mx.add_argument("--jobs", type=int, default=200, help="number of jobs (default 200)")
    mx.add_argument("--rate", type=float, default=20.0, metavar="JOBS_PER_HOUR", help="Poisson arrivals (20)")
    mx.add_argument(
        "--mix",
        default="elastic=30,cpu=30,small=20,plan=20",
        help="class weights CLASS=W,... of elastic, cpu, small, plan; classes left out get none "
        "(default elastic=30,cpu=30,small=20,plan=20)",
    )
    mx.add_argument("--max-duration-s", type=float, default=8 * 3600.0, help="run-time cap (8 h)")
    mx.add_argument("--guaranteed-fraction", type=float, default=0.3, help="of prod's jobs (0.3)")
    mx.add_argument(
        "--time-limits",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each job declares a time limit of 1.2-3x its run time, up to the minute (default: on)",
    )
    mx.add_argument("--gpus", type=int, default=64, help="cluster size, a multiple of 32 (64)")
    mx.add_argument("--seed", type=int, default=0)
    mx.add_argument("--out", required=True, metavar="CSV", help="output trace ('-' for stdout)")
    mx.add_argument("--cluster-out", metavar="TOML", help="write the matching cluster here")
    mx.add_argument("--config-out", metavar="TOML", help="write the tenants' quotas here")
    mx.set_defaults(run=run_mix)

    sa = tsub.add_parser(
        "from-sacct",
        parents=[common],
        help="a site's Slurm accounting history (sacct) as a trace",
        description="Runs sacct --parsable2 --noheader --allusers --duplicates --allocations and "
        "writes the finished jobs that held GPUs as a trace: submit times from the earliest, run "
        "time the sum of a requeued job's runs, GPUs, CPUs and memory from AllocTRES, tenant the "
        "account, model and plan from 'mosaic submit' metadata (else the neutral profile). Jobs "
        "that never started, have not finished or held no GPU are counted and left out "
        "(slurm_plugin/slurm/sacct_trace.py says how). Needs Slurm accounting (slurmdbd).",
    )
    sa.add_argument("--since", default="1970-01-01T00:00:01", help="sacct start time (default: all)")
    sa.add_argument("--until", help="sacct end time (default: now)")
    sa.add_argument("--partition", action="append", default=[], help="only this partition (repeatable)")
    sa.add_argument(
        "--qos-guaranteed", default="", metavar="Q,...", help="QOS names whose jobs are guaranteed"
    )
    sa.add_argument("--anonymise", action="store_true", help="replace users and accounts by stable hashes")
    sa.add_argument("--slurm-conf", help="slurm.conf of the cluster (default: Slurm's own)")
    sa.add_argument("--input", metavar="TEXT", help="read saved sacct output instead of running sacct")
    sa.add_argument("--out", required=True, metavar="CSV", help="output file ('-' for stdout)")
    sa.set_defaults(run=run_from_sacct)


def _emit(jobs: list[TraceJob], out: str) -> None:
    text = format_trace(jobs)
    if out == "-":
        sys.stdout.write(text)
        return
    write_atomic(out, text)
    gpus = Counter(j.num_gpus for j in jobs)
    span_h = (max(j.submit_time_s for j in jobs) - min(j.submit_time_s for j in jobs)) / 3600 if jobs else 0
    mix = ", ".join(f"{g}:{n}" for g, n in sorted(gpus.items()))
    log.info("wrote %d jobs to %s (arrivals over %.1f h; GPUs %s)", len(jobs), out, span_h, mix)


def run_gen(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    rate = 0.0 if args.static else args.rate
    if args.kind == "synergy":
        try:
            split = tuple(float(x) for x in args.split.split(","))
        except ValueError:
            raise ConfigError(f"--split {args.split!r}: expected three numbers like 20,70,10") from None
        jobs = synergy_trace(
            args.jobs,
            jobs_per_hour=rate,
            seed=args.seed,
            split=split,
            multi_gpu=not args.single_gpu,
            max_gpus=args.max_gpus,
            static=args.static,
        )
    elif args.kind == "shockwave":
        jobs = shockwave_trace(
            args.jobs, jobs_per_hour=rate, seed=args.seed, static=args.static, models=args.models
        )
    else:
        jobs = gavel_trace(args.jobs, jobs_per_hour=rate, seed=args.seed, static=args.static)
    _emit(jobs, args.out)
    return 0


def run_philly(args: argparse.Namespace) -> int:
    source = args.source or f"bundled:{PHILLY_FILE}"
    text = read_text(args.source) if args.source else bundled_text(PHILLY_FILE)
    rows = parse_philly(text, source=source)
    if args.list:
        for vc, n in virtual_clusters(rows).items():
            print(f"{vc}\t{n} jobs")
        return 0
    if not args.vc or not args.out:
        raise ConfigError("mosaic trace philly needs --vc and --out (or --list)")
    if (args.elastic or args.seed) and not args.random_types:
        raise ConfigError("mosaic trace philly: --seed and --elastic go with --random-types")
    jobs = philly_trace(rows, vc=args.vc, first=args.first, count=args.count, max_gpus=args.max_gpus)
    if args.random_types:
        jobs = random_types(jobs, seed=args.seed)
        if args.elastic:
            jobs = elastic(jobs)
    _emit(jobs, args.out)
    return 0


def run_rubick(args: argparse.Namespace) -> int:
    jobs = parse_workload(read_text(args.workload), source=args.workload)
    _emit(list(jobs), args.out)
    return 0


def run_mix(args: argparse.Namespace) -> int:
    options = MixOptions(
        jobs=args.jobs,
        jobs_per_hour=args.rate,
        mix=parse_mix(args.mix),
        max_duration_s=args.max_duration_s,
        guaranteed_fraction=args.guaranteed_fraction,
        time_limits=args.time_limits,
        gpus=args.gpus,
        seed=args.seed,
    )
    plan_jobs = parse_trace(bundled_text("rubick_base.csv"), source="bundled:rubick_base.csv")
    jobs = mix_trace(options, plan_jobs)
    _emit(jobs, args.out)
    if args.cluster_out:
        write_atomic(args.cluster_out, mix_cluster(args.gpus))
    if args.config_out:
        write_atomic(args.config_out, mix_tenants(args.gpus))
    classes = Counter(j.job_id.split("-")[0] for j in jobs)
    log.info("mix: %s", ", ".join(f"{c} {n}" for c, n in sorted(classes.items())))
    return 0


def run_crius(args: argparse.Namespace) -> int:
    source = args.source or f"bundled:{CRIUS_RAW[args.trace]}"
    text = read_text(args.source) if args.source else bundled_text(CRIUS_RAW[args.trace])
    converted = parse_crius_trace(text, source=source)
    if converted.estimated:
        log.info(
            "%d job(s) of a shape Crius did not measure take the time of the next larger measured "
            "model size / 1.8 per size step, as the artifact does",
            converted.estimated,
        )
    if converted.dropped:
        log.warning(
            "dropped %d job(s) without a measured iteration time (first: %s: %s)",
            len(converted.dropped),
            *converted.dropped[0],
        )
    if not converted.jobs:
        raise ConfigError(f"{source}: no job has a measured iteration time")
    jobs = list(converted.jobs)
    if args.iterations_divisor != 1:
        jobs = divide_iterations(jobs, args.iterations_divisor)
    if args.elastic:
        jobs = elastic(jobs)
    _emit(jobs, args.out)
    return 0


def run_from_sacct(args: argparse.Namespace) -> int:
    from slurm_plugin.report import accounting_error
    from slurm_plugin.slurm.backend import CliSlurm
    from slurm_plugin.slurm.runner import SlurmCommandError, SlurmError
    from slurm_plugin.slurm.sacct_trace import format_site_trace, trace_from_sacct

    if args.input:
        text, separator, source = read_text(args.input), "|", args.input
    else:
        client = CliSlurm({"SLURM_CONF": args.slurm_conf} if args.slurm_conf else {}, timeout_s=300.0)
        try:
            text, separator = client.sacct_trace_text(args.since, args.until, args.partition)
        except SlurmCommandError as e:
            raise SlurmError(accounting_error(e)) from e
        source = "sacct"
    result = trace_from_sacct(
        text,
        delimiter=separator,
        guaranteed_qos=args.qos_guaranteed.split(","),
        anonymise=args.anonymise,
        source=source,
    )
    if not result.jobs:
        raise ConfigError(f"{source}: no finished job that held GPUs ({_counts(result.skipped)})")
    csv_text = format_site_trace(result.jobs)
    if args.out == "-":
        sys.stdout.write(csv_text)
    else:
        write_atomic(args.out, csv_text)
    print(
        f"wrote {len(result.jobs)} jobs ({result.requeued} requeued, their runs summed; "
        f"{result.array_tasks} array tasks) to {args.out}; left out: {_counts(result.skipped)}"
        + (f"; {result.unread_comments} Mosaic comment(s) not usable" if result.unread_comments else ""),
        file=sys.stderr,
    )
    return 0


def _counts(skipped: Mapping[str, int]) -> str:
    from slurm_plugin.slurm.sacct_trace import SKIP_NEVER_STARTED, SKIP_NO_GPU, SKIP_UNFINISHED

    return ", ".join(f"{skipped.get(k, 0)} {k}" for k in (SKIP_NEVER_STARTED, SKIP_UNFINISHED, SKIP_NO_GPU))
