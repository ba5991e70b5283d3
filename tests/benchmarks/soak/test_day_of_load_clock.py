"""The day-of-load benchmark puts Slurm's wall-clock times on the controller's compressed clock."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.soak.day_of_load import CompressedSlurm, CompressedTimes
from slurm_plugin.slurm.parse import SlurmJob
from tests.builders import make_slurm_job

JOB = make_slurm_job(submit_time=990.0)


def _ticks(n: int, wall_per_tick: float = 8.0, tick_s: float = 60.0) -> CompressedTimes:
    times = CompressedTimes(1000.0, 1000.0)
    for k in range(1, n + 1):
        times.anchor(1000.0 + k * wall_per_tick, 1000.0 + k * tick_s)
    return times


def test_a_job_that_ran_within_the_ticks_is_accounted_on_the_compressed_clock() -> None:
    times = _ticks(100)
    # Started 2 s into tick 50 (wall 1402) and listed at tick 51: 15 s of controller time
    # have passed, not the ~2,600 s that tick 51's clock minus its wall start time would say.
    now = 1000.0 + 51 * 60
    assert now - times(1402.0) == 45.0
    assert now - 1402.0 > 2600


def test_times_outside_the_anchors_keep_their_distance() -> None:
    times = _ticks(10)
    assert times(990.0) == 990.0  # before the first tick: a second is a second
    assert times(1000.0 + 10 * 8 + 3) == 1000.0 + 10 * 60 + 3


@given(st.lists(st.floats(0.5, 30.0), min_size=1, max_size=40), st.floats(900.0, 1400.0), st.floats(0.0, 1.0))
def test_the_mapping_is_monotone_and_a_covered_time_never_moves(
    walls: list[float], t: float, frac: float
) -> None:
    times = CompressedTimes(1000.0, 1000.0)
    wall = virtual = 1000.0
    before: float | None = None
    for step in walls:
        wall += step
        virtual += 60.0
        times.anchor(wall, virtual)
        if t <= wall:
            now = times(t)
            assert before is None or now == before  # later anchors leave it where it was
            before = now
    u = t + frac
    assert times(u) >= times(t)


def test_the_wrapper_maps_each_listed_object_once_and_keeps_its_identity() -> None:
    running = replace(JOB, id="8", state="RUNNING", start_time=1402.0, submit_time=1010.0)

    class Listing:
        calls = 0

        def jobs(self) -> list[SlurmJob]:
            self.calls += 1
            return [JOB, running]

        def release(self, job_ids: list[str]) -> str:
            return f"released {job_ids}"

    times = _ticks(100)
    client = CompressedSlurm(Listing(), times)
    first = client.jobs()
    second = client.jobs()
    assert first[0] is second[0] and first[1] is second[1]
    assert first[1].start_time == times(1402.0) and first[1].submit_time == times(1010.0)
    assert first[0].start_time is None and first[0].submit_time == 990.0
    assert client.release(["7"]) == "released ['7']"  # everything else is the wrapped client's
