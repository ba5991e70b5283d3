"""``mosaic explain JOB --run DIR``: a simulation recorded with ``mosaic sim --record-rounds``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from planner.explain import ROUNDS_FILE, explain, read_recorded
from slurm_plugin.cli.main import main
from slurm_plugin.files import bundled_text

JOBS = 40


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo trace's first jobs on two of the demo's servers (so that jobs are preempted
    and moved) under the default scheduler, every round recorded."""
    work = tmp_path_factory.mktemp("explain")
    lines = bundled_text("demo_trace.csv").splitlines()
    (work / "trace.csv").write_text("\n".join(lines[: JOBS + 1]) + "\n")
    cluster = bundled_text("demo_cluster.toml").replace("count = 8", "count = 2")
    (work / "cluster.toml").write_text(cluster)
    out = work / "run"
    args = ["sim", "--trace", str(work / "trace.csv"), "--cluster", str(work / "cluster.toml")]
    args += ["--out", str(out), "--record-rounds", "--no-plot"]
    assert main(["-q", *args]) == 0
    return out


def test_every_jobs_restarts_are_the_simulators(run_dir: Path) -> None:
    recorded = read_recorded((run_dir / ROUNDS_FILE).read_text(), "rounds")
    with (run_dir / "jobs.csv").open() as f:
        rows = {r["job_id"]: r for r in csv.DictReader(f)}
    assert set(recorded.jobs) == set(rows) and len(rows) == JOBS
    counted = {
        j: explain(f, recorded.rounds, recorded.jobs, recorded.nodes).restarts
        for j, f in recorded.jobs.items()
    }
    assert counted == {j: int(r["restarts"]) for j, r in rows.items()}
    assert sum(counted.values()) > 0  # the comparison is not vacuous


def test_explain_prints_a_jobs_history_and_json(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (run_dir / "jobs.csv").open() as f:
        restarted = max(csv.DictReader(f), key=lambda r: int(r["restarts"]))
    job = restarted["job_id"]
    assert main(["explain", job, "--run", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"job {job} (best-effort): finished")
    assert f"restarts: {restarted['restarts']}" in text
    assert "history:" in text and "started on 1 " in text
    assert main(["explain", job, "--run", str(run_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"] == job and doc["restarts"] == int(restarted["restarts"]) and doc["history"]


def test_explain_errors_name_what_is_missing(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "nope", "--run", str(run_dir)]) == 2
    assert "no job 'nope' in the simulated trace" in capsys.readouterr().err
    assert main(["explain", "0", "--run", str(tmp_path)]) == 2
    assert "no recorded rounds (run mosaic sim with --record-rounds)" in capsys.readouterr().err
    (tmp_path / ROUNDS_FILE).write_text('{"nodes": {}, "jobs": {}}\n{"round": 1, "time_s": 0}\n')
    assert main(["explain", "0", "--run", str(tmp_path)]) == 2
    assert f"{tmp_path / ROUNDS_FILE}:2: missing required key 'plan'" in capsys.readouterr().err
