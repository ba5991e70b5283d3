import pytest

from planner.config import PRESETS, build_scheduler, config_from_mapping, preset
from planner.core.errors import ConfigError
from planner.registry import Registry
from planner.stages import ORDERINGS


def test_every_preset_builds():
    for name in PRESETS:
        assert build_scheduler(preset(name)).name == name


def test_published_preemption_defaults():
    expected = {"fifo": False, "sjf": False, "srtf": True, "las": True, "tiresias": True, "ftf": True}
    assert {n: build_scheduler(preset(n)).preemptive for n in expected} == expected
    assert build_scheduler(preset("las").with_overrides(preemptive=False)).preemptive is False


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown scheduler preset 'tiresia'; known presets: fifo, sjf"):
        preset("tiresia")


def test_unknown_component_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown ordering policy 'lottery'; known: .*fifo.*tiresias"):
        build_scheduler(preset("fifo").with_overrides(policy="lottery"))
    with pytest.raises(ConfigError, match=r"unknown packing 'magic'; known: .*gavel, tesserae"):
        build_scheduler(preset("fifo").with_overrides(packing="magic"))


def test_scheduler_table_with_options():
    config = config_from_mapping(
        {
            "preset": "tiresias",
            "preemptive": False,
            "options": {"policy": {"queue_thresholds_gpu_s": [100, 1000], "promote_knob": 0}},
        }
    )
    s = build_scheduler(config)
    assert s.preemptive is False
    assert s.ordering.thresholds_gpu_s == (100.0, 1000.0) and s.ordering.promote_knob == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"preset": "fifo", "polcy": "las"}, r"unknown key 'polcy'; valid keys: .*policy"),
        ({"preset": "tiresias", "options": {"policy": {"queues": 3}}}, r"unknown key 'queues'"),
        ({"preset": "tiresias", "options": {"tiresias": {"promote_knob": 3}}}, r"unknown stage 'tiresias'"),
        (
            {"preset": "tiresias", "options": {"packing": {"max_gpus": 1}}},
            r"options given for the packing stage",
        ),
        (
            {"preset": "tiresias", "options": {"policy": {"queue_thresholds_gpu_s": [10, 5]}}},
            "strictly increasing",
        ),
        (
            {"preset": "sjf", "options": {"policy": {"size": "weight"}}},
            r"expected one of duration, gpu_time, gpus",
        ),
        ({"preset": "fifo", "preemptive": "yes"}, "expected true or false"),
    ],
)
def test_bad_scheduler_tables(table, message):
    with pytest.raises(ConfigError, match=message):
        build_scheduler(config_from_mapping(table))


def test_registry_rejects_duplicates_and_classes_without_a_factory():
    registry: Registry[object] = Registry("thing")

    @registry.register("a")
    class A:
        @classmethod
        def from_options(cls, options, context):
            return cls()

    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a")(A)
    with pytest.raises(TypeError, match="from_options"):
        registry.register("b")(type("B", (), {}))
    assert registry.names() == ("a",)
    assert "fifo" in ORDERINGS
