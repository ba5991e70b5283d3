"""``mosaic presets``: the presets by tier, and how each runs on the live controller."""

from __future__ import annotations

from planner.config import PRESET_TIERS, PRESETS
from slurm_plugin.cli.main import main


def test_every_preset_is_in_exactly_one_tier_and_mosaic_alone_is_recommended():
    tiered = [name for names in PRESET_TIERS.values() for name in names]
    assert sorted(tiered) == sorted(PRESETS) and len(tiered) == len(set(tiered))
    assert list(PRESET_TIERS) == ["recommended", "paper reproductions", "baselines and ablations"]
    assert PRESET_TIERS["recommended"] == ("mosaic",)
    assert {"tiresias", "rubick", "crius", "sjf-bsbf", "synergy-tune", "tesserae-t"} <= set(
        PRESET_TIERS["paper reproductions"]
    )


def _sections(out: str) -> dict[str, dict[str, str]]:
    """Tier heading -> preset -> its live line."""
    sections: dict[str, dict[str, str]] = {}
    current = last = None
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = line
            sections[current] = {}
        elif current and line.startswith("  ") and line.strip().startswith("live: "):
            sections[current][last] = line.strip().removeprefix("live: ")
        elif current and line.startswith("  ") and line.strip():
            last = line.split()[0]
        elif not line.strip():
            current = None
    return sections


def test_mosaic_presets_lists_the_tiers_and_whether_each_preset_runs_live(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    sections = _sections(out)
    headings = list(sections)
    assert headings[0] == "Recommended:" and headings[1].startswith("Paper reproductions")
    assert headings[2] == "Baselines and ablations:"
    assert list(sections["Recommended:"]) == ["mosaic"]
    assert list(sections[headings[1]]) == list(PRESET_TIERS["paper reproductions"])
    assert list(sections[headings[2]]) == list(PRESET_TIERS["baselines and ablations"])
    live = {name: text for section in sections.values() for name, text in section.items()}
    assert set(live) == set(PRESETS) and all(text.startswith("yes") for text in live.values())
    for name in ("crius", "crius-ddl", "sjf-bsbf", "sjf-ffs"):
        assert "event-driven: the daemon plans at each arrival and completion" in live[name]
    assert live["mosaic"] == "yes: plans every round_s"
    assert "gres/shard" in live["tesserae-t"] and "gres/shard" not in live["rubick"]
    assert "--duration-s" in live["sjf"] and "--duration-s" not in live["las"]
    # The components each preset composes are still listed.
    assert "policy=tiresias preemptive" in out and "reconfiguration:" in out
