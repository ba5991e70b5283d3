"""``squeue --Format`` text (what the controller reads) against ``squeue --json`` (what it read
before): both captured from one moment of one queue (contrib/capture_slurm_fixtures.py
--pair-only), plus hostile text and the backend's GPU-index cache on fakes."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from slurm_plugin.controller.actuate import never_runnable
from slurm_plugin.slurm import backend, commands
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import (
    SQUEUE_FIELDS,
    SlurmJob,
    SlurmParseError,
    parse_scontrol_gres_detail,
    parse_squeue_json,
    parse_squeue_text,
    with_gres_detail,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
SEPARATOR = "~mosaic-fixture-separator~"  # contrib/capture_slurm_fixtures.py PAIR_SEPARATOR
HOSTILE_NAME = "evil|name\n   JOB_GRES=gpu:1\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:3)\nJobName=x"


def text_jobs() -> list[SlurmJob]:
    jobs = parse_squeue_text((DATA / "squeue_format.txt").read_text(), SEPARATOR)
    details = json.loads((DATA / "scontrol_detail.json").read_text())
    return [
        with_gres_detail(j, parse_scontrol_gres_detail(details[j.id], j)) if j.id in details else j
        for j in jobs
    ]


def json_jobs() -> list[SlurmJob]:
    return parse_squeue_json((DATA / "squeue_pair.json").read_text())


def differences(text: SlurmJob, js: SlurmJob) -> dict[str, tuple[object, object]]:
    """Fields where the two parsers disagree, but for ``reason`` where squeue prints the
    description Slurm set (``job requeued in held state``) instead of the code: there the
    controller's one use of it, :func:`never_runnable`, must agree."""
    out = {}
    for f in dataclasses.fields(SlurmJob):
        a, b = getattr(text, f.name), getattr(js, f.name)
        if f.name == "reason" and a != b and " " in a and never_runnable(a) == never_runnable(b):
            continue
        if a != b:
            out[f.name] = (a, b)
    return out


def test_text_reads_every_job_as_json_does():
    text, js = text_jobs(), json_jobs()
    assert [j.id for j in text] == sorted((j.id for j in js), key=int)
    by_id = {j.id: j for j in js}
    assert {j.id: differences(j, by_id[j.id]) for j in text if differences(j, by_id[j.id])} == {}
    # The capture holds what the comparison is about.
    states = {j.state for j in text}
    assert {"PENDING", "RUNNING", "COMPLETING", "COMPLETED"} <= states
    assert any(len(j.gpu_indices) == 2 for j in text)  # a two-node job's indices per node
    assert any(j.mem_mb_per_cpu for j in text if j.state == "RUNNING")
    assert any(j.reason == "BadConstraints" for j in text)
    assert any(j.gpus_per_task for j in text) and any(j.gpus_per_job for j in text)
    # user_id is compared with the rest: root's jobs and one of another user ('nobody').
    assert {j.user_id for j in text} == {0, 65534}
    # So is time_limit_s: --time=10, 90, 2-03:04:00, none, and 400 days (squeue: INVALID).
    assert {j.time_limit_s for j in text} == {None, 600.0, 5400.0, 3064 * 60.0}


def test_hostile_names_and_comments_come_through_whole():
    text = {j.id: j for j in text_jobs()}
    hostile = [j for j in text.values() if j.name == HOSTILE_NAME]
    assert len(hostile) == 2  # one held (with a hostile comment), one running
    held = next(j for j in hostile if j.state == "PENDING")
    assert "\n" in held.comment and "|" in held.comment and SEPARATOR[:-1] in held.comment
    assert held.comment == next(j for j in json_jobs() if j.id == held.id).comment
    running = next(j for j in hostile if j.state == "RUNNING")
    # The name fakes a GPU line on n1 (IDX:3): the real allocation is what is read.
    assert running.gpu_indices == next(j for j in json_jobs() if j.id == running.id).gpu_indices
    assert running.gpu_indices and running.gpu_indices != (("n1", (3,)),)


def test_array_tasks_sharing_a_record_are_one_job():
    text = parse_squeue_text((DATA / "squeue_format.txt").read_text(), SEPARATOR)
    raw = (DATA / "squeue_format.txt").read_text().split(SEPARATOR + "\n")
    assert len(raw) - 1 > len(text)  # --array printed the unsplit tasks one per line
    assert sum(j.name == "arr" for j in text) == sum(j.name == "arr" for j in json_jobs()) == 2


def row(**values: str) -> str:
    base = {name: "" for name in SQUEUE_FIELDS}
    base.update(
        {
            "JobID": "42",
            "Partition": "gpu",
            "State": "PENDING",
            "Reason": "JobHeldUser",
            "PriorityLong": "0",
            "tres-per-node": "gres:gpu:2",
            "NumCPUs": "4",
            "MinMemory": "2048M",
            "tres-alloc": "cpu=4,mem=2G,node=1,billing=4",
            "NumNodes": "1",
            "Feature": "(null)",
            "SubmitTime": "1795445216",
            "StartTime": "N/A",
            "TimeLimit": "UNLIMITED",
            "RestartCnt": "0",
            "NumTasks": "1",
            "NTPerNode": "0",
            "Name": "job",
            "Comment": "(null)",
            "admin_comment": "(null)",
            "tres-per-task": "N/A",
            "tres-per-job": "N/A",
            "UserId": "1001",
        }
    )
    base.update(values)
    return "".join(base[name] + SEP for name in SQUEUE_FIELDS) + "\n"


SEP = "~0123456789abcdef~"


def test_a_record_reads_like_json():
    (j,) = parse_squeue_text(row(), SEP)
    assert (j.id, j.state, j.held, j.gpus_per_node, j.cpus, j.mem_mb_per_node, j.mem_mb_per_cpu) == (
        "42", "PENDING", True, 2, 4, 2048, None,
    )  # fmt: skip
    assert j.user_id == 1001
    assert (j.comment, j.admin_comment, j.features, j.start_time, j.submit_time) == (
        "",
        "",
        "",
        None,
        1795445216.0,
    )


def test_memory_per_cpu_is_told_from_the_memory_tres():
    (j,) = parse_squeue_text(row(MinMemory="512M", **{"tres-alloc": "cpu=4,mem=2G,node=1"}), SEP)
    assert (j.mem_mb_per_node, j.mem_mb_per_cpu, j.memory_mb_per_node()) == (None, 512, 2048)
    (j,) = parse_squeue_text(row(MinMemory="0"), SEP)
    assert (j.mem_mb_per_node, j.mem_mb_per_cpu) == (None, None)


def test_pending_job_counts_the_nodes_it_asked_for():
    (j,) = parse_squeue_text(row(NumNodes="2", **{"tres-alloc": "cpu=4,mem=2G,node=1"}), SEP)
    assert j.num_nodes == 1


def test_a_count_slurm_has_not_worked_out_yet_reads_as_json_reads_it():
    # NumTasks of a job submitted an instant ago is NO_VAL (0xfffffffe); --json omits it.
    (j,) = parse_squeue_text(row(NumTasks="4294967294", NTPerNode="4294967295"), SEP)
    assert (j.tasks, j.tasks_per_node) == (1, 0)
    (j,) = parse_squeue_text(row(PriorityLong="4294967294"), SEP)
    assert j.priority == 4294967294  # a priority is not a count


def test_any_text_in_free_fields_survives():
    nasty = f"a{SEP[:-1]}|b\n{SEP[1:]}\n(null) %k"
    (j,) = parse_squeue_text(row(Name=nasty, Comment=nasty, admin_comment=nasty), SEP)
    assert j.name == j.comment == j.admin_comment == nasty


def test_bad_text_is_refused_with_where():
    with pytest.raises(SlurmParseError, match="too short"):
        parse_squeue_text(row(), "~x~")
    with pytest.raises(SlurmParseError, match="record 2 has 2 fields"):
        parse_squeue_text(row() + "7" + SEP + "x" + SEP + "\n", SEP)
    with pytest.raises(SlurmParseError, match="ends inside a record"):
        parse_squeue_text(row() + "43" + SEP + "gpu", SEP)
    with pytest.raises(SlurmParseError, match="JobID '4_2' is not a job id"):
        parse_squeue_text(row(JobID="4_2"), SEP)
    with pytest.raises(SlurmParseError, match="job 42: NumCPUs is 'many'"):
        parse_squeue_text(row(NumCPUs="many"), SEP)
    with pytest.raises(SlurmParseError, match="job 42: no SubmitTime"):
        parse_squeue_text(row(SubmitTime="N/A"), SEP)
    assert parse_squeue_text("", SEP) == []


@pytest.mark.parametrize(
    "uid", ["", "N/A", "root(0)", "root", "-1", " 7", "7 ", "1e3", "٣", "4294967295", "12345678901"]
)
def test_a_user_id_that_is_not_a_plain_uid_is_refused(uid):
    # squeue 22.05 prints --Format=UserId as the bare number (scontrol: 'root(0)'). This
    # number decides whose status directory the controller trusts: nothing else is guessed at.
    with pytest.raises(
        SlurmParseError, match=f"job 42: UserId is {re.escape(repr(uid))}, expected a numeric"
    ):
        parse_squeue_text(row(UserId=uid), SEP)


def test_user_id_reads_from_json_and_is_checked():
    doc = json.loads((DATA / "squeue_pair.json").read_text())
    doc["jobs"] = doc["jobs"][:1]
    (j,) = parse_squeue_json(json.dumps(doc))
    assert j.user_id == doc["jobs"][0]["user_id"]
    del doc["jobs"][0]["user_id"]
    assert parse_squeue_json(json.dumps(doc))[0].user_id is None  # unknown: not checked
    for bad in (-1, 2**32 - 1, "0", True):
        doc["jobs"][0]["user_id"] = bad
        with pytest.raises(SlurmParseError, match="'user_id' is"):
            parse_squeue_json(json.dumps(doc))


def test_time_limit_reads_from_json_in_seconds():
    # Captured from Slurm 22.05 (contrib/capture_slurm_fixtures.py --pair-only): time_limit in
    # minutes; null where the job has none (no --time, the partition's MaxTime=INFINITE).
    jobs = {j.name: j for j in json_jobs()}
    raw = {j["name"]: j for j in json.loads((DATA / "squeue_pair.json").read_text())["jobs"]}
    assert (raw["nomem"]["time_limit"], jobs["nomem"].time_limit_s) == (90, 5400.0)  # --time=90
    assert (raw["gpus"]["time_limit"], jobs["gpus"].time_limit_s) == (3064, 183840.0)  # 2-03:04:00
    assert (raw["rpcpu"]["time_limit"], jobs["rpcpu"].time_limit_s) == (10, 600.0)  # running
    assert (raw["mem0"]["time_limit"], jobs["mem0"].time_limit_s) == (None, None)  # unlimited
    # 400 days: --json gives the minutes, squeue --Format prints INVALID; both read no limit.
    assert (raw["cw"]["time_limit"], jobs["cw"].time_limit_s) == (576000, None)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 5400.0),
        (None, None),
        (0, None),  # --time=0: no limit
        (4294967295, None),  # INFINITE
        (4294967294, None),  # NO_VAL
        (525600, 365 * 86400.0),  # the longest limit squeue --Format prints
        # Slurm 23.02 on: {"set", "infinite", "number"}
        ({"set": True, "infinite": False, "number": 90}, 5400.0),
        ({"set": True, "infinite": True, "number": 0}, None),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"infinite": True}, None),
    ],
)
def test_time_limit_json_shapes(value, seconds):
    doc = json.loads((DATA / "squeue_pair.json").read_text())
    doc["jobs"] = doc["jobs"][:1]
    doc["jobs"][0]["time_limit"] = value
    assert parse_squeue_json(json.dumps(doc))[0].time_limit_s == seconds
    del doc["jobs"][0]["time_limit"]
    assert parse_squeue_json(json.dumps(doc))[0].time_limit_s is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("90", "'time_limit' is '90'"),
        (True, "'time_limit' is True"),
        (-1, "'time_limit' is -1, not a time limit"),
        (2**32, "'time_limit' is 4294967296, not a time limit"),
        ({"set": True, "infinite": False}, "'time_limit': 'number' missing"),
        ({"set": True, "infinite": False, "number": "90"}, "'number' is '90'"),
        ({"set": "yes", "number": 90}, "'set' is 'yes'"),
        ([90], "'time_limit' is \\[90\\]"),
    ],
)
def test_a_bad_json_time_limit_is_refused_with_where(value, message):
    doc = json.loads((DATA / "squeue_pair.json").read_text())
    doc["jobs"] = doc["jobs"][:1]
    doc["jobs"][0]["time_limit"] = value
    with pytest.raises(SlurmParseError, match=f"squeue --json: job {doc['jobs'][0]['job_id']}: .*{message}"):
        parse_squeue_json(json.dumps(doc))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5:00", 300.0),
        ("1:30:00", 5400.0),
        ("2-03:04:00", 183840.0),
        ("365-00:00:00", 365 * 86400.0),
        ("UNLIMITED", None),
        ("NOT_SET", None),
        ("INVALID", None),  # squeue's text for a limit beyond 365 days
        ("", None),
    ],
)
def test_time_limit_reads_from_text(value, seconds):
    (j,) = parse_squeue_text(row(TimeLimit=value), SEP)
    assert j.time_limit_s == seconds


@pytest.mark.parametrize("value", ["soon", "90", "1:2:3:4", "-5:00", "5:0", "1-", "1e3:00", "٣:00"])
def test_a_bad_text_time_limit_is_refused_with_where(value):
    with pytest.raises(SlurmParseError, match=f"job 42: TimeLimit is {re.escape(repr(value))}"):
        parse_squeue_text(row(TimeLimit=value), SEP)


def test_squeue_argv_puts_the_separator_after_every_field():
    argv = commands.squeue_text(SEP)
    assert argv[:2] == ["squeue", "--noheader"] and "--states=all" in argv and "--array" in argv
    spec = argv[-1].removeprefix("--Format=").split(",")
    assert spec == [f"{name}:{SEP}" for name in SQUEUE_FIELDS]
    for bad in ("1abc", ".abc", "a,b", ""):
        with pytest.raises(Exception, match="cannot follow a field"):
            commands.squeue_text(bad)


DETAIL = (
    "JobId=7 JobName={name}\n   UserId=root(0) GroupId=root(0)\n   JobState=RUNNING Reason=None\n"
    "   TRES=cpu=4,mem=4G,node=2,billing=4\n   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n"
    "   JOB_GRES=gpu:2\n     Nodes=n[1-2] CPU_IDs=0-1 Mem=2048 GRES=gpu:1(IDX:2)\n"
    "   MinCPUsNode=2 MinMemoryNode=2G MinTmpDiskNode=0\n   Comment={comment}\n"
)


def running(name: str = "job", nodes: tuple[str, ...] = ("n1", "n2")) -> SlurmJob:
    (j,) = parse_squeue_text(row(JobID="7", State="RUNNING", Name=name, NodeList=",".join(nodes)), SEP)
    return j


def test_gres_detail_lines_cover_a_hostlist():
    j = running()
    assert parse_scontrol_gres_detail(DETAIL.format(name="job", comment=""), j) == ("gpu:1(IDX:2)",) * 2
    fake = "x\n   JOB_GRES=gpu:1\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:3)"
    j = running(name=fake)
    text = DETAIL.format(
        name=fake, comment="\n   JOB_GRES=gpu:9\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=gpu:1(IDX:0)"
    )
    assert with_gres_detail(j, parse_scontrol_gres_detail(text, j)).gpu_indices == (
        ("n1", (2,)),
        ("n2", (2,)),
    )
    # Lines that do not cover the job's nodes are not guessed from.
    assert (
        parse_scontrol_gres_detail(DETAIL.format(name=fake, comment=""), running(fake, ("n1", "n3"))) is None
    )
    with pytest.raises(SlurmParseError, match="does not end in JobName='other'"):
        parse_scontrol_gres_detail(DETAIL.format(name="job", comment=""), running("other"))
    with pytest.raises(SlurmParseError, match="does not start with 'JobId=7'"):
        parse_scontrol_gres_detail("JobId=8 JobName=job\n", j)


class FakeCli(CliSlurm):
    """The backend with its commands answered from the captured pair; counts each command."""

    def __init__(self) -> None:
        super().__init__()
        self.text = (DATA / "squeue_format.txt").read_text()
        self.details: Mapping[str, str] = json.loads((DATA / "scontrol_detail.json").read_text())
        self.calls: list[str] = []

    def _run(self, argv: list[str], extra_env: Mapping[str, str] | None = None) -> str:
        if argv[:2] == ["squeue", "--noheader"]:
            self.calls.append("squeue")
            assert extra_env == commands.SQUEUE_TEXT_ENV
            separator = argv[-1].split(":", 1)[1].split(",", 1)[0]
            return self.text.replace(SEPARATOR, separator)
        if argv == ["squeue", "--json"]:
            self.calls.append("json")
            return (DATA / "squeue_pair.json").read_text()
        assert argv[:4] == ["scontrol", "-d", "show", "job"], argv
        self.calls.append("scontrol")
        return self.details[argv[4]]


def test_backend_reads_indices_once_per_run(monkeypatch):
    cli = FakeCli()
    first = cli.jobs()
    assert cli.calls.count("scontrol") == len(cli.details) and "json" not in cli.calls
    by_id = {j.id: j for j in json_jobs()}
    assert all(j.gpu_indices == by_id[j.id].gpu_indices for j in first)
    cli.calls.clear()
    assert cli.jobs() == first and cli.calls == ["squeue"]  # remembered
    # A job requeued and started again (new start time) is read again.
    job_id = next(iter(cli.details))
    old = next(j for j in first if j.id == job_id)
    cli.text = cli.text.replace(
        f"{int(old.start_time or 0)}{SEPARATOR}", f"{int(old.start_time or 0) + 60}{SEPARATOR}"
    )
    restarted = sum(1 for j in first if j.id in cli.details and j.start_time == old.start_time)
    cli.calls.clear()
    cli.jobs()
    assert cli.calls == ["squeue"] + ["scontrol"] * restarted
    # Many running jobs never seen: one squeue --json instead of a call each.
    monkeypatch.setattr(backend, "DETAIL_CALLS_MAX", 1)
    cli = FakeCli()
    again = cli.jobs()
    assert cli.calls == ["squeue", "json"] and again == first


def test_records_printed_as_before_are_not_parsed_again():
    reuse: dict[tuple[str, ...], SlurmJob] = {}
    first = parse_squeue_text(row() + row(JobID="43"), SEP, reuse)
    again = parse_squeue_text(row() + row(JobID="43", PriorityLong="7"), SEP, reuse)
    assert again[0] is first[0] and again[1] is not first[1]
    assert (again[1].id, again[1].priority) == ("43", 7) and len(reuse) == 2
    # A different separator prints the same record: still the same job.
    other = "~fedcba9876543210~"
    assert parse_squeue_text(row().replace(SEP, other), other, reuse)[0] is first[0]
    assert len(reuse) == 1
