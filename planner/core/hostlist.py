"""Slurm's compressed host lists (``n[1-3,05],gpu7``), the one parser every package uses (pure).

The controller reads them in ``squeue --json`` (``nodes``, ``required_nodes``); a job reads
them in ``SLURM_JOB_NODELIST`` (``mosaic-run``, emulated jobs). ``scontrol show hostnames``
is the reference: names in order, zero padding kept (``g[01-02]`` -> ``g01, g02``).
"""

from __future__ import annotations

import re

from planner.core.errors import InputError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
EMPTY = frozenset({"", "(null)", "None assigned"})
MAX_HOSTS = 1 << 20
"""More names than any allocation holds: a longer list is refused rather than expanded."""


class HostlistError(InputError):
    """A host list Slurm would not have written (names the text and the bad part)."""


def expand_hostlist(text: str) -> tuple[str, ...]:
    """``n[1-3,5],m2`` -> ``(n1, n2, n3, n5, m2)``; an empty list (``(null)``) -> ``()``."""
    text = text.strip()
    if text in EMPTY:
        return ()
    out: list[str] = []
    for part in _split_top_level(text):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\](.*)", part)
        if m is None:
            if "[" in part or "]" in part:
                raise HostlistError(f"hostlist {text!r}: unbalanced brackets in {part!r}")
            out.append(part)
            continue
        prefix, body, suffix = m.groups()
        for item in body.split(","):
            r = _RANGE.match(item.strip())
            if r is None:
                raise HostlistError(f"hostlist {text!r}: bad range {item!r}")
            lo, hi = r.group(1), r.group(2) or r.group(1)
            if len(lo) > 18 or len(hi) > 18:
                raise HostlistError(f"hostlist {text[:80]!r}: number too long in {item[:40]!r}")
            if int(hi) < int(lo):
                raise HostlistError(f"hostlist {text!r}: range {item!r} runs backwards")
            if len(out) + int(hi) - int(lo) >= MAX_HOSTS:
                raise HostlistError(f"hostlist {text[:80]!r}: more than {MAX_HOSTS} names")
            width = len(lo) if lo.startswith("0") else 0
            out += [f"{prefix}{k:0{width}d}{suffix}" for k in range(int(lo), int(hi) + 1)]
    return tuple(out)


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return [p for p in parts if p]
