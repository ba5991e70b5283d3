"""The mosaic replan stress benchmark: its seed ranges and its sums over seeds."""

from __future__ import annotations

import argparse
import re

import pytest

from benchmarks.soak.replan_stress_mosaic import seed_range, total


def test_a_seed_range_includes_both_ends_and_a_single_seed_is_one() -> None:
    assert seed_range("100-159") == range(100, 160)
    assert seed_range("7") == range(7, 8)


@pytest.mark.parametrize("text", ["x", "3-", "9-3", "1-2-3"])
def test_a_malformed_seed_range_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(text))):
        seed_range(text)


def test_the_total_sums_the_draws_of_every_seed() -> None:
    row = total("default", 3, range(1, 3))
    assert row["seeds"] == 2
    assert row["draws"] == 6
    assert row["gpus_changed"] + row["cpus_or_memory_changed"] <= 6
    assert row["seeds_changed"] == [r["seed"] for r in row["by_seed"]]


@pytest.mark.parametrize("variant", ["sharing", "tesserae-packing"])
def test_each_variant_plans_with_its_packing_stage(variant: str) -> None:
    from benchmarks.soak.replan_stress_mosaic import scheduler
    from planner.policies.mosaic.stages import MosaicPacking, TesseraeRigidPacking
    from planner.policies.sharing import SharedConsolidatedPlacement

    sched = scheduler(variant)
    assert isinstance(sched.placement, SharedConsolidatedPlacement)
    assert sched.placement.dissolve is (variant == "tesserae-packing")
    want = {"sharing": MosaicPacking, "tesserae-packing": TesseraeRigidPacking}[variant]
    assert type(sched.packing) is want
