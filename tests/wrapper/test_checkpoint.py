"""Finding the checkpoint to resume from: the newest complete one, never a half-written one."""

import pytest

from planner.errors import InputError
from wrapper import checkpoint


def make(root, step, complete, **record):
    path = checkpoint.step_dir(root, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    if complete:
        checkpoint.write_complete_marker(path, {"step": step, **record})
    return path


def test_the_newest_complete_checkpoint_wins_over_a_newer_incomplete_one(tmp_path):
    make(tmp_path, 5, True, world_size=2)
    make(tmp_path, 10, True, world_size=2, plan={"dp": 2})
    make(tmp_path, 15, False)  # a rank was killed while saving
    latest = checkpoint.latest_complete(tmp_path)
    assert latest.step == 10 and latest.path.name == "step-00000010" and latest.dp == 2


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert checkpoint.latest_complete(tmp_path) is None
    assert checkpoint.latest_complete(tmp_path / "missing") is None
    make(tmp_path, 3, False)
    assert checkpoint.latest_complete(tmp_path) is None


def test_other_directories_are_not_checkpoints(tmp_path):
    make(tmp_path, 4, True)
    (tmp_path / "step-00000004-universal").mkdir()
    (tmp_path / "latest").write_text("step-00000004")
    assert [step for step, _, _ in checkpoint.list_checkpoints(tmp_path)] == [4]


def test_steps_sort_numerically_past_eight_digits(tmp_path):
    make(tmp_path, 99999999, True)
    make(tmp_path, 100000000, True)
    assert checkpoint.latest_complete(tmp_path).step == 100000000


def test_a_damaged_marker_is_an_error_naming_it(tmp_path):
    path = make(tmp_path, 1, False)
    (path / checkpoint.COMPLETE_MARKER).write_text("{")
    with pytest.raises(InputError, match="MOSAIC-COMPLETE: not valid JSON"):
        checkpoint.latest_complete(tmp_path)
