"""``mosaic sweep --slurm`` on the test cluster: 4 presets x 2 traces x 3 seeds as one job array,
the same numbers as ``--local``, and after a cell is lost the re-run's array holds that cell only."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from slurm_plugin import sweep as sw
from slurm_plugin.cli.main import main
from slurm_plugin.testcluster.shapes import OTHER_PARTITION
from tests.builders import SMALL_CLUSTER_TOML

CLUSTER = SMALL_CLUSTER_TOML
# Wall-clock measurements: the only numbers two runs of one cell may differ in.
WALL_KEYS = {"wall_time_s", "decision_time_s_mean", "decision_time_s_max"}


def _rows(directory: Path) -> list[dict[str, str]]:
    with (directory / sw.RESULTS_FILE).open(newline="") as f:
        return [{k: v for k, v in r.items() if k not in WALL_KEYS} for r in csv.DictReader(f)]


def test_a_sweep_runs_as_one_job_array_and_resumes_one_lost_cell(
    live, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)
    traces = []
    for name, seed in (("small", 1), ("other", 2)):
        traces.append(tmp_path / f"{name}.csv")
        argv = ["trace", "gen", "--kind", "gavel", "--jobs", "8", "--rate", "6", "--seed", str(seed)]
        assert main([*argv, "--out", str(traces[-1])]) == 0
    definition = ["--presets", "fifo,sjf,las,tiresias", "--traces", ",".join(map(str, traces))]
    definition += ["--seeds", "1-3", "--cluster", str(cluster), "--round-s", "60"]
    # The managed partition's job_submit.lua holds every job for the controller: not this one's.
    slurm = ["--slurm", "--partition", OTHER_PARTITION, "--max-parallel", "8", "--mem", "1G", "--wait"]
    slurm += ["--slurm-conf", str(live.layout.conf)]
    arrayed, local = tmp_path / "arrayed", tmp_path / "local"

    assert main(["sweep", *definition, *slurm, "--out", str(arrayed)]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "(24 of 24 cells, --array=0-23%8)" in printed
    assert "24 done, 0 failed, 0 missing of 24 cells" in printed
    doc = json.loads((arrayed / sw.SWEEP_FILE).read_text())
    job_id = doc["slurm_job_id"]
    assert doc["slurm_jobs"] == [{"job_id": job_id, "array": "0-23%8", "partition": OTHER_PARTITION}]
    assert len(list((arrayed / "logs").glob(f"{job_id}_*.out"))) == 24  # one task per cell

    assert main(["sweep", *definition, "--local", "--out", str(local)]) == 0
    assert _rows(arrayed) == _rows(local)
    assert len(_rows(local)) == 24 and {r["status"] for r in _rows(local)} == {"done"}

    lost = doc["cells"][13]["cell"]  # as if its task had been killed before it finished
    shutil.rmtree(arrayed / "cells" / lost)
    capsys.readouterr()
    assert main(["sweep", "status", str(arrayed)]) == 0
    assert "23 done, 0 failed, 1 missing" in capsys.readouterr().out
    assert main(["sweep", *definition, *slurm, "--out", str(arrayed)]) == 0
    assert "(1 of 24 cells, --array=13%8)" in capsys.readouterr().out
    again = json.loads((arrayed / sw.SWEEP_FILE).read_text())
    assert [j["array"] for j in again["slurm_jobs"]] == ["0-23%8", "13%8"]
    assert list((arrayed / "logs").glob(f"{again['slurm_job_id']}_*.out")) == [
        arrayed / "logs" / f"{again['slurm_job_id']}_13.out"
    ]
    assert _rows(arrayed) == _rows(local)
