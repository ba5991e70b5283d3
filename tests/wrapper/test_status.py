"""Reading the files a job writes for the controller (wrapper.status): newest first, from the end."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin import planfile
from wrapper import status

LINE = st.one_of(
    st.fixed_dictionaries({"step": st.integers(0, 10**6)}).map(lambda r: json.dumps(r).encode()),
    st.binary(max_size=12),  # torn lines, bytes that are not UTF-8, stray terminators
    st.sampled_from([b"[1, 2]", b"", b"{", b'{"a": 1}\r', b'{"b":\r2}']),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(LINE, max_size=30),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.integers(1, 40),
    st.booleans(),
)
def test_newest_records_are_read_records_reversed_whatever_the_chunk(
    tmp_path_factory, lines, end, chunk, last
):
    path = tmp_path_factory.mktemp("status") / "heartbeat.jsonl"
    data = end.join(lines) + (end if last else b"")
    path.write_bytes(data)
    oldest_first = list(status.read_records(path))
    assert list(status.newest_records(path, chunk_bytes=chunk)) == oldest_first[::-1]


def test_the_newest_progress_reads_only_the_end_of_a_long_log(tmp_path, monkeypatch):
    # A job's log grows for as long as it runs (here ~3 MiB); the tick asks every running
    # job's progress, and the newest heartbeat has it: one 64 KiB read, not the whole log.
    directory = status.status_dir(tmp_path, "42")
    directory.mkdir(parents=True)
    beat = {"event": "heartbeat", "job_id": "42", "plan_version": 3, "samples_per_s": 812.5}
    lines = [json.dumps({**beat, "step": k, "progress": k / 20_000}) for k in range(20_000)]
    (directory / status.HEARTBEATS).write_text("\n".join(lines) + "\n")
    reads: list[int] = []
    pread = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    assert planfile.last_progress(tmp_path, "42") == 19_999 / 20_000
    assert reads == [status.NEWEST_FIRST_CHUNK]


def test_a_progress_further_back_is_found_in_larger_reads(tmp_path):
    # The newest ~200 KiB carry no progress (e.g. a run that stopped reporting it): the
    # reader goes back 64 KiB, then 256 KiB more, and finds the last one that did.
    directory = status.status_dir(tmp_path, "42")
    directory.mkdir(parents=True)
    older = [json.dumps({"event": "heartbeat", "step": k, "progress": 0.25}) for k in range(100)]
    newer = [json.dumps({"event": "heartbeat", "step": k, "note": "x" * 80}) for k in range(2_000)]
    (directory / status.HEARTBEATS).write_text("\n".join(older + newer) + "\n{torn")
    assert planfile.last_progress(tmp_path, "42") == 0.25


def test_a_line_cut_by_the_read_limit_is_skipped(tmp_path):
    path = tmp_path / "heartbeat.jsonl"
    path.write_bytes(b'{"progress": 0.5, "pad": "' + b"y" * 100 + b'"}\n{"step": 1}\n')
    assert list(status.newest_records(path, max_bytes=40, chunk_bytes=8)) == [{"step": 1}]
    assert list(status.newest_records(tmp_path / "absent.jsonl")) == []
