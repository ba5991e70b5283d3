"""Finding the checkpoint to resume from: the newest complete one, never a half-written one."""

import pytest

from planner.core.errors import InputError
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


OLD, NEW = "a" * 16, "b" * 16


def test_a_submission_token_is_hex_or_an_error_naming_the_variable():
    assert checkpoint.submission_token({}) is None
    assert checkpoint.submission_token({"MOSAIC_SUBMISSION": " "}) is None
    assert checkpoint.submission_token({"MOSAIC_SUBMISSION": OLD}) == OLD
    for bad in ("../x", "ABCDEF0123456789", "abc"):
        with pytest.raises(InputError, match="MOSAIC_SUBMISSION: expected 8-64 lowercase hex"):
            checkpoint.submission_token({"MOSAIC_SUBMISSION": bad})


def test_a_job_id_reused_by_a_new_submission_gets_its_own_directory(tmp_path):
    old_root = checkpoint.job_root("1", OLD, tmp_path)
    assert old_root == tmp_path / "1"  # nobody there: the plain default
    old_root.mkdir()
    checkpoint.claim(old_root, "1", OLD)
    make(old_root, 50, True, submission=OLD)
    assert checkpoint.job_root("1", OLD, tmp_path) == old_root  # a requeue of the old job finds its own
    new_root = checkpoint.job_root("1", NEW, tmp_path)
    assert new_root == tmp_path / f"1-{NEW}" and checkpoint.latest_complete(new_root) is None
    checkpoint.claim(old_root, "1", NEW)  # the first owner stays
    assert checkpoint.read_owner(old_root) == {"job_id": "1", "submission": OLD}
    assert checkpoint.job_root("1", None, tmp_path) == old_root  # no token (plain sbatch): by id, as before


def test_checkpoints_without_an_owner_are_another_submissions_for_a_token_bearing_job(tmp_path):
    make(tmp_path / "7", 10, True)  # written before jobs had tokens
    assert checkpoint.foreign_owner(tmp_path / "7", NEW) == {}
    assert checkpoint.job_root("7", NEW, tmp_path) == tmp_path / f"7-{NEW}"
    assert checkpoint.foreign_owner(tmp_path / "8", NEW) is None  # empty or absent: free to claim


def test_a_damaged_owner_record_is_an_error_naming_it(tmp_path):
    (tmp_path / "3" / ".mosaic").mkdir(parents=True)
    (tmp_path / "3" / checkpoint.OWNER_FILE).write_text("[1]")
    with pytest.raises(InputError, match=r"owner\.json: expected a JSON object"):
        checkpoint.job_root("3", NEW, tmp_path)
