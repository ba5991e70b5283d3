"""The closed loop, short, on the live test cluster: measure with ``mosaic profile``, decide
with ``mosaic controller --scheduler synergy-tune`` on those profiles, run the real jobs.

The cluster is the ``cpu-scarce`` shape (one node, 4 GPUs, 4 CPUs: a GPU's proportional
share is 1 CPU). Both CPU examples are profiled under srun at 1 and 2 CPUs (the cores this
machine can pin), then their batch scripts are submitted together. Synergy-Tune gives each
job the CPUs its measured curve says pay (the fewest reaching 95 % of its peak), here within
the node's 4. The benchmark with both presets, longer runs and JCTs is
``benchmarks/soak/closed_loop.py``; this test asserts the decision and that the controller read
the jobs' heartbeats, not timings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from benchmarks.soak.closed_loop import DATA, JOBS, Settings, demand_cpus, max_cpus, profile, run_pair
from slurm_plugin.testcluster.lifecycle import Cluster

SHARE = 1  # the cpu-scarce node's 4 CPUs over its 4 GPUs


def test_tune_gives_the_image_job_the_cpus_its_measured_profile_pays_for(
    slurm_cluster_of: Callable[[str], Cluster], tmp_path: Path
) -> None:
    cluster = slurm_cluster_of("cpu-scarce")
    # 120 steps run ~5 s of heartbeats: the controller (a round every 2 s) reads a rated
    # heartbeat in two or three rounds. With 30 steps (~1.2 s) one round at most fell in that
    # window, and on a loaded machine none did: the controller observed nothing.
    s = Settings(steps=120, run_s=2.0, heartbeat_s=0.4, round_s=2.0, timeout_s=120.0)
    # The image job's loader fills its prefetch queue first: a window of 2 s measures that
    # more than the decode rate, so its runs are measured a little longer.
    windows = {"image-cnn": replace(s, run_s=6.0), "text-transformer": s}
    paths = []
    for example in JOBS:
        out = tmp_path / f"{example}.json"
        measured = profile(cluster, example, out, DATA, windows[example])
        assert set(measured["cpu_samples_per_s"]) == {"1", "2"}, measured
        assert measured["source"].startswith("profiled")
        paths.append(out)
    wants = min(demand_cpus(tmp_path / "image-cnn.json", "image-cnn"), 4 - SHARE)

    result = run_pair(cluster, tmp_path / "tune", "synergy-tune", paths, DATA, s)

    image = result["jobs"]["image-cnn"]
    assert {j["state"] for j in result["jobs"].values()} == {"COMPLETED"}
    # The first start is the profile's decision (a later round may move the job again once
    # its co-located rate is observed: online refinement).
    first = image["cpus_given"][0]["cpus"]
    assert first == wants, (first, wants, result)
    if wants > SHARE:  # the measured curve says more CPUs pay: more than the proportional share
        assert max_cpus(result, "image-cnn") > SHARE
    # The job saw the CPUs Slurm gave it, and the controller read its heartbeats.
    assert image["heartbeats"] and image["heartbeats"][-1]["step"] == s.steps
    assert {b["cpus"] for b in image["heartbeats"]} <= {e["cpus"] for e in image["cpus_given"]}
    observed = [o for o in result["observed_by_controller"] if o["job_id"] == image["job_id"]]
    assert observed and observed[0]["model"] == "image-cnn", result["observed_by_controller"]
    assert observed[0]["cpus_per_gpu"] == first
