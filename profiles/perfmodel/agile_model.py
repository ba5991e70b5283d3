"""The models of Crius's agile estimate: shapes, the Fig. 7 stage partition, DP-only memory.

Split from :mod:`profiles.perfmodel.agile` (which documents the method): what the estimate
knows about a model before any measurement, i.e. its layers' FLOPs, parameters and
activations (from the Crius artifact's benchmark configurations, ``sjtu-epcc/arena``,
``runtime/crius_worker/jax/configs.py``), the stage partition by FLOPs share, the GPU types,
and the data-parallel-only memory fitted to ``builtin/data/crius/dp_mem.json``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from planner.core.errors import ConfigError, InputError
from profiles.gpus import catalog
from profiles.names import normalise
from profiles.perfmodel.crius import DEVICES
from profiles.perfmodel.dp_memory import COUNTS, builtin_dp_memory

GB = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU type: memory (GB), dense fp16 tensor peak (TFLOP/s), GPUs per node, links."""

    name: str
    mem_gb: float
    peak_tflops: float
    gpus_per_node: int
    intra_gb_s: float
    inter_gb_s: float = 12.5
    intra_latency_s: float = 10e-6
    inter_latency_s: float = 20e-6


def _spec(name: str) -> GpuSpec:
    """The catalog's facts of ``name`` (``profiles/builtin/gpus.toml``) as the estimate reads them."""
    t = catalog().types[name]
    if t.peak_tflops is None or t.gpus_per_node is None or t.intra_gb_s is None:
        raise ConfigError(f"GPU catalog: {name} needs peak_tflops, gpus_per_node and intra_gb_s")
    return GpuSpec(name, t.mem_gb, t.peak_tflops, t.gpus_per_node, t.intra_gb_s)


GPU_SPECS: Mapping[str, GpuSpec] = {name: _spec(name) for name in DEVICES}


# -- the model -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Layer:
    """One operator group of a model, per sample: training FLOPs (forward + backward),
    parameters, bytes of activation it hands the next layer, bytes its tensor-parallel
    all-reduces carry (forward + backward), and activation memory in relative units."""

    flops: float
    params: float
    boundary_bytes: float
    tp_bytes: float
    act_units: float


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model Crius trains: family (``bert``, ``moe``, ``wide_resnet``), parameter count, layers."""

    name: str
    family: str
    params: float
    layers: tuple[Layer, ...]
    grad_bytes: float

    @property
    def flops_per_sample(self) -> float:
        return sum(layer.flops for layer in self.layers)

    @property
    def act_units(self) -> float:
        return sum(layer.act_units for layer in self.layers)

    @property
    def conv(self) -> bool:
        return self.family == "wide_resnet"


# The artifact's benchmark configurations: transformers (seq_len, hidden, layers, vocab,
# experts: 0 = dense) and Wide-ResNets (filters, width factor, ResNet depth).
_TRANSFORMERS: Mapping[str, tuple[int, int, int, int, int]] = {
    "bert_760M": (1024, 1536, 24, 51200, 0),
    "bert_1.3B": (1024, 2048, 24, 51200, 0),
    "bert_2.6B": (1024, 2560, 32, 51200, 0),
    "bert_6.7B": (1024, 4096, 32, 51200, 0),
    "bert_15B": (1024, 5120, 48, 51200, 0),
    "bert_39B": (1024, 8192, 48, 51200, 0),
    "moe_690M": (1024, 768, 8, 32000, 16),
    "moe_1.3B": (1024, 768, 16, 32000, 16),
    "moe_2.4B": (1024, 1024, 16, 32000, 16),
    "moe_10B": (1024, 1536, 16, 32000, 32),
    "moe_27B": (1024, 2048, 16, 32000, 48),
    "moe_70B": (1024, 2048, 32, 32000, 64),
}
_WIDE_RESNETS: Mapping[str, tuple[int, int, int]] = {
    "wide_resnet_500M": (224, 2, 50),
    "wide_resnet_1B": (320, 2, 50),
    "wide_resnet_2B": (448, 2, 50),
    "wide_resnet_4B": (640, 2, 50),
    "wide_resnet_6.8B": (320, 16, 50),
    "wide_resnet_13B": (320, 16, 101),
}
_RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
_PARAMS = re.compile(r"^(?P<family>[a-z_]+?)_+(?P<value>\d+(?:\.\d+)?)(?P<unit>[MB])$")
CANONICAL_NAMES = {normalise(name): name for name in (*_TRANSFORMERS, *_WIDE_RESNETS)}


def _transformer(name: str, params: float, shape: tuple[int, int, int, int, int]) -> ModelSpec:
    s, h, n_layers, vocab, experts = shape
    # Per token: attention projections 8h^2 and scores 4sh FLOPs; the FFN 16h^2 (dense) or,
    # GShard's top-2 routing over experts, 32h^2; x3 for forward + backward.
    ffn = 32.0 * h * h if experts else 16.0 * h * h
    flops = 3.0 * s * (8.0 * h * h + ffn + 4.0 * s * h)
    layer_params = 4.0 * h * h + (experts or 1) * 8.0 * h * h
    act = 2.0 * s * h  # fp16 activations at a layer boundary
    layer = Layer(flops=flops, params=layer_params, boundary_bytes=act, tp_bytes=4.0 * act, act_units=s * h)
    layers = [layer] * n_layers
    # The embedding (vocab x h) sits with the first layer, the output projection's FLOPs with
    # the last (tied weights: its parameters are the embedding's).
    layers[0] = Layer(flops, layer_params + vocab * h, act, 4.0 * act, s * h)
    layers[-1] = Layer(flops + 3.0 * 2.0 * s * h * vocab, layer_params, act, 4.0 * act, s * h)
    return _scaled(name, "bert" if not experts else "moe", params, layers, grad_bytes=2.0)


def _wide_resnet(name: str, params: float, shape: tuple[int, int, int]) -> ModelSpec:
    filters, width, depth = shape
    layers = []
    for group, blocks in enumerate(_RESNET_BLOCKS[depth]):
        f = filters * 2**group
        m = width * f
        side = 56 // 2**group
        block_params = 8.0 * f * m + 9.0 * m * m  # 1x1 in, 3x3, 1x1 out (bottleneck)
        out = 4.0 * f * side * side * 4.0  # fp32 output map
        flops = 3.0 * 2.0 * block_params * side * side
        layers += [Layer(flops, block_params, out, 4.0 * out, side * side * (4.0 * f + 2.0 * m))] * blocks
    return _scaled(name, "wide_resnet", params, layers, grad_bytes=4.0)


def _scaled(name: str, family: str, params: float, layers: list[Layer], grad_bytes: float) -> ModelSpec:
    """Scale the shape's parameter count to the model's nominal size (the label's)."""
    factor = params / sum(layer.params for layer in layers)
    scaled = tuple(
        Layer(layer.flops, layer.params * factor, layer.boundary_bytes, layer.tp_bytes, layer.act_units)
        for layer in layers
    )
    return ModelSpec(name=name, family=family, params=params, layers=scaled, grad_bytes=grad_bytes)


@cache
def model_spec(model: str) -> ModelSpec | None:
    """The shape of one of Crius's models (``bert_760M``, ``moe__2.4B``, ``Wide-ResNet-2B``...).

    ``None`` for a model outside the artifact's configurations.
    """
    name = CANONICAL_NAMES.get(normalise(model))
    if name is None:
        return None
    match = _PARAMS.match(name)
    assert match is not None  # the keys above are well formed
    params = float(match.group("value")) * (1e6 if match.group("unit") == "M" else 1e9)
    if name in _TRANSFORMERS:
        return _transformer(name, params, _TRANSFORMERS[name])
    return _wide_resnet(name, params, _WIDE_RESNETS[name])


# -- stage partition (Fig. 7) -----------------------------------------------------------------


@cache
def partition(model: str, stages: int) -> tuple[tuple[int, int], ...]:
    """Contiguous ``[start, end)`` layer ranges of ``stages`` stages with balanced FLOPs.

    Minimises the largest stage's FLOPs (equal FLOPs = equal time when GPUs are mapped by
    FLOPs share, Fig. 7), then the traffic at the cuts. Raises when there are fewer layers
    than stages.
    """
    spec = model_spec(model)
    if spec is None:
        raise InputError(f"agile estimate: unknown model {model!r}")
    n = len(spec.layers)
    if not 1 <= stages <= n:
        raise InputError(f"agile estimate: {model}: {stages} stages for {n} layers")
    prefix = [0.0]
    for layer in spec.layers:
        prefix.append(prefix[-1] + layer.flops)
    # best[s][j]: (largest stage FLOPs, cut traffic) of the first j layers in s stages.
    inf = (math.inf, math.inf)
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0)
    for s in range(1, stages + 1):
        for j in range(s, n - (stages - s) + 1):
            for i in range(s - 1, j):
                if best[s - 1][i] == inf:
                    continue
                traffic = best[s - 1][i][1] + (spec.layers[i - 1].boundary_bytes if i else 0.0)
                value = (max(best[s - 1][i][0], prefix[j] - prefix[i]), traffic)
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    bounds = []
    j = n
    for s in range(stages, 0, -1):
        i = cut[s][j]
        bounds.append((i, j))
        j = i
    return tuple(reversed(bounds))


# -- data-parallel memory ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """``W`` (model states, GB per replica) and ``A`` (activation GB per sample) of one model."""

    states_gb: float
    act_gb_per_sample: float
    fitted: bool


@cache
def dp_memory_points() -> Mapping[str, tuple[tuple[int, int, float], ...]]:
    """The bundled DP-only memory (``dp_mem.json``, parsed once by
    :func:`profiles.perfmodel.dp_memory.builtin_dp_memory`) as model -> ((global batch, GPUs, GB),
    ...), usable entries only."""
    return memory_points(builtin_dp_memory().needs)


def memory_points(
    needs: Mapping[tuple[str, int], tuple[float, ...]],
) -> Mapping[str, tuple[tuple[int, int, float], ...]]:
    """A parsed ``dp_mem`` table (:func:`profiles.perfmodel.dp_memory.parse_dp_memory`) as
    model -> ((batch, GPUs, GB), ...), keeping only the measured (positive) values."""
    out: dict[str, list[tuple[int, int, float]]] = {}
    for (model, batch), values in needs.items():
        points = out.setdefault(model, [])
        points += [(batch, n, gb) for n, gb in zip(COUNTS, values, strict=True) if gb > 0]
    return {k: tuple(v) for k, v in out.items()}


def fit_memory(points: Sequence[tuple[int, int, float]]) -> tuple[float, float] | None:
    """Least squares ``GB = W + A x batch / n``; ``None`` without two distinct loads."""
    xs = np.array([b / n for b, n, _ in points], dtype=np.float64)
    ys = np.array([gb for _, _, gb in points], dtype=np.float64)
    if len(set(xs.tolist())) < 2:
        return None
    design = np.stack([np.ones_like(xs), xs], axis=1)
    (w, a), *_ = np.linalg.lstsq(design, ys, rcond=None)
    if a <= 0 or w <= 0:
        return None
    return float(w), float(a)


def family_of(model: str) -> str | None:
    spec = model_spec(model)
    return None if spec is None else spec.family


def stage_counts(gpus: int) -> tuple[int, ...]:
    """``1, 2, 4, ...``: the powers of two that divide ``gpus`` (§6.1's ~log2 N stage counts)."""
    out, s = [], 1
    while s <= gpus and gpus % s == 0:
        out.append(s)
        s *= 2
    return tuple(out)


def normalise_model(model: str) -> str:
    """Crius's name of a model (``bert__760M`` -> ``bert_760M``); unchanged when unknown."""
    return CANONICAL_NAMES.get(normalise(model), model)
