"""sacct runs -> the metrics module's job records (pure), on captured and constructed rows."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from planner.relaunch import Change
from slurm_plugin.report import Run, build_report, run_change, summary, with_store_starts
from slurm_plugin.slurm.parse import parse_parsable, parse_time

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
HEADER = "JobID|JobName|Partition|State|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList|Comment"


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_captured_requeued_jobs_that_never_ran_again_are_preempted_not_restarted():
    report = build_report(parse_parsable((DATA / "sacct.txt").read_text()), ["gpu"], now=2e9)
    by_id = {r.job_id: r for r in report.records}
    assert sorted(by_id) == ["1", "3", "4", "6", "7"]  # job 5 ran in the other partition
    # Job 3 was requeued, then cancelled while pending: a stop without a relaunch, as the
    # simulator counts a preempted job that never resumes.
    three = by_id["3"]
    assert (three.restarts, three.migrations, three.preemptions, three.state) == (0, 0, 1, "cancelled")
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
    # No audit line says why the second run started (the column is absent): a run on other
    # nodes counts as a relaunch elsewhere, a migration.
    assert (record.restarts, record.migrations, record.preemptions, record.state) == (1, 1, 0, "finished")
    assert (record.model, record.duration_s, record.attained_gpu_s) == ("gpt2", 100.0, 2 * 60 + 2 * 40)
    doc = summary(build_report(rows, ["gpu"], now=0.0), cluster_gpus=4, cluster_cpus=16)
    assert doc["finished"] == 1 and doc["avg_jct_s"] == 120.0 and doc["avg_queue_s"] == 10.0
    assert doc["gpu_util"] == (2 * 60 + 2 * 40) / (4 * 120.0)
    assert doc["avg_ftf"] == 120.0 / 100.0  # alone on the cluster: ideal time = duration


def _totals(records):
    return tuple(sum(getattr(r, key) for r in records) for key in ("restarts", "migrations", "preemptions"))


def test_a_demo_run_under_las_counts_its_resumes_elsewhere_as_restarts_not_migrations():
    # `mosaic demo` (LAS, the demo trace) with AdminComment in sacct: every run after a job's
    # first was started by the controller as "placed" (a resume after a preemption), 19 of the
    # 20 on other nodes than the run before. The simulator counts those as it does: a
    # preemption, then a restart; no migration.
    rows = parse_parsable((DATA / "sacct_demo_las.txt").read_text())
    records = build_report(rows, ["gpu"], now=2e9).records
    by_id = {r.job_id: (r.restarts, r.migrations, r.preemptions) for r in records}
    assert by_id["1"] == (5, 0, 5) and by_id["2"] == (0, 0, 0)
    assert _totals(records) == (20, 0, 20)
    # Without the audit lines only the nodes tell: each resume elsewhere looks like a move.
    for row in rows:
        del row["AdminComment"]
    assert _totals(build_report(rows, ["gpu"], now=2e9).records) == (20, 19, 1)


def _run(nodes, comment, state="REQUEUED"):
    return Run("9", state, 0.0, 1.0, 2.0, 1.0, 4, nodes, comment)


@pytest.mark.parametrize(
    ("comment", "nodes", "change"),
    [
        ("mosaic r7-start-9 moved n2:1gpu 4cpu 16384MB/node", "n2", Change.MOVED),
        ("mosaic r7-start-9 resized n1:2gpu 8cpu 16384MB/node", "n1", Change.RESIZED),
        ("mosaic r7-start-9 reshaped n1:1gpu 2cpu 16384MB/node", "n1", Change.RESHAPED),
        ("mosaic r7-start-9 shared n1:1gpu 2cpu 8192MB/node", "n1", Change.SHARED),
        ("mosaic r7-start-9 placed n2:1gpu 4cpu 16384MB/node", "n2", Change.RESUMED),  # resumed elsewhere
        ("mosaic r7-start-9 placed n1:1gpu 4cpu 16384MB/node", "n1", Change.RESUMED),
        # No start line of its own (the previous run's comment, or none): its nodes decide.
        ("mosaic r1-start-9 placed n1:1gpu 4cpu 16384MB/node", "n2", Change.MOVED),
        ("", "n1", Change.RESUMED),
        ("mosaic r7-start-9 refused: Slurm will not run the job", "n1", Change.RESUMED),
    ],
)
def test_a_run_started_for_the_reason_its_audit_line_gives(comment, nodes, change):
    first = _run("n1", "mosaic r1-start-9 placed n1:1gpu 4cpu 16384MB/node")
    assert run_change(first, None) is Change.START
    assert run_change(_run(nodes, comment), first) is change


def test_a_relaunch_is_a_restart_but_no_preemption_and_a_move_is_a_migration():
    rows = parse_parsable(
        "\n".join(
            [
                HEADER + "|AdminComment",
                "9|a|gpu|REQUEUED|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:01:10|00:01:00|"
                "cpu=4,gres/gpu=1,mem=4G|cpu=4,gres/gpu=1|n1||mosaic r1-start-9 placed n1:1gpu",
                "9|a|gpu|REQUEUED|2026-01-01T00:01:10|2026-01-01T00:01:12|2026-01-01T00:02:00|00:00:48|"
                "cpu=8,gres/gpu=2,mem=8G|cpu=4,gres/gpu=1|n1||mosaic r5-start-9 resized n1:2gpu",
                "9|a|gpu|REQUEUED|2026-01-01T00:02:00|2026-01-01T00:02:02|2026-01-01T00:03:00|00:00:58|"
                "cpu=8,gres/gpu=2,mem=8G|cpu=4,gres/gpu=1|n3||mosaic r9-start-9 moved n3:2gpu",
                "9|a|gpu|REQUEUED|2026-01-01T00:03:00|2026-01-01T00:05:00|2026-01-01T00:06:00|00:01:00|"
                "cpu=8,gres/gpu=2,mem=8G|cpu=4,gres/gpu=1|n4||mosaic r20-start-9 placed n4:2gpu",
                "9|a|gpu|PENDING|2026-01-01T00:06:00|None|None|00:00:00||cpu=4,gres/gpu=1|None assigned||"
                "mosaic r31-stop-9 preempted: stopped",
            ]
        )
    )
    (record,) = build_report(rows, ["gpu"], now=_t("2026-01-01T00:07:00")).records
    # Resized, moved, resumed on n4 after a preemption, preempted again and still waiting.
    assert (record.restarts, record.migrations, record.preemptions) == (3, 1, 2)


def _store_starts(rows, delay_s=0.4):
    """The store's applied starts that the rows' audit lines came from: each recorded
    ``delay_s`` after its run started, as the controller records a start once released."""
    starts = {}
    for row in rows:
        m = re.match(r"mosaic (\S+) (.*)", row.get("AdminComment", ""))
        start = parse_time(row["Start"])
        if m is not None and start is not None:
            starts.setdefault(row["JobID"], []).append((start + delay_s, m.group(1), m.group(2)))
    return {job: sorted(set(entries)) for job, entries in starts.items()}


def test_an_operators_report_reads_why_each_run_started_from_the_store():
    # The demo run above, as an Operator's controller leaves it: no AdminComment in sacct
    # (Slurm refuses it to an Operator), the start lines in the store's action log only.
    rows = parse_parsable((DATA / "sacct_demo_las.txt").read_text())
    starts = _store_starts(rows)
    bare = [{**row, "AdminComment": ""} for row in rows]
    assert _totals(build_report(bare, ["gpu"], now=2e9).records) == (20, 19, 1)  # nodes alone
    filled = with_store_starts(bare, starts)
    assert [r["AdminComment"] for r in filled] == [r["AdminComment"] for r in rows]
    assert _totals(build_report(filled, ["gpu"], now=2e9).records) == (20, 0, 20)


def test_store_starts_that_made_no_run_or_came_too_late_are_not_taken():
    def row(start, end, nodes, state="REQUEUED"):
        return {"JobID": "5", "Partition": "gpu", "State": state, "Submit": "2026-01-01T00:00:00",
                "Start": start, "End": end, "AllocTRES": "cpu=4,gres/gpu=1", "ReqTRES": "gres/gpu=1",
                "NodeList": nodes, "Comment": "", "AdminComment": ""}  # fmt: skip

    rows = [
        row("2026-01-01T00:01:00", "2026-01-01T00:05:00", "n1"),
        row("2026-01-01T00:09:00", "2026-01-01T00:12:00", "n1"),
        row("2026-01-01T00:20:00", "2026-01-01T00:30:00", "n2", "COMPLETED"),
    ]
    t = {k: parse_time(r["Start"]) for k, r in enumerate(rows)}
    starts = {
        "5": [
            (t[0] + 0.3, "r1-start-5", "placed"),
            (t[0] + 60.0, "r2-start-5", "placed (already running as planned)"),  # made no run
            (t[1] - 200.0, "r4-start-5", "moved (released; Slurm: pending, Resources)"),  # started later
            (t[2] + 2.5, "r9-start-5", "placed"),  # recorded too long after the third run started
        ]
    }
    filled = with_store_starts(rows, starts)
    assert [r["AdminComment"] for r in filled] == [
        "mosaic r1-start-5 placed",
        "mosaic r4-start-5 moved (released; Slurm: pending, Resources)",
        "",  # no start of the controller's: the nodes tell (n1 -> n2, a move)
    ]
    (record,) = build_report(filled, ["gpu"], now=2e9).records
    # Run 2 on the same node, by its line a move; run 3 on another node, by its nodes a move.
    assert (record.restarts, record.migrations, record.preemptions) == (2, 2, 0)
    # A run with its own start line keeps it.
    own = [{**rows[0], "AdminComment": "mosaic r7-start-5 placed n1:1gpu"}]
    assert with_store_starts(own, starts)[0]["AdminComment"] == "mosaic r7-start-5 placed n1:1gpu"
