"""Normalised packed throughput: measured pairs, and each estimation rule in order."""

import pytest

from profiles import ProfileStore
from profiles.colocation import ColocationModel, Side
from profiles.document import profiles_from_document

STORE = ProfileStore.builtin()
MODEL = ColocationModel(STORE)


def test_measured_pair_is_packed_over_isolated():
    table = STORE.colocation_table()
    from profiles.schema import ColocationKey

    packed = table[ColocationKey("v100", "resnet18", 128, 1, "recommendation", 2048, 1)]
    est = MODEL.estimate(Side("resnet18", 128, 1), Side("recommendation", 2048, 1), "v100")
    r18 = STORE.resolve("resnet18").steps_per_s("v100", 1, 128)
    rec = STORE.resolve("recommendation").steps_per_s("v100", 1, 2048)
    assert est.a == pytest.approx(packed[0] / r18) and est.b == pytest.approx(packed[1] / rec)
    assert est.source == "measured"
    swapped = MODEL.estimate(Side("recommendation", 2048, 1), Side("resnet18", 128, 1), "v100")
    assert (swapped.a, swapped.b) == pytest.approx((est.b, est.a))


def test_pairs_that_cannot_share_are_kept_as_such():
    est = MODEL.estimate(Side("resnet50", 64, 4), Side("transformer", 64, 4), "v100")
    assert not est.fits and "cannot share" in est.source


def test_rules_in_order():
    # Another GPU type: measured on the newest known one.
    assert MODEL.estimate(Side("resnet18", 128, 1), Side("lm", 20, 1), "a100").source == "measured on v100"
    # Unmeasured models: the median of their tasks' measured pairs, then of everything.
    tasks = MODEL.estimate(Side("vgg19", 64, 1), Side("gpt3-xl", 512, 1), "a100")
    assert tasks.source == "median of measured image+language pairs" and 0 < tasks.a < 1
    anything = MODEL.estimate(Side("no-such", 1, 1), Side("other", 1, 1), "a100")
    assert anything.source == "median of all measured pairs" and anything.a == anything.b


def test_unmeasured_gpu_counts_keep_the_one_gpu_ratio():
    doc = {
        "format": "mosaic-profiles/1",
        "models": {
            "m": {
                "throughput": [{"gpu_type": "a100", "num_gpus": 1, "steps_per_s": 2.0}],
                "colocation": [
                    {
                        "with": "n",
                        "gpu_type": "a100",
                        "num_gpus": 1,
                        "steps_per_s": 1.5,
                        "with_steps_per_s": 0.5,
                    }
                ],
            },
            "n": {"throughput": [{"gpu_type": "a100", "num_gpus": 1, "steps_per_s": 1.0}]},
        },
    }
    store = ProfileStore(profiles_from_document(doc))
    model = ColocationModel(store)
    one = model.estimate(Side("m", None, 1), Side("n", None, 1), "a100")
    four = model.estimate(Side("m", None, 4), Side("n", None, 4), "a100")
    assert (one.a, one.b) == (0.75, 0.5)
    assert (four.a, four.b) == (0.75, 0.5) and "1-GPU ratio" in four.source


def test_noise_is_bounded_fixed_per_pair_and_seeded():
    a, b = Side("resnet18", 128, 1), Side("recommendation", 2048, 1)
    true = MODEL.estimate(a, b, "v100")
    noisy = ColocationModel(STORE, noise=0.5, seed=1)
    est = noisy.estimate(a, b, "v100")
    assert 0.5 * true.a <= est.a <= 1.5 * true.a and est.a != true.a
    assert ColocationModel(STORE, noise=0.5, seed=1).estimate(a, b, "v100") == est  # reproducible
    assert ColocationModel(STORE, noise=0.5, seed=2).estimate(a, b, "v100") != est
    with pytest.raises(ValueError, match="noise"):
        ColocationModel(STORE, noise=1.5)
