"""Every parser a user, a job or a node can feed, as fuzz targets (shared by the hypothesis
tests in this package, ``benchmarks/soak/fuzz.py`` and the optional atheris harness in
``contrib/fuzz/``).

A target takes one input (``str`` text; the file-reading ones take ``bytes``) and either
returns or raises one of its ``allowed`` errors, whose message must name the input (the
``source`` label the target passes, :data:`SOURCE`) so that a user can tell which file,
line and key is at fault. Anything else (``KeyError``, ``TypeError``, ``ValueError`` from
``int()``, ``UnicodeDecodeError``, ``RecursionError``, ...) is a bug in the parser.

Each target also has seeds: valid inputs the mutators start from (so that mutations reach
past the first check of each parser).
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import InputError, MosaicError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
SOURCE = "FUZZ-SRC"


class Bug(AssertionError):
    """A parser answered bad input with something other than its own error."""


class KnownBug(Bug):
    """A :class:`Bug` already reported in a module this suite does not own (``Target.known``;
    none today: every finding so far is fixed, with its test in ``tests/fuzz/test_regressions.py``)."""


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[Any], Any]
    allowed: tuple[type[BaseException], ...]
    seeds: tuple[Any, ...]
    kind: str = "text"  # "text" (str), "json" (str of JSON), "toml" (str of TOML) or "bytes"
    named: bool = True  # the error must name SOURCE
    known: tuple[str, ...] = ()  # substrings of reported, not yet fixed, findings (KnownBug)

    def check(self, data: Any) -> str | None:
        """Run one input: ``None`` when accepted, the error message when refused; raises
        :class:`Bug` on anything else."""
        try:
            return self._check(data)
        except Bug as e:
            if any(k in str(e) for k in self.known):
                raise KnownBug(str(e)) from e.__cause__
            raise

    def _check(self, data: Any) -> str | None:
        try:
            self.run(data)
        except self.allowed as e:
            message = str(e)
            if self.named and SOURCE not in message:
                raise Bug(f"{self.name}: error does not name the input: {message!r}") from e
            if not message.strip():
                raise Bug(f"{self.name}: empty error message") from e
            return message
        except Bug:
            raise
        except Exception as e:
            raise Bug(f"{self.name}: {type(e).__name__}: {e!s:.300} on input {data!r:.300}") from e
        return None


# -- seeds -----------------------------------------------------------------------------

SCRIPT = """#!/bin/bash
#SBATCH --gres=gpu:2 -c 8 --mem=32G
#MOSAIC --model resnet50 --global-batch-size 256 --framework torch
#MOSAIC --plans '[{"zero_stage": 1}, {"zero_stage": 2}]' --tenant vision --guaranteed
#MOSAIC --min-gpus 1 --max-gpus 4 --gpu-types a100,v100 --deadline-s 3600 --duration-s=600
#MOSAIC --plan '{"tp": 1}' --gpu-type a100 --best-effort
srun python train.py
"""

SNAPSHOT = {
    "time_s": 100.0,
    "nodes": [
        {"name": "n1", "gpus": 4, "gpu_type": "v100", "cpus": 32, "mem_gb": 256, "intra_gbps": 300},
        {"name": "n2", "gpus": 4, "gpu_type": "a100", "cpus": 32, "mem_gb": 256},
    ],
    "jobs": [
        {
            "id": "1",
            "num_gpus": 2,
            "model": "resnet50",
            "submit_time_s": 0.0,
            "state": "running",
            "attained_gpu_s": 10.0,
            "progress": 0.5,
            "batch_size": 64,
            "plans": [{"zero_stage": 1}],
            "assignment": {"gpus": [["n1", 0], ["n1", 1]], "cpus": 16, "mem_gb": 128.0, "shares_with": []},
        },
        {
            "id": "2",
            "num_gpus": 1,
            "model": "bert",
            "submit_time_s": 5.0,
            "state": "pending",
            "attained_gpu_s": 0.0,
            "min_gpus": 1,
            "max_gpus": 4,
            "gpu_types": ["a100", "v100"],
            "tenant": "t",
            "deadline_s": 900.0,
            "policy_state": {"queue": 0},
        },
    ],
}

ROUND_PLAN = {
    "assignments": {
        "1": {
            "gpus": [["n1", 0], ["n1", 1]],
            "num_gpus": 2,
            "gpu_type": "v100",
            "cpus": 16,
            "mem_gb": 128.0,
            "plan": {"zero_stage": 1},
            "shares_with": [],
        }
    },
    "preempted": ["3"],
    "migrated": [],
    "started": ["1"],
    "reshaped": [],
    "order": ["1", "2"],
    "reasons": {"2": "no-resources"},
    "decision_time_s": 0.01,
    "stage_times_s": {"policy": 0.001},
    "policy_state": {"1": {"queue": 0}},
}

PROFILES = {
    "format": "mosaic-profiles/1",
    "models": {
        "my-llm": {
            "task": "language",
            "aliases": ["myllm-7b"],
            "batch_size": 256,
            "source": "fuzz",
            "throughput": [
                {"gpu_type": "a100", "num_gpus": 1, "batch_size": 256, "steps_per_s": 1.9},
                {"gpu_type": "a100", "num_gpus": 8, "consolidated": False, "steps_per_s": 9.7},
                {"gpu_type": "a100", "num_gpus": 8, "plan": {"zero_stage": 2}, "steps_per_s": 12.0},
            ],
            "sensitivity": {
                "cpus_per_gpu": [1, 2, 4],
                "mem_gb_per_gpu": [32, 64],
                "throughput": [[0.4, 0.5], [0.8, 0.9], [1.0, 1.0]],
            },
            "ideal_cpus_per_gpu": 4,
            "ideal_mem_gb_per_gpu": 64,
            "colocation": [
                {
                    "with": "resnet50",
                    "gpu_type": "a100",
                    "num_gpus": 1,
                    "batch_size": 256,
                    "with_batch_size": 64,
                    "steps_per_s": 1.1,
                    "with_steps_per_s": 9.0,
                }
            ],
        },
        "my-cnn": {
            "task": "image",
            "optimistic": {
                "cpu_samples_per_s": {"1": 100.0, "2": 190.0, "4": 300.0},
                "dataset_gb": 100.0,
                "sample_kb": 110.0,
                "storage_mb_per_s_per_gpu": 200.0,
            },
        },
    },
}

_PARAMS = {"k_bwd": 2.0, "k_sync": 1.1, "k_opt": 3e-11, "k_opt_off": 3.7e-09, "k_off": 1.0, "k_swap": 1.0}
PERFMODEL = {
    "format": "mosaic-perfmodel/1",
    "model": "rubick",
    "environment": {"intra_gb_s": 150.0, "inter_gb_s": 100.0, "pcie_gb_s": 32.0},
    "shared": {**_PARAMS, "k_const": 0.076, "flops_per_s": 6e13},
    "models": {
        "bert": {
            "name": "bert",
            "params_m": 336.3,
            "seq_len": 512,
            "hidden": 1024,
            "layers": 24,
            "samples": 7,
            **_PARAMS,
            "k_const": 0.05,
            "flops_per_s": 5.9e13,
        }
    },
    "fit": {"samples": 34, "rmsle": 0.03},
}

PLAN_DOCUMENT = {
    "format": "mosaic-plan/1",
    "job_id": "42",
    "version": 3,
    "assignment": {
        "gpus": [["n1", 0], ["n1", 1]],
        "cpus": 8,
        "mem_gb": 32.0,
        "plan": {"zero_stage": 2, "global_batch": 64},
        "shares_with": [],
    },
}

HEARTBEATS = (
    '{"event": "start", "job_id": "42", "plan_version": 1, "time": 1700000000.0}\n'
    '{"event": "heartbeat", "job_id": "42", "progress": 0.25, "samples": 640, "samples_per_s": 32.5,'
    ' "step": 10, "time": 1700000010.0, "cpu_percent": 99.0, "rss_mb": 1024.0, "gpus": []}\n'
    '{"event": "checkpoint", "job_id": "42", "path": "/ckpt/step-00000010", "step": 10,'
    ' "time": 1700000011.5}\n'
)
MARKER = (
    '{"job_id": "42", "time": 1700000020.0, "signal": "USR1", "plan_version": 1, "step": 10, "path": null}\n'
)
COMPLETE = '{"framework": "torch", "plan": {"dp": 2, "zero_stage": 1}, "step": 120, "world_size": 2}\n'


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _toml_table(text: str, key: str) -> Any:
    """The ``[key]`` table of TOML text, read as the command line reads ``--config`` files
    (:func:`slurm_plugin.files.read_toml`; its errors name the file)."""
    from slurm_plugin.files import read_toml

    document = _in_file(text.encode("utf-8", "surrogatepass"), "mosaic.toml", read_toml)
    return document.get(key)


# -- the targets -----------------------------------------------------------------------


def _directives(text: str) -> None:
    from slurm_plugin.directives import decode_comment, encode_comment, parse_directives

    meta = parse_directives(text, SOURCE)
    # What is accepted must survive the trip through the Slurm comment unchanged.
    comment = encode_comment(meta)
    back = decode_comment(comment)
    if json.dumps(back, sort_keys=True) != json.dumps(meta, sort_keys=True):
        raise Bug(f"directives: {meta!r} does not survive its comment {comment!r}")


def _comment(text: str) -> None:
    from slurm_plugin.directives import decode_comment

    value = decode_comment(text)
    if value is not None and not isinstance(value, dict):
        raise Bug(f"decode_comment returned {type(value).__name__}")


def _snapshot(text: str) -> None:
    from planner.core.codec import snapshot_from_json, snapshot_to_json

    snapshot = snapshot_from_json(text, SOURCE)
    if snapshot_from_json(json.dumps(snapshot_to_json(snapshot)), SOURCE) != snapshot:
        raise Bug("snapshot does not round-trip")


def _round_plan(text: str) -> None:
    from planner.core.codec import round_plan_from_json, round_plan_to_json

    plan = round_plan_from_json(text, SOURCE)
    json.dumps(round_plan_to_json(plan))  # plans and policy states are opaque: NaN passes through


def _trace(text: str) -> None:
    from planner.traces.csvio import format_trace, parse_trace

    jobs = parse_trace(text, SOURCE)
    if parse_trace(format_trace(jobs), SOURCE) != jobs:
        raise Bug("trace does not round-trip")


def _cluster(text: str) -> None:
    from planner.cluster import cluster_from_toml

    cluster_from_toml(text, SOURCE)


def _scheduler_config(text: str) -> None:
    from planner.config import build_scheduler, config_from_mapping
    from planner.core.errors import ConfigError

    table = _toml_table(text, "scheduler")
    if table is None:
        return
    config = config_from_mapping(table, SOURCE)
    try:
        build_scheduler(config)
    except ConfigError as e:
        # The components check their own options; their errors name the component and the
        # key ("options of tiresias: key 'promote_knob': ..."), not the file.
        if "options" not in str(e) and "unknown" not in str(e):
            raise Bug(f"scheduler_toml: component error names no key: {e}") from e


def _controller_config(text: str) -> None:
    from slurm_plugin.controller.config import controller_config

    table = _toml_table(text, "controller")
    if table is None:
        return
    controller_config(table, SOURCE)


def _profiles(text: str) -> None:
    from profiles.document import profiles_from_document

    profiles_from_document(text, SOURCE)


def _perfmodel(text: str) -> None:
    from profiles.perfmodel.document import from_document, to_document

    model = from_document(text, SOURCE)
    json.dumps(to_document(model), allow_nan=False)


def _perfmodel_csv(text: str) -> None:
    from profiles.perfmodel.csvio import parse_table

    parse_table(text, SOURCE, require_time=True)


def _plan_document(text: str) -> None:
    from planner.core.fields import json_document
    from planner.core.plandoc import PlanFileError, parse_plan_document

    parse_plan_document(json_document(text, SOURCE, PlanFileError), SOURCE)


def _in_file(data: bytes, name: str, use: Callable[[Path], Any]) -> Any:
    with tempfile.TemporaryDirectory(prefix="mosaic-fuzz-") as tmp:
        path = Path(tmp) / SOURCE / name
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        return use(path)


def _plan_file(data: bytes) -> None:
    from wrapper.planfile import read_plan_file

    _in_file(data, "42.json", read_plan_file)


def _spool_with(data: bytes, job_id: str, relative: str, use: Callable[[Path], Any]) -> Any:
    with tempfile.TemporaryDirectory(prefix="mosaic-fuzz-") as tmp:
        spool = Path(tmp) / SOURCE
        path = spool / relative
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        return use(spool)


def _controller_plan_file(data: bytes) -> None:
    """The controller reads a job's plan file back (``current_exec_plan``, the next version)."""
    from slurm_plugin import planfile

    def use(spool: Path) -> None:
        plan = planfile.current_exec_plan(spool, "42")
        if plan is not None and not isinstance(plan, dict):
            raise Bug("current_exec_plan returned a non-dict")
        planfile._current_version(spool / "plans" / "42.json")

    _spool_with(data, "42", "plans/42.json", use)


def _heartbeats(data: bytes) -> None:
    """What a job writes into its (world-writable) status directory, read by the controller."""
    from slurm_plugin import planfile

    def use(spool: Path) -> None:
        records = planfile.read_heartbeats(spool, "42")
        if not all(isinstance(r, dict) for r in records):
            raise Bug("read_heartbeats returned a non-dict record")
        progress = planfile.last_progress(spool, "42")
        if progress is not None and not 0 <= progress <= 1:
            raise Bug(f"last_progress {progress} is outside [0, 1]")

    _spool_with(data, "42", "status/42/heartbeat.jsonl", use)


RATED_HEARTBEATS = "".join(
    json.dumps({"event": "heartbeat", "job_id": "42", "plan_version": 1, "samples_per_s": rate, "time": t})
    + "\n"
    for rate, t in ((None, 1700000000), (512.0, 1700000010), (498.5, 1700000020), (501, 1700000030))
)


def _heartbeat_rates(data: bytes) -> None:
    """The controller's online refinement reads a job's newest heartbeats for its rate."""
    from slurm_plugin.controller import refine

    def use(spool: Path) -> None:
        records = refine.newest_run_records(refine.read_heartbeat_lines(spool, "42"), 1)
        if not all(isinstance(r, dict) for r in records):
            raise Bug("newest_run_records returned a non-dict record")
        rate, bad = refine.run_rate(records, 1, 1700000000.0)
        if rate is not None and not 0 < rate <= refine.MAX_SAMPLES_PER_S:
            raise Bug(f"run_rate gave {rate}")
        if bad < 0:
            raise Bug("a negative count of bad heartbeats")

    _spool_with(data, "42", "status/42/heartbeat.jsonl", use)


def _checkpoint_marker(data: bytes) -> None:
    from slurm_plugin import planfile

    def use(spool: Path) -> None:
        planfile.read_checkpoint_marker(spool, "42")
        when = planfile.checkpoint_time(spool, "42")
        if when is not None and not isinstance(when, float):
            raise Bug("checkpoint_time returned a non-float")

    _spool_with(data, "42", "status/42/checkpoint.json", use)


def _complete_marker(data: bytes) -> None:
    from wrapper import checkpoint

    def use(root: Path) -> None:
        info = checkpoint.latest_complete(root)
        if info is not None:
            _ = (info.world_size, info.dp)

    _spool_with(data, "42", f"step-00000120/{checkpoint.COMPLETE_MARKER}", use)


def _squeue(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_squeue_json

    for job in parse_squeue_json(text):
        _ = (job.held, job.gpus_held_per_node, job.is_pending, job.holds_resources, job.memory_mb_per_node())


SQUEUE_SEPARATOR = "~mosaic-fixture-separator~"  # contrib/capture_slurm_fixtures.py PAIR_SEPARATOR


def _squeue_text(text: str) -> None:
    """``squeue --Format`` output, what the controller reads each tick."""
    from slurm_plugin.slurm.parse import parse_squeue_text

    for job in parse_squeue_text(text, SQUEUE_SEPARATOR):
        _ = (job.held, job.gpus_held_per_node, job.is_pending, job.holds_resources, job.memory_mb_per_node())


@functools.cache
def _gres_job() -> Any:
    """Job 11 of the captured queue (2 nodes): the job the ``scontrol -d`` seed describes."""
    from slurm_plugin.slurm.parse import parse_squeue_text

    jobs = parse_squeue_text(_read("squeue_format.txt"), SQUEUE_SEPARATOR)
    return next(j for j in jobs if j.id == "11")


def _gres_detail(text: str) -> None:
    """``scontrol -d show job`` of a running job: its GPU indices per node."""
    from slurm_plugin.slurm.parse import parse_scontrol_gres_detail, with_gres_detail

    job = _gres_job()
    detail = parse_scontrol_gres_detail(text, job)
    if detail is not None:
        _ = with_gres_detail(job, detail).gpu_indices


def _sinfo(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_sinfo_json

    for node in parse_sinfo_json(text):
        _ = (node.shards_per_gpu, node.usable)


def _scontrol(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_scontrol_records

    parse_scontrol_records(text)


def _sacct(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_parsable, tres_map

    for row in parse_parsable(text, SOURCE):
        for key in ("AllocTRES", "ReqTRES"):
            tres_map(row.get(key, ""))


def _sacct_trace(text: str) -> None:
    """``mosaic trace from-sacct``: sacct's history to trace rows, which the trace reader must
    take back unchanged."""
    from planner.traces.csvio import parse_trace
    from slurm_plugin.slurm.sacct_trace import format_site_trace, trace_from_sacct

    result = trace_from_sacct(text, guaranteed_qos=("prod",), source=SOURCE)
    if tuple(result.trace_jobs) != parse_trace(format_site_trace(result.jobs), SOURCE):
        raise Bug("sacct trace does not round-trip through the trace CSV")


def _slurm_fields(text: str) -> None:
    """The small field parsers squeue/sinfo/sacct/sbatch output goes through."""
    from slurm_plugin.slurm import parse

    for parser in (
        parse.expand_hostlist,
        parse.expand_indices,
        parse.gres_counts,
        parse.gpu_indices,
        parse.parse_memory_mb,
        parse.parse_time,
        parse.parse_sbatch_id,
    ):
        with contextlib.suppress(parse.SlurmParseError):
            parser(text)


def _plan_path(text: str) -> None:
    """A job id naming a plan file (or a status directory) stays inside the spool."""
    from planner.core.plandoc import plan_file_path
    from slurm_plugin import planfile

    spool = Path("/spool")
    for path, base in (
        (plan_file_path(spool, text), spool / "plans"),
        (planfile.plan_path(spool, text), spool / "plans"),
        (planfile.status_dir(spool, text), spool / "status"),
    ):
        if path.parent != base or ".." in path.parts or "\n" in str(path) or "/" in path.name:
            raise Bug(f"job id {text!r} names {path}, outside {base}")


def _rubick_workload(text: str) -> None:
    from planner.traces.rubick import parse_workload

    parse_workload(text, SOURCE)


def _crius_trace(text: str) -> None:
    from planner.traces.crius import parse_crius_trace

    parse_crius_trace(text, SOURCE)


def _lines(text: str, count: int) -> str:
    return "".join(text.splitlines(keepends=True)[:count])


def _records(text: str, separator: str, count: int) -> str:
    """The first ``count`` records of ``squeue --Format`` output whose records end in
    ``separator`` + newline."""
    end = separator + "\n"
    return "".join(record + end for record in text.split(end)[:count])


def _targets() -> dict[str, Target]:
    from slurm_plugin.slurm.parse import SlurmParseError

    mosaic_toml = (ROOT / "etc" / "mosaic.toml").read_text(encoding="utf-8")
    squeue = json.loads(_read("squeue.json"))
    sinfo = json.loads(_read("sinfo.json"))
    small_squeue = json.dumps({**squeue, "jobs": squeue["jobs"][:2]})
    small_sinfo = json.dumps({**sinfo, "nodes": sinfo["nodes"][:2]})
    samples = (ROOT / "profiles" / "builtin" / "data" / "rubick" / "samples.csv").read_text(encoding="utf-8")
    trace = (ROOT / "planner" / "sim" / "bundled" / "demo_trace.csv").read_text(encoding="utf-8")
    elastic_trace = (
        "job_id,submit_time_s,num_gpus,duration_s,model,batch_size,gpu_type,tenant,guaranteed,deadline_s,"
        "plan,plans,min_gpus,max_gpus,gpu_types\n"
        'a,0,2,100,resnet50,64,v100,t1,true,500,"{""tp"": 1}","[{""zero_stage"": 1}]",1,4,v100;a100\n'
    )
    bundled = ROOT / "planner" / "sim" / "bundled"
    rubick_workload = (bundled / "rubick_workload_mt.csv").read_text(encoding="utf-8")
    crius_trace = (bundled / "crius_simulate_trace_venus.csv").read_text(encoding="utf-8")
    listing = [
        Target("directives", _directives, (InputError,), (SCRIPT,)),
        Target(
            "comment", _comment, (), ("mosaic:" + json.dumps({"model": "x", "plans": [{}]}),), named=False
        ),
        Target("snapshot", _snapshot, (InputError,), (json.dumps(SNAPSHOT),), "json"),
        Target("round_plan", _round_plan, (InputError,), (json.dumps(ROUND_PLAN),), "json"),
        Target("trace", _trace, (InputError,), (_lines(trace, 8), elastic_trace)),
        Target("rubick_workload", _rubick_workload, (InputError,), (_lines(rubick_workload, 6),)),
        Target("crius_trace", _crius_trace, (InputError,), (_lines(crius_trace, 6),)),
        Target(
            "cluster_toml",
            _cluster,
            (InputError,),
            tuple(
                p.read_text(encoding="utf-8") for p in sorted((ROOT / "etc" / "clusters").glob("*.toml"))[:2]
            ),
            "toml",
        ),
        Target("scheduler_toml", _scheduler_config, (InputError,), (mosaic_toml,), "toml"),
        Target("controller_toml", _controller_config, (InputError,), (mosaic_toml,), "toml"),
        Target("profiles", _profiles, (InputError,), (json.dumps(PROFILES),), "json"),
        Target(
            "perfmodel",
            _perfmodel,
            (InputError,),
            (json.dumps(PERFMODEL),),
            "json",
        ),
        Target(
            "perfmodel_csv",
            _perfmodel_csv,
            (InputError,),
            (_lines(samples, 6),),
        ),
        Target("plan_document", _plan_document, (InputError,), (json.dumps(PLAN_DOCUMENT),), "json"),
        Target("plan_file", _plan_file, (InputError,), (json.dumps(PLAN_DOCUMENT).encode(),), "bytes"),
        Target(
            "controller_plan_file",
            _controller_plan_file,
            (),
            (json.dumps(PLAN_DOCUMENT).encode(),),
            "bytes",
            named=False,
        ),
        Target("heartbeats", _heartbeats, (InputError,), (HEARTBEATS.encode(),), "bytes"),
        Target("heartbeat_rates", _heartbeat_rates, (InputError,), (RATED_HEARTBEATS.encode(),), "bytes"),
        Target("checkpoint_marker", _checkpoint_marker, (InputError,), (MARKER.encode(),), "bytes"),
        Target("complete_marker", _complete_marker, (InputError,), (COMPLETE.encode(),), "bytes"),
        Target(
            "squeue_json",
            _squeue,
            (SlurmParseError,),
            (small_squeue,),
            "json",
            named=False,
        ),
        Target(
            "squeue_text",
            _squeue_text,
            (SlurmParseError,),
            (_records(_read("squeue_format.txt"), SQUEUE_SEPARATOR, 3),),
            named=False,
        ),
        Target(
            "scontrol_gres_detail",
            _gres_detail,
            (SlurmParseError,),
            tuple(json.loads(_read("scontrol_detail.json")).values())[:1],
            named=False,
        ),
        Target(
            "sinfo_json",
            _sinfo,
            (SlurmParseError,),
            (small_sinfo,),
            "json",
            named=False,
        ),
        Target(
            "scontrol", _scontrol, (SlurmParseError,), (_lines(_read("scontrol_jobs.txt"), 3),), named=False
        ),
        Target("sacct", _sacct, (SlurmParseError,), (_lines(_read("sacct.txt"), 6),)),
        Target(
            "sacct_trace",
            _sacct_trace,
            (SlurmParseError,),
            (_read("sacct_trace.txt"), _lines(_read("sacct_trace_iso.txt"), 4)),
        ),
        Target(
            "slurm_fields",
            _slurm_fields,
            (),
            (
                "n[1-3,5],gpu-[01-02]",
                "gpu:a100:2(IDX:0-1,3)",
                "16G",
                "2026-11-21T23:38:02",
                "Submitted batch job 42",
            ),
            named=False,
        ),
        Target("plan_path", _plan_path, (InputError,), ("42", "42_1", "1234.batch"), named=False),
    ]
    return {t.name: t for t in listing}


TARGETS: dict[str, Target] = _targets()
ERRORS: tuple[type[BaseException], ...] = (MosaicError,)
