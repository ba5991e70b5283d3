"""Named crash points in the controller's round: a test-only hook to kill it at each step.

A controller can die anywhere (the OOM killer, a reboot, ``kill -9``): the next tick must
find every job where a restarted controller can finish or undo what the dead one began
(docs/admin-guide.md, "A tick": a round left half-applied is completed). To prove that at every step,
the controller calls :func:`crash_point` with a name from :data:`CRASH_POINTS` at each
boundary of a round: between the Slurm commands of an action, between an action and its
record in the state store, and inside the store's transactions before they commit.

**Test-only hook.** With the environment variable ``MOSAIC_CRASH_AT=<name>[:<n>]`` the
process sends itself ``SIGKILL`` the ``n``-th time (default 1) it reaches the point
``<name>``: no handler, no ``finally``, no flush runs, as in a real crash.
``MOSAIC_CRASH_AT=none`` arms nothing and, with ``MOSAIC_CRASH_LOG=<file>``, each point
reached is appended to that file (one name a line; also before the kill when a point is
named), which tells a test that every registered point is reached by its scenario. A name
that is not registered is an error naming the variable and the registered points. Never
set it on a real controller. Unset (the daemon's case), a point costs one lookup in
``os.environ``.

``tests/slurm_plugin/test_live_crash_points.py`` kills the real ``mosaic controller --once``
at every point, on the test cluster, and checks what the next controller makes of it;
``benchmarks/soak/crash_points.py`` writes the outcome table.
"""

from __future__ import annotations

import os
import signal

from planner.core.errors import InputError

CRASH_ENV = "MOSAIC_CRASH_AT"
LOG_ENV = "MOSAIC_CRASH_LOG"
NONE = "none"

CRASH_POINTS: tuple[str, ...] = (
    # The tick (slurm_plugin/controller/loop.py), in the order a round reaches them.
    "tick.observed",  # Slurm and the store read; nothing decided yet
    "round.begun",  # the round's plan committed as 'applying', no action logged
    "round.policy_state",  # the planner's policy state committed
    # The actuator (slurm_plugin/controller/actuate.py).
    "actions.logged",  # every action of the round logged 'planned'
    "stop.signalled",  # after each job's checkpoint signal (scancel --signal)
    "stop.checkpointed",  # the checkpoint wait over (marker, exit or grace), before requeuehold
    "stop.requeue_held",  # after the requeuehold of the stopped jobs
    "stop.left_nodes",  # the stopped jobs seen off their nodes
    "stop.audited",  # after each stopped job's AdminComment
    "stop.done",  # after each stop's 'done' record
    "start.plan_written",  # after each job's plan file is in place
    "start.updated",  # after each job's scontrol update (shape, StartTime, AdminComment)
    "start.released",  # after each job's scontrol release
    "start.done",  # after each start's outcome record
    "hold.held",  # after each scontrol hold, before its record
    "round.applied",  # every action applied, the round not yet marked done
    "round.finished",  # the round committed as done
    # Inside the store's transactions (slurm_plugin/store.py), before COMMIT.
    "store.begin_round",
    "store.log_action",
    "store.next_plan_version",
    "store.finish_round",
    # Inside the plan file's write (slurm_plugin/planfile.py): the temporary file fsynced,
    # not yet renamed into place.
    "planfile.written",
)

_KNOWN = frozenset(CRASH_POINTS)
_reached: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here by ``SIGKILL`` if ``MOSAIC_CRASH_AT`` names this point (see the module docstring)."""
    spec = os.environ.get(CRASH_ENV)
    if spec is None:
        return
    _armed(spec, name)


def parse_spec(spec: str) -> tuple[str, int]:
    """``<name>[:<n>]`` -> (name, n); :class:`InputError` naming the variable when malformed."""
    name, sep, count = spec.strip().partition(":")
    if name != NONE and name not in _KNOWN:
        raise InputError(
            f"{CRASH_ENV}={spec!r}: no crash point {name!r} (test-only hook; registered: "
            f"{', '.join(CRASH_POINTS)}, or {NONE!r})"
        )
    if not sep:
        return name, 1
    try:
        n = int(count)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"{CRASH_ENV}={spec!r}: the count after ':' must be a whole number >= 1")
    return name, n


def _armed(spec: str, name: str) -> None:
    if name not in _KNOWN:
        raise InputError(f"crash point {name!r} is not registered in CRASH_POINTS")
    target, n = parse_spec(spec)
    _reached[name] = seen = _reached.get(name, 0) + 1
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{name}\n")
    if name == target and seen == n:
        os.kill(os.getpid(), signal.SIGKILL)
