"""Parsers of Slurm's output, on real output captured from the test cluster (tests/data/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_plugin.slurm import commands
from slurm_plugin.slurm.parse import (
    SlurmParseError,
    expand_hostlist,
    expand_indices,
    gpu_indices,
    gres_counts,
    parse_memory_mb,
    parse_parsable,
    parse_sbatch_id,
    parse_scontrol_records,
    parse_sinfo_json,
    parse_squeue_json,
    tres_map,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.fixture(scope="module")
def jobs():
    return {j.name: j for j in parse_squeue_json((DATA / "squeue.json").read_text())}


@pytest.fixture(scope="module")
def nodes():
    return {n.name: n for n in parse_sinfo_json((DATA / "sinfo.json").read_text())}


def test_running_job_has_its_allocation_and_gpu_indices(jobs):
    j = jobs["running"]
    assert (j.state, j.partition, j.gpus_per_node) == ("RUNNING", "gpu", 2)
    assert (j.cpus, j.mem_mb_per_node) == (4, 8192)
    assert j.nodes == ("n1",)
    assert j.gpu_indices == (("n1", (1, 2)),)  # gres_detail 'gpu:2(IDX:1-2)'
    assert j.comment == "mosaic:{}"
    assert j.start_time is not None and j.start_time >= j.submit_time


def test_held_requeued_and_bad_constraints_are_pending(jobs):
    held, requeued, bad = jobs["held"], jobs["requeued"], jobs["bad"]
    assert held.held and held.reason == "JobHeldUser" and held.requeues == 0
    assert requeued.held and requeued.requeues == 1 and requeued.features == "v100"
    assert bad.reason == "BadConstraints" and bad.gpus_per_node == 5
    for j in (held, requeued, bad):
        assert j.is_pending and j.nodes == () and j.start_time is None


def test_two_node_job_lists_indices_per_node(jobs):
    j = jobs["two-nodes"]
    assert j.num_nodes == 2 and j.nodes == ("n2", "n4")
    assert dict(j.gpu_indices) == {"n2": (1,), "n4": (0,)}


def test_completing_job_still_holds_resources(jobs):
    j = jobs["completing"]
    assert j.state == "COMPLETING" and j.holds_resources and not j.is_pending


def test_other_partition_job_is_visible(jobs):
    assert jobs["other"].partition == "other" and jobs["other"].state == "RUNNING"


def test_nodes_drained_and_down_are_not_capacity(nodes):
    assert nodes["n1"].usable and nodes["n2"].usable  # mixed, mixed+COMPLETING
    assert not nodes["n3"].usable and nodes["n3"].reason == "fixture down"
    assert not nodes["n4"].usable and "DRAIN" in nodes["n4"].flags
    n1 = nodes["n1"]
    assert (n1.gpus, n1.cpus, n1.mem_mb, n1.features) == (4, 16, 65536, ("a100",))
    assert nodes["n3"].features == ("v100",)
    assert n1.partitions == ("gpu", "other")


def test_sinfo_lists_each_node_once(nodes):
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]


def test_scontrol_records_keep_values_with_spaces():
    jobs = {r["JobName"]: r for r in parse_scontrol_records((DATA / "scontrol_jobs.txt").read_text())}
    assert jobs["running"]["MinMemoryNode"] == "8G" and jobs["running"]["TresPerNode"] == "gres:gpu:2"
    assert jobs["requeued"]["Reason"] == "job_requeued_in_held_state"
    nodes = parse_scontrol_records((DATA / "scontrol_nodes.txt").read_text())
    assert nodes[0]["OS"].startswith("Linux ") and " " in nodes[0]["OS"]
    assert nodes[1]["State"] == "MIXED+COMPLETING"


def test_sacct_fields_may_hold_the_pipe_and_line_breaks_with_a_token_delimiter():
    # A user's --comment (or job name) may hold "|" and line breaks; with a random token as
    # sacct's --delimiter every row still parses, the comment whole.
    sep = "~5f3a~"
    text = sep.join(["JobID", "JobName", "Comment", "State"]) + "\n"
    text += sep.join(["11", "a|b", "x | y\n\nz|", "COMPLETED"]) + "\n"
    text += sep.join(["12", "plain", "", "RUNNING"]) + "\n"
    rows = parse_parsable(text, "sacct -P", sep)
    assert rows == [
        {"JobID": "11", "JobName": "a|b", "Comment": "x | y\n\nz|", "State": "COMPLETED"},
        {"JobID": "12", "JobName": "plain", "Comment": "", "State": "RUNNING"},
    ]
    # A line break in the last column could not be told from a row's end: sacct's last
    # column is NodeList, which never holds one.
    assert commands.SACCT_FIELDS[-1] == "NodeList"
    with pytest.raises(SlurmParseError, match="line 5 has 5 fields, the header 4"):
        parse_parsable(text.replace("plain", "a" + sep + "b"), "sacct -P", sep)
    with pytest.raises(SlurmParseError, match="line 5 has 3 fields"):
        parse_parsable(text.rsplit("RUNNING", 1)[0].rsplit(sep, 1)[0] + "\n", "sacct -P", sep)


def test_sacct_lists_one_row_per_run():
    rows = parse_parsable((DATA / "sacct.txt").read_text())
    runs = [r for r in rows if r["JobName"] == "requeued"]
    assert [r["State"] for r in runs] == ["REQUEUED", "CANCELLED by 0"]
    assert tres_map(runs[0]["AllocTRES"])["gres/gpu"] == "1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n1", ("n1",)),
        ("n[1-3]", ("n1", "n2", "n3")),
        ("n[2,4]", ("n2", "n4")),
        ("g[08-10],x", ("g08", "g09", "g10", "x")),
        ("a[1-2],b[3]", ("a1", "a2", "b3")),
        ("", ()),
        ("None assigned", ()),
    ],
)
def test_expand_hostlist(text, expected):
    assert expand_hostlist(text) == expected


@given(st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True))
def test_index_ranges_round_trip(indices):
    indices = sorted(indices)
    # compress to Slurm's range form, then expand back
    parts, start = [], indices[0]
    for a, b in zip(indices, [*indices[1:], None], strict=True):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}-{a}")
            start = b
    assert expand_indices(",".join(parts)) == tuple(indices)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:2", {"gpu": 2}),
        ("gres:gpu:a100:4", {"gpu": 4}),
        ("gres:gpu:2,gres:shard:1", {"gpu": 2, "shard": 1}),
        ("gpu:4(S:0)", {"gpu": 4}),
        ("gres:gpu", {"gpu": 1}),
        ("", {}),
    ],
)
def test_gres_counts(text, expected):
    assert gres_counts(text) == expected


def test_gpu_indices_from_gres_detail():
    assert gpu_indices("gpu:2(IDX:1-2)") == (1, 2)
    assert gpu_indices("gpu:a100:3(IDX:0,2-3)") == (0, 2, 3)
    assert gpu_indices("gpu:0(IDX:N/A)") == ()


def test_memory_and_sbatch_id():
    assert [parse_memory_mb(m) for m in ("8G", "4096M", "512")] == [8192, 4096, 512]
    assert parse_sbatch_id("123\n") == "123" and parse_sbatch_id("45;cluster") == "45"
    with pytest.raises(SlurmParseError, match="not a job id"):
        parse_sbatch_id("sbatch: error: Batch job submission failed")


def test_malformed_documents_name_the_command_and_field():
    with pytest.raises(SlurmParseError, match="squeue --json: not valid JSON"):
        parse_squeue_json("{")
    with pytest.raises(SlurmParseError, match="no 'jobs' list"):
        parse_squeue_json("{}")
    with pytest.raises(SlurmParseError, match="job 7: 'submit_time' missing"):
        parse_squeue_json('{"jobs": [{"job_id": 7, "job_state": "PENDING"}]}')
    with pytest.raises(SlurmParseError, match="Slurm reported errors"):
        parse_sinfo_json('{"nodes": [], "errors": ["boom"]}')
    with pytest.raises(SlurmParseError, match="line 2 has 1 fields"):
        parse_parsable("A|B\nx\n")
