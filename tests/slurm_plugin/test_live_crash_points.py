"""The controller killed (SIGKILL) at every step of a round, then restarted: nothing is lost.

Each case runs the scenario of :mod:`tests.slurm_plugin.crash_scenario` on the test cluster
(a preemption with checkpoint and requeuehold, a resize, a held job started, a job held,
plan files written): the real ``mosaic controller --once`` in a subprocess with
``MOSAIC_CRASH_AT`` naming one crash point of :data:`~slurm_plugin.controller.faults.CRASH_POINTS`
must die by SIGKILL there; then two plain ticks, and the checks: no job lost or FAILED
(squeue, sacct), none held that the plan runs, the round completed or rolled back, no action
left 'planned', each job's AdminComment naming the store's last action on it, every job run
exactly as often as the round says, every plan file whole and matching what Slurm runs.

The cases are every registered point (so a new point is covered as soon as it is
registered) and the later occurrences of the points a round reaches once per job;
``test_the_scenario_reaches_every_crash_point`` fails for a point the round never reaches.
"""

from __future__ import annotations

import pytest

from slurm_plugin.controller.faults import CRASH_POINTS, parse_spec
from tests.slurm_plugin.crash_scenario import crash_and_recover, points_reached, prepare, run_controller

# Points reached once per job or per action: their last occurrence in the scenario's round
# too (the second stopped job, the second started job, a 'done' record mid-commit).
LATER = (
    "stop.signalled:2",
    "stop.audited:2",
    "stop.done:2",
    "store.next_plan_version:2",
    "planfile.written:2",
    "start.plan_written:2",
    "start.updated:2",
    "start.released:2",
    "start.done:2",
    "store.log_action:6",  # the first stop's 'done'
    "store.log_action:9",  # the last start's 'done'
)
CASES = (*CRASH_POINTS, *LATER)


def test_the_scenario_reaches_every_crash_point(live, tmp_path):
    s = prepare(live, tmp_path)
    done = run_controller(s, "trace", "none")
    assert done.returncode == 0, done.stderr[-3000:]
    reached = points_reached(s, "trace")
    missing = [p for p in CRASH_POINTS if reached[p] == 0]
    assert not missing, f"registered crash points the round never reaches: {missing} (reached: {reached})"
    for case in LATER:
        name, n = parse_spec(case)
        assert reached[name] >= n, f"{case}: the round reaches {name} only {reached[name]} times"


@pytest.mark.parametrize("crash_at", CASES)
def test_a_controller_killed_at_a_crash_point_loses_nothing(live, tmp_path, crash_at):
    outcome = crash_and_recover(live, tmp_path, crash_at)
    assert outcome.returncode == -9, (
        f"MOSAIC_CRASH_AT={crash_at}: the controller was not killed (exit {outcome.returncode}); "
        f"see {tmp_path}/crash.err"
    )
    assert outcome.problems == {}, outcome.to_json()
    assert outcome.round_outcome in {"completed", "rolled back", "done before the kill"}, outcome.to_json()


# The restarted controller killed again while it completes the round (then a third one).
TWICE = (
    ("stop.checkpointed", "stop.requeue_held"),
    ("stop.requeue_held", "start.updated"),
    ("start.released", "round.applied"),
)


@pytest.mark.parametrize(("crash_at", "then"), TWICE)
def test_a_controller_killed_again_while_completing_the_round_loses_nothing(live, tmp_path, crash_at, then):
    outcome = crash_and_recover(live, tmp_path, crash_at, then)
    assert (outcome.returncode, outcome.then_returncode) == (-9, -9), outcome.to_json()
    assert outcome.problems == {}, outcome.to_json()
    assert outcome.round_outcome == "completed", outcome.to_json()
