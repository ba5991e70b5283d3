"""``mosaic sweep``: every preset on every trace with every seed, each cell one ``mosaic sim`` run,
on a local process pool or as one Slurm job array. The directory it writes is described in
:mod:`slurm_plugin.sweep`."""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from planner.cluster import cluster_from_toml
from planner.config import PRESETS, build_scheduler
from planner.core.errors import MosaicError
from slurm_plugin import sweep as sw
from slurm_plugin.cli import sim_cmd
from slurm_plugin.cli.scheduler_args import scheduler_config
from slurm_plugin.files import read_text, write_atomic
from slurm_plugin.profiles_file import load_profile_store
from slurm_plugin.slurm.runner import run as run_command
from wrapper.atomic import publish_dir

log = logging.getLogger(__name__)

# The sim flags a sweep sets itself, per cell or for every cell; every other flag of
# ``mosaic sim`` is a sweep flag too and reaches each cell as given.
SWEEP_SETS = frozenset(
    {"help", "cluster", "trace", "out", "seed", "scheduler", "json", "no_plot", "no_progress", "config"}
)
LOGS_DIR = "logs"
SCRIPT_FILE = "sweep.sbatch"
POLL_S = 2.0


def _sim_parser() -> argparse.ArgumentParser:
    """``mosaic sim``'s own parser: a sweep takes its flags and builds each cell's arguments with it."""
    holder = argparse.ArgumentParser(add_help=False)
    sub = holder.add_subparsers()
    sim_cmd.add_parser(sub, argparse.ArgumentParser(add_help=False))
    parser: argparse.ArgumentParser = sub.choices["sim"]
    return parser


def _passed_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest not in SWEEP_SETS]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "sweep",
        parents=[common],
        help="simulate every preset on every trace with every seed",
        description="Run mosaic sim for every cell (preset x trace x seed) into DIR/cells/<cell>/ and "
        "collect DIR/results.csv (one row per cell). Run again with the same flags, it runs only the "
        "missing and failed cells; a directory holding a different sweep is refused. "
        "'mosaic sweep status DIR' says what is done.",
    )
    p.add_argument("--presets", metavar="A,B,...", help=f"scheduler presets ({', '.join(PRESETS)})")
    p.add_argument("--traces", metavar="T1.csv,...", help="trace files")
    p.add_argument("--seeds", default="0", metavar="LIST", help="seeds, e.g. 1-5,7 (default 0)")
    p.add_argument("--cluster", metavar="TOML", help="cluster description")
    p.add_argument("--out", metavar="DIR", help="the sweep's directory")
    p.add_argument("--dry-run", action="store_true", help="list the cells and which would run; run none")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="run the cells here (the default)")
    mode.add_argument("--slurm", action="store_true", help="run the cells as one Slurm job array")
    p.add_argument(
        "-j", "--jobs", type=int, default=1, metavar="N", help="--local: cells at once (default 1)"
    )
    sl = p.add_argument_group("--slurm")
    sl.add_argument("--partition", help="partition of the array job (default: Slurm's)")
    sl.add_argument("--max-parallel", type=int, metavar="N", help="array tasks running at once (%%N)")
    sl.add_argument("--mem", default="4G", help="memory per array task (sbatch --mem; default 4G)")
    sl.add_argument("--time", metavar="LIMIT", help="time limit per array task (sbatch --time)")
    sl.add_argument("--wait", action="store_true", help="wait for the array job to end, then report")
    sl.add_argument("--slurm-conf", help="slurm.conf of the cluster (default: Slurm's own)")
    sim = p.add_argument_group("simulation (as mosaic sim, for every cell)")
    sim.add_argument("--config", metavar="TOML", help="a Mosaic config file; its [scheduler] table is used")
    for action in _passed_actions(_sim_parser()):
        sim._add_action(action)
    p.set_defaults(run=run)

    cmds = p.add_subparsers(dest="sweep_command", metavar="{status}")
    st = cmds.add_parser(
        "status",
        parents=[common],
        help="what is done, failed and missing",
        description="Count the done, failed and missing cells of DIR, name those not done (a failed "
        "one with its error, a missing one with its array task's state while Slurm still holds it), "
        "print the latest Slurm array job's id, and write DIR/results.csv again.",
    )
    st.add_argument("dir", metavar="DIR")
    st.add_argument("--slurm-conf", help="slurm.conf of the cluster the array runs on (default: Slurm's own)")
    st.set_defaults(run=run_status)
    # One cell of a sweep: what each Slurm array task runs (not listed in the help).
    rc = cmds.add_parser("run-cell", parents=[common])
    rc.add_argument("dir", metavar="DIR")
    rc.add_argument("index", type=int)
    rc.set_defaults(run=run_run_cell)


def _csv_list(text: str | None, flag: str) -> list[str]:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    if not items:
        raise sw.SweepError(f"mosaic sweep needs {flag}")
    return items


def sweep_from_args(args: argparse.Namespace) -> sw.Sweep:
    """The sweep the flags describe, its inputs checked (each trace is parsed only by its cells)."""
    presets = _csv_list(args.presets, "--presets A,B,...")
    unknown = [name for name in presets if name not in PRESETS]
    if unknown:
        raise sw.SweepError(
            f"--presets: unknown preset {', '.join(unknown)}; known presets: {', '.join(PRESETS)}"
        )
    traces = [Path(t).resolve() for t in _csv_list(args.traces, "--traces T1.csv,...")]
    absent = [str(t) for t in traces if not t.is_file()]
    if absent:
        raise sw.SweepError(f"--traces: no such file: {', '.join(absent)}")
    if not args.cluster:
        raise sw.SweepError("mosaic sweep needs --cluster TOML")
    cluster = Path(args.cluster).resolve()
    cluster_from_toml(read_text(cluster), source=str(cluster))
    config = str(Path(args.config).resolve()) if args.config else None
    actions = _passed_actions(_sim_parser())
    options = {a.dest: getattr(args, a.dest) for a in actions}
    options["profiles"] = [str(Path(p).resolve()) for p in options.get("profiles") or []]
    sweep = sw.Sweep(
        presets=tuple(presets),
        traces=tuple(str(t) for t in traces),
        seeds=sw.parse_seeds(args.seeds),
        cluster=str(cluster),
        config=config,
        sim_options=options,
        option_defaults={a.dest: a.default for a in actions},
    )
    sweep.check()
    # The config file, the scheduler flags and the profiles, checked once for every preset.
    profiles = load_profile_store(options["profiles"])
    for name in presets:
        build_scheduler(scheduler_config(sim_args(sweep, sweep.cells[0], Path("."), preset=name)), profiles)
    return sweep


def sim_args(sweep: sw.Sweep, cell: sw.Cell, out: Path, preset: str | None = None) -> argparse.Namespace:
    """The arguments of ``mosaic sim`` for one cell, as sim's own parser builds them."""
    argv = ["--cluster", sweep.cluster, "--trace", cell.trace, "--seed", str(cell.seed)]
    argv += ["--scheduler", preset or cell.preset, "--out", str(out), "--no-plot", "--no-progress"]
    if sweep.config is not None:
        argv += ["--config", sweep.config]
    args = _sim_parser().parse_args(argv)
    for key, value in sweep.sim_options.items():
        setattr(args, key, value)
    return args


def run_cell(directory: Path, index: int) -> str:
    """Run cell ``index`` of the sweep in ``directory``: its directory appears whole, or its
    ``.error`` says why not; results.csv is regenerated either way. Returns the cell's state."""
    sweep, _ = sw.load(directory)
    cells = sweep.cells
    if not 0 <= index < len(cells):
        raise sw.SweepError(f"{directory}: no cell {index} (the sweep has {len(cells)})")
    cell = cells[index]
    tmp_root = directory / sw.TMP_DIR
    tmp_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{cell.id}.", dir=tmp_root))
    error: str | None = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # sim's table: results.csv has the numbers
            sim_cmd.run(sim_args(sweep, cell, tmp))
    except MosaicError as e:
        error = f"{e}\n"
    except Exception:  # one cell's bug is that cell's failure; the others still run
        error = traceback.format_exc()
    with sw.locked(directory):
        if error is None:
            final = sw.cell_dir(directory, cell)
            if final.exists():  # a cell run twice at once: the later complete copy wins
                shutil.rmtree(final)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the results from the sweep's readers
            publish_dir(tmp, final)
            sw.error_path(directory, cell).unlink(missing_ok=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            write_atomic(sw.error_path(directory, cell), error)
    status = sw.write_results(directory, sweep)[cell]
    if error is not None:
        log.warning("cell %s failed: %s", cell.id, error.strip().splitlines()[-1])
    return status


def _describe(directory: Path, cell: sw.Cell, status: str) -> str:
    line = f"  {cell.index:>4}  {cell.id:<40} {status}"
    if status == "failed":
        lines = sw.error_text(directory, cell).strip().splitlines()
        line += f": {lines[-1] if lines else '(no message)'}"
    return line


def run(args: argparse.Namespace) -> int:
    if not args.out:
        raise sw.SweepError("mosaic sweep needs --out DIR")
    if args.jobs < 1:
        raise sw.SweepError(f"-j/--jobs must be >= 1, got {args.jobs}")
    if not args.slurm:
        given = [
            f
            for f, v in (
                ("--partition", args.partition),
                ("--max-parallel", args.max_parallel),
                ("--time", args.time),
                ("--wait", args.wait),
            )
            if v
        ]
        if given:
            raise sw.SweepError(f"{', '.join(given)} go with --slurm")
    if args.max_parallel is not None and args.max_parallel < 1:
        raise sw.SweepError(f"--max-parallel must be >= 1, got {args.max_parallel}")
    directory = Path(args.out).resolve()
    sweep = sweep_from_args(args)
    sw.check_same(directory, sweep)
    status = {cell: sw.state(directory, cell) for cell in sweep.cells}
    todo = [cell for cell in sweep.cells if status[cell] != "done"]
    if args.dry_run:
        print(f"{len(sweep.cells)} cells, {len(todo)} would run:")
        for cell in sweep.cells:
            print(
                _describe(directory, cell, status[cell]) + ("" if status[cell] == "done" else "  (would run)")
            )
        return 0
    sw.save(directory, sweep)
    if not todo:
        sw.write_results(directory, sweep)
        print(f"all {len(sweep.cells)} cells are done: {directory / sw.RESULTS_FILE}")
        return 0
    if args.slurm:
        return _run_slurm(args, directory, sweep, todo)
    return _run_local(directory, sweep, todo, args.jobs)


def _run_local(directory: Path, sweep: sw.Sweep, todo: list[sw.Cell], jobs: int) -> int:
    log.info("running %d of %d cells, %d at a time", len(todo), len(sweep.cells), jobs)
    outcome: dict[sw.Cell, str] = {}
    if jobs == 1:
        for cell in todo:
            outcome[cell] = run_cell(directory, cell.index)
            log.info("%s: %s", cell.id, outcome[cell])
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            futures = {pool.submit(run_cell, directory, cell.index): cell for cell in todo}
            for future in as_completed(futures):
                cell = futures[future]
                outcome[cell] = future.result()
                log.info("%s: %s", cell.id, outcome[cell])
    return _report(directory, sweep)


def _report(directory: Path, sweep: sw.Sweep) -> int:
    status = sw.write_results(directory, sweep)
    counts = {s: sum(1 for v in status.values() if v == s) for s in sw.STATES}
    print(", ".join(f"{counts[s]} {s}" for s in sw.STATES) + f" of {len(status)} cells")
    for cell, s in status.items():
        if s == "failed":
            print(_describe(directory, cell, s))
    print(f"wrote {directory / sw.RESULTS_FILE}")
    return 0 if counts["done"] == len(status) else 1


def sbatch_argv(
    directory: Path,
    indices: list[int],
    *,
    partition: str | None,
    max_parallel: int | None,
    mem: str,
    time_limit: str | None,
) -> list[str]:
    """``sbatch`` for the array of ``indices``, each task running ``SCRIPT_FILE``."""
    array = sw.array_spec(indices) + (f"%{max_parallel}" if max_parallel else "")
    argv = ["sbatch", "--parsable", "--job-name=mosaic-sweep", f"--array={array}"]
    argv += ["--cpus-per-task=1", f"--mem={mem}", f"--chdir={directory}"]
    argv.append(f"--output={directory / LOGS_DIR / '%A_%a.out'}")
    if partition:
        argv.append(f"--partition={partition}")
    if time_limit:
        argv.append(f"--time={time_limit}")
    return [*argv, str(directory / SCRIPT_FILE)]


def task_script(directory: Path) -> str:
    """The array task: this interpreter (a virtualenv's too) runs one cell by its task id."""
    return (
        "#!/bin/sh\n"
        f'exec "{sys.executable}" -m slurm_plugin.cli.main sweep run-cell "{directory}" '
        '"$SLURM_ARRAY_TASK_ID"\n'
    )


def _run_slurm(args: argparse.Namespace, directory: Path, sweep: sw.Sweep, todo: list[sw.Cell]) -> int:
    env = {"SLURM_CONF": str(Path(args.slurm_conf).resolve())} if args.slurm_conf else {}
    (directory / LOGS_DIR).mkdir(exist_ok=True)
    write_atomic(directory / SCRIPT_FILE, task_script(directory), mode=0o755)
    argv = sbatch_argv(
        directory,
        [c.index for c in todo],
        partition=args.partition,
        max_parallel=args.max_parallel,
        mem=args.mem,
        time_limit=args.time,
    )
    job_id = run_command(argv, env=env).stdout.strip().split(";")[0]
    array = argv[3].removeprefix("--array=")
    sw.save(directory, sweep, {"job_id": job_id, "array": array, "partition": args.partition})
    print(f"submitted array job {job_id} ({len(todo)} of {len(sweep.cells)} cells, --array={array})")
    if not args.wait:
        print(f"mosaic sweep status {directory}")
        return 0
    while _queued(job_id, env):
        time.sleep(POLL_S)
    return _report(directory, sweep)


def _queued(job_id: str, env: dict[str, str]) -> bool:
    """Whether any task of the array is still pending or running. squeue forgets a job some time
    after it ends ("Invalid job id"); any other failure is taken as a passing one: still queued."""
    result = run_command(["squeue", "-h", "-j", job_id, "-o", "%i"], env=env, check=False)
    if result.returncode == 0:
        return bool(result.stdout.strip())
    if "invalid job id" in result.stderr.lower():
        return False
    log.warning("squeue -j %s exited %d: %s", job_id, result.returncode, result.stderr.strip())
    return True


def run_status(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    sweep, doc = sw.load(directory)
    status = sw.write_results(directory, sweep)
    counts = {s: sum(1 for v in status.values() if v == s) for s in sw.STATES}
    print(f"{directory}: " + ", ".join(f"{counts[s]} {s}" for s in sw.STATES) + f" of {len(status)} cells")
    tasks: dict[int, str] = {}
    job_id = doc.get("slurm_job_id")
    if job_id:
        env = {"SLURM_CONF": str(Path(args.slurm_conf).resolve())} if args.slurm_conf else {}
        asked = _array_tasks(str(job_id), env)
        if asked is None:
            print(f"  Slurm array job {job_id}: squeue could not say which of its tasks are queued")
        else:
            tasks = asked
            held = collections.Counter(sorted(tasks.values()))
            print(
                f"  Slurm array job {job_id}: "
                + (", ".join(f"{n} {state.lower()}" for state, n in held.items()) if tasks else "ended")
            )
    for cell, s in status.items():
        if s != "done":
            line = _describe(directory, cell, s)
            if s == "missing" and cell.index in tasks:
                line += f" (array task {tasks[cell.index].lower()})"
            print(line)
    return 0


def _array_tasks(job_id: str, env: dict[str, str]) -> dict[int, str] | None:
    """Slurm's state of each task of array job ``job_id`` it still holds (pending, running, ...):
    none once the job has ended; ``None`` when squeue fails otherwise."""
    result = run_command(["squeue", "-h", "-r", "-j", job_id, "-o", "%K %T"], env=env, check=False)
    if result.returncode != 0:
        return {} if "invalid job id" in result.stderr.lower() else None
    return array_task_states(result.stdout)


def array_task_states(text: str) -> dict[int, str]:
    """``squeue -h -r -o "%K %T"`` output as {array task index: state}; a line without a task
    index (``N/A``: not an array task) is skipped."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit():
            out[int(fields[0])] = fields[1]
    return out


def run_run_cell(args: argparse.Namespace) -> int:
    status = run_cell(Path(args.dir).resolve(), args.index)
    return 0 if status == "done" else 1
