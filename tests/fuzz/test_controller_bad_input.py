"""The controller's tick survives jobs whose Slurm comment is malformed (no live Slurm).

Anyone can submit a job to the managed partition with any ``--comment`` (``mosaic:...``
included) and ``scontrol update`` it later: the comment is untrusted input to the daemon.
A bad comment must neither fail the tick (every job would stay held) nor keep the job held:
it is planned as a job without metadata, or with the metadata that makes sense.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.config import build_scheduler, preset
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.store import Store
from tests.fuzz.conftest import TRIED
from tests.fuzz.mutate import NASTY_VALUES, mutated
from tests.fuzz.targets import TARGETS
from tests.slurm_plugin.test_controller_loop import FakeSlurm, no_wait

BAD_COMMENTS = [
    "mosaic:",
    "mosaic:{",
    "mosaic:[]",
    "mosaic:null",
    "mosaic:" + "[" * 5000,
    'mosaic:{"model": ' + "9" * 5000 + "}",
    "mosaic:\udcff",
    'mosaic:{"duration_s": ' + str(10**400) + "}",
    'mosaic:{"deadline_s": ' + str(10**400) + "}",
    'mosaic:{"duration_s": NaN, "deadline_s": Infinity}',
    'mosaic:{"duration_s": "1h", "deadline_s": [], "batch_size": -5, "guaranteed": "no"}',
    'mosaic:{"batch_size": true, "plans": "x", "plan": [1], "gpu_types": 5, "min_gpus": "a"}',
    'mosaic:{"plan": {"tp": 9999, "zero_stage": 7}, "plans": [{"pp": -1}, 3]}',
    'mosaic:{"model": {"a": 1}, "tenant": 5, "gpu_type": 7}',
    'mosaic:{"min_gpus": 0, "max_gpus": -3, "gpu_types": ["", null]}',
    'mosaic:{"min_gpus": 4, "max_gpus": 1}',
    'mosaic:{"task_layout": {"tasks": "x"}}',
    'mosaic:{"task_layout": [1, 2]}',
    'mosaic:{"job_id": "1", "id": "1", "user": "root"}',
]


def _tick(comment: str, spool: Path) -> tuple[FakeSlurm, object]:
    config = ControllerConfig(spool_dir=spool, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    slurm = FakeSlurm()
    slurm._jobs = [replace(j, comment=comment) if j.id in {"2", "3"} else j for j in slurm._jobs]
    store = Store(config.store_path)
    report = Controller(slurm, store, config, build_scheduler(preset("fifo")), sleep=no_wait).tick()
    return slurm, report


def _released(slurm: FakeSlurm) -> set[str]:
    return {job for kind, ids in slurm.calls if kind == "release" for job in ids}


def test_clean_comments_release_the_pending_jobs(tmp_path: Path) -> None:
    """The reference the bad comments are held to: with no metadata, fifo starts job 2 (job 3
    waits for GPUs)."""
    slurm, report = _tick("", tmp_path)
    assert report.ok and "2" in _released(slurm)


@pytest.mark.parametrize("comment", BAD_COMMENTS)
def test_a_bad_comment_neither_fails_the_tick_nor_keeps_the_job_held(comment: str, tmp_path: Path) -> None:
    slurm, report = _tick(comment, tmp_path)
    assert report.ok, report.error
    assert "2" in _released(slurm), f"{comment[:80]!r} kept job 2 held: {slurm.calls}"


def test_a_bad_plan_in_a_comment_is_reported_and_the_job_runs_as_submitted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the plan reached the start and failed it every round: the job stayed held."""
    slurm, report = _tick('mosaic:{"plan": {"zero_stage": 7}}', tmp_path)
    assert report.ok and "2" in _released(slurm)
    assert "job 2: plan: key 'zero_stage'" in caplog.text and "the plan is ignored" in caplog.text


def _comments() -> st.SearchStrategy[str]:
    values = st.sampled_from(NASTY_VALUES[:-1])  # not the nested placeholder
    keys = st.sampled_from(
        [
            "model",
            "batch_size",
            "plan",
            "plans",
            "framework",
            "guaranteed",
            "tenant",
            "deadline_s",
            "duration_s",
            "gpu_type",
            "min_gpus",
            "max_gpus",
            "gpu_types",
            "task_layout",
        ]
    )
    documents = st.dictionaries(keys, values, max_size=4).map(
        lambda d: "mosaic:" + json.dumps(d).replace(str(10**4000), "9" * 5000)
    )
    return documents | mutated(TARGETS["comment"]) | st.text(max_size=60)


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@settings(max_examples=max(5, settings.default.max_examples // 10))
@given(comment=_comments())
def test_the_tick_survives_any_comment(comment: str) -> None:
    TRIED["controller_tick"] += 1
    with tempfile.TemporaryDirectory(prefix="mosaic-fuzz-") as tmp:
        _slurm, report = _tick(comment, Path(tmp))
    assert report.ok, f"{comment[:100]!r}: {report.error}"
