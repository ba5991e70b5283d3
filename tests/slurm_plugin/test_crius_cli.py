"""mosaic trace crius, mosaic trace philly --random-types, mosaic sim on a Crius cluster with
deadlines, and deadlines in mosaic report."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from planner.traces import parse_trace
from planner.traces.crius import GPU_TYPES, parse_crius_trace
from slurm_plugin.cli.main import main
from slurm_plugin.report import build_report, summary
from slurm_plugin.slurm.parse import parse_parsable

ROOT = Path(__file__).resolve().parents[2]
HEADER = "JobID|JobName|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|Comment"


def _raw(name: str) -> str:
    return (
        resources.files("planner").joinpath("sim", "bundled", f"crius_simulate_trace_{name}.csv").read_text()
    )


def test_trace_crius_converts_the_bundled_trace(tmp_path):
    out = tmp_path / "v.csv"
    assert main(["trace", "crius", "venus", "--out", str(out)]) == 0
    assert (
        out.read_text()
        == resources.files("planner").joinpath("sim", "bundled", "crius_venus.csv").read_text()
    )
    five = tmp_path / "v5.csv"
    assert main(["trace", "crius", "pai", "--iterations-divisor", "5", "--elastic", "--out", str(five)]) == 0
    full = parse_crius_trace(_raw("pai"), "pai").jobs
    short = parse_trace(five.read_text(), str(five))
    assert [j.iterations for j in short] == [max(1, j.iterations // 5) for j in full]
    assert all(j.gpu_types == GPU_TYPES and j.max_gpus is not None for j in short)


def test_trace_crius_names_a_bad_cell(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(_raw("venus").splitlines()[0] + "\nj,100,10,moe__2.4B,50,512,16,v100\n")
    assert main(["trace", "crius", "venus", "--source", str(bad), "--out", str(tmp_path / "x.csv")]) == 2
    assert f"{bad}:2: column 'deadline': 50 is not after the submission time 100" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_trace_philly_random_types(tmp_path, capsys):
    out = tmp_path / "p.csv"
    args = ["trace", "philly", "--vc", "6214e9", "--count", "60", "--out", str(out)]
    assert main([*args, "--random-types", "--seed", "3"]) == 0
    jobs = parse_trace(out.read_text(), str(out))
    assert len(jobs) == 60 and {j.gpu_type for j in jobs} <= set(GPU_TYPES)
    assert all(j.deadline_s is not None and j.iterations and j.batch_size for j in jobs)
    again = tmp_path / "q.csv"
    assert main([*args[:-1], str(again), "--random-types", "--seed", "3"]) == 0
    assert again.read_text() == out.read_text()  # seeded
    assert main([*args, "--elastic"]) == 2
    assert "--seed and --elastic go with --random-types" in capsys.readouterr().err


def test_sim_on_crius_256_reports_deadlines_and_knows_the_models(tmp_path):
    trace = tmp_path / "t.csv"
    lines = (ROOT / "planner" / "sim" / "bundled" / "crius_venus.csv").read_text().splitlines()
    trace.write_text("\n".join(lines[:41]) + "\n")  # the first 40 jobs
    out = tmp_path / "sim"
    cluster = ROOT / "etc" / "clusters" / "crius-256.toml"
    args = ["sim", "--cluster", str(cluster), "--trace", str(trace), "--scheduler", "fifo", "--out", str(out)]
    assert main([*args, "--no-plot", "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["gpus"] == 256 and s["unknown_models"] == [] and s["finished"] == 40
    assert s["deadline_jobs"] == 40 and 0 <= s["deadline_met"] <= 40
    assert s["deadline_satisfactory_ratio"] == pytest.approx(s["deadline_met"] / 40)


def test_report_reads_the_deadline_from_the_comment():
    def row(job_id: str, end: str, comment: str) -> str:
        return (f"{job_id}|a|gpu|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:{end}|"
                f"00:00:00|cpu=8,gres/gpu=2,mem=8G|cpu=8,gres/gpu=2|n1|{comment}")  # fmt: skip

    rows = parse_parsable("\n".join([
        HEADER,
        row("1", "01:00", 'mosaic:{"model":"bert","deadline_s":90}'),  # finished at 60 s: met
        row("2", "03:00", 'mosaic:{"model":"bert","deadline_s":120}'),  # finished at 180 s: missed
        row("3", "02:00", 'mosaic:{"model":"bert"}'),  # no deadline
        row("4", "02:00", 'mosaic:{"model":"bert","deadline_s":true}'),  # malformed: none
    ]))  # fmt: skip
    report = build_report(rows, ["gpu"], now=0.0)
    submit = report.records[0].submit_time_s
    assert [r.deadline_s for r in report.records] == [submit + 90, submit + 120, None, None]
    doc = summary(report, cluster_gpus=8, cluster_cpus=64)
    assert (doc["deadline_jobs"], doc["deadline_met"], doc["deadline_satisfactory_ratio"]) == (2, 1, 0.5)


def test_the_deadline_directive_lands_in_the_comment():
    from slurm_plugin.directives import parse_directives

    assert parse_directives("#!/bin/bash\n#MOSAIC --deadline-s 3600\n", "s.sh") == {"deadline_s": 3600}
