"""The runtime API inside one process: plan, signal flag, heartbeats with telemetry."""

import json
import os
import signal
import subprocess
import sys
import types

import pytest

from planner.core.errors import InputError
from wrapper import runtime, status
from wrapper.telemetry import Telemetry


@pytest.fixture
def restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in runtime.STOP_SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def make(tmp_path, **env):
    base = {
        "MOSAIC_EXEC_PLAN": json.dumps({"dp": 1, "micro_batch": 4, "grad_accum": 2, "global_batch": 8}),
        "MOSAIC_PLAN_VERSION": "3",
        "MOSAIC_STATUS_DIR": str(tmp_path / "status"),
        "MOSAIC_JOB_ID": "12",
    }
    return runtime.Runtime({**base, **env})


def test_the_plan_comes_from_mosaic_run(tmp_path, restore_handlers):
    rt = make(tmp_path)
    assert rt.plan.micro_batch == 4 and rt.plan.grad_accum == 2 and rt.plan_version == 3
    assert runtime.Runtime({}).plan is None  # not under mosaic-run: no plan, run as written


def test_a_broken_plan_in_the_environment_is_an_error(tmp_path, restore_handlers):
    with pytest.raises(InputError, match="MOSAIC_EXEC_PLAN: key 'zero_stage'"):
        make(tmp_path, MOSAIC_EXEC_PLAN='{"zero_stage": 7}')


@pytest.mark.parametrize("sig", runtime.STOP_SIGNALS)
def test_a_checkpoint_signal_only_sets_the_flag(tmp_path, restore_handlers, sig):
    rt = make(tmp_path)
    assert not rt.should_checkpoint()
    os.kill(os.getpid(), sig)  # delivered to this (main) thread before kill returns
    assert rt.should_checkpoint() and rt.stop_signal == sig.name


def test_heartbeats_carry_progress_throughput_and_telemetry(tmp_path, restore_handlers, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML here: no "gpus" key, no error
    rt = make(tmp_path, MOSAIC_HEARTBEAT_S="0")
    rt.report(1, samples=8, progress=0.1)
    rt.report(2, samples=16, progress=0.2)
    first, second = status.read_records(tmp_path / "status" / status.HEARTBEATS)
    assert first["event"] == "heartbeat" and first["samples_per_s"] is None and first["progress"] == 0.1
    assert second["samples_per_s"] > 0 and second["plan_version"] == 3 and second["job_id"] == "12"
    for key in ("cpu_percent", "rss_gb", "node_cpu_percent", "node_mem_used_gb", "node_mem_total_gb"):
        assert key in second
    assert "gpus" not in second


def test_heartbeats_are_rate_limited_and_only_rank_0_writes(tmp_path, restore_handlers):
    rt = make(tmp_path, MOSAIC_HEARTBEAT_S="3600")
    rt.report(1, samples=8)
    rt.report(2, samples=16)
    rt.report(3, samples=24, force=True)
    assert [r["step"] for r in status.read_records(tmp_path / "status" / status.HEARTBEATS)] == [1, 3]
    other = make(tmp_path / "r1", RANK="1", WORLD_SIZE="2")
    other.report(1, samples=8, force=True)
    assert not (tmp_path / "r1" / "status").exists()


def test_gpu_telemetry_is_reported_where_nvml_sees_gpus(monkeypatch):
    class Util:
        gpu = 87

    class Mem:
        used, total = 3 * 1024**3, 80 * 1024**3

    fake = types.SimpleNamespace(
        NVMLError=RuntimeError,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: Util,
        nvmlDeviceGetMemoryInfo=lambda h: Mem,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    gpus = Telemetry().sample()["gpus"]
    assert gpus == [
        {"index": 1, "util_percent": 87, "mem_used_gb": 3.0, "mem_total_gb": 80.0},
        {"index": 3, "util_percent": 87, "mem_used_gb": 3.0, "mem_total_gb": 80.0},
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "gpus" not in Telemetry().sample()


def test_cpu_telemetry_counts_the_work_of_child_processes(tmp_path):
    # DataLoader workers and pools do a CPU-bound job's work: a rank's CPU use must include them.
    telemetry = Telemetry()
    before = telemetry.cpu_seconds()
    burn = "import time\nwhile time.process_time() < 0.4: pass\nprint('done', flush=True)\ntime.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        assert telemetry.cpu_seconds() - before >= 0.35
        assert telemetry.sample()["cpu_percent"] > 0
    finally:
        child.kill()
        child.wait()
    assert telemetry.cpu_seconds() - before >= 0.35  # an ended child's work is still counted
