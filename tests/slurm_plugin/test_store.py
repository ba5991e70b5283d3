"""The SQLite state store: what survives a controller restart."""

from __future__ import annotations

import sqlite3

from slurm_plugin.controller.memory import sqlite_memory_mb
from slurm_plugin.store import Store


def test_jobs_keep_their_first_request_and_accounting(tmp_path):
    store = Store(tmp_path / "m.db")
    store.add_job("1", 2, {"model": "resnet50"}, now=100.0)
    store.add_job("1", 8, {}, now=200.0)  # seen again after a resize: the first request stays
    store.account({"1": (50.0, 0.25, 150.0, None)})
    store.set_policy_state({"1": {"queue": 1}})
    assert store.next_plan_version("1") == 1 and store.next_plan_version("1") == 2
    store.close()
    again = Store(tmp_path / "m.db")
    job = again.job("1")
    assert job is not None
    assert (job.num_gpus, job.meta, job.attained_gpu_s, job.progress) == (
        2,
        {"model": "resnet50"},
        50.0,
        0.25,
    )
    assert job.policy_state == {"queue": 1} and job.plan_version == 2 and job.pending_since_s is None


def test_a_round_left_applying_is_found_after_a_restart(tmp_path):
    store = Store(tmp_path / "m.db")
    done = store.begin_round(10.0, {"assignments": {}})
    store.finish_round(done, 0)
    crashed = store.begin_round(20.0, {"assignments": {"1": {}}})
    store.begin_round(30.0, {"assignments": {}}, dry_run=True)  # dry runs are never "unfinished"
    store.close()
    again = Store(tmp_path / "m.db")
    unfinished = again.unfinished_round()
    assert (
        unfinished is not None
        and unfinished.round_id == crashed
        and unfinished.plan == {"assignments": {"1": {}}}
    )
    again.finish_round(crashed, 1)
    assert again.unfinished_round() is None and again.last_round().round_id == crashed  # type: ignore[union-attr]


def test_action_log_is_keyed_by_request_id_and_counts_stops(tmp_path):
    store = Store(tmp_path / "m.db")
    store.log_action("r1-stop-7", 1, "7", "stop", "planned", "preempted", 1000.0)
    store.log_action("r1-stop-7", 1, "7", "stop", "done", "preempted", 1001.0)  # same request: updated
    store.log_action("r2-stop-7", 2, "7", "stop", "done", "moved", 2000.0)
    store.log_action("r3-stop-7", 3, "7", "stop", "skipped", "rate limit", 3000.0)
    assert store.action_status("r1-stop-7") == "done"
    assert len(list(store.actions(1))) == 1
    assert store.stops_since("7", 0.0) == 2 and store.stops_since("7", 1500.0) == 1


def test_applied_starts_are_listed_per_job_oldest_first(tmp_path):
    store = Store(tmp_path / "m.db")
    store.log_action("r1-start-7", 1, "7", "start", "done", "placed", 1000.0)
    store.log_action("r2-stop-7", 2, "7", "stop", "done", "moved", 1990.0)
    store.log_action("r2-start-7", 2, "7", "start", "done", "moved", 2000.0)
    store.log_action("r2-start-8", 2, "8", "start", "failed", "placed", 2000.0)
    store.log_action("r3-start-9", 3, "9", "start", "planned", "placed", 3000.0)
    store.log_action("r0-start-6", 0, "6", "start", "done", "placed", 10.0)
    want = [(1000.0, "r1-start-7", "placed"), (2000.0, "r2-start-7", "moved")]
    assert store.starts_done(500.0) == {"7": want}


def test_store_uses_wal_so_readers_do_not_block_the_controller(tmp_path):
    Store(tmp_path / "m.db").close()
    mode = sqlite3.connect(tmp_path / "m.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_ticks_are_counted(tmp_path):
    store = Store(tmp_path / "m.db")
    store.log_tick(1.0, True, 1, None, 0.1)
    store.log_tick(2.0, False, None, "squeue timed out", 0.1)
    assert store.tick_counts() == (2, 1)


def test_unchanged_rows_and_policy_states_follow_every_write(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add_jobs([("1", 1, {"model": "a"}), ("2", 1, {})], 10.0)
    first = store.jobs()
    again = store.jobs()
    assert again["1"] is first["1"]  # an unchanged row keeps its decoded record
    store.set_policy_state({"1": {"queue": 1}, "2": {"queue": 0}})
    assert store.jobs()["1"].policy_state == {"queue": 1}
    store.set_policy_state({"1": {"queue": 1}, "2": {"queue": 2}})  # "1" unchanged: not rewritten
    store.set_policy_state({"2": {"queue": 0}})  # back to what jobs() last read: still written
    now = store.jobs()
    assert (now["1"].policy_state, now["2"].policy_state) == ({"queue": 1}, {"queue": 0})
    store.account({"1": (5.0, 0.5, 20.0, None)})
    assert store.jobs()["1"].attained_gpu_s == 5.0
    other = Store(tmp_path / "s.db")  # another process's write is seen too
    other.set_policy_state({"1": {"queue": 9}})
    assert store.jobs()["1"].policy_state == {"queue": 9}


def test_a_policy_state_write_keeps_the_decoded_meta_and_stays_exact(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add_jobs([("1", 1, {"model": "a", "plans": [{"tp": 2}]})], 10.0)
    before = store.jobs()["1"]
    store.set_policy_state({"1": {"queue": (1, 2)}})
    after = store.jobs()["1"]
    assert after.meta is before.meta and after.policy_state == {"queue": [1, 2]}  # as decoded
    store.account({"1": (5.0, None, 20.0, None)})  # another column changes after the read
    store.set_policy_state({"1": {"queue": 3}})
    now = store.jobs()["1"]
    assert (now.attained_gpu_s, now.policy_state, now.meta) == (5.0, {"queue": 3}, before.meta)
    assert now == Store(tmp_path / "s.db").jobs()["1"]  # what a fresh read decodes


def test_jobs_by_id_read_only_those_rows_and_forget_the_others(tmp_path):
    # The controller asks for the jobs Slurm lists now: the history of every job ever seen
    # must not be read (or kept decoded) each tick.
    store = Store(tmp_path / "s.db")
    store.add_jobs([(str(k), 1, {"model": "m"}) for k in range(1200)], 10.0)  # more than one query
    wanted = [str(k) for k in range(0, 1200, 2)] + ["absent", "0"]
    got = store.jobs(wanted)
    assert sorted(got, key=int) == [str(k) for k in range(0, 1200, 2)]
    assert got["600"].meta == {"model": "m"} and store.jobs(["600"])["600"] is got["600"]
    assert len(store._seen) == 1  # only what the last call read stays decoded
    assert len(store.jobs()) == 1200 and store.jobs([]) == {}


def test_reading_jobs_by_id_prepares_one_statement_whatever_the_count(tmp_path):
    # The sqlite3 module caches 128 prepared statements per connection: one SQL text per
    # count of ids asked for kept up to 128 statements of hundreds of variables (~10 MB)
    # in the controller's memory.
    store = Store(tmp_path / "s.db")
    store.add_jobs([(str(k), 1, {"model": "m"}) for k in range(500)], 10.0)
    store.jobs([str(k) for k in range(500)])  # the pages and one statement, once
    before = sqlite_memory_mb()
    for count in range(1, 500, 3):
        assert len(store.jobs([str(k) for k in range(count)])) == count
    after = sqlite_memory_mb()
    assert before is not None and after is not None
    assert after - before < 1.0, (before, after)


def _plan(jobs: int, decision_s: float) -> dict[str, object]:
    """A round plan as the controller stores it, with ``jobs`` queued jobs."""
    ids = [str(k) for k in range(jobs)]
    return {
        "assignments": {"0": {"gpus": [["n1", 0]], "num_gpus": 1, "cpus_per_gpu": 4, "mem_gb_per_gpu": 8.0}},
        "preempted": [],
        "migrated": [],
        "started": ["0"],
        "reshaped": [],
        "order": ids,
        "reasons": dict.fromkeys(ids, "waiting"),
        "decision_time_s": decision_s,
        "stage_times_s": {"order": decision_s / 2},
        "policy_state": {j: {"queue": 1, "attained_s": 12.5} for j in ids},
    }


def test_old_round_plans_keep_what_the_round_decided_and_lose_the_queue(tmp_path):
    store = Store(tmp_path / "m.db")
    ids = [store.begin_round(float(t), _plan(1000, 0.01 * t)) for t in range(1, 7)]
    for round_id in ids:
        store.finish_round(round_id, 1)
    old_applying = ids[1]  # a round a crash left half-applied stays whole
    store.db.execute("UPDATE rounds SET status = 'applying' WHERE round_id = ?", (old_applying,))
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]

    assert store.compact_rounds(keep=2) == 3  # rounds 1, 3, 4: not 2 (applying), not 5-6 (newest)
    assert store.compact_rounds(keep=2) == 0  # nothing new
    plans = {r.round_id: r.plan for r in store.rounds(10)}
    for round_id in (ids[0], ids[2], ids[3]):
        plan = plans[round_id]
        assert plan["compacted"] is True and plan["jobs_ordered"] == 1000
        assert not set(plan) & {"order", "reasons", "policy_state"}
        assert plan["started"] == ["0"] and plan["assignments"] == _plan(1, 0)["assignments"]
    for round_id in (old_applying, ids[4], ids[5]):
        assert "compacted" not in plans[round_id] and len(plans[round_id]["order"]) == 1000
    # What reports read survives compaction: every round's decision time, oldest first.
    assert store.decision_times() == [0.01 * t for t in range(1, 7)]
    assert store.decision_times(since_s=5.0) == [0.05, 0.06]

    # A new process (cron's --once) finds what is left to compact; old rows' freed pages are
    # reused by new rounds, so the file stops growing with the queue's length.
    store.close()
    again = Store(tmp_path / "m.db")
    for t in range(7, 27):
        again.finish_round(again.begin_round(float(t), _plan(1000, 0.01)), 1)
        again.compact_rounds(keep=2)
    assert sum("compacted" not in r.plan for r in again.rounds(100)) == 3  # two newest + the applying one
    assert again.db.execute("PRAGMA page_count").fetchone()[0] <= pages


def test_a_plan_that_is_not_a_json_object_is_left_as_it_is(tmp_path):
    store = Store(tmp_path / "m.db")
    ids = [store.begin_round(float(t), _plan(3, 0.1)) for t in range(4)]
    for round_id in ids:
        store.finish_round(round_id, 0)
    store.db.execute("UPDATE rounds SET plan = '[1, 2]' WHERE round_id = ?", (ids[0],))
    store.db.execute("UPDATE rounds SET plan = 'not json' WHERE round_id = ?", (ids[1],))
    assert store.compact_rounds(keep=1) == 1  # round 3 only
    texts = [r[0] for r in store.db.execute("SELECT plan FROM rounds ORDER BY round_id")]
    assert texts[:2] == ["[1, 2]", "not json"] and texts[2].startswith('{"compacted": true')


def _history(store: Store) -> None:
    """Jobs, rounds, actions and ticks at t = 10..60; round 3 (t=30) was left applying."""
    for k, (first, finished) in enumerate([(5.0, 15.0), (5.0, None), (25.0, 45.0), (50.0, 55.0)], 1):
        store.add_job(str(k), 1, {}, now=first)
        if finished is not None:
            store.mark_finished([str(k)], finished)
    for t in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        round_id = store.begin_round(t, {"assignments": {}})
        store.log_action(f"r{round_id}-start-1", round_id, "1", "start", "done", "", t)
        if t != 30.0:
            store.finish_round(round_id, 1)
        store.log_tick(t, ok=t != 20.0, round_id=round_id, error=None, duration_s=1.0)


def test_history_before_the_cutoff_is_forgotten_but_an_applying_round_stays(tmp_path):
    store = Store(tmp_path / "m.db")
    _history(store)
    pruned = store.prune_history(before_s=50.0, batch=2)
    # Rounds 1 and 2 (t=10, 20) go; round 3 was left applying, so it and everything after stay.
    assert [r.round_id for r in store.rounds(10)] == [6, 5, 4, 3]
    assert store.unfinished_round() is not None and store.unfinished_round().round_id == 3
    assert sorted(a[1] for a in store.actions()) == [3, 4, 5, 6]
    # Ticks before t=50 go except the failed one (t=20); the counters only grow.
    assert store.tick_counts() == (6, 1)
    remaining_ticks = [r[0] for r in store.db.execute("SELECT time_s FROM ticks ORDER BY tick_id")]
    assert remaining_ticks == [20.0, 50.0, 60.0]
    # Jobs 1 (finished at 15) and 3 (at 45) go; job 2 never finished, job 4 finished at 55.
    assert sorted(store.jobs()) == ["2", "4"]
    assert (pruned.jobs, pruned.rounds, pruned.actions, pruned.ticks) == (2, 2, 2, 3)
    assert store.prune_history(before_s=50.0) == type(pruned)(0, 0, 0, 0)  # nothing left to forget


def test_once_the_applying_round_is_done_its_time_is_forgotten_too(tmp_path):
    store = Store(tmp_path / "m.db")
    _history(store)
    store.finish_round(3, 1)
    store.prune_history(before_s=1e9, batch=3)
    # Everything ended; the newest round stays (with its action), and the failed tick.
    assert [r.round_id for r in store.rounds(10)] == [6] and [a[1] for a in store.actions()] == [6]
    assert sorted(store.jobs()) == ["2"] and store.tick_counts() == (6, 1)
    store.close()
    again = Store(tmp_path / "m.db")  # the counters survive a reopen
    assert again.tick_counts() == (6, 1) and again.last_round().round_id == 6
