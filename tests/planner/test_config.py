import pytest

from planner.config import PRESETS, build_scheduler, config_from_mapping, preset
from planner.core.errors import ConfigError
from planner.registry import Registry, StageContext
from planner.stages import ORDERINGS, SHAPINGS
from profiles.store import ProfileStore


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


@pytest.mark.parametrize("shaping", ["proportional", "opt", "tune"])
def test_a_stage_given_another_component_drops_the_presets_options_for_it(shaping):
    # mosaic's shaping option (placement_first) is Synergy-Tune's: another shaping starts from
    # its own defaults, the same one keeps it, and options given for the stage still apply.
    config = config_from_mapping({"preset": "mosaic", "shaping": shaping})
    assert config.options.get("shaping") == ({"placement_first": True} if shaping == "tune" else None)
    assert type(build_scheduler(config).shaping) is type(
        SHAPINGS.create(shaping, {}, StageContext(ProfileStore.builtin()))
    )
    assert preset("mosaic").with_overrides(shaping=shaping).options.get("shaping") == config.options.get(
        "shaping"
    )
    table = {"preset": "mosaic", "shaping": shaping, "options": {"shaping": {"tolerance": 0.1}}}
    given = config_from_mapping(table).options["shaping"]
    assert given == ({"placement_first": True, "tolerance": 0.1} if shaping == "tune" else {"tolerance": 0.1})


def test_the_schedulers_restart_cost_reaches_every_stage_that_weighs_restarts():
    # One restart cost for the scheduler (Rubick's δ, Crius's charge); a stage's own option wins.
    rubick = build_scheduler(config_from_mapping({"preset": "rubick", "restart_cost_s": 260}))
    assert rubick.ordering.restart_cost_s == 260.0 and rubick.reconfiguration.restart_cost_s == 260.0
    crius = build_scheduler(config_from_mapping({"preset": "crius", "restart_cost_s": 260}))
    assert crius.reconfiguration.restart_cost_s == 260.0
    table = {
        "preset": "rubick",
        "restart_cost_s": 260,
        "options": {"reconfiguration": {"restart_cost_s": 60}},
    }
    mixed = build_scheduler(config_from_mapping(table))
    assert mixed.ordering.restart_cost_s == 260.0 and mixed.reconfiguration.restart_cost_s == 60.0
    composed = build_scheduler(config_from_mapping({"preset": "mosaic", "restart_cost_s": 260}))
    assert composed.ordering.restarts.restart_cost_s == 260.0
    stage = composed.reconfiguration
    assert stage.rubick.restart_cost_s == stage.crius.restart_cost_s == 260.0
    default = build_scheduler(PRESETS["rubick"])
    assert default.ordering.restart_cost_s == default.reconfiguration.restart_cost_s == 30.0


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
        ({"preset": "rubick", "restart_cost_s": -1}, r"key 'restart_cost_s'.*>= 0"),
        ({"preset": "rubick", "restart_cost_s": "slow"}, r"key 'restart_cost_s'"),
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
