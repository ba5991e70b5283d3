"""The plan-file protocol: the controller writes (slurm_plugin.planfile), the job reads (wrapper.planfile)."""

import json
import multiprocessing
import os
import stat

import pytest

from planner.core.errors import InputError
from planner.core.execplan import PlanError
from planner.core.model import Assignment
from planner.core.plandoc import FORMAT, PlanFileError
from slurm_plugin import planfile as writer
from wrapper import planfile as reader
from wrapper import status


def assignment(plan=None, gpus=(("n1", 0), ("n1", 1))):
    return Assignment(tuple(gpus), 8, 32.0, plan=plan)


def test_the_job_reads_what_the_controller_wrote(tmp_path):
    written = writer.write_plan(tmp_path, "42", None, assignment({"zero_stage": 2, "global_batch": 64}))
    path = reader.find_plan_file({"SLURM_JOB_ID": "42", "MOSAIC_SPOOL": str(tmp_path)})
    plan = reader.read_plan_file(path)
    assert path == written and plan.version == 1 and plan.job_id == "42" and plan.workers == 2
    assert plan.assignment == assignment({"zero_stage": 2, "global_batch": 64})
    assert plan.exec_plan.zero_stage == 2 and plan.exec_plan.global_batch == 64


def test_every_write_is_a_new_version(tmp_path):
    path = writer.plan_path(tmp_path, "7")
    versions = []
    for _ in range(3):
        writer.write_plan(tmp_path, "7", None, assignment({"dp": 2}))
        versions.append(reader.read_plan_file(path).version)
    assert versions == [1, 2, 3]
    writer.write_plan(tmp_path, "7", 10, assignment())  # the controller's own counter, when it keeps one
    assert reader.read_plan_file(path).version == 10
    assert writer.current_exec_plan(tmp_path, "7") is None


def test_the_plan_file_is_readable_by_the_job_and_writable_only_by_the_controller(tmp_path):
    writer.write_plan(tmp_path, "42", None, assignment())
    path = writer.plan_path(tmp_path, "42")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "status").stat().st_mode) == 0o1777
    assert path.stat().st_uid == os.getuid()


def test_a_write_leaves_no_temporary_file_behind(tmp_path):
    for _ in range(3):
        writer.write_plan(tmp_path, "42", None, assignment())
    assert sorted(p.name for p in (tmp_path / "plans").iterdir() if not p.name.endswith(".lock")) == [
        "42.json"
    ]


def _write_many(spool, count):
    for _ in range(count):
        writer.write_plan(spool, "9", None, assignment())


def test_concurrent_writers_lose_no_version(tmp_path):
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        pool.starmap(_write_many, [(str(tmp_path), 5)] * 3)
    # Without the lock two writers read the same old version and one increment is lost.
    assert reader.read_plan_file(writer.plan_path(tmp_path, "9")).version == 15


def test_without_a_plan_file_there_is_no_plan(tmp_path):
    assert reader.find_plan_file({"SLURM_JOB_ID": "1", "MOSAIC_SPOOL": str(tmp_path)}) is None
    assert reader.find_plan_file({}) is None


def test_an_explicit_plan_file_wins(tmp_path):
    writer.write_plan(tmp_path, "5", None, assignment())
    path = writer.plan_path(tmp_path, "5")
    env = {"SLURM_JOB_ID": "6", "MOSAIC_SPOOL": str(tmp_path), "MOSAIC_PLAN_FILE": str(path)}
    assert reader.find_plan_file(env) == path


def test_the_controller_never_writes_an_impossible_plan(tmp_path):
    with pytest.raises(PlanError, match="job 3: plan: offload_param needs zero_stage 3"):
        writer.write_plan(tmp_path, "3", None, assignment({"offload_param": True}))
    assert not writer.plan_path(tmp_path, "3").exists()


@pytest.mark.parametrize("job_id", ["../etc", "", "a/b", ".hidden"])
def test_a_job_id_cannot_escape_the_spool(tmp_path, job_id):
    with pytest.raises(InputError, match="cannot name a plan file"):
        writer.write_plan(tmp_path, job_id, None, assignment())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "not valid JSON"),
        ({"format": "mosaic-plan/9", "job_id": "1", "version": 1}, "expected 'mosaic-plan/1'"),
        ({"format": FORMAT, "job_id": "1", "version": 0, "assignment": {}}, "key 'gpus'"),
        (
            {
                "format": FORMAT,
                "job_id": "1",
                "version": 1,
                "assignment": {"gpus": [["n1", 0]], "cpus": 1, "mem_gb": 1, "plan": {"zero_stage": 9}},
            },
            "assignment.plan: key 'zero_stage': expected 0, 1, 2 or 3, got 9",
        ),
    ],
)
def test_a_malformed_plan_file_is_an_error_naming_the_file(tmp_path, document, message):
    path = tmp_path / "1.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(InputError, match=str(path)) as error:
        reader.read_plan_file(path)
    assert message in str(error.value)


def test_removing_a_plan_makes_the_job_run_as_submitted_again(tmp_path):
    writer.write_plan(tmp_path, "8", None, assignment())
    writer.remove_plan(tmp_path, "8")
    assert reader.find_plan_file({"SLURM_JOB_ID": "8", "MOSAIC_SPOOL": str(tmp_path)}) is None


def test_the_controller_reads_the_jobs_marker_and_heartbeats(tmp_path):
    writer.ensure_spool(tmp_path)
    directory = status.status_dir(tmp_path, "8")
    status.append_record(directory / status.HEARTBEATS, {"event": "heartbeat", "step": 1})
    status.append_record(directory / status.HEARTBEATS, {"event": "heartbeat", "step": 2})
    status.write_marker(directory / status.CHECKPOINT_MARKER, {"step": 2, "signal": "USR1"})
    assert [r["step"] for r in writer.read_heartbeats(tmp_path, "8", owner_uid=os.getuid())] == [1, 2]
    assert writer.read_checkpoint_marker(tmp_path, "8")["step"] == 2
    assert writer.checkpoint_time(tmp_path, "8") is None  # this marker has no time
    assert writer.last_progress(tmp_path, "8") is None
    assert writer.read_checkpoint_marker(tmp_path, "9") is None
    with pytest.raises(PlanFileError, match="not the job's user"):
        writer.read_checkpoint_marker(tmp_path, "8", owner_uid=os.getuid() + 1)


def test_a_torn_last_heartbeat_line_is_skipped(tmp_path):
    path = tmp_path / "h.jsonl"
    status.append_record(path, {"step": 1})
    with open(path, "a") as f:
        f.write('{"step": 2, "sam')
    assert list(status.read_records(path)) == [{"step": 1}]
