"""mosaic trace rubick, mosaic sim on Rubick's cluster, and tenants in mosaic report."""

from __future__ import annotations

import csv
import io
import json
from importlib import resources
from pathlib import Path

import pytest

from planner.traces import parse_trace
from slurm_plugin.cli.main import main
from slurm_plugin.report import build_report, summary
from slurm_plugin.slurm.parse import parse_parsable

ROOT = Path(__file__).resolve().parents[2]
HEADER = "JobID|JobName|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|Comment"


def _raw(kind: str) -> str:
    return resources.files("planner").joinpath("sim", "bundled", f"rubick_workload_{kind}.csv").read_text()


def test_trace_rubick_converts_and_names_bad_cells(tmp_path, capsys):
    rows = _raw("mt").splitlines()
    src = tmp_path / "w.csv"
    src.write_text("\n".join(rows[:41]) + "\n")  # the first 40 jobs
    out = tmp_path / "t.csv"
    assert main(["trace", "rubick", str(src), "--out", str(out)]) == 0
    jobs = parse_trace(out.read_text(), str(out))
    assert len(jobs) == 40 and {j.gpu_type for j in jobs} == {"a800"}
    bad = tmp_path / "bad.csv"
    bad.write_text(rows[0] + "\n" + rows[1].replace(",vit,", ",resnet,") + "\n")
    assert main(["trace", "rubick", str(bad), "--out", str(tmp_path / "x.csv")]) == 2
    assert "bad.csv:2: column 'application': unknown model 'resnet'" in capsys.readouterr().err


def test_sim_on_the_paper_cluster_reports_classes_and_tenants(tmp_path):
    rows = _raw("mt").splitlines()
    src = tmp_path / "w.csv"
    src.write_text("\n".join(rows[:61]) + "\n")
    trace = tmp_path / "t.csv"
    assert main(["trace", "rubick", str(src), "--out", str(trace)]) == 0
    config = tmp_path / "s.toml"
    config.write_text('[scheduler]\npolicy = "fifo"\n\n[[tenants]]\nname = "tenant-a"\ngpu_quota = 64\n')
    cluster = ROOT / "etc" / "clusters" / "rubick-64.toml"
    out = tmp_path / "sim"
    args = [
        "sim",
        "--cluster",
        str(cluster),
        "--trace",
        str(trace),
        "--config",
        str(config),
        "--out",
        str(out),
    ]
    assert main([*args, "--no-plot", "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    jobs = list(csv.DictReader(io.StringIO((out / "jobs.csv").read_text())))
    assert s["finished"] == 60 and s["guaranteed_jobs"] == sum(r.split(",")[-1] == "1" for r in rows[1:61])
    a = s["tenants"]["tenant-a"]
    assert a["gpu_quota"] == 64 and 0 < a["quota_use"] <= 1 and s["tenants"]["tenant-b"]["quota_use"] is None
    total = sum(float(r["attained_gpu_s"]) for r in jobs)  # jobs.csv rounds to 3 decimals
    assert a["gpu_s"] + s["tenants"]["tenant-b"]["gpu_s"] == pytest.approx(total, abs=0.001 * len(jobs))


def test_report_reads_tenant_and_guaranteed_from_the_comment():
    def row(job_id: str, end: str, comment: str) -> str:
        return (f"{job_id}|a|gpu|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:{end}|"
                f"00:00:00|cpu=8,gres/gpu=2,mem=8G|cpu=8,gres/gpu=2|n1|{comment}")  # fmt: skip

    rows = parse_parsable("\n".join([
        HEADER,
        row("1", "01:00", 'mosaic:{"model":"bert","tenant":"vision","guaranteed":true}'),
        row("2", "03:00", 'mosaic:{"model":"bert","tenant":"vision"}'),
        row("3", "02:00", 'mosaic:{"model":"bert"}'),
    ]))  # fmt: skip
    report = build_report(rows, ["gpu"], now=0.0)
    assert [(r.tenant, r.guaranteed) for r in report.records] == [
        ("vision", True),
        ("vision", False),
        (None, False),
    ]
    doc = summary(report, cluster_gpus=8, cluster_cpus=64, quotas={"vision": 4})
    assert doc["guaranteed_jobs"] == 1 and doc["guaranteed_avg_jct_s"] == 60.0
    assert doc["best_effort_avg_jct_s"] == 150.0
    vision = doc["tenants"]["vision"]
    assert (vision["jobs"], vision["avg_jct_s"], vision["gpu_s"]) == (2, 120.0, 2 * 60.0 + 2 * 180.0)
    assert vision["quota_use"] == 2 * 60.0 / (4 * 180.0)  # the guaranteed job's GPU-s over quota x makespan


def test_report_takes_the_quotas_from_the_config(tmp_path):
    from slurm_plugin.cli.report_cmd import _quotas

    top = tmp_path / "a.toml"
    top.write_text('[[tenants]]\nname = "tenant-a"\ngpu_quota = 64\n')
    nested = tmp_path / "b.toml"
    nested.write_text('[scheduler]\npreset = "rubick"\n[[scheduler.tenants]]\nname = "x"\ngpu_quota = 8\n')
    bare = tmp_path / "c.toml"
    bare.write_text("[controller]\n")
    assert _quotas(str(top)) == {"tenant-a": 64.0}
    assert _quotas(str(nested)) == {"x": 8.0}
    assert _quotas(str(bare)) is None and _quotas(None) is None
