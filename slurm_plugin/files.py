"""Reading Mosaic's input files and writing its outputs.

Reads name the file in every error; writes are atomic (:func:`wrapper.atomic.write_atomic`,
re-exported here: a temporary file in the same directory, fsynced, then ``os.replace``), so
an interrupted run never leaves half a file.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from wrapper.atomic import write_atomic

BUNDLED = "sim/bundled"


def read_text(path: str | Path) -> str:
    """A text file (``.gz`` decompressed), or an :class:`InputError` naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read: {e.strerror}") from e
    if p.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise InputError(f"{p}: not a valid gzip file: {e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not UTF-8 text ({e})") from e


def read_json(path: str | Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from e
    except (ValueError, RecursionError) as e:  # a 5000-digit number; nesting too deep
        raise InputError(f"{path}: not valid JSON: {e or 'nested too deeply'}") from None


def read_toml(path: str | Path) -> dict[str, Any]:
    text = read_text(path)
    try:
        return tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer of more than 4,300 digits
        raise InputError(f"{path}: not valid TOML: {e}") from e
    except RecursionError:
        raise InputError(f"{path}: not valid TOML: nested too deeply") from None


def bundled_text(name: str) -> str:
    """A file shipped in ``planner/sim/bundled`` (demo cluster, demo trace, Philly trace)."""
    data = resources.files("planner").joinpath(*BUNDLED.split("/"), name).read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8")


def write_json(path: str | Path, document: Any) -> None:
    write_atomic(path, json.dumps(document, indent=2, sort_keys=False) + "\n")


__all__ = ["BUNDLED", "bundled_text", "read_json", "read_text", "read_toml", "write_atomic", "write_json"]
