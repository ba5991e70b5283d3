"""Online refinement: heartbeats -> observed points -> the next round's profiles (the real
controller tick against a fake Slurm and a spool of hand-written heartbeat logs)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from profiles.document import profiles_from_document
from profiles.store import ProfileStore
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.observe import first_sight_meta
from slurm_plugin.controller.refine import (
    MAX_LINES,
    TAIL_BYTES,
    HeartbeatError,
    Refiner,
    newest_run_records,
    read_heartbeat_lines,
    run_rate,
)
from slurm_plugin.directives import encode_comment
from slurm_plugin.slurm.parse import SlurmJob, parse_sinfo_json, parse_squeue_json
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, SteppedClock

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
T0 = 1_795_300_000.0
SCHEDULER = preset("synergy-tune")


def _job(job_id: str, state: str, cpus: int, gpu: int | None = None, model: str = "resnet18") -> SlurmJob:
    """A 1-GPU job on n1 (running on GPU ``gpu``) or pending and held."""
    template = parse_squeue_json((DATA / "squeue.json").read_text())[0]
    running = state == "RUNNING"
    return replace(
        template,
        id=job_id,
        name=f"job{job_id}",
        state=state,
        priority=1 if running else 0,
        gpus_per_node=1,
        cpus=cpus,
        mem_mb_per_node=64_000,
        nodes=("n1",) if running else (),
        gpu_indices=(("n1", (gpu,)),) if running and gpu is not None else (),
        submit_time=T0 - 100 + int(job_id),
        start_time=T0 if running else None,
        comment=encode_comment({"model": model}),
        user_id=os.getuid(),  # the user who writes the test's status directories
    )


class Cluster(FakeSlurm):
    """One 8-GPU node whose GPU-proportional share is 4 CPUs and 62.5 GB per GPU (resnet18's
    built-in Synergy profile asks for 9 CPUs per GPU)."""

    def __init__(self, jobs: list[SlurmJob]) -> None:
        super().__init__()
        node = parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
        self._nodes = [
            replace(
                node, cpus=32, mem_mb=512_000, gpus=8, features=("v100",), partitions=("gpu",), state="idle"
            )
        ]
        self._jobs = jobs

    def cpus_given(self, job_id: str) -> int:
        return int(self.fields[job_id]["NumCPUs"])


def _beats(spool: Path, job_id: str, version: int, rates: list[float | None], *, start: float = T0) -> None:
    directory = spool / "status" / job_id
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "heartbeat.jsonl", "a", encoding="utf-8") as f:
        for k, rate in enumerate(rates):
            record = {"event": "heartbeat", "time": start + 10 * (k + 1), "plan_version": version, "step": k}
            record["samples_per_s"] = rate
            f.write(json.dumps(record) + "\n")


def _known(store: Store, *jobs: SlurmJob, version: int = 1) -> None:
    """The jobs as the controller recorded them when it started them (plan version 1)."""
    store.add_jobs([(sj.id, 1, first_sight_meta(sj)) for sj in jobs], T0 - 50)
    for sj in jobs:
        for _ in range(version):
            store.next_plan_version(sj.id)


def _controller(
    config: ControllerConfig, slurm: FakeSlurm, store: Store, refine: bool, base: ProfileStore | None = None
) -> Controller:
    base = base or ProfileStore.builtin()
    scheduler = build_scheduler(SCHEDULER, base)
    refiner = (
        Refiner(store, base, lambda p: build_scheduler(SCHEDULER, p), config.spool_dir) if refine else None
    )
    clock = SteppedClock(T0 + 200)
    return Controller(slurm, store, config, scheduler, clock=clock, refiner=refiner, sleep=clock.sleep)


@pytest.fixture
def config(tmp_path: Path) -> ControllerConfig:
    return ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)


@pytest.mark.parametrize("refine", [False, True])
def test_a_wrong_prior_is_corrected_in_the_next_round(config: ControllerConfig, refine: bool) -> None:
    """resnet18's built-in profile says 9 CPUs per GPU train 1.85x as fast as 4; two running
    resnet18 jobs, at 4 and at 9 CPUs per GPU, both report 200 samples/s. The next resnet18
    job gets 9 CPUs per GPU from the prior, and only the GPU-proportional 4 once the
    heartbeats are read."""
    running = [_job("11", "RUNNING", 4, gpu=0), _job("12", "RUNNING", 9, gpu=1)]
    waiting = _job("13", "PENDING", 4)
    slurm = Cluster([*running, waiting])
    store = Store(config.store_path)
    _known(store, *running, waiting)
    _beats(config.spool_dir, "11", 1, [None, 350.0, 200.0, 201.0, 199.0])  # the first rate: start-up
    _beats(config.spool_dir, "12", 1, [None, 90.0, 200.0, 200.0, 200.0])
    report = _controller(config, slurm, store, refine).tick()
    assert report.ok, report.error
    assert slurm.cpus_given("13") == (4 if refine else 9)
    if refine:
        rates = {p.job_id: (p.cpus_per_gpu, p.samples_per_s_per_gpu, p.time_s) for p in store.observations()}
        assert rates == {"11": (4.0, 200.0, T0 + 200), "12": (9.0, 200.0, T0 + 200)}  # the controller's time
        # Each point records the nodes its GPUs were on (Rubick's pricer needs them), and the
        # state store gives them back.
        assert {p.shape.nodes for p in store.observations()} == {1}


def test_observations_survive_a_controller_restart(config: ControllerConfig) -> None:
    """One job, two runs: at 4 CPUs per GPU (seen by the first controller, which relaunches
    it with the 9 the prior asks for), then at 9 (seen by a restarted controller, from the
    same state store): the flat pair corrects the prior."""
    job = _job("11", "RUNNING", 4, gpu=0)
    slurm = Cluster([job, _job("13", "PENDING", 4)])
    store = Store(config.store_path)
    _known(store, job)
    _beats(config.spool_dir, "11", 1, [None, 120.0, 120.0, 120.0])
    assert _controller(config, slurm, store, refine=True).tick().ok
    # One CPU count says nothing about the curve: the prior still rules.
    assert slurm.cpus_given("13") == 9 and slurm.cpus_given("11") == 9
    store.close()

    store = Store(config.store_path)
    assert store.job("11").plan_version == 2  # type: ignore[union-attr]
    slurm = Cluster([replace(job, cpus=9), _job("14", "PENDING", 4)])
    _beats(config.spool_dir, "11", 2, [None, 300.0, 121.0, 119.0, 120.0], start=T0 + 1)
    assert _controller(config, slurm, store, refine=True).tick().ok
    assert slurm.cpus_given("14") == 4
    assert sorted((p.cpus_per_gpu, p.samples_per_s_per_gpu) for p in store.observations()) == [
        (4.0, 120.0),
        (9.0, 120.0),
    ]


def test_jobs_without_a_model_are_not_observed(config: ControllerConfig) -> None:
    """Black-box jobs (no #MOSAIC --model) share the default model name, not a program."""
    running = [
        replace(_job("11", "RUNNING", 4, gpu=0), comment=""),
        replace(_job("12", "RUNNING", 9, gpu=1), comment=""),
    ]
    slurm = Cluster([*running, _job("13", "PENDING", 4)])
    store = Store(config.store_path)
    _known(store, *running)
    _beats(config.spool_dir, "11", 1, [None, 200.0, 200.0])
    _beats(config.spool_dir, "12", 1, [None, 200.0, 200.0])
    assert _controller(config, slurm, store, refine=True).tick().ok
    assert store.observations() == []


def test_a_profiled_prior_is_corrected_by_one_run(config: ControllerConfig) -> None:
    """A profile measured by ``mosaic profile`` (absolute: 50, 95, 150, 190 samples/s at 1, 2,
    4, 8 CPUs) asks for 9 CPUs per GPU. The job gets them, runs at 150 (no faster than at 4):
    the next job of the model gets the GPU-proportional 4, after this one run."""
    document = {
        "format": "mosaic-profiles/1",
        "models": {
            "image-cnn": {
                "source": "profiled",
                "optimistic": {
                    "cpu_samples_per_s": {"1": 50.0, "2": 95.0, "4": 150.0, "8": 190.0},
                    "dataset_gb": 1.0,
                    "sample_kb": 100.0,
                    "storage_mb_per_s_per_gpu": 5.0,
                },
            }
        },
    }
    base = ProfileStore.builtin().with_profiles(profiles_from_document(document).values())
    slurm = Cluster([_job("11", "PENDING", 4, model="image-cnn")])
    store = Store(config.store_path)
    assert _controller(config, slurm, store, True, base).tick().ok
    assert slurm.cpus_given("11") == 9
    mem_mb = int(slurm.fields["11"]["MinMemoryNode"])
    running = replace(_job("11", "RUNNING", 9, gpu=0, model="image-cnn"), mem_mb_per_node=mem_mb)
    slurm = Cluster([running, _job("13", "PENDING", 4, model="image-cnn")])
    _beats(config.spool_dir, "11", 1, [None, 160.0, 150.0, 151.0, 149.0])
    assert _controller(config, slurm, store, True, base).tick().ok
    assert slurm.cpus_given("13") == 4
    assert [(p.cpus_per_gpu, p.samples_per_s_per_gpu) for p in store.observations()] == [(9.0, 150.0)]


def test_a_sensitive_curve_that_holds_keeps_its_cpus(config: ControllerConfig) -> None:
    """Heartbeats that confirm the prior (2.4 / 1.3 = 1.85x from 4 to 9 CPUs per GPU) change nothing."""
    running = [_job("11", "RUNNING", 4, gpu=0), _job("12", "RUNNING", 9, gpu=1)]
    slurm = Cluster([*running, _job("13", "PENDING", 4)])
    store = Store(config.store_path)
    _known(store, *running)
    _beats(config.spool_dir, "11", 1, [None, 100.0, 100.0])
    _beats(config.spool_dir, "12", 1, [None, 185.0, 185.0])
    assert _controller(config, slurm, store, refine=True).tick().ok
    assert slurm.cpus_given("13") == 9


def test_bad_heartbeats_are_ignored_with_one_log_line(config: ControllerConfig, caplog) -> None:
    running = [
        _job("11", "RUNNING", 4, gpu=0),
        _job("12", "RUNNING", 9, gpu=1),
        _job("15", "RUNNING", 4, gpu=2),
    ]
    slurm = Cluster([*running, _job("13", "PENDING", 4)])
    store = Store(config.store_path)
    _known(store, *running)
    status = config.spool_dir / "status"
    (status / "11").mkdir(parents=True)
    lines = [b"\xff\xfe not json", b"[1, 2]", b'{"event": "heartbeat", "samples_per_s": 1e999']
    bad = [{"event": "heartbeat", "time": T0 + k, "plan_version": 1, "samples_per_s": v}
           for k, v in enumerate([-5.0, 0, True, "fast", 1e300, None])]  # fmt: skip
    (status / "11" / "heartbeat.jsonl").write_bytes(b"\n".join(lines + [json.dumps(r).encode() for r in bad]))
    # Job 12's status directory is a link to another's: never followed.
    (status / "elsewhere").mkdir()
    _beats(config.spool_dir, "elsewhere", 1, [None, 500.0, 500.0])
    os.symlink(status / "elsewhere", status / "12")
    # Job 15's log is far larger than what is read; only its end counts.
    _beats(config.spool_dir, "15", 1, [None, 9.0] + [1.0] * (TAIL_BYTES // 60))
    with (status / "15" / "heartbeat.jsonl").open("a") as f:
        f.write("".join(json.dumps({"event": "heartbeat", "time": T0 + 1e5 + k, "plan_version": 1,
                                    "samples_per_s": 50.0}) + "\n" for k in range(6)))  # fmt: skip
    loggers = {"slurm_plugin.controller.refine", "slurm_plugin.planfile"}
    for name in loggers:
        caplog.set_level(logging.WARNING, logger=name)
    controller = _controller(config, slurm, store, refine=True)
    for _ in range(3):
        assert controller.tick().ok
    assert [p.job_id for p in store.observations()] == ["15"]
    assert store.observations()[0].samples_per_s_per_gpu == 50.0
    messages = [r.getMessage() for r in caplog.records if r.name in loggers]
    # One per job, not one per tick, per line or per reader (progress and heartbeats both
    # read job 12's directory).
    assert len(messages) == 2, messages
    assert any("job 11: 5 heartbeat(s)" in m for m in messages)
    assert any("job 12: status ignored" in m and "not a directory" in m for m in messages)


def test_a_status_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    _beats(tmp_path, "7", 1, [None, 1.0, 2.0])
    assert len(read_heartbeat_lines(tmp_path, "7", owner_uid=os.getuid())) == 3
    with pytest.raises(HeartbeatError, match="owned by uid"):
        read_heartbeat_lines(tmp_path, "7", owner_uid=os.getuid() + 1)
    with pytest.raises(HeartbeatError, match="cannot name"):
        read_heartbeat_lines(tmp_path, "../7")
    assert read_heartbeat_lines(tmp_path, "8") == []


def test_only_the_end_of_a_log_is_parsed() -> None:
    def line(version: object, rate: object, event: str = "heartbeat") -> bytes:
        return json.dumps(
            {"event": event, "plan_version": version, "time": 1, "samples_per_s": rate}
        ).encode()

    # The current run (3) from its start: every record, its first rate included.
    lines = [line(2, 5.0), line(2, 5.0), line(3, None, "start"), line(3, None), line(3, 9.0), line(3, 1.0)]
    assert [r["samples_per_s"] for r in newest_run_records(lines, 3)] == [None, None, 9.0, 1.0]
    # A long run: its newest six rates (the oldest of them then skipped as if it were the first).
    lines = [line(3, float(k)) for k in range(40)] + [b"not json", b"[]"]
    assert [r["samples_per_s"] for r in newest_run_records(lines, 3)] == [34.0, 35.0, 36.0, 37.0, 38.0, 39.0]
    assert run_rate(newest_run_records(lines, 3), 3, None) == (37.0, 0)
    # Lines without a rate: never more than MAX_LINES parsed.
    assert len(newest_run_records([line(3, None)] * (3 * MAX_LINES), 3)) == MAX_LINES


def test_run_rate_uses_the_current_run_only() -> None:
    def beat(version: object, time: float, rate: object) -> dict[str, object]:
        return {"event": "heartbeat", "plan_version": version, "time": time, "samples_per_s": rate}

    records = [
        beat(1, 10, 100.0),  # the previous run
        beat(1, 20, 100.0),
        {"event": "start", "plan_version": 2, "time": 30},
        beat(2, 40, None),  # no rate yet
        beat(2, 50, 500.0),  # start-up: skipped
        beat(2, 60, 10.0),
        beat(2, 70, 12.0),
        beat(True, 75, 99.0),  # not a version
        beat(2, 5, 77.0),  # before Slurm started this run
        beat(2, 80, -1.0),
    ]
    assert run_rate(records, 2, started_s=30) == (11.0, 1)
    assert run_rate(records, 3, started_s=30) == (None, 0)
    many = [beat(1, k, float(k)) for k in range(1, 20)]
    assert run_rate(many, 1, None) == (17.0, 0)  # the median of the newest five (15..19)


def test_mosaic_profiles_shows_each_block_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from profiles.observed import ObservedPoint, Shape
    from slurm_plugin.cli.main import main

    store = Store(tmp_path / "mosaic.db")
    shape = Shape("v100", 1)
    store.record_observations(
        [(1, ObservedPoint("resnet18", shape, c, 62.5, 200.0, T0 + c, job_id=f"j{c}")) for c in (4.0, 9.0)],
        keep=4,
    )
    store.close()
    assert main(["profiles", "resnet18"]) == 0
    before = capsys.readouterr().out
    assert "blocks: throughput (built-in), sensitivity (built-in)" in before
    assert "demand from the matrix (5 % tolerance): 9 CPUs" in before
    assert main(["profiles", "res18", "--spool", str(tmp_path)]) == 0
    after = capsys.readouterr().out
    assert "sensitivity (built-in+observed)" in after and "observed runs: 2" in after
    assert "demand from the matrix (5 % tolerance): 4 CPUs" in after


def test_the_store_keeps_the_newest_points_per_model_shape_and_cpus(tmp_path: Path) -> None:
    from profiles.observed import ObservedPoint, Shape

    store = Store(tmp_path / "mosaic.db")
    a, b = Shape("v100", 1), Shape("v100", 2)
    points = [(1, ObservedPoint("m", a, 4, 10, 1.0 + k, float(k), job_id=f"a{k}")) for k in range(5)]
    points += [(1, ObservedPoint("m", b, 4, 10, 9.0, 0.0, job_id="b"))]
    store.record_observations(points, keep=3)
    kept = store.observations()
    assert [(p.job_id, p.time_s) for p in kept] == [("b", 0.0), ("a2", 2.0), ("a3", 3.0), ("a4", 4.0)]
    # A run's point is updated in place as its heartbeats arrive, not added again.
    store.record_observations([(1, ObservedPoint("m", a, 4, 10, 7.0, 9.0, job_id="a4"))], keep=3)
    assert [p.samples_per_s_per_gpu for p in store.observations() if p.job_id == "a4"] == [7.0]
    assert len(store.observations()) == 4
    # Newer runs at another CPU count do not push out the only points of this one.
    store.record_observations(
        [(1, ObservedPoint("m", a, 9, 10, 1.0, 100.0 + k, job_id=f"c{k}")) for k in range(5)], keep=3
    )
    assert sorted(p.job_id for p in store.observations() if p.shape == a and p.cpus_per_gpu == 4) == [
        "a2",
        "a3",
        "a4",
    ]
