"""Render a resolved execution plan for the job's framework (pure builders, golden-tested).

* DeepSpeed: the config JSON (``zero_optimization``, offload, batch split, activation
  checkpointing), merged over the job's own config so its optimizer, precision and other
  settings stay as the user wrote them; the plan's keys win.
* Megatron-LM: command-line arguments appended to the training command (Megatron's argparse
  keeps the last occurrence, so the plan overrides what the user typed).
* torch: environment variables the runtime API (:mod:`wrapper.runtime`) reads.
* srun: the argv that starts one task per GPU with the assigned CPUs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from planner.core.execplan import ExecPlan, PlanError, plan_to_mapping
from planner.core.model import Assignment

FRAMEWORKS = ("torch", "deepspeed", "megatron")


def _resolved(plan: ExecPlan, framework: str) -> tuple[int, int, int, int]:
    if not plan.is_resolved:
        raise PlanError(
            f"plan for {framework}: the global batch is unknown; give it in the plan ('global_batch') "
            "or with mosaic-run --global-batch"
        )
    assert plan.dp is not None and plan.micro_batch is not None
    assert plan.grad_accum is not None and plan.global_batch is not None
    return plan.dp, plan.micro_batch, plan.grad_accum, plan.global_batch


def deepspeed_config(
    plan: ExecPlan, base: Mapping[str, Any] | None = None, load_universal: bool = False
) -> dict[str, Any]:
    """The DeepSpeed config for ``plan``, over the job's ``base`` config.

    ``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp``
    is DeepSpeed's own invariant (it rejects a config that breaks it), the same as Mosaic's
    global-batch invariant. ``load_universal`` makes ``load_checkpoint`` read a universal
    checkpoint (DeepSpeed's only way to resume ZeRO optimizer state at another DP size).
    """
    _, micro, accum, global_batch = _resolved(plan, "deepspeed")
    config = copy.deepcopy(dict(base or {}))
    config["train_batch_size"] = global_batch
    config["train_micro_batch_size_per_gpu"] = micro
    config["gradient_accumulation_steps"] = accum
    zero = dict(config.get("zero_optimization") or {})
    zero["stage"] = plan.zero_stage
    for key, wanted in (("offload_optimizer", plan.offload_optimizer), ("offload_param", plan.offload_param)):
        if wanted:
            zero[key] = {**dict(zero.get(key) or {}), "device": "cpu"}
        else:
            zero.pop(key, None)
    config["zero_optimization"] = zero
    if plan.offload_optimizer or plan.offload_param:
        # DeepSpeed refuses a client-built optimizer (torch.optim.Adam) under ZeRO-Offload unless
        # told otherwise: a job the scheduler moves to an offload plan would fail at start. It runs
        # (the optimizer step on the host, as the plan means); DeepSpeedCPUAdam stays the faster
        # choice for a job that builds it. A job's own setting wins.
        config.setdefault("zero_force_ds_cpu_optimizer", False)
    if plan.activation_checkpointing:
        # Takes effect where the model calls deepspeed.checkpointing.checkpoint (DeepSpeed's
        # activation-checkpointing API); the runtime exposes the same switch for plain torch.
        config["activation_checkpointing"] = {
            "partition_activations": False,
            "cpu_checkpointing": plan.offload_param,
            "contiguous_memory_optimization": False,
            **dict(config.get("activation_checkpointing") or {}),
        }
    else:
        config.pop("activation_checkpointing", None)
    if plan.tp > 1:
        config["tensor_parallel"] = {**dict(config.get("tensor_parallel") or {}), "autotp_size": plan.tp}
    checkpoint = dict(config.get("checkpoint") or {})
    if load_universal:
        checkpoint["load_universal"] = True
    else:
        checkpoint.pop("load_universal", None)
    if checkpoint:
        config["checkpoint"] = checkpoint
    else:
        config.pop("checkpoint", None)
    return config


def megatron_args(plan: ExecPlan) -> list[str]:
    """Megatron-LM arguments for ``plan`` (appended after the user's own).

    Megatron's distributed optimizer shards optimizer state over the data-parallel ranks,
    which is ZeRO-1; Megatron has no gradient or parameter partitioning (ZeRO-2/3) nor
    ZeRO-Offload, so such a plan is refused rather than silently run as something else.
    """
    _, micro, _, global_batch = _resolved(plan, "megatron")
    if plan.zero_stage > 1 or plan.offload_optimizer or plan.offload_param:
        raise PlanError(
            f"plan for megatron: zero_stage {plan.zero_stage}"
            f"{' with offload' if plan.offload_optimizer or plan.offload_param else ''} has no Megatron-LM "
            "equivalent (its distributed optimizer is ZeRO-1); use zero_stage 0 or 1"
        )
    args = [
        "--tensor-model-parallel-size",
        str(plan.tp),
        "--pipeline-model-parallel-size",
        str(plan.pp),
        "--micro-batch-size",
        str(micro),
        "--global-batch-size",
        str(global_batch),
    ]
    if plan.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    if plan.activation_checkpointing:
        args += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    return args


def torch_plan_environment(plan: ExecPlan, plan_version: int | None) -> dict[str, str]:
    """What the runtime API reads: the plan as JSON and its version (absent: no plan)."""
    env = {"MOSAIC_EXEC_PLAN": json.dumps(plan_to_mapping(plan), sort_keys=True)}
    if plan_version is not None:
        env["MOSAIC_PLAN_VERSION"] = str(plan_version)
    return env


def srun_argv(
    assignment: Assignment, task_command: Sequence[str], output: str | None = None, gpus: bool = True
) -> tuple[list[str], str | None]:
    """``srun`` for one task per assigned GPU, and the hostfile text an uneven spread needs.

    Tasks go to the assignment's nodes in proportion to its GPUs there; CPUs per task are the
    node's CPU share over its tasks (at least 1). An even spread uses ``--ntasks-per-node``;
    an uneven one ``--distribution=arbitrary`` with the returned hostfile (``SLURM_HOSTFILE``).
    ``--kill-on-bad-exit`` stops every rank when one fails, so no rank waits forever in a
    collective; ``--open-mode=append`` keeps earlier runs' output on a restart.
    """
    per_node = assignment.per_node
    tasks = assignment.num_gpus
    shares = zip(per_node, assignment.node_shares(), strict=True)
    cpus_per_task = max(1, min(cpus // count for (_, count), (_, cpus, _) in shares))
    argv = [
        "srun",
        f"--ntasks={tasks}",
        f"--nodes={len(per_node)}",
        f"--nodelist={','.join(node for node, _ in per_node)}",
        f"--cpus-per-task={cpus_per_task}",
        "--kill-on-bad-exit=1",
        "--export=ALL",
    ]
    hostfile = None
    counts = {count for _, count in per_node}
    if len(counts) == 1:
        argv.append(f"--ntasks-per-node={next(iter(counts))}")
        if gpus:
            argv.append(f"--gres=gpu:{next(iter(counts))}")
    else:
        argv.append("--distribution=arbitrary")
        hostfile = "".join(f"{node}\n" * count for node, count in per_node)
        if gpus:
            argv.append(f"--gpus={tasks}")
    if output is not None:
        argv += [f"--output={output}", "--open-mode=append"]
    return argv + list(task_command), hostfile
