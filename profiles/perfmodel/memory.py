"""GPU memory of one worker under an execution plan: a plan that does not fit is infeasible.

Rubick's planner only considers plans that fit the GPU (§5: "enumerating the feasible
plans"); this is the estimate behind that check.

* **Model states** (ZeRO, Rajbhandari et al. SC'20, §3): mixed-precision Adam keeps
  ``2Ψ`` bytes of fp16 weights, ``2Ψ`` of fp16 gradients and ``12Ψ`` of fp32 master
  weights and moments for the ``Ψ = P/(t·p)`` parameters of one model-parallel shard.
  ZeRO-1 partitions the ``12Ψ`` over the ``d`` data-parallel ranks, ZeRO-2 also the
  gradients, ZeRO-3 also the weights; ZeRO-Offload moves the optimizer states to the
  host, and parameter offload the weights.
* **Activations** (Korthikanti et al. MLSys'23, §4.1): one transformer layer stores
  ``s·b·h·(34 + 5·a·s/h)`` bytes for a micro-batch of ``b`` (fp16, ``a`` heads); under
  tensor parallelism (no sequence parallelism) ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``. The
  ``5·a·s/h`` part is the stored attention scores; fused attention kernels
  (FlashAttention, PyTorch's ``scaled_dot_product_attention``) do not store them, so it
  is counted only with ``attention_scores=True``. (With it, GPT-2 XL's measured 2-GPU run
  at micro-batch 8 would not fit 80 GB.)
  With activation checkpointing a layer keeps only its input (``2·s·b·h``) and one
  layer's activations exist at a time during the recompute. A GPU holds ``l/p`` layers;
  under 1F1B the first stage has ``min(p, m)`` micro-batches in flight.
* ``Environment.reserved_gb`` covers the CUDA context, NCCL buffers and fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.perfmodel.query import Environment, Query

GIB = 2**30


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Per-GPU memory of a plan, GiB, by part."""

    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    reserved_gb: float

    @property
    def total_gb(self) -> float:
        return (
            self.weights_gb + self.gradients_gb + self.optimizer_gb + self.activations_gb + self.reserved_gb
        )


def memory_estimate(
    query: Query, env: Environment | None = None, *, attention_scores: bool = False
) -> MemoryEstimate:
    """The memory one GPU of ``query``'s plan needs (module docstring)."""
    env = env or Environment()
    plan, shape = query.plan, query.model
    d = float(plan.dp or 1)
    t, p = float(plan.tp), float(plan.pp)
    psi = shape.params / (t * p)
    stage = plan.zero_stage
    weights = 0.0 if plan.offload_param else 2.0 * psi / (d if stage >= 3 else 1.0)
    gradients = 2.0 * psi / (d if stage >= 2 else 1.0)
    optimizer = 0.0 if plan.offload_optimizer else 12.0 * psi / (d if stage >= 1 else 1.0)

    assert plan.micro_batch is not None  # a Query's plan is resolved
    s, h, b = float(shape.seq_len), float(shape.hidden), float(plan.micro_batch)
    heads = float(shape.attention_heads)
    # Korthikanti et al.'s counts are for 2-byte activations.
    scale = env.activation_bytes / 2.0
    scores = 5.0 * heads * s / (h * t) if attention_scores else 0.0
    full_layer = s * b * h * (10.0 + 24.0 / t + scores) * scale
    layers_here = shape.layers / p
    in_flight = min(p, float(query.grad_accum))
    if plan.activation_checkpointing:
        activations = (2.0 * s * b * h * scale * layers_here) * in_flight + full_layer
    else:
        activations = full_layer * layers_here * in_flight
    return MemoryEstimate(
        weights_gb=weights / GIB,
        gradients_gb=gradients / GIB,
        optimizer_gb=optimizer / GIB,
        activations_gb=activations / GIB,
        reserved_gb=env.reserved_gb,
    )


def fits(
    query: Query, gpu_mem_gb: float, env: Environment | None = None, *, attention_scores: bool = False
) -> bool:
    """True when the plan's estimated per-GPU memory is within ``gpu_mem_gb`` GiB."""
    return memory_estimate(query, env, attention_scores=attention_scores).total_gb <= gpu_mem_gb
