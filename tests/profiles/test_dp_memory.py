"""The data-parallel memory check of Crius's baselines (dp_mem.json, the artifact's rule)."""

from __future__ import annotations

import pytest

from planner.core.errors import InputError
from profiles.perfmodel.dp_memory import DpMemory, builtin_dp_memory, parse_dp_memory


def test_the_artifacts_rule_on_the_bundled_table():
    memory = builtin_dp_memory()
    # bert_760M at batch 128 needs 24.129 GB on 1 GPU: x 1.2 = 28.95 GB <= 0.8 x 40 (A100) and
    # <= 0.8 x 48 (A40), > 0.8 x 32 (V100) and > 0.8 x 24 (A10).
    assert memory.fits("bert_760M", 128, "a100", 1) is True
    assert memory.fits("bert_760M", 128, "a40", 1) is True
    assert memory.fits("bert_760M", 128, "v100", 1) is False
    assert memory.fits("bert-760M", 128, "a10", 1) is False  # names match as everywhere
    # 13.519 GB on 2 GPUs: 16.2 GB fits even the A10's 19.2 GB; -1 (not available) never fits.
    assert memory.fits("bert_760M", 128, "a10", 2) is True
    assert memory.fits("bert_760M", 128, "a100", 16) is False
    assert memory.fits("wide_resnet_4B", 256, "a100", 8) is False  # no data-parallel run fits
    assert memory.fits("bert_760M", 64, "a100", 4) is False  # not profiled at that batch
    assert memory.fits("resnet50", 128, "a100", 4) is None  # not Crius's model: cannot say
    assert memory.fits("bert_760M", 128, "h100", 4) is None
    assert memory.fits("bert_760M", 128, "a100", 3) is None


def test_zero_fits_and_bad_documents_are_named():
    memory = DpMemory(parse_dp_memory({"m_1B_8": [0, 0, 0, 0, 0]}))
    assert memory.fits("m_1B", 8, "a10", 4) is True
    with pytest.raises(InputError, match="'m_1B_x'"):
        parse_dp_memory({"m_1B_x": [1, 2, 3, 4, 5]})
    with pytest.raises(InputError, match="m_1B_8: expected 5 numbers"):
        parse_dp_memory([{"m_1B_8": [1, 2]}])
    with pytest.raises(InputError, match="expected"):
        parse_dp_memory("nope")
