"""Crius's measured best-plan iteration times, behind :class:`IterationTimeModel`.

Crius (EuroSys'26) profiled 16 large models (BERT, Wide-ResNet and MoE variants, 500M to
39B parameters), each at several global batch sizes, on device sets of four GPU types
(A100-40G, V100-32G, A40-48G, A10-24G) and 1 to 16 GPUs. Every value is the iteration time
of the *best* parallel plan (data x tensor x pipeline) that Alpa's search found for that
model, batch and device set; the plan itself is not recorded. A value of ``-1`` in the
data means no plan fits in GPU memory there (kept here as a record with no time).

The bundled file is ``builtin/data/crius/prof_database.json`` (provenance in
``builtin/data/crius/README.md``): ``{"optimal": {"<model>_<batch>": {"<hosts>_<type>_
<hosts>_n_<gpus per host>_d": seconds}}}``.

:class:`CriusTable` answers only what was measured: model (by name, case and punctuation
ignored, so ``bert_760M``, ``bert-760M`` and ``bert__760M`` are one model), global batch,
GPU type and GPU count. The query's plan is not compared (the time is the best plan's,
whichever plan is asked). Its ``nodes`` selects the layout when that layout was measured;
otherwise the consolidated layout (fewest nodes) answers, as Crius's own simulator looks
it up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from planner.core.errors import InputError
from profiles.names import normalise
from profiles.perfmodel.query import Query

SOURCE = "Crius prof_database (sjtu-epcc/arena, branch ae-eurosys, Apache-2.0)"
_DATA = ("builtin", "data", "crius", "prof_database.json")
DEVICES = ("a100", "v100", "a40", "a10")
"""The GPU types of Crius's testbed (its facts: ``profiles/builtin/gpus.toml``), in the artifact's order."""
_DEVICE = re.compile(r"^(?P<hosts>\d+)_(?P<type>[a-z0-9]+)_(?P<hosts2>\d+)_n_(?P<per_host>\d+)_d$")
_PARAMS = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>[MB])$")
_UNITS = {"M": 1e6, "B": 1e9}


@dataclass(frozen=True, slots=True)
class CriusRecord:
    """One measured device set of one model and global batch.

    ``model`` is Crius's label (``bert_760M``, ``wide_resnet_2B``, ``moe_2.4B``): ``family``
    plus ``size`` (parameters as written, ``params`` as a number). ``iter_time_s`` is the
    best plan's seconds per iteration (one global batch), ``None`` where no plan fits in
    memory. ``plan`` is the best plan when the data records it (the bundled data does not).
    """

    model: str
    family: str
    size: str
    params: float
    batch_size: int
    gpu_type: str
    gpus: int
    nodes: int
    iter_time_s: float | None
    plan: str | None = None

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def fits(self) -> bool:
        return self.iter_time_s is not None

    @property
    def samples_per_s(self) -> float | None:
        return None if self.iter_time_s is None else self.batch_size / self.iter_time_s


def _split_model(model: str) -> tuple[str, str, float]:
    family, _, size = model.rpartition("_")
    match = _PARAMS.match(size)
    if not family or match is None:
        raise InputError(f"Crius data: model {model!r} is not <family>_<params>")
    return family, size, float(match.group("value")) * _UNITS[match.group("unit")]


def parse_records(document: object) -> tuple[CriusRecord, ...]:
    """The records of a ``prof_database`` document (``{"optimal": {...}}``)."""
    if not isinstance(document, dict) or not isinstance(document.get("optimal"), dict):
        raise InputError('Crius data: expected {"optimal": {model_batch: {device: seconds}}}')
    records = []
    for label, devices in document["optimal"].items():
        model, _, batch = label.rpartition("_")
        if not batch.isdigit() or not isinstance(devices, dict):
            raise InputError(f"Crius data: bad entry {label!r}")
        family, size, params = _split_model(model)
        for device, seconds in devices.items():
            match = _DEVICE.match(device)
            if match is None or match.group("hosts") != match.group("hosts2"):
                raise InputError(f"Crius data: {label}: bad device set {device!r}")
            hosts, per_host = int(match.group("hosts")), int(match.group("per_host"))
            value = float(seconds)
            records.append(
                CriusRecord(
                    model=model,
                    family=family,
                    size=size,
                    params=params,
                    batch_size=int(batch),
                    gpu_type=match.group("type"),
                    gpus=hosts * per_host,
                    nodes=hosts,
                    iter_time_s=value if value > 0 else None,
                )
            )
    return tuple(records)


_Key = tuple[str, int, str, int]


@dataclass(frozen=True, slots=True)
class CriusTable:
    """Exact lookup over Crius's records (see the module docstring for what matches)."""

    records: tuple[CriusRecord, ...]
    _by_key: dict[_Key, tuple[CriusRecord, ...]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        grouped: dict[_Key, list[CriusRecord]] = {}
        for r in self.records:
            grouped.setdefault((normalise(r.model), r.batch_size, r.gpu_type.lower(), r.gpus), []).append(r)
        index = {k: tuple(sorted(v, key=lambda r: r.nodes)) for k, v in grouped.items()}
        object.__setattr__(self, "_by_key", index)

    @classmethod
    def of(cls, records: Iterable[CriusRecord]) -> CriusTable:
        return cls(tuple(sorted(records, key=_order)))

    @classmethod
    def builtin(cls) -> CriusTable:
        """The bundled measurements (cached)."""
        return builtin_crius()

    def _layouts(self, model: str, batch: int, gpu_type: str, gpus: int) -> tuple[CriusRecord, ...]:
        return self._by_key.get((normalise(model), batch, gpu_type.lower(), gpus), ())

    def record(
        self, model: str, batch: int, gpu_type: str, gpus: int, nodes: int | None = None
    ) -> CriusRecord | None:
        """The measured record: the layout over ``nodes`` if measured, else the consolidated one."""
        layouts = self._layouts(model, batch, gpu_type, gpus)
        if not layouts:
            return None
        for r in layouts:
            if r.nodes == nodes:
                return r
        return layouts[0]  # fewest nodes first

    def best_time_s(
        self, model: str, batch: int, gpu_type: str, gpus: int, nodes: int | None = None
    ) -> float | None:
        """Best-plan seconds per iteration; ``None`` when not measured or out of memory."""
        found = self.record(model, batch, gpu_type, gpus, nodes)
        return None if found is None else found.iter_time_s

    def measured_configs(self, model: str) -> tuple[CriusRecord, ...]:
        """Every record of ``model`` (all batches), by batch, GPU type, GPU count and nodes."""
        key = normalise(model)
        return tuple(r for r in self.records if normalise(r.model) == key)

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.model for r in self.records))

    def knows(self, model: str) -> bool:
        key = normalise(model)
        return any(k[0] == key for k in self._by_key)

    def iteration_time_s(self, query: Query) -> float | None:
        if query.gpu_type is None:
            return None
        return self.best_time_s(query.model.name, query.global_batch, query.gpu_type, query.gpus, query.nodes)

    def __len__(self) -> int:
        return len(self.records)


def _order(r: CriusRecord) -> tuple[object, ...]:
    return (r.family, r.params, r.batch_size, r.gpu_type, r.gpus, r.nodes)


@cache
def builtin_crius() -> CriusTable:
    """Crius's bundled measurements (``builtin/data/crius/prof_database.json``), cached."""
    text = resources.files("profiles").joinpath(*_DATA).read_text(encoding="utf-8")
    return CriusTable.of(parse_records(json.loads(text)))
