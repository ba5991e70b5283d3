"""The controller hands the memory a tick freed back to the kernel (glibc's malloc_trim), and
reads SQLite's own memory (the state store's share)."""

from __future__ import annotations

import ctypes

from slurm_plugin.controller import memory


def _resident_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_freed_small_blocks_leave_the_resident_set_after_a_trim() -> None:
    # 40 MB in 64 KB blocks (below glibc's mmap threshold: they live in the heap), every other
    # one kept, so the freed half lies in holes through the heap and only a trim returns it.
    blocks = [ctypes.create_string_buffer(64_000) for _ in range(640)]
    for b in blocks:
        ctypes.memset(b, 1, 64_000)
    kept = blocks[::2]
    del blocks
    before = _resident_kb()
    assert memory.release_free_memory() is True  # Debian's glibc
    after = _resident_kb()
    assert before - after > 5_000, (before, after)  # at least 5 MB of the ~20 MB freed went back
    assert len(kept) == 320


def test_without_the_c_library_s_trim_it_says_so(monkeypatch) -> None:
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_free_memory() is False


def test_sqlite_memory_is_read_from_the_library_the_sqlite3_module_uses(tmp_path) -> None:
    import sqlite3

    before = memory.sqlite_memory_mb()
    assert before is not None  # Debian's Python links libsqlite3
    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("CREATE TABLE t (x TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [("x" * 200,)] * 20000)
    db.commit()
    db.execute("SELECT count(*) FROM t").fetchone()
    during = memory.sqlite_memory_mb()
    db.close()
    assert during is not None and during > before + 1.0  # the connection's page cache, ~2 MB
    after = memory.sqlite_memory_mb()
    assert after is not None and after < during
