"""Named component registries: configuration picks stages by name, never by ``if``.

Each stage kind (ordering, placement, packing, shaping, reconfiguration, migration)
has one :class:`Registry`. A component class registers under a unique name and builds
itself from its options with a ``from_options(options, context)`` classmethod; the
registry rejects a duplicate name and answers a typo with the list of known names
(after the Kubernetes scheduler framework's plugin registry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from planner.core.errors import ConfigError
from profiles.store import ProfileStore

DEFAULT_RESTART_COST_S = 30.0
"""What a scheduler assumes one restart costs when not told (the simulator's default
checkpoint plus relaunch)."""


@dataclass(frozen=True)
class StageContext:
    """What a stage may need besides its options: shared, read-only knowledge.

    ``profile_noise`` and ``seed`` perturb what stages *believe* about throughputs
    (Tesserae §7.2's profiling-error study); the simulator's true speeds are unaffected.
    ``tenants`` maps a tenant's name to its GPU quota (the configuration's ``[[tenants]]``).
    ``preemptive`` is ``False`` when the scheduler was configured non-preemptive explicitly
    (``--non-preemptive``, ``preemptive = false``; not a policy's default): a stage that resizes
    jobs (the reconfiguration stages) must then not take GPUs from a running job.
    ``restart_cost_s`` is what one restart of a job costs (checkpoint, relaunch, warm-up): the
    scheduler's ``restart_cost_s``; a stage that weighs restarts uses it unless its own
    options set one.
    """

    profiles: ProfileStore
    profile_noise: float = 0.0
    seed: int = 0
    tenants: Mapping[str, int] = field(default_factory=dict)
    preemptive: bool = True
    restart_cost_s: float = DEFAULT_RESTART_COST_S


T = TypeVar("T")
C = TypeVar("C", bound=type)
Factory = Callable[[Mapping[str, Any], StageContext], Any]


class Registry(Generic[T]):
    """Components of one stage kind, by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Factory] = {}

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator: ``@ORDERINGS.register("fifo")`` on a class with ``from_options``."""

        def add(cls: C) -> C:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            factory = getattr(cls, "from_options", None)
            if not callable(factory):
                raise TypeError(f"{cls!r} needs a from_options(options, context) classmethod")
            self._entries[name] = factory
            return cls

        return add

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def create(self, name: str, options: Mapping[str, Any], context: StageContext) -> T:
        try:
            factory = self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none yet)"
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {known}") from None
        component: T = factory(options, context)
        return component
