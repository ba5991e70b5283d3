"""``#MOSAIC`` directives in a batch script, and the job metadata they become.

Like ``#SBATCH``, directives are read from the script's leading comment block (up to
the first command line)::

    #!/bin/bash
    #SBATCH --gres=gpu:2 -c 8 --mem=32G
    #MOSAIC --model resnet50 --global-batch-size 256 --framework torch
    #MOSAIC --plans '[{"zero_stage": 1}, {"zero_stage": 2}]' --tenant vision --guaranteed
    #MOSAIC --min-gpus 1 --max-gpus 4 --gpu-types a100,v100

``--min-gpus``/``--max-gpus``/``--gpu-types`` make the job elastic (the GPU counts and
types it accepts, :class:`planner.core.model.Job`); without them it runs on the GPUs its
``#SBATCH`` request names, as before.

The metadata travels in the job's Slurm comment as ``mosaic:<compact JSON>`` (so it
survives a lost state store and shows in ``squeue``/``sacct``), and in the state store.
Every error names the script, the line and the directive.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from typing import Any

from planner.core.errors import InputError
from planner.core.fields import loads_json

COMMENT_PREFIX = "mosaic:"
SUBMISSION = "submission"  # comment key: the token `mosaic submit` gives each submission
FRAMEWORKS = ("torch", "deepspeed", "megatron")

# directive -> (metadata key, kind); kind "flag" takes no value.
DIRECTIVES: dict[str, tuple[str, str]] = {
    "--model": ("model", "str"),
    "--global-batch-size": ("batch_size", "int"),
    "--plan": ("plan", "object"),
    "--plans": ("plans", "list"),
    "--framework": ("framework", "framework"),
    "--guaranteed": ("guaranteed", "flag"),
    "--best-effort": ("guaranteed", "flag-false"),
    "--tenant": ("tenant", "str"),
    "--deadline-s": ("deadline_s", "positive"),
    "--duration-s": ("duration_s", "positive"),
    "--gpu-type": ("gpu_type", "str"),
    "--min-gpus": ("min_gpus", "int"),
    "--max-gpus": ("max_gpus", "int"),
    "--gpu-types": ("gpu_types", "names"),
}


class DirectiveError(InputError):
    """A ``#MOSAIC`` directive is malformed (names the script, line and directive)."""


def parse_directives(text: str, source: str = "script") -> dict[str, Any]:
    """The metadata the script's ``#MOSAIC`` lines declare (empty when there are none)."""
    meta: dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if lineno == 1 and line.startswith("#!"):
            continue
        if not line or (line.startswith("#") and not line.startswith("#MOSAIC")):
            continue
        if not line.startswith("#"):
            break  # the first command ends the directive block, as for #SBATCH
        rest = line[len("#MOSAIC") :]
        if rest and not rest[0].isspace():
            raise DirectiveError(f"{source}:{lineno}: '{line.split()[0]}' is not '#MOSAIC'")
        where = f"{source}:{lineno}"
        try:
            tokens = shlex.split(rest, comments=False)
        except ValueError as e:
            raise DirectiveError(f"{where}: cannot split the directive line: {e}") from e
        _apply_tokens(tokens, meta, where)
        _check_demand(meta, where)
    return meta


def _check_demand(meta: Mapping[str, Any], where: str) -> None:
    """The directives so far must not contradict each other.

    The GPU count the job asks Slurm for is not known here (it is an ``#SBATCH`` option),
    so whether the range holds it is for the reader of the metadata to check
    (:func:`planner.core.model.demand_problem`).
    """
    low, high = meta.get("min_gpus"), meta.get("max_gpus")
    if low is not None and high is not None and low > high:
        raise DirectiveError(f"{where}: --min-gpus {low} is more than --max-gpus {high}")
    types, wanted = meta.get("gpu_types"), meta.get("gpu_type")
    if types is not None and wanted is not None and str(wanted).lower() not in types:
        raise DirectiveError(f"{where}: --gpu-type {wanted} is not among --gpu-types {','.join(types)}")


def _apply_tokens(tokens: list[str], meta: dict[str, Any], where: str) -> None:
    k = 0
    while k < len(tokens):
        token = tokens[k]
        name, inline = token, None
        if "=" in token:
            name, inline = token.split("=", 1)
        spec = DIRECTIVES.get(name)
        if spec is None:
            raise DirectiveError(f"{where}: unknown directive {name!r}; known: {', '.join(DIRECTIVES)}")
        key, kind = spec
        if kind in {"flag", "flag-false"}:
            if inline is not None:
                raise DirectiveError(f"{where}: {name} takes no value")
            meta[key] = kind == "flag"
            k += 1
            continue
        if inline is None:
            if k + 1 >= len(tokens):
                raise DirectiveError(f"{where}: {name} needs a value")
            inline = tokens[k + 1]
            k += 2
        else:
            k += 1
        meta[key] = _value(name, kind, inline, where)


def _value(name: str, kind: str, text: str, where: str) -> Any:
    if kind == "str":
        if not text:
            raise DirectiveError(f"{where}: {name} needs a non-empty value")
        return text
    if kind == "names":
        names = [part.strip().lower() for part in text.split(",")]  # GPU types match lower-cased
        if not all(names):
            raise DirectiveError(f"{where}: {name} needs GPU type names separated by ',', got {text!r}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise DirectiveError(f"{where}: {name} lists {', '.join(twice)} twice")
        return names
    if kind == "framework":
        if text not in FRAMEWORKS:
            raise DirectiveError(f"{where}: {name} {text!r}: expected one of {', '.join(FRAMEWORKS)}")
        return text
    if kind in {"int", "positive"}:
        try:
            number = int(text) if kind == "int" else float(text)
        except ValueError:
            raise DirectiveError(f"{where}: {name} {text!r} is not a number") from None
        if not math.isfinite(number):
            raise DirectiveError(f"{where}: {name} must be a finite number, got {text}")
        if number <= 0:
            raise DirectiveError(f"{where}: {name} must be positive, got {text}")
        return number
    try:
        value = loads_json(text)
    except ValueError as e:
        raise DirectiveError(f"{where}: {name} is not valid JSON: {getattr(e, 'msg', e)}") from e
    if kind == "object" and not isinstance(value, dict):
        raise DirectiveError(f"{where}: {name} must be a JSON object")
    if kind == "list" and not (isinstance(value, list) and all(isinstance(p, dict) for p in value)):
        raise DirectiveError(f"{where}: {name} must be a JSON list of objects")
    return value


def encode_comment(meta: Mapping[str, Any]) -> str:
    """The Slurm comment carrying ``meta``."""
    return COMMENT_PREFIX + json.dumps(dict(meta), separators=(",", ":"), sort_keys=True)


def decode_comment(comment: str) -> dict[str, Any] | None:
    """Metadata from a Slurm comment; ``None`` for a comment Mosaic did not write or cannot read."""
    if not comment.startswith(COMMENT_PREFIX):
        return None
    try:
        value = loads_json(comment[len(COMMENT_PREFIX) :])
    except ValueError:  # bad JSON, a 5000-digit number, nesting too deep: not Mosaic's
        return None
    return value if isinstance(value, dict) else None
