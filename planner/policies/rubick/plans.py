"""Candidate execution plans of one job on ``g`` GPUs, its global batch fixed (Rubick §3, §5.2).

Rubick's plan search enumerates the plans a job may run with and keeps the feasible ones
(§5.2: "enumerating the feasible plans and the performance predictions"). The families are
those of §3 / Table 2:

* **DP** and **ZeRO-DP** (DeepSpeed ZeRO stages 1, 2 and 3), each with gradient accumulation
  (**GA**: ``micro_batch x grad_accum`` = the per-worker share of the global batch, for
  ``grad_accum`` in 1, 2, 4, 8, 16 where it divides) and with or without activation
  checkpointing (**GC**);
* **ZeRO-Offload** (ZeRO-2 with the optimizer state and step on the host), same GA/GC;
* **TP/PP/3D** (Megatron-LM): ``tp`` in 2, 4, 8 within one node and dividing the hidden size,
  ``pp`` dividing the layer count, ``dp = g / (tp x pp)``, ZeRO 0 or 1 (the pipeline engine
  partitions no gradients), the micro-batches of the pipeline being ``grad_accum``. The paper
  leaves TP and PP out for models under a billion parameters ("mostly unnecessary for these
  relatively small models", §7.1); so does :func:`candidate_plans` (``MIN_3D_PARAMS``).

Every plan returned is resolved (:func:`planner.core.execplan.check` passes) and trains with the
same global batch; whether it fits GPU memory is the pricer's question (``profiles.plan_pricing``).
"""

from __future__ import annotations

from planner.core.execplan import ExecPlan

MIN_3D_PARAMS = 1e9
_ACCUM = (1, 2, 4, 8, 16)
_MODEL_PARALLEL = (1, 2, 4, 8)
# (zero stage, optimizer offload) of the data-parallel families.
_DP_FAMILIES = ((0, False), (1, False), (2, False), (3, False), (2, True))


def candidate_plans(
    gpus: int,
    global_batch: int,
    *,
    gpus_per_node: int,
    hidden: int,
    layers: int,
    params: float,
    model_parallel: bool = True,
) -> list[ExecPlan]:
    """Every resolved plan of the families above on ``gpus`` GPUs (module docstring).

    ``model_parallel=False`` keeps the data-parallel families only (what Sia scales).
    """
    out: list[ExecPlan] = []
    allow_3d = model_parallel and params >= MIN_3D_PARAMS
    for tp in _MODEL_PARALLEL if allow_3d else (1,):
        if gpus % tp or tp > gpus_per_node or hidden % tp:
            continue
        for pp in _MODEL_PARALLEL if allow_3d else (1,):
            if (gpus // tp) % pp or layers % pp:
                continue
            dp = gpus // (tp * pp)
            per_worker, rest = divmod(global_batch, dp)
            if rest or per_worker < 1:
                continue
            families = _DP_FAMILIES if tp * pp == 1 else ((0, False), (1, False))
            for zero, offload in families:
                if dp == 1 and zero in (1, 2, 3) and not offload:
                    continue  # nothing to partition over one data-parallel rank
                for accum in _ACCUM:
                    if per_worker % accum:
                        continue
                    for gc in (False, True):
                        out.append(
                            ExecPlan(
                                dp=dp,
                                tp=tp,
                                pp=pp,
                                zero_stage=zero,
                                offload_optimizer=offload,
                                micro_batch=per_worker // accum,
                                grad_accum=accum,
                                activation_checkpointing=gc,
                                global_batch=global_batch,
                            )
                        )
    return out
