"""Online refinement on the real test cluster: jobs report their throughput through the
runtime API, and the controller's next round plans with what they reported.

The jobs say they train resnet18, whose built-in Synergy profile asks for 9 CPUs per GPU
(1.85x the throughput of the 4 a GPU's share is here), but each step waits a fixed time
(as a GPU-bound job waits on its GPU): its throughput does not depend on its CPUs.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from profiles.store import ProfileStore
from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.refine import Refiner, run_rate
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from tests.slurm_plugin.live_helpers import config_for, jobs, submit_job, wait_for

SCHEDULER = preset("synergy-tune")

JOB = textwrap.dedent(
    """
    import json, os, time
    from pathlib import Path
    from wrapper import runtime, status

    spool, job = Path(os.environ["MOSAIC_SPOOL"]), os.environ["SLURM_JOB_ID"]
    version = json.loads((spool / "plans" / f"{job}.json").read_text())["version"]
    directory = status.status_dir(spool, job)
    env = dict(os.environ, MOSAIC_PLAN_VERSION=str(version), MOSAIC_STATUS_DIR=str(directory),
               MOSAIC_HEARTBEAT_S="0.25")
    rt = runtime.Runtime(env)
    step = 0
    while not rt.stop_requested():
        time.sleep(0.02)  # one step: 32 samples, whatever the CPUs
        step += 1
        rt.report(step, samples=32 * step)
    status.write_marker(directory / status.CHECKPOINT_MARKER, {"job_id": job, "time": time.time()})
    """
)


def _script(directory: Path, name: str) -> Path:
    code = directory / "flat_job.py"
    code.write_text(JOB)
    path = directory / f"{name}.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J {name} --gres=gpu:1 -c 2 --mem=4G -o /dev/null\n"
        "#MOSAIC --model resnet18 --duration-s 600\n"
        f"cd {Path(__file__).resolve().parents[2]}\n"
        f"exec {sys.executable} {code}\n"
    )
    return path


def _cpus(config: ControllerConfig, job_id: str) -> int:
    return jobs(config)[job_id].cpus


def _reported(config: ControllerConfig, store: Store, job_id: str) -> bool:
    """The job's current run has two rates beyond its first."""
    record = store.job(job_id)
    if record is None:
        return False
    beats = [
        r
        for r in planfile.read_heartbeats(config.spool_dir, job_id)
        if r.get("plan_version") == record.plan_version and r.get("samples_per_s") is not None
    ]
    return len(beats) >= 3 and run_rate(beats, record.plan_version, None)[0] is not None


def test_flat_heartbeats_stop_extra_cpus_in_the_next_round(
    live, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_for(live, tmp_path / "spool", stop_timeout_s=20.0, checkpoint_grace_s=5.0)
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    store = Store(config.store_path)
    base = ProfileStore.builtin()
    refiner = Refiner(store, base, lambda p: build_scheduler(SCHEDULER, p), config.spool_dir)
    controller = Controller(client, store, config, build_scheduler(SCHEDULER, base), refiner=refiner)
    prior = Controller(client, store, config, build_scheduler(SCHEDULER, base))  # dry runs only

    # Five jobs on four 4-GPU, 16-CPU nodes: three get the prior's 9 CPUs, two the share (4).
    first = [submit_job(config, _script(tmp_path, f"flat{k}")) for k in range(5)]
    time.sleep(0.5)
    assert controller.tick().ok
    wait_for("five jobs running", lambda: all(jobs(config)[j].state == "RUNNING" for j in first), 30)
    given = {j: _cpus(config, j) for j in first}
    assert sorted(given.values()) == [4, 4, 9, 9, 9], given
    wait_for("rates of every run", lambda: all(_reported(config, store, j) for j in first), 60)
    assert controller.tick().ok
    observed = {p.job_id: p.cpus_per_gpu for p in store.observations()}
    assert observed == {j: float(c) for j, c in given.items()}

    # A 9-CPU job ends; a new resnet18 job fits there with 9 CPUs. The prior still gives it
    # 9 (dry run), the refined profiles the GPU-proportional 4.
    ended = next(j for j, c in given.items() if c == 9)
    run(["scancel", ended], env=config.slurm_env)
    wait_for(
        f"job {ended} gone", lambda: ended not in {j for j, s in jobs(config).items() if s.holds_resources}
    )
    new = submit_job(config, _script(tmp_path, "flat5"))
    time.sleep(0.5)
    planned = {a["job"]: a.get("cpus") for a in prior.tick(dry_run=True).actions if a["kind"] == "start"}
    assert planned.get(new) == 9
    # The round, by `mosaic controller --once` (a new controller process: it finds the
    # observations in the state store).
    common = ["--slurm-conf", str(live.layout.conf), "--spool", str(config.spool_dir)]
    assert main(["controller", "--once", "--scheduler", "synergy-tune", *common]) == 0
    report = json.loads(capsys.readouterr().out)
    started = {a["job"]: a.get("cpus") for a in report["actions"] if a["kind"] == "start"}
    assert started.get(new) == 4, report["actions"]
    wait_for(f"job {new} running", lambda: jobs(config)[new].state == "RUNNING", 30)
    assert _cpus(config, new) == 4
