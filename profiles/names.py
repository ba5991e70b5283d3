"""Model names: canonical forms, aliases and Gavel's "Model (batch size N)" labels.

Names are matched case-insensitively with punctuation ignored (profiles/README.md), so
``ResNet-18``, ``resnet_18`` and ``res18`` all mean ``resnet18``.
"""

from __future__ import annotations

import re

_BATCH_SUFFIX = re.compile(r"^(?P<name>.*?)\s*\(\s*batch\s*size\s*(?P<batch>\d+)\s*\)\s*$", re.IGNORECASE)
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def normalise(name: str) -> str:
    """Lower-case, punctuation-free key used for every name lookup."""
    return _NOT_ALNUM.sub("", name.lower())


def split_batch_suffix(label: str) -> tuple[str, int | None]:
    """``"ResNet-18 (batch size 128)"`` -> ``("ResNet-18", 128)``; other labels unchanged."""
    match = _BATCH_SUFFIX.match(label)
    if match is None:
        return label.strip(), None
    return match.group("name").strip(), int(match.group("batch"))
