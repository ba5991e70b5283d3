"""The one atomic write (wrapper/atomic.py): the whole new file or the old one, never a part,
and no temporary file left behind."""

import os
import stat
from pathlib import Path

import pytest

from wrapper import atomic
from wrapper.atomic import write_atomic


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_text_and_bytes_are_written_whole(tmp_path):
    write_atomic(tmp_path / "a.txt", "héllo\n")
    write_atomic(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "a.txt").read_bytes() == "héllo\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    write_atomic(tmp_path / "a.txt", "new")
    assert (tmp_path / "a.txt").read_text() == "new"
    assert _entries(tmp_path) == ["a.txt", "b.bin"]


def test_an_interrupted_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text("old\n")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert _entries(tmp_path) == ["plan.json"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text("old\n")

    def fail(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", fail)
    with pytest.raises(OSError, match="Input/output"):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert _entries(tmp_path) == ["plan.json"]


def test_an_interruption_before_the_rename_leaves_no_new_file(tmp_path):
    path = tmp_path / "new.json"

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "x", before_replace=interrupt)
    assert _entries(tmp_path) == []


def test_before_replace_sees_the_temporary_written_and_the_target_unchanged(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    seen = []

    def look():
        (tmp,) = [p for p in tmp_path.iterdir() if p.name != "f"]
        named = tmp.name.startswith(".f.") and tmp.name.endswith(".tmp")
        seen.append((named, tmp.read_text(), path.read_text()))

    write_atomic(path, "new", before_replace=look)
    assert seen == [(True, "new", "old")]
    assert path.read_text() == "new"


def test_mode_is_exact_and_the_default_follows_the_umask(tmp_path):
    write_atomic(tmp_path / "exact", "x", mode=0o644)
    assert stat.S_IMODE((tmp_path / "exact").stat().st_mode) == 0o644
    write_atomic(tmp_path / "secret", "x", mode=0o600)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "default", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "default").stat().st_mode) == 0o640


def test_parents_are_made_unless_refused(tmp_path):
    write_atomic(tmp_path / "a" / "b" / "c.txt", "x")
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "x"
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "c.txt", "x", parents=False)
    assert not (tmp_path / "missing").exists()


def test_sync_dir_fsyncs_the_directory_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real = atomic.fsync_dir
    monkeypatch.setattr(atomic, "fsync_dir", lambda d: (synced.append(Path(d)), real(d)))
    write_atomic(tmp_path / "m", "x")
    assert synced == []
    write_atomic(tmp_path / "m", "y", sync_dir=True)
    assert synced == [tmp_path]


def test_a_symlink_planted_at_a_temporary_name_is_not_followed(tmp_path, monkeypatch):
    target = tmp_path / "elsewhere"
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".f.aaaa.tmp").symlink_to(target)  # taken: the next name is tried
    write_atomic(tmp_path / "f", "x")
    assert not target.exists()
    assert (tmp_path / "f").read_text() == "x"
    assert _entries(tmp_path) == [".f.aaaa.tmp", "f"]
