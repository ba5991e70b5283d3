"""``CliSlurm.update`` tries again while slurmctld says the update must wait (real message)."""

from __future__ import annotations

import pytest

from slurm_plugin.slurm import backend
from slurm_plugin.slurm.backend import UPDATE_BUSY_QUIET_S, UPDATE_BUSY_TRIES, CliSlurm
from slurm_plugin.slurm.runner import SlurmCommandError

# What Slurm 22.05's scontrol printed in the test cluster right after slurmctld restarted
# (accounting on): the job's accounting index was not back from slurmdbd yet.
BUSY = "Job update not available right now, the DB index is being set, try again in a bit for job 22\n"


class Busy(CliSlurm):
    def __init__(self, busy: int, stderr: str = BUSY) -> None:
        super().__init__()
        self.busy, self.stderr, self.calls, self.slept = busy, stderr, 0, []
        self.now = 0.0
        self.sleep = self.slept.append
        self.clock = lambda: self.now

    def _run(self, argv, extra_env=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls <= self.busy:
            raise SlurmCommandError(argv, 1, self.stderr)
        return ""


def test_an_update_refused_as_busy_is_tried_again_until_accepted() -> None:
    cli = Busy(busy=3)
    cli.update(["22"], {"Gres": "gpu:4"})
    assert cli.calls == 4 and cli.slept == [1.0, 1.0, 1.0]


def test_busy_for_too_long_or_another_error_is_raised() -> None:
    cli = Busy(busy=UPDATE_BUSY_TRIES)
    with pytest.raises(SlurmCommandError, match="try again in a bit"):
        cli.update(["22"], {"Gres": "gpu:4"})
    assert cli.calls == UPDATE_BUSY_TRIES
    other = Busy(busy=1, stderr="Invalid job id specified\n")
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        other.update(["22"], {"Gres": "gpu:4"})
    assert other.calls == 1 and other.slept == []
    assert backend.UPDATE_BUSY in BUSY


def test_after_an_update_gave_up_busy_others_are_not_tried_again_for_a_while() -> None:
    cli = Busy(busy=UPDATE_BUSY_TRIES + 1)
    with pytest.raises(SlurmCommandError, match="try again in a bit"):
        cli.update(["22"], {"Gres": "gpu:4"})
    assert cli.calls == UPDATE_BUSY_TRIES
    # Another job's update in the same round: refused once, raised at once (next round plans it).
    cli.now = UPDATE_BUSY_QUIET_S - 1
    with pytest.raises(SlurmCommandError, match="try again in a bit"):
        cli.update(["23"], {"Gres": "gpu:4"})
    assert cli.calls == UPDATE_BUSY_TRIES + 1
    # Past the quiet time it is tried again as before, and accepted.
    cli.busy, cli.now = cli.calls + 2, UPDATE_BUSY_QUIET_S + 1
    cli.update(["23"], {"Gres": "gpu:4"})
    assert cli.calls == UPDATE_BUSY_TRIES + 4
    # An accepted update ends the quiet time at once.
    cli.busy = cli.calls + 1
    cli.update(["24"], {"Gres": "gpu:4"})
    assert cli.calls == UPDATE_BUSY_TRIES + 6
