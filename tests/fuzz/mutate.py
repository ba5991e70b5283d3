"""Input generators for the fuzz targets: mutations of valid seeds, and random inputs.

Two front ends share one set of mutation operators: hypothesis strategies (the CI tests;
hypothesis shrinks a failure to a small input) and a plain :class:`random.Random` driver
(``benchmarks/soak/fuzz.py``, many inputs quickly). A mutation either edits the seed as text
(insert / delete / duplicate a span, splice in a nasty token) or, for JSON seeds, edits the
parsed document (replace a value anywhere with a nasty value, drop or add a key) and
serialises it again, so that mutations reach the checks behind the syntax.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.targets import Target

NASTY_TEXT = (
    "",
    " ",
    "0",
    "-1",
    "1.5",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "-0",
    "9" * 5000,
    "true",
    "null",
    "[]",
    "{}",
    "[" * 3000,
    "{" * 50 + "}" * 3,
    '"',
    "'",
    "\\",
    "\x00",
    "\n",
    "\r\n",
    ",",
    ";",
    "|",
    "=",
    ":",
    "#",
    "#MOSAIC",
    "--model",
    "--plans=",
    "mosaic:",
    "../../etc/passwd",
    "/etc/shadow",
    "a/b",
    "..",
    "é",
    "\u2028",
    "\ufeff",
    "x" * 200,
    "n[1-100000000]",
    "n[3-1]",
    "gpu:a100:2(IDX:0-1)",
    "(null)",
    "N/A",
    "UNLIMITED",
    "9999999999999999999999",
)

NASTY_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    10**4000,  # str() of more than 4300 digits raises: the text operators splice those in
    1e308,
    -0.0,
    0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    " ",
    "../../etc/passwd",
    "a/b",
    "x" * 100,
    [],
    {},
    [None],
    [[]],
    {"": None},
    ["n1", 0],
    [["n1", 0]],
    {"zero_stage": 9},
)


# -- the operators -----------------------------------------------------------------------


DEEP = "\x00deep\x00"
"""A placeholder value that :func:`_dumps` writes as JSON nested 1200 levels deep."""
_DEEP_JSON = '[{"k": ' * 600 + "1" + "}]" * 600


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON document (the root included), down to 20 levels."""
    out = [prefix]
    if len(prefix) >= 20:
        return out
    if isinstance(document, dict):
        for key, value in document.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for k, value in enumerate(document):
            out += _paths(value, (*prefix, k))
    return out


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {**document, head: _replace(document[head], rest, value)}
    copy = list(document)
    copy[head] = _replace(copy[head], rest, value)
    return copy


def _drop(document: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return document
    if len(path) == 1:
        if isinstance(document, dict):
            return {k: v for k, v in document.items() if k != path[0]}
        return [v for k, v in enumerate(document) if k != path[0]]
    head = path[0]
    if isinstance(document, dict):
        return {**document, head: _drop(document[head], path[1:])}
    copy = list(document)
    copy[head] = _drop(copy[head], path[1:])
    return copy


def _dumps(document: Any) -> str:
    try:
        return json.dumps(document).replace(json.dumps(DEEP), _DEEP_JSON)
    except (ValueError, RecursionError):  # an int too long for str(), or too deep
        return json.dumps("unserialisable")


_TOML_VALUE = re.compile(r"^(\s*[A-Za-z_][\w.-]*\s*=\s*)(.*)$", re.MULTILINE)
TOML_VALUES = (
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e400",
    "9223372036854775807",
    "true",
    '""',
    '" "',
    '"../x"',
    "[]",
    '["", "a"]',
    "[1, 2]",
    "{}",
    "{a = 1}",
    "1979-05-27T07:32:00Z",
    "0.5",
    '"none"',
    '"fifo"',
    '"USR1; rm"',
)


class Ops:
    """The mutation operators, parameterised by a source of choices (``pick(n)`` in [0, n))."""

    def __init__(self, pick: Any) -> None:
        self.pick = pick

    def choice(self, items: Any) -> Any:
        return items[self.pick(len(items))]

    def text(self, seed: str) -> str:
        out = seed
        for _ in range(1 + self.pick(4)):
            n = len(out)
            op = self.pick(6)
            i, j = sorted((self.pick(n + 1), self.pick(n + 1)))
            if op == 0:  # insert a nasty token
                out = out[:i] + self.choice(NASTY_TEXT) + out[i:]
            elif op == 1:  # replace a span with a nasty token
                out = out[:i] + self.choice(NASTY_TEXT) + out[j:]
            elif op == 2:  # delete a span
                out = out[:i] + out[j:]
            elif op == 3:  # duplicate a span
                out = out[:j] + out[i:j] + out[j:]
            elif op == 4 and n:  # flip one character
                out = out[:i] + chr(self.pick(0x300)) + out[i + 1 :]
            else:  # replace a word (a run of letters/digits) with a nasty token
                words = [m.span() for m in re.finditer(r"[\w.+-]+", out)]
                if words:
                    a, b = self.choice(words)
                    out = out[:a] + self.choice(NASTY_TEXT) + out[b:]
        return out

    def json(self, seed: str) -> str:
        document = json.loads(seed)
        for _ in range(1 + self.pick(3)):
            paths = _paths(document)
            path = self.choice(paths)
            op = self.pick(5)
            if op == 0 and path:
                document = _drop(document, path)
            elif op == 1:
                parent = path[:-1] if path else ()
                target = document
                for key in parent:
                    target = target[key]
                if isinstance(target, dict):
                    document = _replace(
                        document, parent, {**target, self.choice(NASTY_TEXT[:20]): self.value()}
                    )
                else:
                    document = _replace(document, path, self.value())
            else:
                document = _replace(document, path, self.value())
        return _dumps(document)

    def value(self) -> Any:
        k = self.pick(len(NASTY_VALUES) + 2)
        if k == len(NASTY_VALUES):
            return DEEP
        if k == len(NASTY_VALUES) + 1:
            return self.choice(NASTY_TEXT)
        return NASTY_VALUES[k]

    def toml(self, seed: str) -> str:
        if self.pick(3) == 0:
            return self.text(seed)
        spots = list(_TOML_VALUE.finditer(seed))
        out = seed
        for _ in range(1 + self.pick(3)):
            spots = list(_TOML_VALUE.finditer(out))
            if not spots:
                break
            m = self.choice(spots)
            out = out[: m.start(2)] + self.choice(TOML_VALUES) + out[m.end(2) :]
        return out

    def bytes(self, seed: bytes) -> bytes:
        text = seed.decode("utf-8", "replace")
        op = self.pick(4)
        if op == 0:
            return self.text(text).encode("utf-8", "surrogatepass")
        if op == 1 and text.strip().startswith("{"):
            lines = text.splitlines(keepends=True) or [text]
            k = self.pick(len(lines))
            with contextlib.suppress(ValueError):
                lines[k] = self.json(lines[k]) + "\n"
            return "".join(lines).encode("utf-8")
        data = bytearray(seed)
        for _ in range(1 + self.pick(4)):
            i = self.pick(len(data) + 1)
            data[i:i] = bytes([self.pick(256)])
        return bytes(data)

    def mutate(self, target: Target) -> Any:
        seed = self.choice(target.seeds)
        if target.kind == "json" and self.pick(3):
            return self.json(seed)
        if target.kind == "toml":
            return self.toml(seed)
        if target.kind == "bytes":
            return self.bytes(seed)
        return self.text(seed)


# -- front ends ----------------------------------------------------------------------------


def random_inputs(target: Target, rng: random.Random) -> Any:
    """One input for ``target``: usually a mutated seed, sometimes random bytes or text."""
    ops = Ops(lambda n: rng.randrange(n) if n > 0 else 0)
    roll = rng.random()
    if roll < 0.85:
        return ops.mutate(target)
    raw = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    if target.kind == "bytes":
        return raw
    if roll < 0.92:
        return raw.decode("utf-8", "replace")
    return "".join(rng.choice('{}[]",:0123456789.eE-+ntrufals\n|=#') for _ in range(rng.randrange(200)))


@st.composite
def mutated(draw: st.DrawFn, target: Target) -> Any:
    """Hypothesis: a mutation of one of the target's seeds."""
    ops = Ops(lambda n: draw(st.integers(0, n - 1)) if n > 0 else 0)
    return ops.mutate(target)


def arbitrary(target: Target) -> st.SearchStrategy[Any]:
    """Hypothesis: an input from scratch (random text or bytes, or a random JSON value)."""
    if target.kind == "bytes":
        return st.binary(max_size=300)
    if target.kind == "json":
        json_values = st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda children: (
                st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
            ),
            max_leaves=20,
        )
        return st.text(max_size=300) | json_values.map(_dumps)
    return st.text(max_size=300)
