"""Looking models up: names and aliases to profiles, with a neutral fallback."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from profiles.builtin import builtin_profiles
from profiles.names import normalise, split_batch_suffix
from profiles.schema import Profile

log = logging.getLogger(__name__)


class ProfileStore:
    """Resolves a job's ``model`` to a :class:`Profile`.

    Lookup ignores case and punctuation and follows aliases; Gavel-style labels
    (``"ResNet-18 (batch size 128)"``) resolve to the model. An unknown model gets a
    neutral profile and is reported once (a warning, and :attr:`unknown_models`),
    never rejected (DESIGN.md "Model names").
    """

    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._profiles = dict(profiles)
        self._index: dict[str, str] = {}
        for profile in self._profiles.values():
            for label in (profile.name, *profile.aliases):
                self._index[normalise(label)] = profile.name
        self._neutral: dict[str, Profile] = {}

    @classmethod
    def builtin(cls) -> ProfileStore:
        return cls(builtin_profiles())

    def with_profiles(self, extra: Iterable[Profile]) -> ProfileStore:
        """A new store where ``extra`` profiles add to or replace (by resolved name) these."""
        merged = dict(self._profiles)
        for profile in extra:
            merged[self.canonical_name(profile.name) or profile.name] = profile
        return ProfileStore(merged)

    def canonical_name(self, model: str) -> str | None:
        label, _ = split_batch_suffix(model)
        return self._index.get(normalise(label))

    def resolve(self, model: str) -> Profile:
        name = self.canonical_name(model)
        if name is not None:
            return self._profiles[name]
        neutral = self._neutral.get(model)
        if neutral is None:
            log.warning("model %r has no profile; scheduling it with the neutral profile", model)
            neutral = self._neutral[model] = Profile(name=model, sources=("neutral: unknown model",))
        return neutral

    @property
    def unknown_models(self) -> frozenset[str]:
        return frozenset(self._neutral)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._profiles))

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.canonical_name(model) is not None
