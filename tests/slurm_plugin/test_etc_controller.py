"""The controller's example files under etc/ stay valid."""

from __future__ import annotations

import tomllib
from pathlib import Path

from slurm_plugin.controller.config import controller_config

ETC = Path(__file__).resolve().parents[2] / "etc"


def test_example_controller_table_is_valid():
    document = tomllib.loads((ETC / "mosaic.toml").read_text())
    config = controller_config(document["controller"], "etc/mosaic.toml: [controller]")
    assert config.partitions == ("gpu",) and config.round_s == 300.0


def test_systemd_unit_and_cron_line_run_the_controller():
    unit = (ETC / "mosaic-controller.service").read_text()
    assert "ExecStart=/opt/mosaic/.venv/bin/mosaic controller --config /etc/mosaic/mosaic.toml" in unit
    cron = [line for line in (ETC / "mosaic-controller.cron").read_text().splitlines() if line[:1] != "#"]
    assert len(cron) == 1 and "controller --once --config" in cron[0]


def test_job_submit_lua_holds_jobs_of_the_managed_partition():
    lua = (ETC / "job_submit.lua").read_text()
    assert "job_desc.priority = 0" in lua and "MANAGED = { gpu = true }" in lua
