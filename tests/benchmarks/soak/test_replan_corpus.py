"""The replan corpus: rounds written once as snapshot JSON and planned again from the file."""

from __future__ import annotations

import io
import json

from benchmarks.soak.replan_corpus import check, draw, main, rounds
from benchmarks.soak.replan_stress_mosaic import replanned_change, scheduler
from planner.core.codec import snapshot_to_json
from tests.planner.test_mosaic import _job, _ran, _round


def test_a_drawn_corpus_reads_back_as_the_rounds_drawn(tmp_path) -> None:
    out = io.StringIO()
    assert draw(out, 4, range(1, 3)) == 8
    path = tmp_path / "rounds.jsonl"
    path.write_text(out.getvalue())
    lines = out.getvalue().splitlines()
    read = list(rounds(path))
    assert len(read) == 8
    assert [snapshot_to_json(r) for r in read] == [json.loads(line) for line in lines]


def test_a_round_reads_back_as_the_snapshot_written(tmp_path) -> None:
    job = _job(1, 2, time_limit_s=600.0)
    snapshot = _round([_ran(_job(0), ("n0", 0)), job, _job(2, 1, "gpt2", min_gpus=1, max_gpus=2)])
    path = tmp_path / "rounds.jsonl"
    path.write_text(json.dumps(snapshot_to_json(snapshot)) + "\n")
    assert list(rounds(path)) == [snapshot]


def test_check_counts_every_round_and_names_the_lines_that_change(tmp_path) -> None:
    path = tmp_path / "rounds.jsonl"
    with path.open("w") as out:
        draw(out, 5, range(3, 5))
    result = check(path, "default")
    assert result["rounds"] == 10
    expected = {"gpus_changed": [], "cpus_or_memory_changed": []}
    for number, snapshot in enumerate(rounds(path), 1):
        change = replanned_change(snapshot, scheduler("default"))
        if change is not None:
            expected[change].append(number)
    assert result["lines"] == expected
    assert result["gpus_changed"] == len(expected["gpus_changed"])


def test_the_command_writes_then_checks_a_corpus(tmp_path, capsys) -> None:
    path = tmp_path / "rounds.jsonl"
    assert main(["draw", str(path), "--draws", "2", "--seeds", "7"]) == 0
    assert "wrote 2 rounds" in capsys.readouterr().out
    assert main(["check", str(path), "--variant", "sharing"]) == 0
    assert json.loads(capsys.readouterr().out)["rounds"] == 2
