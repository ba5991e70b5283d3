"""The ``mosaic-perfmodel/1`` document: a fitted performance model as JSON.

::

    {
      "format": "mosaic-perfmodel/1",
      "model": "rubick",
      "environment": {"intra_gb_s": 150.0, "inter_gb_s": 100.0, "pcie_gb_s": 32.0, ...},
      "shared": {"k_bwd": 2.0, "k_sync": 1.1, "k_opt": 3e-11, "k_opt_off": 3.7e-09,
                 "k_off": 1.0, "k_swap": 1.0, "k_const": 0.076, "flops_per_s": 6e13},
      "models": {"bert": {"name": "bert", "params_m": 336.3, "seq_len": 512, "hidden": 1024,
                          "layers": 24, "samples": 7, "k_bwd": 2.0, ..., "flops_per_s": 5.9e13}},
      "fit": {"samples": 34, "rmsle": 0.03}
    }

Times are seconds, ``k_opt`` seconds per parameter, ``k_opt_off`` seconds per parameter
and CPU thread, ``flops_per_s`` the model's compute rate (``terms.py``). ``fit`` is
informational. Unknown keys are errors that list the valid ones.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from planner.core.errors import InputError, ProfileError
from planner.core.fields import Fields, json_document
from profiles.perfmodel import cpu_step
from profiles.perfmodel.cpu_step import CpuStepModel
from profiles.perfmodel.docparts import FORMAT, SHAPE_KEYS, fit_block, read_rmsle, read_shape, shape_entry
from profiles.perfmodel.fit import ModelFit, PerfModel
from profiles.perfmodel.query import Environment
from profiles.perfmodel.terms import PARAM_NAMES, PerfParams

KIND = "rubick"
_ENV_KEYS = tuple(f.name for f in fields(Environment))
_MODEL_KEYS = (*SHAPE_KEYS, "samples", *PARAM_NAMES, "flops_per_s")


def _params(params: PerfParams, rate: float) -> dict[str, float]:
    return {**asdict(params), "flops_per_s": rate}


def to_document(model: PerfModel, samples: int | None = None) -> dict[str, Any]:
    """The JSON object of a fitted model."""
    models: dict[str, Any] = {}
    for key, fitted in sorted(model.models.items()):
        entry = shape_entry(fitted.shape)
        entry["samples"] = fitted.samples
        entry.update(_params(fitted.params, fitted.rate))
        models[key] = entry
    document: dict[str, Any] = {
        "format": FORMAT,
        "model": KIND,
        "environment": asdict(model.environment),
        "shared": _params(model.shared, model.shared_rate),
        "models": models,
    }
    if fit := fit_block(samples, model.rmsle):
        document["fit"] = fit
    return document


def read_any(document: Any, source: str = "perfmodel") -> PerfModel | CpuStepModel:
    """A ``mosaic-perfmodel/1`` document of either kind: Rubick's model (``"model":
    "rubick"``) or the profiler's CPU step model (``"cpu-step"``); errors name the key."""
    data = json_document(document, source, ProfileError)
    f = Fields(data, source, ProfileError)
    if f.req_str("format") != FORMAT:
        f.fail_key("format", f"expected {FORMAT!r}, got {f.data['format']!r}")
    kind = f.req_str("model")
    if kind == cpu_step.KIND:
        return cpu_step.from_document(data, source)
    return from_document(data, source)


def from_document(document: Any, source: str = "perfmodel") -> PerfModel:
    """Read a ``mosaic-perfmodel/1`` document (JSON text or parsed); errors name the key."""
    f = Fields(json_document(document, source, ProfileError), source, ProfileError)
    f.only(("format", "model", "environment", "shared", "models", "fit"))
    if f.req_str("format") != FORMAT:
        f.fail_key("format", f"expected {FORMAT!r}, got {f.data['format']!r}")
    if f.req_str("model") != KIND:
        f.fail_key("model", f"expected {KIND!r} or {cpu_step.KIND!r}, got {f.data['model']!r}")
    env_fields = f.child("environment")
    env_fields.only(_ENV_KEYS)
    given = {k: env_fields.opt_float(k, minimum=0.0) for k in _ENV_KEYS}
    try:
        env = Environment(**{k: v for k, v in given.items() if v is not None})
    except InputError as e:
        raise ProfileError(f"{source}: {e}") from e
    shared_fields = f.child("shared")
    shared_fields.only((*PARAM_NAMES, "flops_per_s"))
    shared, shared_rate = _read_params(shared_fields)
    models_fields = f.child("models")
    models: dict[str, ModelFit] = {}
    for key in models_fields.data:
        m = models_fields.child(key)
        m.only(_MODEL_KEYS)
        shape = read_shape(m, source, key)
        params, rate = _read_params(m)
        models[key] = ModelFit(shape=shape, params=params, rate=rate, samples=m.opt_int("samples", 0) or 0)
    rmsle = read_rmsle(f, source)
    return PerfModel(shared=shared, shared_rate=shared_rate, models=models, environment=env, rmsle=rmsle)


def _read_params(f: Fields) -> tuple[PerfParams, float]:
    values = {k: f.req_float(k, minimum=0.0) for k in PARAM_NAMES}
    for k in ("k_sync", "k_off", "k_swap"):
        if values[k] < 1:
            f.fail_key(k, f"an overlap exponent must be >= 1, got {values[k]}")
    rate = f.req_float("flops_per_s", minimum=0.0)
    if rate <= 0:
        f.fail_key("flops_per_s", "must be > 0")
    return PerfParams(**values), rate
