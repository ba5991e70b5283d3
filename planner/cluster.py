"""Cluster descriptions: the ``[[nodes]]`` TOML format (docs/reference.md "Cluster TOML").

.. code-block:: toml

    [[nodes]]
    count = 16          # how many identical servers
    gpus = 8
    gpu_type = "v100"
    cpus = 24
    mem_gb = 500
    name_prefix = "n"   # optional; servers are named n1, n2, ...
    intra_gbps = 300    # optional: GPU-to-GPU bandwidth inside a server
    inter_gbps = 100    # optional: network bandwidth between servers
    gpu_mem_gb = 80     # optional: memory of one GPU (default: the GPU catalog's for gpu_type)

Node names are ``<name_prefix><i>`` with ``i`` counting from 1 per prefix across all
groups that share it, so two groups with the default prefix never collide.
"""

from __future__ import annotations

import tomllib
from typing import Any

from planner.core.errors import ClusterError
from planner.core.fields import Fields
from planner.core.model import Node
from profiles.gpus import gpu_mem_gb

MAX_NODES = 100_000
"""More servers than any cluster has: a larger ``count`` is a typo, not a cluster to build."""
_NODE_KEYS = (
    "count",
    "gpus",
    "gpu_type",
    "cpus",
    "mem_gb",
    "name_prefix",
    "intra_gbps",
    "inter_gbps",
    "gpu_mem_gb",
)


def cluster_from_toml(text: str, source: str = "cluster") -> tuple[Node, ...]:
    """Parse cluster TOML text into nodes (no file access: the caller reads the file)."""
    try:
        document = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer of more than 4,300 digits
        raise ClusterError(f"{source}: not valid TOML: {e}") from e
    except RecursionError:
        raise ClusterError(f"{source}: not valid TOML: nested too deeply") from None
    return cluster_from_mapping(document, source)


def cluster_from_mapping(document: Any, source: str = "cluster") -> tuple[Node, ...]:
    top = Fields(document, source, ClusterError)
    top.only(["nodes", "name", "description"])
    groups = top.req_list("nodes")
    if not groups:
        top.fail_key("nodes", "needs at least one [[nodes]] table")
    nodes: list[Node] = []
    next_index: dict[str, int] = {}
    for i, raw in enumerate(groups):
        f = Fields(raw, f"{source}: nodes[{i}]", ClusterError)
        f.only(_NODE_KEYS)
        count = f.req_int("count", minimum=1)
        if len(nodes) + count > MAX_NODES:
            f.fail_key("count", f"{count} servers make more than {MAX_NODES} in all")
        prefix = f.opt_str("name_prefix") or "n"
        gpus = f.req_int("gpus", minimum=1)
        cpus = f.req_int("cpus", minimum=1)
        mem_gb = f.req_float("mem_gb", minimum=0.0)
        gpu_type = f.req_str("gpu_type").lower()
        intra = f.opt_float("intra_gbps", minimum=0.0)
        inter = f.opt_float("inter_gbps", minimum=0.0)
        gpu_mem = f.opt_float("gpu_mem_gb", minimum=0.0)
        if gpu_mem is not None and gpu_mem <= 0:
            f.fail_key("gpu_mem_gb", f"expected a positive number, got {gpu_mem}")
        start = next_index.get(prefix, 1)
        for k in range(count):
            nodes.append(Node(f"{prefix}{start + k}", gpus, gpu_type, cpus, mem_gb, intra, inter, gpu_mem))
        next_index[prefix] = start + count
    return tuple(nodes)


def gpu_mem_gb_of(node: Node) -> float | None:
    """Memory of one GPU of ``node``: its own (``gpu_mem_gb``), else its type's in the GPU
    catalog; ``None`` for a type the catalog does not know."""
    return node.gpu_mem_gb if node.gpu_mem_gb is not None else gpu_mem_gb(node.gpu_type)
