"""The GPU catalog: what Mosaic knows of each GPU type, from ``builtin/gpus.toml``.

One table per type: memory (GB), dense fp16 tensor peak (TFLOP/s), GPUs per server and the
bandwidth inside it where a paper's testbed gives them, and the name Slurm gives the type
(GRES type / node feature); plus the order in which a type without measurements borrows
another's (``fallback``). ``builtin/README.md`` says where each number comes from. Every
pricer and estimate reads GPU facts here; a node's own memory may differ from its type's
(``gpu_mem_gb`` of a cluster TOML node group, :attr:`planner.core.model.Node.gpu_mem_gb`).

Pure: the bundled file is read once, through :func:`catalog`; :func:`parse_catalog` parses
any text, and its errors name the file, the line of the type's table and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from planner.core.errors import ConfigError
from planner.core.fields import Fields

SOURCE = "profiles/builtin/gpus.toml"
_TYPE_KEYS = ("mem_gb", "peak_tflops", "gpus_per_node", "intra_gb_s", "slurm_feature")


@dataclass(frozen=True, slots=True)
class GpuType:
    """One GPU type of the catalog (module docstring); ``None``: the catalog does not say."""

    name: str
    mem_gb: float
    peak_tflops: float | None = None
    gpus_per_node: int | None = None
    intra_gb_s: float | None = None
    slurm_feature: str = ""

    def __post_init__(self) -> None:
        if not self.slurm_feature:
            object.__setattr__(self, "slurm_feature", self.name)


@dataclass(frozen=True, slots=True)
class GpuCatalog:
    """The GPU types by (lower-case) name, and the fallback order."""

    types: Mapping[str, GpuType]
    fallback: tuple[str, ...]

    def get(self, gpu_type: str | None) -> GpuType | None:
        """The type ``gpu_type`` names (any case); ``None``: not in the catalog."""
        return None if gpu_type is None else self.types.get(gpu_type.lower())

    def type_named_by(self, feature: str) -> str:
        """The type whose Slurm name (GRES type / node feature) is ``feature`` (any case); a
        name no type has is returned lower-cased, as it is."""
        name = feature.lower()
        return next((t.name for t in self.types.values() if t.slurm_feature == name), name)

    def mem_gb(self, gpu_type: str | None) -> float | None:
        """Memory of one GPU of ``gpu_type``; ``None`` for a type the catalog does not know."""
        found = self.get(gpu_type)
        return None if found is None else found.mem_gb

    def gpus_per_node(self) -> Mapping[str, int]:
        """GPUs per server of the types whose testbed the catalog gives."""
        return {n: t.gpus_per_node for n, t in self.types.items() if t.gpus_per_node is not None}

    def borrow_order(self, gpu_type: str) -> tuple[str, ...]:
        """``gpu_type`` first, then the fallback types (without repeating it)."""
        return tuple(dict.fromkeys((gpu_type, *self.fallback)))


def parse_catalog(text: str, source: str = SOURCE) -> GpuCatalog:
    """The catalog in ``text`` (TOML), strictly: unknown keys, missing or non-positive
    numbers and unknown fallback types are errors naming ``source``, the line and the key."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from e
    top = Fields(document, source, ConfigError)
    top.only(["types", "fallback"])
    raw_types = top.opt_object("types")
    if not raw_types:
        top.fail_key("types", "needs at least one [types.NAME] table")
    lines = text.splitlines()
    types: dict[str, GpuType] = {}
    for name, raw in raw_types.items():
        where = f"{source}:{_line_of(lines, name)}: [types.{name}]"
        if name != name.lower():
            raise ConfigError(f"{where}: type names are lower-case")
        types[name] = _gpu_type(name, Fields(raw, where, ConfigError))
    fallback = top.req_list("fallback") if top.has("fallback") else []
    for t in fallback:
        if not isinstance(t, str) or t not in types:
            top.fail_key("fallback", f"{t!r} is not a type of the catalog ({', '.join(types)})")
    features = [t.slurm_feature for t in types.values()]
    duplicate = next((f for f in features if features.count(f) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{source}: slurm_feature {duplicate!r} names more than one type")
    return GpuCatalog(MappingProxyType(types), tuple(fallback))


def _gpu_type(name: str, f: Fields) -> GpuType:
    f.only(_TYPE_KEYS)
    mem = _positive(f, "mem_gb", required=True)
    assert mem is not None
    gpn = f.opt_int("gpus_per_node", minimum=1)
    feature = f.opt_str("slurm_feature")
    return GpuType(
        name,
        mem,
        _positive(f, "peak_tflops"),
        gpn,
        _positive(f, "intra_gb_s"),
        feature.lower() if feature else name,
    )


def _positive(f: Fields, key: str, required: bool = False) -> float | None:
    if not required and not f.has(key):
        return None
    value = f.req_float(key, minimum=0.0)
    if value <= 0:
        f.fail_key(key, f"expected a positive number, got {value}")
    return value


def _line_of(lines: list[str], name: str) -> int:
    """1-based line of ``[types.NAME]`` (0 when written another way, e.g. inline)."""
    header = f"[types.{name}]"
    return next((i for i, line in enumerate(lines, 1) if line.strip().startswith(header)), 0)


@cache
def catalog() -> GpuCatalog:
    """The bundled catalog, parsed once per process."""
    text = resources.files("profiles").joinpath("builtin", "gpus.toml").read_text(encoding="utf-8")
    return parse_catalog(text)


def gpu_mem_gb(gpu_type: str | None) -> float | None:
    """Memory of one GPU of ``gpu_type`` from the bundled catalog; ``None``: unknown type."""
    return catalog().mem_gb(gpu_type)
