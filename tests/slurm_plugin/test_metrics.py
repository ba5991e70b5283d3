"""The controller's Prometheus metrics file after ticks against a fake Slurm, read back with
prometheus_client's own text parser (what a scraper reads)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.config import build_scheduler, preset
from planner.core.model import Assignment
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.metrics import COUNTERS, DECISION_BUCKETS_S, round_counts
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.controller.rounddiff import Action, Kind
from slurm_plugin.directives import encode_comment
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, no_wait

QUOTAS = {"nlp": 4.0, "vision": 2.0, "idle": 8.0}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, through prometheus_client's parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


@pytest.fixture
def cluster(tmp_path):
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    slurm = FakeSlurm()
    tenants = {"1": "nlp", "2": "vision"}  # job 1 runs, job 2 waits (held) in the fixture
    slurm._jobs = [
        replace(j, comment=encode_comment({"tenant": tenants[j.id]})) if j.id in tenants else j
        for j in slurm._jobs
    ]
    return config, slurm


def _tick(config, slurm, name="fifo"):
    store = Store(config.store_path)
    try:
        controller = Controller(
            slurm, store, config, build_scheduler(preset(name)), sleep=no_wait, quotas=QUOTAS
        )
        report = controller.tick()
    finally:
        store.close()
    return report, (config.spool_dir / "metrics.prom").read_text()


def test_a_tick_exports_tenants_jobs_gpus_counters_and_the_decision_histogram(cluster):
    config, slurm = cluster
    report, text = _tick(config, slurm)
    assert report.ok and report.result is not None
    kinds = families(text)
    assert kinds["mosaic_tenant_gpus_in_use"] == "gauge" and kinds["mosaic_tenant_gpu_quota"] == "gauge"
    assert kinds["mosaic_round_decision_seconds"] == "histogram"
    for name, _ in COUNTERS.values():  # the parser strips a counter's _total
        assert kinds[name.removesuffix("_total")] == "counter"
    s = samples(text)
    # Existing names stay (dashboards depend on them).
    for name in (
        "mosaic_ticks_total",
        "mosaic_tick_failures_total",
        "mosaic_last_tick_ok",
        "mosaic_managed_jobs",
    ):
        assert (name, ()) in s
    assert s[("mosaic_decision_seconds", ())] == pytest.approx(report.decision_time_s, abs=1e-6)

    started = {a["job"]: a for a in report.actions if a["kind"] == "start"}
    stopped = [a for a in report.actions if a["kind"] == "stop"]
    assert set(started) == {"1", "2"} and sorted(report.result.done) == sorted(
        a["request_id"] for a in report.actions
    )
    gpus = {job: sum(a["nodes"].values()) for job, a in started.items()}
    for tenant, quota in QUOTAS.items():
        assert s[("mosaic_tenant_gpu_quota", (("tenant", tenant),))] == quota
    assert s[("mosaic_tenant_gpus_in_use", (("tenant", "nlp"),))] == gpus["1"]
    assert s[("mosaic_tenant_gpus_in_use", (("tenant", "vision"),))] == gpus["2"]
    assert s[("mosaic_tenant_gpus_in_use", (("tenant", "idle"),))] == 0
    # Jobs 1 and 2 run after the round; 3 and 4 stay held (priority 0); 5 is another partition's.
    assert s[("mosaic_jobs", (("state", "running"),))] == 2
    assert s[("mosaic_jobs", (("state", "held"),))] == 2
    assert s[("mosaic_jobs", (("state", "pending"),))] == 0
    # n1 and n2 (4 a100 each) are usable; n3 is down, n4 draining. Allocated: jobs 1 and 2 as
    # started, job 5 of partition "other" on n1 and job 7, left alone on n2 and draining n4.
    assert s[("mosaic_gpus_capacity", ())] == 8
    allocated = s[("mosaic_gpus_allocated", ())]
    assert allocated == gpus["1"] + gpus["2"] + 2
    assert s[("mosaic_gpu_utilization_ratio", ())] == pytest.approx(allocated / 8, abs=1e-6)

    assert s[("mosaic_job_starts_total", ())] == len(started)
    assert s[("mosaic_job_stops_total", ())] == len(stopped)
    relaunched = sum(1 for a in stopped if a["reason"] != "preempted")
    assert s[("mosaic_job_restarts_total", ())] == relaunched
    assert s[("mosaic_job_resizes_total", ())] == sum(1 for a in stopped if a["reason"] == "resized")
    assert s[("mosaic_job_type_moves_total", ())] == 0  # every usable node is a100

    assert s[("mosaic_round_decision_seconds_count", ())] == 1
    assert s[("mosaic_round_decision_seconds_sum", ())] == pytest.approx(report.decision_time_s, abs=1e-6)
    buckets = [s[("mosaic_round_decision_seconds_bucket", (("le", f"{le:g}"),))] for le in DECISION_BUCKETS_S]
    assert buckets == sorted(buckets) and s[("mosaic_round_decision_seconds_bucket", (("le", "+Inf"),))] == 1
    first = next(le for le in DECISION_BUCKETS_S if report.decision_time_s <= le)
    assert s[("mosaic_round_decision_seconds_bucket", (("le", f"{first:g}"),))] == 1


def test_counters_carry_on_across_a_controller_restart_and_a_history_prune(cluster):
    config, slurm = cluster
    first, text = _tick(config, slurm)  # one controller process (cron's --once) ...
    before = samples(text)
    second, text = _tick(config, slurm)  # ... and the next: a new Controller on the same store
    after = samples(text)
    assert after[("mosaic_ticks_total", ())] == 2
    assert after[("mosaic_round_decision_seconds_count", ())] == 2
    assert after[("mosaic_round_decision_seconds_sum", ())] == pytest.approx(
        first.decision_time_s + second.decision_time_s, abs=2e-6
    )
    second_starts = sum(1 for a in second.actions if a["kind"] == "start")
    assert after[("mosaic_job_starts_total", ())] == before[("mosaic_job_starts_total", ())] + second_starts
    for name, _ in COUNTERS.values():
        assert after[(name, ())] >= before[(name, ())]
    # The store forgetting old rounds and actions leaves the counters as they are.
    store = Store(config.store_path)
    try:
        counted = store.counters()
        store.prune_history(first.time_s + 1e6)
        assert store.counters() == counted
    finally:
        store.close()


def test_a_blind_tick_keeps_the_counters_and_leaves_the_cluster_gauges_out(cluster):
    config, slurm = cluster
    _, text = _tick(config, slurm)
    before = samples(text)
    slurm.down = True
    report, text = _tick(config, slurm)
    assert not report.ok
    s = samples(text)
    assert s[("mosaic_last_tick_ok", ())] == 0 and s[("mosaic_tick_failures_total", ())] == 1
    for name, _ in COUNTERS.values():
        assert s[(name, ())] == before[(name, ())]  # never back to zero
    assert s[("mosaic_round_decision_seconds_count", ())] == 1
    assert s[("mosaic_tenant_gpu_quota", (("tenant", "nlp"),))] == 4  # configuration, still known
    # What Slurm runs is unknown: no gauge claims zero jobs or zero GPUs.
    assert not any(
        name in {"mosaic_jobs", "mosaic_gpus_allocated", "mosaic_tenant_gpus_in_use"} for name, _ in s
    )


def test_round_counts_tell_resizes_type_moves_and_resumes_apart(tmp_path):
    config = ControllerConfig(spool_dir=tmp_path)
    slurm = FakeSlurm()
    # n2 holds v100s here, so moving job 1 from n1 (a100) to n2 changes its GPU type.
    slurm._nodes = [replace(n, features=("v100",)) if n.name == "n2" else n for n in slurm._nodes]
    obs = build_observation(1e9, slurm.jobs(), slurm.nodes(), {}, config)
    current = next(j for j in obs.snapshot.jobs if j.id == "1").assignment
    assert current is not None and current.nodes == ("n1",)
    n = current.num_gpus

    def relaunch(reason, target):
        return [
            Action(Kind.STOP, "1", "r1-stop-1", reason),
            Action(Kind.START, "1", "r1-start-1", reason, target),
        ]

    def counts(actions, done=None):
        c = round_counts(obs, actions, [a.request_id for a in actions] if done is None else done, None)
        return {k: c[k] for k in COUNTERS}

    moved = Assignment(tuple(("n2", i) for i in range(n)), current.cpus, current.mem_gb)
    assert counts(relaunch("moved", moved)) == {
        "starts": 1, "stops": 1, "resizes": 0, "type_moves": 1, "restarts": 1
    }  # fmt: skip
    resized = Assignment(tuple(("n1", i) for i in range(n + 1)), current.cpus, current.mem_gb)
    assert counts(relaunch("resized", resized)) == {
        "starts": 1, "stops": 1, "resizes": 1, "type_moves": 0, "restarts": 1
    }  # fmt: skip
    # Only applied actions count: a relaunch whose start failed is a stop.
    assert counts(relaunch("resized", resized), done=["r1-stop-1"])["starts"] == 0
    # Job 3 was requeued once (Slurm's restart count): starting it again is a resume, a restart;
    # job 2 never ran: a first start.
    one = Assignment((("n2", 0),), 1, 2.0)
    placed = [
        Action(Kind.START, "3", "r1-start-3", "placed", one),
        Action(Kind.START, "2", "r1-start-2", "placed", one),
    ]
    assert counts(placed) == {"starts": 2, "stops": 0, "resizes": 0, "type_moves": 0, "restarts": 1}
    # A preemption is a stop, nothing else; the decision time goes into the histogram.
    c = round_counts(obs, [Action(Kind.STOP, "1", "r1-stop-1", "preempted")], ["r1-stop-1"], 0.02)
    assert c["stops"] == 1 and c["restarts"] == 0
    assert c["decision_s:count"] == 1 and c["decision_s:sum"] == 0.02
    assert "decision_s:le=0.01" not in c and c["decision_s:le=0.025"] == 1


DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "mosaic-dashboard.json"


def test_the_grafana_dashboard_charts_only_metrics_the_controller_exports(cluster):
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    panels = dashboard["panels"]
    assert panels and len({p["id"] for p in panels}) == len(panels)
    exprs = []
    for p in panels:
        assert isinstance(p["type"], str) and p["title"]
        assert set(p["gridPos"]) >= {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"])
        exprs += [t["expr"] for t in p["targets"]]
    referenced = {m for e in exprs for m in re.findall(r"\bmosaic_[a-z0-9_]+", e)}
    config, slurm = cluster
    _, text = _tick(config, slurm)
    exported = {name for name, _ in samples(text)}
    assert not referenced - exported, f"the dashboard charts metrics never exported: {referenced - exported}"
    # Every family the controller writes has a panel.
    charted = {re.sub(r"_(bucket|sum|count)$", "", m) for m in referenced}
    assert {re.sub(r"_(bucket|sum|count)$", "", m) for m in exported} <= charted
