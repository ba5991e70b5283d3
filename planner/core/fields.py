"""Typed reading of untrusted mappings (JSON objects, TOML tables, CSV rows).

Every accessor names the location and the key in its error, so a malformed snapshot
says ``jobs[3] (id 'j12'): key 'num_gpus': expected an integer >= 1, got '2' (str)``
instead of a bare ``KeyError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from planner.core.errors import InputError


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


class Fields:
    """A view on one mapping, with a location used in every error message."""

    __slots__ = ("data", "error", "where")

    def __init__(self, data: Any, where: str, error: type[InputError] = InputError) -> None:
        self.where = where
        self.error = error
        if not isinstance(data, Mapping):
            self.fail(f"expected an object, got {_describe(data)}")
        self.data: Mapping[str, Any] = data

    def fail(self, message: str) -> NoReturn:
        raise self.error(f"{self.where}: {message}")

    def fail_key(self, key: str, message: str) -> NoReturn:
        raise self.error(f"{self.where}: key '{key}': {message}")

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def only(self, allowed: Iterable[str]) -> None:
        """Reject unknown keys, listing the valid ones (for configs, not snapshots)."""
        valid = sorted(allowed)
        for key in self.data:
            if key not in valid:
                self.fail(f"unknown key '{key}'; valid keys: {', '.join(valid)}")

    def _required(self, key: str) -> Any:
        if key not in self.data:
            self.fail(f"missing required key '{key}'")
        value = self.data[key]
        if value is None:
            self.fail_key(key, "must not be null")
        return value

    # -- scalars ---------------------------------------------------------------------
    def req_str(self, key: str) -> str:
        value = self._required(key)
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.fail_key(key, f"expected a string, got {_describe(value)}")
        text = str(value)
        if not text.strip():
            self.fail_key(key, "must not be empty")
        return text

    def opt_str(self, key: str) -> str | None:
        return self.req_str(key) if self.has(key) else None

    def req_int(self, key: str, minimum: int | None = None) -> int:
        value = self._required(key)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.fail_key(key, f"expected an integer{_bound(minimum)}, got {_describe(value)}")
        if minimum is not None and value < minimum:
            self.fail_key(key, f"expected an integer{_bound(minimum)}, got {value}")
        return int(value)

    def opt_int(self, key: str, minimum: int | None = None) -> int | None:
        return self.req_int(key, minimum) if self.has(key) else None

    def req_float(self, key: str, minimum: float | None = None, maximum: float | None = None) -> float:
        value = self._required(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail_key(key, f"expected a number{_range(minimum, maximum)}, got {_describe(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a float's range
            number = math.inf if value > 0 else -math.inf
        if not math.isfinite(number):
            self.fail_key(key, f"expected a finite number, got {number}")
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            self.fail_key(key, f"expected a number{_range(minimum, maximum)}, got {number}")
        return number

    def opt_float(self, key: str, minimum: float | None = None, maximum: float | None = None) -> float | None:
        return self.req_float(key, minimum, maximum) if self.has(key) else None

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            self.fail_key(key, f"expected true or false, got {_describe(value)}")
        return value

    # -- containers ------------------------------------------------------------------
    def req_list(self, key: str) -> list[Any]:
        value = self._required(key)
        if not isinstance(value, list):
            self.fail_key(key, f"expected a list, got {_describe(value)}")
        return value

    def opt_object(self, key: str) -> Mapping[str, Any] | None:
        if not self.has(key):
            return None
        value = self.data[key]
        if not isinstance(value, Mapping):
            self.fail_key(key, f"expected an object, got {_describe(value)}")
        return value

    def child(self, key: str, label: str | None = None) -> Fields:
        return Fields(self._required(key), f"{self.where}.{label or key}", self.error)


def loads_json(text: str | bytes) -> Any:
    """:func:`json.loads` for untrusted text: every way it can fail is a :class:`ValueError`.

    Besides bad syntax (``JSONDecodeError``) that is bytes that are not UTF-8
    (``UnicodeDecodeError``), an integer of more digits than Python converts (4300) and
    nesting deeper than the interpreter's recursion limit (``RecursionError``, turned into a
    ``ValueError`` here).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def json_document(document: Any, source: str, error: type[InputError] = InputError) -> Any:
    """Parse JSON text (str or bytes); an already-parsed document passes through."""
    if not isinstance(document, str | bytes):
        return document
    try:
        return loads_json(document)
    except ValueError as e:
        raise error(f"{source}: not valid JSON: {e}") from e


def _bound(minimum: int | None) -> str:
    return "" if minimum is None else f" >= {minimum}"


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum:g}, {maximum:g}]"
    if minimum is not None:
        return f" >= {minimum:g}"
    if maximum is not None:
        return f" <= {maximum:g}"
    return ""
