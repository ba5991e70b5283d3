"""What the performance model is asked: a model, an execution plan and the resources.

Rubick's Table 1 splits a prediction's inputs into the job's model (``s``, ``h``, ``l``,
``P``), its resources (``g`` GPUs, ``c`` CPUs), its parallel sizes (``d``, ``t``, ``p``),
``b`` (global batch), ``m``/``a`` (micro-batches, accumulation steps) and the environment
(``B_intra``, ``B_inter``, ``B_pcie``). :class:`ModelShape` and :class:`Query` hold the
first groups, :class:`Environment` the last one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan, PlanError, resolve


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The constants of one model that the formulas use (Rubick Table 1, "Job Model").

    ``params`` is the parameter count ``P``; ``seq_len``, ``hidden`` and ``layers`` are
    ``s``, ``h`` and ``l`` of a transformer; ``heads`` (attention heads) only enters the
    memory estimate and defaults to ``hidden / 64``.
    """

    name: str
    params: float
    seq_len: int
    hidden: int
    layers: int
    heads: int | None = None

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise InputError("model shape: the model name is empty")
        for key in ("params", "seq_len", "hidden", "layers"):
            value = getattr(self, key)
            if isinstance(value, int) and value.bit_length() > 64:  # math.isfinite would overflow
                got = f"an integer of {value.bit_length()} bits"
                why = f"{key} must be a positive number below 2**64, got {got}"
                raise InputError(f"model {self.name!r}: {why}")
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise InputError(f"model {self.name!r}: {key} must be a positive number, got {value!r}")
        if self.heads is not None and self.heads < 1:
            raise InputError(f"model {self.name!r}: heads must be >= 1, got {self.heads}")

    @property
    def attention_heads(self) -> int:
        """Heads of the attention layers (``hidden / 64`` when not given: BERT/GPT-2's width)."""
        return self.heads if self.heads is not None else max(1, self.hidden // 64)

    def forward_flops_per_sample(self) -> float:
        """Matrix-multiply FLOPs of one sample's forward pass.

        Narayanan et al. (SC'21) Eq. 3 counts ``72·B·s·l·h²·(1 + s/6h + V/16lh)`` for a
        forward and backward pass of a GPT layer stack; the forward pass is a third of it.
        The vocabulary term is left out (the vocabulary size is not a model constant here):
        it is the output layer, at most a few per cent for these shapes, and the fitted
        per-model speed absorbs it. The count comes from the layer shape, not from ``P``,
        because embeddings are parameters without matrix multiplies.
        """
        s, h, layers = float(self.seq_len), float(self.hidden), float(self.layers)
        return 24.0 * s * layers * h * h * (1.0 + s / (6.0 * h))


@dataclass(frozen=True, slots=True)
class Query:
    """One configuration to predict: a model, its resolved plan, nodes and CPUs per GPU.

    ``plan`` is resolved (:func:`planner.core.execplan.resolve`): ``dp x tp x pp`` workers, one
    per GPU, and ``dp x micro_batch x grad_accum`` = the global batch. ``nodes`` is how
    many servers the GPUs are spread over (evenly); ``cpus_per_gpu`` (``c``) only matters
    for ZeRO-Offload, whose optimizer step runs on the CPU. ``gpu_type`` names the GPU
    (``a100``, ``v100``...) for models measured on several types (the Crius and Gavel
    tables); ``None`` asks a single-type model (Rubick's fit) and is unknown to the tables.
    """

    model: ModelShape
    plan: ExecPlan
    nodes: int = 1
    cpus_per_gpu: float | None = None
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        where = f"model {self.model.name!r}"
        if not self.plan.is_resolved:
            raise PlanError(f"{where}: the plan must be resolved (dp, micro_batch, grad_accum, global_batch)")
        if self.nodes < 1 or self.gpus % self.nodes:
            raise InputError(f"{where}: {self.gpus} GPUs do not spread evenly over {self.nodes} node(s)")
        if self.cpus_per_gpu is not None and not self.cpus_per_gpu > 0:
            raise InputError(f"{where}: cpus_per_gpu must be > 0, got {self.cpus_per_gpu}")
        if self.plan.offload_optimizer and self.cpus_per_gpu is None:
            raise InputError(f"{where}: ZeRO-Offload needs cpus_per_gpu (its optimizer step runs on the CPU)")

    @property
    def gpus(self) -> int:
        return self.plan.world_size

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def global_batch(self) -> int:
        assert self.plan.global_batch is not None  # resolved
        return self.plan.global_batch

    @property
    def grad_accum(self) -> int:
        assert self.plan.grad_accum is not None  # resolved
        return self.plan.grad_accum


def make_query(
    model: ModelShape,
    gpus: int,
    global_batch: int,
    plan: ExecPlan | None = None,
    nodes: int = 1,
    cpus_per_gpu: float | None = None,
) -> Query:
    """A :class:`Query` with ``plan`` (default: plain data parallelism) resolved for ``gpus``."""
    where = f"model {model.name!r}"
    resolved = resolve(plan or ExecPlan(), gpus, global_batch, where)
    return Query(model=model, plan=resolved, nodes=nodes, cpus_per_gpu=cpus_per_gpu)


def plan_label(plan: ExecPlan) -> str:
    """The plan's name in Rubick's Table 2 vocabulary (``DP``, ``ZeRO-Offload+GC``, ``TP+PP``...).

    Derived from the plan itself: 3D plans are ``TP+PP`` or, with ``dp > 1``,
    ``DP+TP+PP``; otherwise ``DP``, ``ZeRO-DP`` or ``ZeRO-Offload``, then ``+GA`` when
    gradients accumulate over several micro-batches and ``+GC`` with activation
    checkpointing.
    """
    if plan.tp * plan.pp > 1:
        base = "DP+TP+PP" if (plan.dp or 1) > 1 else "TP+PP"
    elif plan.offload_optimizer or plan.offload_param:
        base = "ZeRO-Offload"
    elif plan.zero_stage > 0:
        base = "ZeRO-DP"
    else:
        base = "DP"
    if (plan.grad_accum or 1) > 1:
        base += "+GA"
    if plan.activation_checkpointing:
        base += "+GC"
    return base


@dataclass(frozen=True, slots=True)
class Environment:
    """The cluster's bandwidths and byte sizes (Rubick Table 1, "Environment").

    Rubick measures ``B_intra``, ``B_inter`` and ``B_pcie`` offline; the defaults
    describe the paper's cluster (A800-80GB, NVLink 400 GB/s, 100 GB/s RDMA per node,
    PCIe 4.0):

    * ``intra_gb_s``: per-GPU bus bandwidth of NCCL collectives inside a node. 400 GB/s
      NVLink counts both directions; 200 GB/s each way, of which ring collectives reach
      about three quarters.
    * ``inter_gb_s``: RDMA bandwidth of one node, shared by the node's GPUs that talk to
      other nodes at the same time.
    * ``pcie_gb_s``: host-device bandwidth of one node for ZeRO-Offload (one PCIe 4.0 x16
      link's worth, 32 GB/s): the offload copies of all the job's GPUs on a node go
      through the host together (see ``terms.py``).
    * ``grad_bytes`` / ``activation_bytes``: fp16 mixed precision; ``offload_bytes``: per
      parameter and step, fp16 gradients to the CPU and fp16 parameters back.
    * ``reserved_gb``: GPU memory the memory estimate sets aside for the CUDA context,
      NCCL buffers and allocator fragmentation.
    * ``peak_tflops``: the GPU's dense fp16/bf16 tensor-core peak (A800/A100: 312
      TFLOP/s). No forward pass can beat it: a profiled forward time shorter than the
      configuration's forward FLOPs at this peak on all its GPUs is not a forward time of
      that configuration (a unit or bookkeeping slip) and is not used (``terms.py``).
    """

    intra_gb_s: float = 150.0
    inter_gb_s: float = 100.0
    pcie_gb_s: float = 32.0
    grad_bytes: float = 2.0
    activation_bytes: float = 2.0
    offload_bytes: float = 4.0
    reserved_gb: float = 3.0
    peak_tflops: float = 312.0

    def __post_init__(self) -> None:
        for key in (
            "intra_gb_s",
            "inter_gb_s",
            "pcie_gb_s",
            "grad_bytes",
            "activation_bytes",
            "offload_bytes",
            "peak_tflops",
        ):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"environment: {key} must be a positive number, got {value!r}")
        if not (math.isfinite(self.reserved_gb) and self.reserved_gb >= 0):
            raise InputError(f"environment: reserved_gb must be >= 0, got {self.reserved_gb!r}")
