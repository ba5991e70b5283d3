"""Rubick's cluster workloads (MLSys'25 §6.1) as Mosaic traces.

The artifact's three workloads (``workload-base.csv``, ``-bp``, ``-mt``; 406 jobs each,
``planner/sim/bundled/README.md``) have the columns ``name, submission_time, duration,
application, num_gpus, num_cpus, bandwidth, exec_plan, steps, is_sla``. One row becomes one
:class:`TraceJob`:

* ``job_id`` = ``name``; ``submit_time_s`` = ``submission_time``; ``num_gpus`` as given;
  ``model`` = ``application`` (one of Rubick's seven models); ``gpu_type`` ``a800``;
* ``plan`` = the submitted plan (:func:`plan_of`): ``ga`` -> ``{}`` (data parallelism; the
  artifact accumulates gradients only as memory requires and does not record how many),
  ``gc`` -> activation checkpointing, ``zero-dp`` -> ZeRO-2, ``zero-offload`` -> ZeRO-2 +
  optimizer offload (+ activation checkpointing for gpt2, llama7 and llama30, as the
  artifact measured it), a three-digit code ``PTD`` -> ``{"pp": P, "tp": T, "dp": D}``;
* ``batch_size`` = the model's global batch (fixed under every plan and GPU count);
  ``iterations`` = ``steps`` (the artifact's simulator runs ``steps`` iterations and
  ignores ``duration`` when ``steps`` is set);
* ``duration_s`` = ``steps`` x the measured iteration time at the requested plan on the
  requested GPUs packed 8 to a node (:mod:`profiles.perfmodel.rubick_measured`), i.e. the
  work at the reference the simulator's speeds are relative to; the artifact's
  ``duration`` only where that time is unknown;
* ``guaranteed`` = ``is_sla``; ``tenant``: the MT workload's two tenants (§6.1): every
  guaranteed job belongs to ``tenant-a`` (a quota of 64 GPUs in the paper), every
  best-effort job to ``tenant-b`` (no quota). A workload without guaranteed jobs (base,
  bp) has no tenants;
* ``min_gpus``/``max_gpus`` (:func:`gpu_bounds`), the artifact scheduler's resizing range:
  a data-parallel job (``ga``, ``gc``, ``zero-dp``, ``zero-offload``) is resized within
  one server, 1 to 8 GPUs (its resource matrix covers 1-8 GPUs and scale-up stops at 8);
  a 3D job moves between the measured 3D placements of its model, so from the fewest to
  the most GPUs of those (llama7: 16-64, llama30: 24-64).

``num_cpus`` and ``bandwidth`` are read (checked) but not carried: the artifact's
simulator does not use them either. Every error names the source, the line and the column.
"""

from __future__ import annotations

from typing import Any

from planner.core.errors import TraceError
from planner.core.execplan import PlanError, plan_from_mapping, resolve
from planner.traces.artifact_csv import Cells, artifact_rows
from planner.traces.records import TraceJob
from profiles.names import normalise
from profiles.perfmodel.rubick_measured import (
    GPU_TYPE,
    GPUS_PER_NODE,
    RubickMeasured,
    builtin_rubick_measured,
    packed,
)

WORKLOAD_COLUMNS = (
    "name",
    "submission_time",
    "duration",
    "application",
    "num_gpus",
    "num_cpus",
    "bandwidth",
    "exec_plan",
    "steps",
    "is_sla",
)
DP_PLANS = ("ga", "gc", "zero-dp", "zero-offload")
# The artifact ran ZeRO-Offload with activation checkpointing for these models.
OFFLOAD_WITH_CHECKPOINTING = ("gpt2", "llama7", "llama30")
GUARANTEED_TENANT = "tenant-a"
BEST_EFFORT_TENANT = "tenant-b"


def plan_of(model: str, code: str) -> dict[str, Any]:
    """The Mosaic plan mapping of an artifact ``exec_plan`` code (module docstring).

    Raises :class:`ValueError` for an unknown code.
    """
    if code == "ga":
        return {}
    if code == "gc":
        return {"activation_checkpointing": True}
    if code == "zero-dp":
        return {"zero_stage": 2}
    if code == "zero-offload":
        plan: dict[str, Any] = {"zero_stage": 2, "offload_optimizer": True}
        if model in OFFLOAD_WITH_CHECKPOINTING:
            plan["activation_checkpointing"] = True
        return plan
    if len(code) == 3 and code.isdigit() and "0" not in code:
        pp, tp, dp = (int(c) for c in code)
        return {"dp": dp, "pp": pp, "tp": tp}
    raise ValueError(f"expected one of {', '.join(DP_PLANS)} or three non-zero digits pp,tp,dp; got {code!r}")


def gpu_bounds(model: str, code: str, num_gpus: int, times: RubickMeasured) -> tuple[int, int]:
    """(min_gpus, max_gpus) the artifact's scheduler may resize the job to (module docstring)."""
    if code in DP_PLANS:
        return 1, max(GPUS_PER_NODE, num_gpus)
    counts = [g for (m, family, g) in times.times if m == model and family[2] * family[3] > 1]
    return min([*counts, num_gpus]), max([*counts, num_gpus])


def parse_workload(
    text: str, source: str = "workload", times: RubickMeasured | None = None
) -> tuple[TraceJob, ...]:
    """Convert one artifact workload CSV (module docstring) into trace jobs, in file order."""
    times = builtin_rubick_measured() if times is None else times
    rows: list[tuple[Cells, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for c in artifact_rows(text, source, WORKLOAD_COLUMNS):
        name = c.text("name")
        if name in seen:
            raise c.fail("name", f"duplicate job name {name!r} (first on line {seen[name]})")
        seen[name] = c.line
        rows.append((c, _convert(c, name, times)))
    if not rows:
        raise TraceError(f"{source}: no jobs after the header")
    tenants = any(fields["guaranteed"] for _, fields in rows)
    return tuple(
        TraceJob(
            **fields,
            tenant=(GUARANTEED_TENANT if fields["guaranteed"] else BEST_EFFORT_TENANT) if tenants else None,
        )
        for _, fields in rows
    )


def _convert(c: Cells, name: str, times: RubickMeasured) -> dict[str, Any]:
    model = normalise(c.text("application"))  # the name the measurements are keyed by
    if not times.knows(model):
        raise c.fail(
            "application", f"unknown model {model!r}; expected one of {', '.join(sorted(times.batches))}"
        )
    num_gpus = c.integer("num_gpus", 1)
    c.number("num_cpus")
    c.number("bandwidth")
    code = c.text("exec_plan").lower()
    try:
        plan = plan_of(model, code)
        resolved = resolve(plan_from_mapping(plan), num_gpus, times.batches[model], f"plan {code!r}")
    except (ValueError, PlanError) as e:
        raise c.fail(
            "exec_plan", f"{e} (job of {num_gpus} GPUs, global batch {times.batches[model]})"
        ) from None
    steps = c.integer("steps", 1)
    sla = c.text("is_sla")
    if sla not in ("0", "1"):
        raise c.fail("is_sla", f"expected 0 or 1, got {sla!r}")
    found = times.lookup(model, resolved, packed(num_gpus))
    duration = steps * found.time_s if found is not None else c.number("duration")
    if not duration > 0:
        raise c.fail("duration", f"the job's work must be positive, got {duration!r}")
    low, high = gpu_bounds(model, code, num_gpus, times)
    return {
        "job_id": name,
        # To the millisecond, as traces are written (the bundled copies are these values).
        "submit_time_s": round(c.number("submission_time"), 3),
        "num_gpus": num_gpus,
        "duration_s": max(0.001, round(duration, 3)),
        "model": model,
        "batch_size": times.batches[model],
        "iterations": steps,
        "gpu_type": GPU_TYPE,
        "guaranteed": sla == "1",
        "plan": plan,
        "min_gpus": low,
        "max_gpus": high,
    }
