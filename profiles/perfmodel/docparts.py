"""Parts every ``mosaic-perfmodel/1`` document shares, whichever model it holds: a model's
shape, and the ``fit`` block (samples, RMSLE)."""

from __future__ import annotations

from typing import Any

from planner.core.errors import InputError, ProfileError
from planner.core.fields import Fields
from profiles.perfmodel.query import ModelShape

FORMAT = "mosaic-perfmodel/1"
SHAPE_KEYS = ("name", "params_m", "seq_len", "hidden", "layers", "heads")


def shape_entry(shape: ModelShape) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": shape.name,
        "params_m": shape.params / 1e6,
        "seq_len": shape.seq_len,
        "hidden": shape.hidden,
        "layers": shape.layers,
    }
    if shape.heads is not None:
        entry["heads"] = shape.heads
    return entry


def read_shape(m: Fields, source: str, key: str) -> ModelShape:
    """A model entry's shape; the shape's own checks are errors naming the entry."""
    try:
        return ModelShape(
            name=m.req_str("name"),
            params=m.req_float("params_m", minimum=0.0) * 1e6,
            seq_len=m.req_int("seq_len", minimum=1),
            hidden=m.req_int("hidden", minimum=1),
            layers=m.req_int("layers", minimum=1),
            heads=m.opt_int("heads", minimum=1),
        )
    except ProfileError:
        raise
    except InputError as e:  # e.g. a count of thousands of digits
        raise ProfileError(f"{source}: models.{key}: {e}") from e


def fit_block(samples: int | None, rmsle: float | None) -> dict[str, Any]:
    """The document's ``fit`` object (empty: leave it out)."""
    fit: dict[str, Any] = {}
    if samples is not None:
        fit["samples"] = samples
    if rmsle is not None:
        fit["rmsle"] = rmsle
    return fit


def read_rmsle(f: Fields, source: str) -> float | None:
    fit = f.opt_object("fit")
    return None if fit is None else Fields(fit, f"{source}.fit", ProfileError).opt_float("rmsle", minimum=0.0)
