"""``mosaic sweep --slurm`` on the test cluster: 4 presets x 2 traces x 3 seeds as one job array;
``sweep status`` says which tasks Slurm still holds; one task is cancelled on purpose, and the
re-run's array holds that cell only; the results are ``--local``'s."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from slurm_plugin import sweep as sw
from slurm_plugin.cli import sweep_cmd
from slurm_plugin.cli.main import main
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster.shapes import OTHER_PARTITION
from tests.builders import SMALL_CLUSTER_TOML
from tests.slurm_plugin.live_helpers import wait_for

CLUSTER = SMALL_CLUSTER_TOML
# Wall-clock measurements: the only numbers two runs of one cell may differ in.
WALL_KEYS = {"wall_time_s", "decision_time_s_mean", "decision_time_s_max"}


def _rows(directory: Path) -> list[dict[str, str]]:
    with (directory / sw.RESULTS_FILE).open(newline="") as f:
        return [{k: v for k, v in r.items() if k not in WALL_KEYS} for r in csv.DictReader(f)]


def test_a_sweep_runs_as_one_job_array_and_reruns_only_a_killed_task(
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
    slurm = ["--slurm", "--partition", OTHER_PARTITION, "--mem", "1G", "--slurm-conf", str(live.layout.conf)]
    arrayed, local = tmp_path / "arrayed", tmp_path / "local"

    # Two tasks at a time, so that the last one is still pending when it is cancelled.
    assert main(["sweep", *definition, *slurm, "--max-parallel", "2", "--out", str(arrayed)]) == 0
    assert "(24 of 24 cells, --array=0-23%2)" in capsys.readouterr().out
    doc = json.loads((arrayed / sw.SWEEP_FILE).read_text())
    job_id = doc["slurm_job_id"]
    assert doc["slurm_jobs"] == [{"job_id": job_id, "array": "0-23%2", "partition": OTHER_PARTITION}]
    killed = doc["cells"][23]["cell"]
    status = ["sweep", "status", str(arrayed), "--slurm-conf", str(live.layout.conf)]
    assert main(status) == 0
    assert f"  Slurm array job {job_id}: " in (printed := capsys.readouterr().out)
    assert f"{killed}" in printed and "(array task pending)" in printed, printed
    run(["scancel", f"{job_id}_23"], env=live.env)  # killed on purpose, before it ran
    wait_for("the array job to end", lambda: not sweep_cmd._queued(job_id, live.env), timeout_s=120)
    assert main(status) == 0
    printed = capsys.readouterr().out
    assert (
        "23 done, 0 failed, 1 missing of 24 cells" in printed
        and f"Slurm array job {job_id}: ended" in printed
    )
    assert killed in printed
    assert len(list((arrayed / "logs").glob(f"{job_id}_*.out"))) == 23  # one task per cell run

    assert main(["sweep", *definition, *slurm, "--max-parallel", "8", "--wait", "--out", str(arrayed)]) == 0
    printed = capsys.readouterr().out
    assert (
        "(1 of 24 cells, --array=23%8)" in printed and "24 done, 0 failed, 0 missing of 24 cells" in printed
    )
    again = json.loads((arrayed / sw.SWEEP_FILE).read_text())
    assert [j["array"] for j in again["slurm_jobs"]] == ["0-23%2", "23%8"]
    assert list((arrayed / "logs").glob(f"{again['slurm_job_id']}_*.out")) == [
        arrayed / "logs" / f"{again['slurm_job_id']}_23.out"
    ]

    assert main(["sweep", *definition, "--local", "--out", str(local)]) == 0
    assert len(_rows(local)) == 24 and {r["status"] for r in _rows(local)} == {"done"}
    assert _rows(arrayed) == _rows(local)
