"""Loading site profile files on top of the built-in profiles."""

from __future__ import annotations

from collections.abc import Iterable

from profiles.document import profiles_from_document
from profiles.store import ProfileStore
from slurm_plugin.files import read_json


def load_profile_store(paths: Iterable[str]) -> ProfileStore:
    """Built-in profiles, then each file's models added or replacing by name, in order."""
    store = ProfileStore.builtin()
    for path in paths:
        store = store.with_profiles(profiles_from_document(read_json(path), source=path).values())
    return store
