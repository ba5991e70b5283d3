"""sacct runs -> the metrics module's job records (pure), on captured and constructed rows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from slurm_plugin.report import build_report, summary
from slurm_plugin.slurm.parse import parse_parsable

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
HEADER = "JobID|JobName|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|Comment"


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_captured_requeued_jobs_count_one_restart_each():
    report = build_report(parse_parsable((DATA / "sacct.txt").read_text()), ["gpu"], now=2e9)
    by_id = {r.job_id: r for r in report.records}
    assert sorted(by_id) == ["1", "3", "4", "6", "7"]  # job 5 ran in the other partition
    assert by_id["3"].restarts == 1 and by_id["3"].preemptions == 1 and by_id["3"].state == "cancelled"
    assert by_id["1"].num_gpus == 2 and by_id["1"].attained_gpu_s == 2 * 5.0  # 2 GPUs, 23:38:05-23:38:10
    assert all(r.finish_time_s is None for r in report.records)


def test_runs_become_submit_first_start_finish_and_migrations():
    rows = parse_parsable(
        "\n".join(
            [
                HEADER,
                "9|a|gpu|REQUEUED|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:01:10|00:01:00|"
                'cpu=8,gres/gpu=2,mem=8G|cpu=8,gres/gpu=2|n1|mosaic:{"model":"gpt2","duration_s":100}',
                "9|a|gpu|COMPLETED|2026-01-01T00:01:10|2026-01-01T00:01:20|2026-01-01T00:02:00|00:00:40|"
                "cpu=8,gres/gpu=2,mem=8G|cpu=8,gres/gpu=2|n2|",
            ]
        )
    )
    (record,) = build_report(rows, ["gpu"], now=0.0).records
    assert record.submit_time_s == _t("2026-01-01T00:00:00")
    assert record.start_time_s == _t("2026-01-01T00:00:10")
    assert record.finish_time_s == _t("2026-01-01T00:02:00") and record.jct_s == 120.0
    assert (record.restarts, record.migrations, record.state) == (1, 1, "finished")
    assert (record.model, record.duration_s, record.attained_gpu_s) == ("gpt2", 100.0, 2 * 60 + 2 * 40)
    doc = summary(build_report(rows, ["gpu"], now=0.0), cluster_gpus=4, cluster_cpus=16)
    assert doc["finished"] == 1 and doc["avg_jct_s"] == 120.0 and doc["avg_queue_s"] == 10.0
    assert doc["gpu_util"] == (2 * 60 + 2 * 40) / (4 * 120.0)
    assert doc["avg_ftf"] == 120.0 / 100.0  # alone on the cluster: ideal time = duration
