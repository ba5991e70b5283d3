"""The example files under etc/ stay valid."""

import tomllib
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.config import build_scheduler, config_from_mapping

ETC = Path(__file__).resolve().parent.parent / "etc"


@pytest.mark.parametrize("path", sorted((ETC / "clusters").glob("*.toml")), ids=lambda p: p.name)
def test_example_clusters_parse(path):
    nodes = cluster_from_toml(path.read_text(), source=str(path))
    assert len({n.name for n in nodes}) == len(nodes) > 0


def test_example_config_builds_a_scheduler():
    document = tomllib.loads((ETC / "mosaic.toml").read_text())
    scheduler = build_scheduler(config_from_mapping(document["scheduler"]))
    assert scheduler.name == "mosaic" and scheduler.ordering.las.promote_knob == 8
