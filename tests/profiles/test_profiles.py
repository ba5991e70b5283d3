import csv
import io
import logging
from importlib import resources

import pytest

from planner.core.errors import ProfileError
from profiles import ProfileStore, SensitivityMatrix
from profiles.builtin import builtin_colocation
from profiles.document import profiles_from_document
from profiles.names import normalise, split_batch_suffix
from profiles.schema import ColocationKey
from profiles.speed import cpu_mem_factor, gpu_type_factor

STORE = ProfileStore.builtin()


def test_names_ignore_case_punctuation_and_follow_aliases():
    assert normalise("ResNet-18") == normalise("resnet_18") == "resnet18"
    assert split_batch_suffix("ResNet-18 (batch size 128)") == ("ResNet-18", 128)
    for label in ["resnet18", "res18", "ResNet-18", "RESNET_18", "ResNet-18 (batch size 64)"]:
        assert STORE.resolve(label).name == "resnet18"
    assert STORE.resolve("Transformer-XL").name == "transformer"


def test_every_canonical_model_of_the_design_exists():
    design = [  # the canonical names every trace may use
        *("resnet18", "resnet50", "alexnet", "shufflenet", "mobilenet", "vgg19", "dcgan", "pointnet", "vae"),
        *(
            "gnmt",
            "lstm",
            "transformer",
            "bert",
            "m5",
            "deepspeech",
            "a3c",
            "cyclegan",
            "lm",
            "recommendation",
        ),
        *("gpt2", "gpt3-medium", "gpt3-xl", "gpt3-3b", "t5", "roberta", "vit", "llama2-7b", "llama-30b"),
        *("wideresnet", "moe"),
    ]
    assert set(design) <= set(STORE.names())


def test_unknown_model_is_neutral_and_reported_once(caplog):
    store = ProfileStore.builtin()
    with caplog.at_level(logging.WARNING):
        first = store.resolve("my-secret-model")
        store.resolve("my-secret-model")
    assert first.is_neutral and first.steps_per_s("v100", 1) is None
    assert store.unknown_models == {"my-secret-model"}
    assert len([r for r in caplog.records if "my-secret-model" in r.message]) == 1


def test_gavel_measurements_are_loaded_as_published():
    text = (
        resources.files("profiles").joinpath("builtin", "data", "gavel_isolated_throughputs.csv").read_text()
    )
    row = next(
        r
        for r in csv.DictReader(io.StringIO(text))
        if r["worker_type"] == "v100"
        and r["model"] == "ResNet-50 (batch size 64)"
        and r["scale_factor"] == "4"
    )
    p = STORE.resolve("resnet50")
    assert p.steps_per_s("v100", 4, 64) == float(row["steps_per_s"])
    spread = p.steps_per_s("v100", 4, 64, consolidated=False)
    assert spread is not None and spread != p.steps_per_s("v100", 4, 64)


def test_missing_gpu_counts_scale_linearly_from_one_gpu_and_batches_snap_to_nearest():
    p = STORE.resolve("a3c")  # Gavel measured A3C on 1 GPU only
    one = p.steps_per_s("v100", 1)
    assert one is not None and p.steps_per_s("v100", 8) == pytest.approx(8 * one)
    r50 = STORE.resolve("resnet50")
    assert r50.nearest_batch(60) == 64 and r50.steps_per_s("v100", 1, 60) == r50.steps_per_s("v100", 1, 64)


def test_synergy_sensitivity_matrix():
    m = STORE.resolve("resnet18").sensitivity
    assert m is not None
    assert m.at(3, 62.5) == 1.0  # GPU-proportional reference
    assert m.at(9, 62.5) == pytest.approx(2.4)  # Synergy: ResNet-18 2.4x at 9 CPUs/GPU
    assert m.at(4.5, 62.5) == pytest.approx((1.3 + 1.53) / 2)  # linear between 4 and 5 CPUs
    assert m.at(100, 1000) == pytest.approx(2.4)  # clamped at the grid's edge
    assert STORE.resolve("resnet18").ideal_cpus_per_gpu == 9
    assert (
        cpu_mem_factor(
            STORE.resolve("bert"),
            cpus_per_gpu=1,
            mem_gb_per_gpu=20,
            reference_cpus_per_gpu=3,
            reference_mem_gb_per_gpu=62.5,
        )
        == 1.0
    )


def test_gpu_type_factor():
    p = STORE.resolve("resnet50")
    ratio = gpu_type_factor(p, gpu_type="k80", reference_type="v100", num_gpus=1, batch_size=64)
    assert ratio == pytest.approx(p.steps_per_s("k80", 1, 64) / p.steps_per_s("v100", 1, 64))
    assert gpu_type_factor(p, gpu_type="h100", reference_type="v100", num_gpus=1, batch_size=64) == 1.0
    assert gpu_type_factor(p, gpu_type="k80", reference_type=None, num_gpus=1, batch_size=64) == 1.0


def test_colocation_table_has_both_orders_and_marks_impossible_pairs():
    table = builtin_colocation()
    key = ColocationKey("v100", "resnet50", 64, 1, "transformer", 64, 1)
    a, b = table[key]
    assert table[ColocationKey("v100", "transformer", 64, 1, "resnet50", 64, 1)] == (b, a)
    assert any(v == (0.0, 0.0) for v in table.values())


def _doc(**model):
    base = {"task": "language", "throughput": [{"gpu_type": "A100", "num_gpus": 1, "steps_per_s": 2.0}]}
    base.update(model)
    return {"format": "mosaic-profiles/1", "models": {"mine": base}}


def test_site_profiles_add_and_override():
    extra = profiles_from_document(_doc(aliases=["my-model"]))
    store = STORE.with_profiles(extra.values())
    assert store.resolve("My_Model").steps_per_s("a100", 1) == 2.0
    override = profiles_from_document({"format": "mosaic-profiles/1", "models": {"res18": {"task": "image"}}})
    assert STORE.with_profiles(override.values()).resolve("resnet18").is_neutral


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"format": "v0", "models": {}}, "expected 'mosaic-profiles/1'"),
        (_doc(colour="blue"), r"model 'mine': unknown key 'colour'"),
        (
            _doc(throughput=[{"gpu_type": "a100", "num_gpus": 0, "steps_per_s": 1}]),
            r"throughput\[0\]: key 'num_gpus'",
        ),
        (
            _doc(sensitivity={"cpus_per_gpu": [1, 2], "mem_gb_per_gpu": [10], "throughput": [[1.0]]}),
            r"sensitivity: key 'throughput': has 1 rows",
        ),
        (
            _doc(sensitivity={"cpus_per_gpu": [2, 1], "mem_gb_per_gpu": [10], "throughput": [[1], [1]]}),
            "strictly increasing",
        ),
        ("{nope", "not valid JSON"),
    ],
)
def test_bad_profile_documents(doc, message):
    with pytest.raises(ProfileError, match=message):
        profiles_from_document(doc, source="site.json")


def test_sensitivity_matrix_bilinear():
    m = SensitivityMatrix((1.0, 3.0), (10.0, 20.0), ((1.0, 2.0), (3.0, 4.0)))
    assert m.at(2, 15) == pytest.approx(2.5)
    assert m.at(0, 0) == 1.0 and m.at(9, 99) == 4.0


def test_zero_throughputs_are_rejected_because_a_job_would_never_finish():
    with pytest.raises(ProfileError, match="must hold positive numbers"):
        profiles_from_document(
            _doc(sensitivity={"cpus_per_gpu": [1], "mem_gb_per_gpu": [10], "throughput": [[0]]})
        )
    with pytest.raises(ProfileError, match="must be positive"):
        profiles_from_document(_doc(throughput=[{"gpu_type": "a100", "num_gpus": 1, "steps_per_s": 0}]))
