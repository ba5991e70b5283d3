"""Knowledge about jobs: the profile schema, built-in profiles and the lookup store."""

from profiles.schema import Profile, SensitivityMatrix, ThroughputKey
from profiles.store import ProfileStore

__all__ = ["Profile", "ProfileStore", "SensitivityMatrix", "ThroughputKey"]
