import pytest

from planner.cluster import cluster_from_toml, gpu_mem_gb_of
from planner.core.errors import ClusterError


def test_groups_expand_to_named_nodes():
    nodes = cluster_from_toml(
        """
        [[nodes]]
        count = 2
        gpus = 8
        gpu_type = "A100"
        cpus = 64
        mem_gb = 512
        [[nodes]]
        count = 1
        gpus = 4
        gpu_type = "v100"
        cpus = 24
        mem_gb = 256
        inter_gbps = 100
        [[nodes]]
        count = 1
        gpus = 4
        gpu_type = "t4"
        cpus = 8
        mem_gb = 64
        name_prefix = "cpu"
        """
    )
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "cpu1"]
    assert nodes[0].gpu_type == "a100" and nodes[2].inter_gbps == 100.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[[nodes]]\ncount=1\ngpus=4\ngpu_type='v'\ncpus=4\nmem_gb=8\ncolour='red'",
            r"nodes\[0\]: unknown key 'colour'; valid keys: count, cpus, gpu_mem_gb, gpu_type, gpus",
        ),
        ("[[nodes]]\ncount=1\ngpus=4\ncpus=4\nmem_gb=8", "missing required key 'gpu_type'"),
        (
            "[[nodes]]\ncount=0\ngpus=4\ngpu_type='v'\ncpus=4\nmem_gb=8",
            "key 'count': expected an integer >= 1",
        ),
        ("nodes = []", "needs at least one"),
        (
            "[[nodes]]\ncount=1\ngpus=4\ngpu_type='v'\ncpus=4\nmem_gb=8\ngpu_mem_gb=0",
            r"nodes\[0\]: key 'gpu_mem_gb': expected a positive number, got 0.0",
        ),
        (
            "[[nodes]]\ncount=1\ngpus=4\ngpu_type='v'\ncpus=4\nmem_gb=8\ngpu_mem_gb='80GB'",
            r"key 'gpu_mem_gb': expected a number",
        ),
        ("[[nodes]\n", "not valid TOML"),
    ],
)
def test_bad_cluster_files_say_what_and_where(text, message):
    with pytest.raises(ClusterError, match=message):
        cluster_from_toml(text, source="c.toml")


def test_gpu_memory_is_the_groups_own_else_the_catalogs():
    nodes = cluster_from_toml(
        """
        [[nodes]]
        count = 1
        gpus = 8
        gpu_type = "a100"
        cpus = 64
        mem_gb = 512
        gpu_mem_gb = 80
        [[nodes]]
        count = 1
        gpus = 4
        gpu_type = "A100"
        cpus = 24
        mem_gb = 256
        [[nodes]]
        count = 1
        gpus = 4
        gpu_type = "mystery"
        cpus = 24
        mem_gb = 256
        """
    )
    assert [n.gpu_mem_gb for n in nodes] == [80.0, None, None]
    # The catalog's A100 is the 40 GB one (profiles/builtin/gpus.toml); a type it does not
    # know has no memory to check against.
    assert [gpu_mem_gb_of(n) for n in nodes] == [80.0, 40.0, None]
