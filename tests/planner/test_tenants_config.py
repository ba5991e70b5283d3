"""``[[tenants]]`` in the scheduler configuration: parsed, validated, handed to the stages."""

from __future__ import annotations

import argparse

import pytest

from planner.config import Tenant, build_scheduler, config_from_mapping
from planner.core.errors import ConfigError
from slurm_plugin.cli.scheduler_args import add_scheduler_args, scheduler_config


def test_tenants_are_read_and_reach_the_orderings():
    config = config_from_mapping(
        {"preset": "rubick", "tenants": [{"name": "a", "gpu_quota": 64}, {"name": "b", "gpu_quota": 0}]}
    )
    assert config.tenants == (Tenant("a", 64), Tenant("b", 0))
    assert build_scheduler(config).ordering.quotas == {"a": 64, "b": 0}
    assert config_from_mapping({"preset": "antman"}).tenants == ()


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        ({"name": "a"}, r"key 'tenants': expected a list"),
        ([{"name": "a"}], r"tenants\[0\]: missing required key 'gpu_quota'"),
        ([{"gpu_quota": 1}], r"tenants\[0\]: missing required key 'name'"),
        ([{"name": " ", "gpu_quota": 1}], r"key 'name': must not be empty"),
        ([{"name": "a", "gpu_quota": -1}], r"tenants\[0\]: key 'gpu_quota'"),
        ([{"name": "a", "gpu_quota": 1}, {"name": "a", "gpu_quota": 2}], r"tenants\[1\].*listed twice"),
        ([{"name": "a", "gpu_quota": 1, "gpus": 2}], r"tenants\[0\].*gpus"),
        (["a"], r"tenants\[0\]: expected an object"),
    ],
)
def test_bad_tenants_are_clear_errors(tenants, message):
    with pytest.raises(ConfigError, match=message):
        config_from_mapping({"preset": "rubick", "tenants": tenants})


def test_the_cli_reads_top_level_tenants_from_the_config_file(tmp_path):
    path = tmp_path / "mosaic.toml"
    path.write_text('[scheduler]\npreset = "antman"\n\n[[tenants]]\nname = "vision"\ngpu_quota = 16\n')
    parser = argparse.ArgumentParser()
    add_scheduler_args(parser, "fifo")
    config = scheduler_config(parser.parse_args(["--config", str(path)]))
    assert config.name == "antman" and config.tenants == (Tenant("vision", 16),)
