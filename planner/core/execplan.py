"""Execution plans as data: how a training job uses the GPUs it was given.

A plan is what Rubick calls an *execution plan* (§3: DP, ZeRO-DP, ZeRO-Offload, gradient
accumulation, gradient checkpointing, 3D TP/PP/DP) and SJF-BSBF's sub-batch + gradient
accumulation (§4.2): the scheduler may change it between runs of a job, and ``mosaic-run``
renders it for the job's framework. Every plan of one job trains with the same *global
batch*: ``dp x micro_batch x grad_accum`` examples per optimizer step, whatever the GPU count.
That is what keeps a job's training mathematics unchanged when Mosaic resizes it (SJF-BSBF
§4.2: "the global batch size stays the same"), so a resumed run follows the same loss curve.

JSON form (the ``plan`` object of an assignment; every key optional)::

    {"dp": 4, "tp": 2, "pp": 1, "zero_stage": 2, "offload_optimizer": true, "offload_param": false,
     "micro_batch": 8, "grad_accum": 4, "activation_checkpointing": true, "global_batch": 128}

A missing key means the default (``tp = pp = 1``, ZeRO stage 0, no offload, no activation
checkpointing) or, for ``dp``, ``micro_batch``, ``grad_accum`` and ``global_batch``, "derive
it from the GPU count and the job's global batch" (:func:`resolve`). So the partial plans
that traces and profiles already carry (``{"tp": 2}``, ``{"zero_stage": 2}``) stay valid,
and :func:`plan_to_mapping` writes only what differs from the defaults, so a plan read and
written back compares equal to the original mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from planner.core.errors import InputError
from planner.core.fields import Fields

MAX_ZERO_STAGE = 3


class PlanError(InputError):
    """An execution plan is malformed or impossible (names the plan and the rule it breaks)."""


@dataclass(frozen=True, slots=True)
class ExecPlan:
    """One execution plan; ``None`` fields are derived by :func:`resolve`.

    ``dp``, ``tp`` and ``pp`` are the data-, tensor- and pipeline-parallel sizes (the job
    runs ``dp x tp x pp`` workers, one per GPU). ``zero_stage`` is DeepSpeed ZeRO's stage
    (1 partitions optimizer state, 2 also gradients, 3 also parameters; Rajbhandari et
    al., the "ZeRO-DP" plans of Rubick §3). ``offload_optimizer`` / ``offload_param`` move
    optimizer state / parameters to CPU memory (ZeRO-Offload). ``micro_batch`` is the
    per-worker batch of one forward/backward pass, ``grad_accum`` how many of them make
    one optimizer step, and ``activation_checkpointing`` recomputes activations in the
    backward pass instead of storing them.
    """

    dp: int | None = None
    tp: int = 1
    pp: int = 1
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_param: bool = False
    micro_batch: int | None = None
    grad_accum: int | None = None
    activation_checkpointing: bool = False
    global_batch: int | None = None

    @property
    def model_parallel(self) -> int:
        """Workers that hold one copy of the model (``tp x pp``)."""
        return self.tp * self.pp

    @property
    def world_size(self) -> int:
        """Workers the plan runs (``dp x tp x pp``); the plan must be resolved."""
        if self.dp is None:
            raise PlanError("plan: the data-parallel size is not resolved yet (see resolve())")
        return self.dp * self.tp * self.pp

    @property
    def is_resolved(self) -> bool:
        """True when the GPU layout and the batch split are all known."""
        return None not in (self.dp, self.micro_batch, self.grad_accum, self.global_batch)


_DEFAULTS = ExecPlan()
PLAN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ExecPlan))
_INT_KEYS = ("dp", "tp", "pp", "micro_batch", "grad_accum", "global_batch")
_BOOL_KEYS = ("offload_optimizer", "offload_param", "activation_checkpointing")


def plan_from_mapping(mapping: Mapping[str, Any] | None, where: str = "plan") -> ExecPlan:
    """Read a plan object (``None``: the default plan), checking every rule of :func:`check`.

    Unknown keys are errors that list the valid ones, so a typo (``"zero"`` for
    ``"zero_stage"``) is caught where the plan is written, not silently ignored.
    """
    if mapping is None:
        return _DEFAULTS
    f = Fields(mapping, where, PlanError)
    f.only(PLAN_KEYS)
    values: dict[str, Any] = {key: f.opt_int(key, minimum=1) for key in _INT_KEYS if f.has(key)}
    values.update({key: f.flag(key, False) for key in _BOOL_KEYS if f.has(key)})
    if f.has("zero_stage"):
        values["zero_stage"] = f.req_int("zero_stage", minimum=0)
    plan = ExecPlan(**values)
    check(plan, where)
    return plan


def plan_to_mapping(plan: ExecPlan) -> dict[str, Any]:
    """The JSON object of a plan: only what differs from the defaults, in a fixed key order."""
    return {key: getattr(plan, key) for key in PLAN_KEYS if getattr(plan, key) != getattr(_DEFAULTS, key)}


def check(plan: ExecPlan, where: str = "plan") -> None:
    """Reject a plan no framework can run, naming the rule it breaks.

    The rules are DeepSpeed's own (``deepspeed/runtime/zero/config.py`` and the pipeline
    engine): parameter offload needs ZeRO-3 (only stage 3 partitions parameters), optimizer
    offload needs ZeRO >= 1 (there must be partitioned optimizer state to move), and
    pipeline parallelism works with ZeRO-0/1 only (the pipeline engine cannot partition
    gradients or parameters across stages). The batch rule is the global-batch invariant.
    """
    if plan.zero_stage > MAX_ZERO_STAGE:
        raise PlanError(f"{where}: key 'zero_stage': expected 0, 1, 2 or 3, got {plan.zero_stage}")
    if plan.offload_param and plan.zero_stage != MAX_ZERO_STAGE:
        raise PlanError(
            f"{where}: offload_param needs zero_stage 3 (only ZeRO-3 partitions parameters), "
            f"got zero_stage {plan.zero_stage}"
        )
    if plan.offload_optimizer and plan.zero_stage == 0:
        raise PlanError(f"{where}: offload_optimizer needs zero_stage >= 1 (ZeRO-Offload moves ZeRO's state)")
    if plan.pp > 1 and plan.zero_stage > 1:
        raise PlanError(
            f"{where}: pipeline parallelism (pp {plan.pp}) works with zero_stage 0 or 1 only, "
            f"got zero_stage {plan.zero_stage}"
        )
    known = (plan.dp, plan.micro_batch, plan.grad_accum, plan.global_batch)
    if None not in known:
        dp, micro, accum, global_batch = known
        assert dp is not None and micro is not None and accum is not None  # for mypy
        if dp * micro * accum != global_batch:
            raise PlanError(
                f"{where}: dp {dp} x micro_batch {micro} x grad_accum {accum} = {dp * micro * accum}, "
                f"not the global batch {global_batch}"
            )


def resolve(plan: ExecPlan, workers: int, global_batch: int | None = None, where: str = "plan") -> ExecPlan:
    """The plan made concrete for ``workers`` GPUs (ranks) and the job's global batch.

    ``dp`` becomes ``workers / (tp x pp)``; the global batch comes from the plan or from
    ``global_batch`` (they must agree); then the missing one of ``micro_batch`` and
    ``grad_accum`` is derived (neither given: no accumulation, ``grad_accum = 1``). A job
    whose global batch is unknown keeps ``micro_batch``/``grad_accum`` as given.
    """
    if workers < 1:
        raise PlanError(f"{where}: needs at least one worker, got {workers}")
    if workers % plan.model_parallel:
        raise PlanError(
            f"{where}: {workers} workers cannot be split into tp {plan.tp} x pp {plan.pp} model replicas"
        )
    dp = workers // plan.model_parallel
    if plan.dp is not None and plan.dp != dp:
        raise PlanError(
            f"{where}: dp {plan.dp} x tp {plan.tp} x pp {plan.pp} is not the {workers} workers given"
        )
    if plan.global_batch is not None and global_batch is not None and plan.global_batch != global_batch:
        raise PlanError(
            f"{where}: global_batch {plan.global_batch} is not the job's global batch {global_batch}"
        )
    target = plan.global_batch if plan.global_batch is not None else global_batch
    micro, accum = plan.micro_batch, plan.grad_accum
    if target is not None:
        per_worker, rest = divmod(target, dp)
        if rest:
            raise PlanError(f"{where}: global batch {target} does not split over dp {dp} workers")
        if micro is None and accum is None:
            micro, accum = per_worker, 1
        elif micro is None:
            assert accum is not None
            micro = _exact(per_worker, accum, f"{where}: {per_worker} examples per worker", "grad_accum")
        elif accum is None:
            accum = _exact(per_worker, micro, f"{where}: {per_worker} examples per worker", "micro_batch")
    elif micro is not None:
        accum = 1 if accum is None else accum
        target = dp * micro * accum
    resolved = replace(plan, dp=dp, micro_batch=micro, grad_accum=accum, global_batch=target)
    check(resolved, where)
    return resolved


def rescale(plan: ExecPlan, workers: int, where: str = "plan") -> ExecPlan:
    """The same training (same global batch, same ZeRO/TP/PP choices) on ``workers`` GPUs.

    Keeps the micro-batch when it still divides the per-worker share and otherwise takes
    the largest micro-batch below it that does, making up the rest with gradient
    accumulation: SJF-BSBF §4.2's sub-batch + accumulation rule, which keeps the global
    batch (and so the loss curve) while a job shrinks or grows.
    """
    if not plan.is_resolved:
        raise PlanError(f"{where}: only a resolved plan (known global batch) can be rescaled")
    assert plan.global_batch is not None and plan.micro_batch is not None
    if workers < 1 or workers % plan.model_parallel:
        raise PlanError(
            f"{where}: {workers} workers cannot be split into tp {plan.tp} x pp {plan.pp} model replicas"
        )
    dp = workers // plan.model_parallel
    per_worker, rest = divmod(plan.global_batch, dp)
    if rest:
        raise PlanError(f"{where}: global batch {plan.global_batch} does not split over dp {dp} workers")
    micro = min(plan.micro_batch, per_worker)
    while per_worker % micro:
        micro -= 1
    return resolve(
        replace(plan, dp=None, micro_batch=micro, grad_accum=None), workers, plan.global_batch, where
    )


def replan(plan: ExecPlan, workers: int, global_batch: int | None = None, where: str = "plan") -> ExecPlan:
    """The same plan on another number of workers, the global batch kept (a resize).

    A resolved plan is :func:`rescale`-d; otherwise ``dp`` is dropped and the plan resolved
    for ``workers``, and if its ``micro_batch``/``grad_accum`` no longer divide the per-worker
    share they are derived again. Raises :class:`PlanError` when no plan runs there (``tp x
    pp`` does not divide the workers, or the global batch does not split over them).
    """
    if plan.is_resolved:
        return rescale(plan, workers, where)
    try:
        return resolve(replace(plan, dp=None), workers, global_batch, where)
    except PlanError:
        return resolve(
            replace(plan, dp=None, micro_batch=None, grad_accum=None), workers, global_batch, where
        )


def check_transition(old: ExecPlan, new: ExecPlan, where: str = "plan change") -> None:
    """Reject a change of plan that would change the training itself (its global batch)."""
    if old.global_batch is not None and new.global_batch is not None and old.global_batch != new.global_batch:
        raise PlanError(
            f"{where}: the global batch must not change between plans "
            f"({old.global_batch} -> {new.global_batch})"
        )


def _exact(total: int, part: int, what: str, key: str) -> int:
    quotient, rest = divmod(total, part)
    if rest:
        raise PlanError(f"{what} do not split into {key} {part}")
    return quotient
