"""Exceptions shared by every Mosaic package.

One root, :class:`MosaicError`, so the entry points can catch "a problem Mosaic
understands" in one place and print it, while bugs still surface as tracebacks.
Input errors always name *what* is wrong and *where* (file, line, job, key).
"""

from __future__ import annotations


class MosaicError(Exception):
    """Root of every error Mosaic raises on purpose."""


class InputError(MosaicError):
    """Malformed input: a snapshot, trace, cluster file, config or profile."""


class SnapshotError(InputError):
    """A Snapshot or RoundPlan document does not match the contract."""


class TraceError(InputError):
    """A trace CSV row or column is malformed."""


class ClusterError(InputError):
    """A cluster description is malformed."""


class ConfigError(InputError):
    """A scheduler or component configuration is malformed or names an unknown component."""


class ProfileError(InputError):
    """A profile document is malformed."""


class SimulationError(MosaicError):
    """The simulator reached an impossible state: always a bug."""
