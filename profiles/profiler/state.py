"""The profiler's resumable state (``PROFILE.json.state.json``), as data (pure).

::

    {"format": "mosaic-profile-state/1",
     "identity": {...what was asked: the job, the request...},
     "runs": {"cpu-1": {"kind": "cpu", "cpus": 1, "samples_per_s": 41.2, "steps_per_s": 1.29,
                        "beats": 6, "window_s": 10.1, "wall_s": 24.0, "partner_samples_per_s": null,
                        "partner_steps_per_s": null}, ...},
     "elapsed_s": 120.4}

A profile resumed with another identity (another job, other CPU counts or plans) would mix
measurements of different things: :func:`check_identity` refuses it, naming what differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from planner.core.errors import ProfileError
from planner.core.fields import Fields, json_document

FORMAT = "mosaic-profile-state/1"


@dataclass(frozen=True, slots=True)
class RunResult:
    """One finished run: the job's throughput (and its partner's, for a pair)."""

    kind: str
    cpus: int
    samples_per_s: float
    steps_per_s: float
    beats: int
    window_s: float
    wall_s: float
    partner_samples_per_s: float | None = None
    partner_steps_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class State:
    identity: Mapping[str, Any]
    runs: Mapping[str, RunResult] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def with_run(self, key: str, result: RunResult) -> State:
        return State(self.identity, {**self.runs, key: result}, self.elapsed_s + result.wall_s)

    def throughputs(self) -> dict[str, float]:
        return {k: r.samples_per_s for k, r in self.runs.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "identity": dict(self.identity),
            "runs": {k: asdict(r) for k, r in self.runs.items()},
            "elapsed_s": self.elapsed_s,
        }


def state_from_json(document: Any, source: str) -> State:
    f = Fields(json_document(document, source, ProfileError), source, ProfileError)
    f.only(["format", "identity", "runs", "elapsed_s"])
    if f.req_str("format") != FORMAT:
        f.fail_key("format", f"expected {FORMAT!r}, got {f.data['format']!r}")
    identity = f.opt_object("identity")
    if identity is None:
        f.fail("missing required key 'identity'")
    runs: dict[str, RunResult] = {}
    raw_runs = f.opt_object("runs") or {}
    for key in raw_runs:
        r = f.child("runs").child(key)
        r.only([x for x in RunResult.__dataclass_fields__])
        runs[str(key)] = RunResult(
            kind=r.req_str("kind"),
            cpus=r.req_int("cpus", minimum=1),
            samples_per_s=r.req_float("samples_per_s", minimum=0.0),
            steps_per_s=r.req_float("steps_per_s", minimum=0.0),
            beats=r.req_int("beats", minimum=0),
            window_s=r.req_float("window_s", minimum=0.0),
            wall_s=r.req_float("wall_s", minimum=0.0),
            partner_samples_per_s=r.opt_float("partner_samples_per_s", minimum=0.0),
            partner_steps_per_s=r.opt_float("partner_steps_per_s", minimum=0.0),
        )
    return State(identity=dict(identity), runs=runs, elapsed_s=f.opt_float("elapsed_s", minimum=0.0) or 0.0)


def check_identity(state: State, identity: Mapping[str, Any], source: str) -> None:
    """Refuse to resume ``state`` for a profile asked differently (names the first difference)."""
    for key in sorted(set(state.identity) | set(identity)):
        old, new = state.identity.get(key), identity.get(key)
        if old != new:
            raise ProfileError(
                f"{source}: this state is from another profile ({key}: {old!r} there, {new!r} now); "
                "remove it, pass --restart, or write to another --out"
            )
