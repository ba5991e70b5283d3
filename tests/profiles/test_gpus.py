"""The GPU catalog (profiles/builtin/gpus.toml): one table, read strictly, used by every pricer."""

from __future__ import annotations

import pytest

from planner.core.errors import ConfigError
from profiles.gpus import catalog, gpu_mem_gb, parse_catalog
from profiles.perfmodel.agile import GPU_SPECS
from profiles.perfmodel.dp_memory import device_memory_gb
from profiles.perfmodel.rubick_measured import GPU_MEM_GB, GPUS_PER_NODE
from profiles.plan_pricing import A800_MEMORY_GB

GOOD = """
fallback = ["v100"]

[types.v100]
mem_gb = 32
peak_tflops = 125.0
gpus_per_node = 8

[types.a100]
mem_gb = 40.0
slurm_feature = "A100_40G"
"""


def test_the_bundled_catalog_holds_the_papers_testbeds():
    c = catalog()
    # Crius's devices (A100 40 GB PCIe x4, V100 32 GB x16, A40 48 GB x2, A10 24 GB x2), Rubick's
    # A800 80 GB x8, and Gavel's measured types as the fallback order, newest first.
    assert {t: c.types[t].mem_gb for t in ("a100", "v100", "a40", "a10", "a800")} == {
        "a100": 40.0,
        "v100": 32.0,
        "a40": 48.0,
        "a10": 24.0,
        "a800": 80.0,
    }
    assert c.gpus_per_node() == {"a100": 4, "a800": 8, "a40": 2, "a10": 2, "v100": 16}
    assert c.fallback == ("v100", "p100", "k80")
    assert c.borrow_order("a100") == ("a100", "v100", "p100", "k80")
    assert c.borrow_order("p100") == ("p100", "v100", "k80")
    assert gpu_mem_gb("H100") == 80.0 and gpu_mem_gb("nope") is None and gpu_mem_gb(None) is None


def test_every_user_reads_the_catalog():
    c = catalog()
    assert {t: (s.mem_gb, s.peak_tflops, s.gpus_per_node) for t, s in GPU_SPECS.items()} == {
        t: (c.types[t].mem_gb, c.types[t].peak_tflops, c.types[t].gpus_per_node) for t in GPU_SPECS
    }
    assert GPU_MEM_GB == A800_MEMORY_GB == c.types["a800"].mem_gb
    assert c.types["a800"].gpus_per_node == GPUS_PER_NODE
    assert device_memory_gb("A40") == 48.0
    assert device_memory_gb("a800") is None  # dp_mem.json's rule is the artifact's, on its devices


def test_parse_reads_every_field_and_defaults_the_slurm_name():
    c = parse_catalog(GOOD, "g.toml")
    assert c.types["v100"].mem_gb == 32.0 and c.types["v100"].slurm_feature == "v100"
    assert c.types["a100"].slurm_feature == "a100_40g"
    assert c.types["a100"].peak_tflops is None and c.types["a100"].gpus_per_node is None
    assert c.get("A100") is c.types["a100"]
    assert c.type_named_by("A100_40G") == "a100" and c.type_named_by("V100") == "v100"
    assert c.type_named_by("Mystery") == "mystery"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fallback = [", r"g\.toml: not valid TOML"),
        ("[types.a100]\npeak_tflops = 1.0\n", r"g\.toml:1: \[types\.a100\]: missing required key 'mem_gb'"),
        ("\n[types.a100]\nmem_gb = 0\n", r"g\.toml:2: \[types\.a100\]: key 'mem_gb': expected a positive"),
        ("[types.a100]\nmem_gb = -4\n", r"key 'mem_gb': expected a number >= 0"),
        ("[types.a100]\nmem_gb = 40\nmemory = 2\n", r"unknown key 'memory'; valid keys: gpus_per_node"),
        ("[types.a100]\nmem_gb = 40\ngpus_per_node = 0\n", r"key 'gpus_per_node'"),
        ("[types.A100]\nmem_gb = 40\n", r"type names are lower-case"),
        ('fallback = ["h100"]\n[types.a100]\nmem_gb = 40\n', r"key 'fallback': 'h100' is not a type"),
        ("fallback = []\n", r"key 'types': needs at least one"),
        ('[types.a]\nmem_gb = 1\n[types.b]\nmem_gb = 1\nslurm_feature = "a"\n', "names more than one"),
        ("colour = 1\n[types.a]\nmem_gb = 1\n", r"unknown key 'colour'"),
    ],
)
def test_a_bad_catalog_is_an_error_naming_file_line_and_key(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_catalog(text, "g.toml")
