"""``mosaic trace from-sacct`` and ``mosaic cluster from-slurm``: the pure parsers on output
captured from Slurm 22.05 (``tests/data/slurm/sacct_trace*.txt``, the command in
``sacct_trace.cmd``; ``sinfo.json``) and on hand-made rows with every odd value sacct prints."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from planner.cluster import cluster_from_toml
from planner.traces.csvio import parse_trace
from profiles.gpus import catalog
from slurm_plugin.cli.cluster_cmd import known_gpu_types
from slurm_plugin.cli.main import main
from slurm_plugin.slurm import commands, parse
from slurm_plugin.slurm.parse import SlurmParseError
from slurm_plugin.slurm.sacct_trace import (
    NEUTRAL_MODEL,
    SKIP_NEVER_STARTED,
    SKIP_NO_GPU,
    SKIP_UNFINISHED,
    SiteJob,
    anonymous,
    cluster_toml,
    format_site_trace,
    named_gpu_mem_gb,
    trace_from_sacct,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
CAPTURED = (DATA / "sacct_trace.txt").read_text()
CAPTURED_ISO = (DATA / "sacct_trace_iso.txt").read_text()
T0 = 1795904090  # the first submission in the capture


def row(**cells: str) -> str:
    """One sacct record in SACCT_TRACE_FIELDS order: a finished 2-GPU job unless told."""
    values = {
        "JobID": "100",
        "User": "alice",
        "Account": "vision",
        "Partition": "gpu",
        "QOS": "normal",
        "State": "COMPLETED",
        "Submit": str(T0),
        "Start": str(T0 + 10),
        "End": str(T0 + 110),
        "ElapsedRaw": "100",
        "Timelimit": "01:00:00",
        "AllocTRES": "billing=4,cpu=4,gres/gpu=2,mem=16G,node=1",
        "Comment": "",
        "JobIDRaw": "100",
    }
    values.update(cells)
    assert list(values) == list(commands.SACCT_TRACE_FIELDS)
    return "|".join(values.values()) + "\n"


def by_id(text: str, **kw: Any) -> dict[str, SiteJob]:
    return {j.trace.job_id: j for j in trace_from_sacct(text, **kw).jobs}


# -- the captured history ---------------------------------------------------------------------


def test_the_captured_history_becomes_one_job_per_job_id_and_array_task():
    result = trace_from_sacct(CAPTURED, guaranteed_qos=["prod"])
    jobs = {j.trace.job_id: j for j in result.jobs}
    assert sorted(jobs) == ["1", "2", "3", "4", "5_0", "5_1", "5_2", "6", "7"]
    # Job 10 was cancelled while pending: sacct gives it a Start (its cancel time) and no
    # allocation; it never ran.
    assert result.skipped == {SKIP_NEVER_STARTED: 1}
    assert result.requeued == 1 and result.array_tasks == 3
    assert {j: jobs[j].trace.num_gpus for j in jobs} == {
        "1": 1, "2": 2, "3": 4, "4": 1, "5_0": 1, "5_1": 1, "5_2": 1, "6": 1, "7": 1,
    }  # fmt: skip
    assert all(j.trace.submit_time_s == 0 for j in result.jobs)  # all submitted in one second
    assert all(j.trace.gpu_type is None for j in result.jobs)  # the test cluster's GRES is untyped


def test_a_requeued_job_is_one_job_with_the_time_of_all_its_runs():
    job = by_id(CAPTURED)["4"]
    assert job.runs == 2 and job.state == "COMPLETED"
    assert job.trace.duration_s == 3 + 6
    assert job.trace.submit_time_s == 0  # its first submission


def test_failed_and_timed_out_runs_keep_the_time_they_ran():
    jobs = by_id(CAPTURED)
    assert (jobs["6"].state, jobs["6"].trace.duration_s) == ("FAILED", 1)
    timeout = jobs["7"]
    assert (timeout.state, timeout.trace.duration_s, timeout.trace.time_limit_s) == ("TIMEOUT", 86, 60)


def test_mosaic_metadata_gives_model_batch_and_plan_and_the_qos_guarantees():
    jobs = by_id(CAPTURED, guaranteed_qos=["prod", "high"])
    mosaic = jobs["2"].trace
    assert (mosaic.model, mosaic.batch_size, mosaic.plan) == ("resnet50", 64, {"zero_stage": 1})
    assert mosaic.guaranteed and mosaic.tenant == "research"
    plain = jobs["1"].trace
    assert (plain.model, plain.batch_size, plain.plan, plain.guaranteed) == (NEUTRAL_MODEL, None, None, False)
    assert not by_id(CAPTURED)["2"].trace.guaranteed  # no QOS given


def test_time_limits_cpus_and_memory():
    jobs = by_id(CAPTURED)
    limits = {k: j.trace.time_limit_s for k, j in jobs.items()}
    assert (limits["1"], limits["3"], limits["2"]) == (600, 86400, None)  # 00:10:00, 1-00:00:00, UNLIMITED
    assert (jobs["2"].cpus, jobs["2"].mem_mb) == (4, 8192)


def test_iso_times_give_the_same_trace_as_epoch_seconds():
    assert trace_from_sacct(CAPTURED_ISO) == trace_from_sacct(CAPTURED)


def test_the_written_csv_reads_back_as_the_same_trace():
    result = trace_from_sacct(CAPTURED, guaranteed_qos=["prod"])
    text = format_site_trace(result.jobs)
    assert parse_trace(text, "t") == tuple(result.trace_jobs)
    assert text.splitlines()[0].endswith(",user,state,runs,cpus,mem_gb")


def test_the_command_is_the_captured_one():
    argv = commands.sacct_trace("now-1hour")
    assert " ".join(argv) in (DATA / "sacct_trace.cmd").read_text().replace("'", "")
    argv = commands.sacct_trace("2026-01-01", "2026-02-01", ["gpu", "big"], delimiter="~x~")
    assert argv[-2:] == ["--endtime=2026-02-01", "--partition=gpu,big"]
    assert "--delimiter=~x~" in argv and "--duplicates" in argv and "--allocations" in argv


# -- hand-made rows -----------------------------------------------------------------------------


def test_submit_times_count_from_the_earliest_and_jobs_come_in_submit_order():
    text = row(JobID="2", Submit=str(T0 + 50)) + row(JobID="1", Submit=str(T0 + 20))
    jobs = trace_from_sacct(text).jobs
    assert [(j.trace.job_id, j.trace.submit_time_s) for j in jobs] == [("1", 0), ("2", 30)]


@pytest.mark.parametrize(
    "limit", ["UNLIMITED", "Partition_Limit", "INVALID", "", "None", "Unknown", "NOT_SET"]
)
def test_no_time_limit(limit):
    assert by_id(row(Timelimit=limit))["100"].trace.time_limit_s is None


def test_the_year_slurms_backfill_writes_is_no_limit():
    """A job without a time limit in a partition without one that Slurm's backfill pass
    starts gets a limit of a year written to it (backfill.c: ``YEAR_MINUTES``; captured
    live by benchmarks/soak/replay_fidelity.py), while the same job started by the main scheduler
    keeps ``UNLIMITED``: both are no limit, whichever pass started it (as is a longer limit
    already, which squeue prints as ``INVALID``). A minute less is a declared limit."""
    assert by_id(row(Timelimit="365-00:00:00"))["100"].trace.time_limit_s is None
    assert by_id(row(Timelimit="364-23:59:00"))["100"].trace.time_limit_s == 365 * 86400 - 60


@pytest.mark.parametrize(
    ("limit", "seconds"), [("00:10:00", 600), ("2-03:04:05", 183845), ("10:00", 600), ("1-00:00:00", 86400)]
)
def test_time_limits(limit, seconds):
    assert by_id(row(Timelimit=limit))["100"].trace.time_limit_s == seconds


@pytest.mark.parametrize(
    ("tres", "gpus", "gpu_type"),
    [
        ("cpu=4,gres/gpu=4,mem=8G,node=1", 4, None),
        ("cpu=4,gres/gpu=4,gres/gpu:a100=4,mem=8G,node=1", 4, "a100"),
        ("cpu=4,gres/gpu:A100=2,mem=8G", 2, "a100"),
        ("cpu=4,gres/gpu=4,gres/gpu:a100=2,gres/gpu:v100=2", 4, None),
    ],
)
def test_gpus_and_their_type_from_alloc_tres(tres, gpus, gpu_type):
    job = by_id(row(AllocTRES=tres))["100"].trace
    assert (job.num_gpus, job.gpu_type) == (gpus, gpu_type)


@pytest.mark.parametrize("start", ["Unknown", "None", ""])
def test_jobs_that_never_started_are_counted(start):
    result = trace_from_sacct(row(JobID="1") + row(JobID="2", Start=start, End="Unknown", ElapsedRaw="0"))
    assert [j.trace.job_id for j in result.jobs] == ["1"]
    assert result.skipped == {SKIP_NEVER_STARTED: 1}


def test_running_and_cpu_only_jobs_are_counted():
    text = (
        row(JobID="1")
        + row(JobID="2", State="RUNNING", End="Unknown")
        + row(JobID="3", AllocTRES="billing=2,cpu=2,mem=1G,node=1")
        + row(JobID="4_[1-9%2]", State="PENDING", Start="None", End="Unknown", AllocTRES="")
    )
    result = trace_from_sacct(text)
    assert [j.trace.job_id for j in result.jobs] == ["1"]
    assert result.skipped == {SKIP_UNFINISHED: 1, SKIP_NO_GPU: 1, SKIP_NEVER_STARTED: 1}


def test_a_requeued_job_waiting_or_running_again_has_not_finished():
    first = row(JobID="7", State="REQUEUED", ElapsedRaw="40")
    again = row(JobID="7", State="PENDING", Submit=str(T0 + 60), Start="Unknown", End="Unknown", AllocTRES="")
    running = row(JobID="7", State="RUNNING", Submit=str(T0 + 60), End="Unknown")
    for text in (first, first + again, first + running):
        assert trace_from_sacct(text).skipped == {SKIP_UNFINISHED: 1}
    # Cancelled while waiting: its first run is all it ran.
    cancelled = row(JobID="7", State="CANCELLED", Submit=str(T0 + 60), Start=str(T0 + 90), End=str(T0 + 90),
                    ElapsedRaw="0", AllocTRES="")  # fmt: skip
    assert by_id(first + cancelled)["7"].trace.duration_s == 40


def test_a_run_under_a_second_counts_one_second_and_a_missing_elapsed_is_end_minus_start():
    assert by_id(row(ElapsedRaw="0"))["100"].trace.duration_s == 1
    assert by_id(row(ElapsedRaw=""))["100"].trace.duration_s == 100


def test_a_comment_with_a_line_break_and_an_unusable_plan():
    broken = row(JobID="1", Comment="first line\nsecond line")
    bad_plan = row(JobID="2", Comment='mosaic:{"model":"gpt2","plan":{"zero_stage":9}}')
    not_json = row(JobID="3", Comment="mosaic:{oops")
    result = trace_from_sacct(broken + bad_plan + not_json)
    assert [j.trace.model for j in result.jobs] == [NEUTRAL_MODEL] * 3
    assert result.unread_comments == 1  # not_json is not Mosaic's comment at all


def test_anonymise_hashes_users_and_accounts_stably():
    text = row(JobID="1") + row(JobID="2", User="bob", Account="nlp") + row(JobID="3")
    jobs = trace_from_sacct(text, anonymise=True).jobs
    assert jobs[0].user == jobs[2].user == anonymous("u", "alice") != jobs[1].user
    assert jobs[0].trace.tenant == anonymous("a", "vision") and jobs[1].trace.tenant == anonymous("a", "nlp")
    assert "alice" not in format_site_trace(jobs) and "vision" not in format_site_trace(jobs)


@pytest.mark.parametrize(
    ("cells", "field"),
    [
        ({"Submit": "yesterday"}, "Submit"),
        ({"Start": "2026-13-45T99:00:00"}, "Start"),
        ({"ElapsedRaw": "-5"}, "ElapsedRaw"),
        ({"ElapsedRaw": "00:01:40"}, "ElapsedRaw"),
        ({"Timelimit": "forever"}, "Timelimit"),
        ({"AllocTRES": "cpu=4,gres/gpu=two"}, "AllocTRES"),
        ({"AllocTRES": "cpu=4,gres/gpu"}, "AllocTRES"),
        ({"AllocTRES": "cpu=4,gres/gpu=1,mem=lots"}, "AllocTRES"),
        ({"JobID": "100.batch"}, "JobID"),
        ({"State": ""}, "State"),
    ],
)
def test_odd_values_are_errors_naming_the_line_and_field(cells, field):
    with pytest.raises(SlurmParseError, match=rf"^src:2: field '{field}': "):
        trace_from_sacct(row(JobID="1") + row(**cells), source="src")


def test_a_record_with_too_many_or_too_few_fields_is_an_error_naming_the_line():
    with pytest.raises(SlurmParseError, match=r"^src:2: 15 fields, expected 14"):
        trace_from_sacct(row() + row(JobIDRaw="1|2"), source="src")
    with pytest.raises(SlurmParseError, match=r"^src:1: 3 fields, expected 14"):
        trace_from_sacct("1|2|3\n", source="src")


def test_another_delimiter_and_an_empty_history():
    assert by_id(row().replace("|", "~x~"), delimiter="~x~")["100"].trace.num_gpus == 2
    assert trace_from_sacct("").jobs == ()


# -- the cluster -------------------------------------------------------------------------------


def test_the_captured_nodes_become_groups_the_simulator_reads():
    nodes = parse.parse_sinfo_json((DATA / "sinfo.json").read_text())
    text, left_out = cluster_toml(nodes, ("a100", "v100"))
    cluster = cluster_from_toml(text, "t")
    assert [(n.gpus, n.gpu_type, n.cpus, n.mem_gb) for n in cluster] == [
        (4, "a100", 16, 64),
        (4, "a100", 16, 64),
        (4, "v100", 16, 64),
        (4, "v100", 16, 64),
    ]
    assert text.count("[[nodes]]") == 2 and not left_out


def test_gres_types_features_and_nodes_without_gpus():
    node = parse.parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
    nodes = [
        dataclasses.replace(node, name="g1", gres_gpu_type="H100", features=("a100",)),  # GRES wins
        dataclasses.replace(node, name="g2", gres_gpu_type="", features=("ib", "l40s", "avx512")),
        dataclasses.replace(node, name="g3", gres_gpu_type="", features=("rack7",)),  # the only feature
        dataclasses.replace(node, name="g4", gres_gpu_type="", features=()),
        dataclasses.replace(node, name="c1", gpus=0),
        dataclasses.replace(node, name='g"5\n', gres_gpu_type='Odd"\\\x01\U0001f600'),  # quoted in TOML
    ]
    text, left_out = cluster_toml(nodes, ("a100", "l40s", "h100"), "mystery")
    types = [n.gpu_type for n in cluster_from_toml(text, "t")]
    assert types == ["h100", "l40s", "rack7", "mystery", 'odd"\\\x01\U0001f600']
    assert left_out == {"no GPU": 1}


@pytest.mark.parametrize(
    ("gres", "gb"),
    [
        ("nvidia_a100-sxm4-80gb", 80.0),  # NVML autodetection's names
        ("nvidia_h100_80gb_hbm3", 80.0),
        ("tesla_v100-sxm2-32gb", 32.0),
        ("a100_40g", 40.0),
        ("a100", None),
        ("", None),
        ("x_40gb_80gb", None),  # two sizes: neither
    ],
)
def test_gpu_memory_is_read_where_the_gres_type_names_it(gres, gb):
    node = parse.parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
    assert named_gpu_mem_gb(dataclasses.replace(node, gres_gpu_type=gres, features=("100g",))) == gb


def test_a_named_gpu_memory_reaches_the_cluster_toml():
    node = parse.parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
    nodes = [
        dataclasses.replace(node, name="g1", gres_gpu_type="nvidia_a100-sxm4-80gb"),
        dataclasses.replace(node, name="g2", gres_gpu_type="a100"),
    ]
    text, _ = cluster_toml(nodes, ("a100",))
    assert [n.gpu_mem_gb for n in cluster_from_toml(text, "t")] == [80.0, None]


# -- the commands -------------------------------------------------------------------------------


def test_the_commands_read_saved_output(tmp_path, capsys):
    trace, cluster = tmp_path / "t.csv", tmp_path / "c.toml"
    assert main(["trace", "from-sacct", "--input", str(DATA / "sacct_trace.txt"), "--qos-guaranteed",
                 "prod", "--out", str(trace)]) == 0  # fmt: skip
    assert "1 never started" in capsys.readouterr().err
    assert len(parse_trace(trace.read_text(), "t")) == 9
    assert main(["cluster", "from-slurm", "--input", str(DATA / "sinfo.json"), "--out", str(cluster)]) == 0
    assert len(cluster_from_toml(cluster.read_text(), "c")) == 4
    assert main(["cluster", "from-slurm", "--input", str(DATA / "sinfo.json"), "--partition", "none",
                 "--out", str(tmp_path / "x.toml")]) == 2  # fmt: skip


def test_cluster_from_slurm_knows_every_catalog_type_by_its_feature():
    """A node whose GRES names no type is typed by the one feature that names a catalog type,
    whichever catalog type it is (the CLI's list is the catalog's, not a list of its own)."""
    known = known_gpu_types()
    assert set(catalog().types) <= set(known)
    node = parse.parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
    for name in ("l4", "mi300x", "a800"):
        typed = dataclasses.replace(node, gres_gpu_type="", features=("ib", name, "avx512"))
        text, _ = cluster_toml([typed], known)
        assert [n.gpu_type for n in cluster_from_toml(text, "t")] == [name]
