"""Shared pytest configuration, and the one live Slurm test cluster fixture.

Tests that drive real Slurm share one cluster per shape for the whole test run
(``slurm_cluster``, or ``slurm_cluster_of("hetero")``); ``live`` empties the homogeneous
one of jobs after each test. They are skipped, with the reason, where Slurm cannot run: not
root, or Debian's Slurm packages missing (``contrib/setup.sh`` installs them as root).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from slurm_plugin.testcluster.lifecycle import Cluster

# CI and --fast draw the same examples on every run (a red CI is then reproducible and never
# a coin toss, and --fast takes the same time each run); the dev profile draws new ones each
# time, to keep exploring.
settings.register_profile(
    "ci", max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("fast", max_examples=15, deadline=None, derandomize=True)  # contrib/test.sh --fast
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


_ROOT_LEVEL = logging.getLogger().level  # before any test ran


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """The CLI's ``main`` configures the root logger (``basicConfig(force=True)``: its own
    stderr handler, level ERROR under ``-q``); without this, a later test's log capture
    depends on which test ran first. The level goes back to what it was before any test (a
    module-scoped fixture may have called ``main`` before this fixture's setup); pytest's own
    capture handlers come and go per phase and are left alone."""
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(_ROOT_LEVEL)


def why_no_slurm() -> str | None:
    """Why the live test cluster cannot run here (``None``: it can)."""
    from slurm_plugin.testcluster import install

    if os.geteuid() != 0:
        return "the live Slurm test cluster needs root (private munged, slurmd as root)"
    missing = install.missing_programs(accounting=True)
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}; run contrib/setup.sh as root)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster_of(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Cluster]]:
    """``slurm_cluster_of(shape)``: that shape's cluster, brought up once per test run."""
    from slurm_plugin.testcluster import lifecycle
    from slurm_plugin.testcluster.shapes import shape_named

    clusters: dict[str, tuple[Path, Cluster]] = {}

    def get(shape: str) -> Cluster:
        why = why_no_slurm()
        if why:
            pytest.skip(why)
        if shape not in clusters:
            root = tmp_path_factory.mktemp(f"slurm-{shape}") / "cluster"
            # With accounting (MariaDB + slurmdbd, ~4 s more) so that sacct and `mosaic report` work.
            clusters[shape] = (
                root,
                lifecycle.up(shape_named(shape, accounting=shape == "homogeneous"), root),
            )
        return clusters[shape][1]

    try:
        yield get
    finally:
        for root, _ in clusters.values():
            lifecycle.down(root)


@pytest.fixture(scope="session")
def slurm_cluster(slurm_cluster_of: Callable[[str], Cluster]) -> Cluster:
    """The homogeneous test cluster (4 nodes x 4 GPUs, accounting on)."""
    return slurm_cluster_of("homogeneous")


@pytest.fixture
def live(slurm_cluster: Cluster) -> Iterator[Cluster]:
    """The session's cluster, emptied of jobs after the test."""
    from slurm_plugin.slurm.runner import run
    from slurm_plugin.testcluster import lifecycle

    yield slurm_cluster
    run(["scancel", "--user=root"], env=slurm_cluster.env, check=False)
    lifecycle.wait_jobs_gone(slurm_cluster, 20.0)


@pytest.fixture
def hetero(slurm_cluster_of: Callable[[str], Cluster]) -> Iterator[Cluster]:
    """The session's heterogeneous cluster (n1, n2: 4 a100 each; n3, n4: 4 v100 each), emptied
    of jobs after the test."""
    from slurm_plugin.slurm.runner import run
    from slurm_plugin.testcluster import lifecycle

    cluster = slurm_cluster_of("hetero")
    yield cluster
    run(["scancel", "--user=root"], env=cluster.env, check=False)
    lifecycle.wait_jobs_gone(cluster, 20.0)


LIVE_FIXTURES = frozenset({"slurm_cluster", "slurm_cluster_of", "live"})
JOB_MODULES = frozenset(
    {"test_resharding", "test_deepspeed", "test_launch", "test_mosaic_run", "test_render"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what is slow for ``contrib/test.sh --fast``: tests on the live cluster, tests
    that run real training processes, and the long simulations (``slow``); run those first."""
    for item in items:
        if LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.live)
        if item.path.stem in JOB_MODULES:
            item.add_marker(pytest.mark.jobs)
    # The long tests first (each file's order kept): on several workers (contrib/test.sh) the
    # quick pure tests then fill the gaps instead of one worker running the live ones last.
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in ("live", "jobs", "slow")))
