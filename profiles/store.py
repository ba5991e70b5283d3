"""Looking models up: names and aliases to profiles, with a neutral fallback."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from profiles.builtin import builtin_colocation, builtin_profiles
from profiles.names import normalise, split_batch_suffix
from profiles.schema import ColocationKey, Profile

if TYPE_CHECKING:
    from profiles.observed import ObservedPoint

log = logging.getLogger(__name__)


class ProfileStore:
    """Resolves a job's ``model`` to a :class:`Profile`.

    Lookup ignores case and punctuation and follows aliases; Gavel-style labels
    (``"ResNet-18 (batch size 128)"``) resolve to the model. An unknown model gets a
    neutral profile and is reported once (a warning, and :attr:`unknown_models`),
    never rejected (profiles/README.md).
    """

    def __init__(self, profiles: Mapping[str, Profile], *, with_builtin_colocation: bool = False) -> None:
        self._profiles = dict(profiles)
        self._index: dict[str, str] = {}
        for profile in self._profiles.values():
            for label in (profile.name, *profile.aliases):
                self._index[normalise(label)] = profile.name
        self._neutral: dict[str, Profile] = {}
        self._with_builtin_colocation = with_builtin_colocation
        self._colocation: dict[ColocationKey, tuple[float, float]] | None = None
        self._observed: tuple[ObservedPoint, ...] = ()

    @classmethod
    def builtin(cls) -> ProfileStore:
        return cls(builtin_profiles(), with_builtin_colocation=True)

    def with_profiles(self, extra: Iterable[Profile]) -> ProfileStore:
        """A new store where ``extra`` profiles add to or replace (by resolved name) these."""
        merged = dict(self._profiles)
        for profile in extra:
            merged[self.canonical_name(profile.name) or profile.name] = profile
        out = ProfileStore(merged, with_builtin_colocation=self._with_builtin_colocation)
        out._observed = self._observed
        return out

    def with_observations(self, points: Sequence[ObservedPoint]) -> ProfileStore:
        """This store carrying running jobs' measurements, for the models that price plans
        (Rubick's pricer corrects its answers by them, :mod:`profiles.plan_correction`)."""
        out = ProfileStore(self._profiles, with_builtin_colocation=self._with_builtin_colocation)
        out._observed = tuple(points)
        return out

    @property
    def observations(self) -> tuple[ObservedPoint, ...]:
        """What :meth:`with_observations` gave (empty: nothing measured)."""
        return self._observed

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

    def model_key(self, model: str) -> str:
        """The name tables use for ``model``: its canonical name, or the label itself."""
        return self.canonical_name(model) or split_batch_suffix(model)[0]

    def colocation_table(self) -> Mapping[ColocationKey, tuple[float, float]]:
        """Measured packed steps/s: the built-in (Gavel) pairs plus every profile's own.

        Loaded on first use; a profile's measurements replace built-in ones for the
        same key, and every pair is present in both orders.
        """
        if self._colocation is None:
            table = dict(builtin_colocation()) if self._with_builtin_colocation else {}
            for profile in self._profiles.values():
                for e in profile.colocation:
                    key = ColocationKey(
                        gpu_type=e.gpu_type,
                        model_a=profile.name,
                        batch_a=e.batch_size,
                        gpus_a=e.num_gpus,
                        model_b=self.model_key(e.with_model),
                        batch_b=e.with_batch_size,
                        gpus_b=e.with_num_gpus or e.num_gpus,
                        plan_a=e.plan,
                        plan_b=e.with_plan,
                    )
                    table[key] = (e.steps_per_s, e.with_steps_per_s)
                    table[key.swapped()] = (e.with_steps_per_s, e.steps_per_s)
            self._colocation = table
        return self._colocation

    def provenance(self, model: str) -> dict[str, str]:
        """Where the numbers of each of the model's blocks came from: ``throughput``,
        ``sensitivity``, ``colocation`` -> ``built-in`` (the bundled tables), ``profiled``
        (a profile document), ``observed`` (the controller's measurements of running jobs)
        or ``built-in+observed`` (a prior refined by observations). Blocks the profile does
        not have are left out; a neutral profile has none."""
        profile = self.resolve(model)
        present = {
            "throughput": bool(profile.throughput),
            "sensitivity": profile.sensitivity is not None,
            "colocation": bool(profile.colocation),
        }
        return {block: profile.provenance.get(block, "built-in") for block, has in present.items() if has}

    @property
    def unknown_models(self) -> frozenset[str]:
        return frozenset(self._neutral)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._profiles))

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.canonical_name(model) is not None
