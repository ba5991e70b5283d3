"""Reading Mosaic's input files and writing its outputs.

Reads name the file in every error; writes are atomic (a temporary file in the same
directory, then ``os.replace``), so an interrupted run never leaves half a file.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from planner.errors import InputError

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


def write_atomic(path: str | Path, content: str | bytes) -> None:
    """Write ``content`` to ``path`` so that readers see the old file or the new one."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, document: Any) -> None:
    write_atomic(path, json.dumps(document, indent=2, sort_keys=False) + "\n")
