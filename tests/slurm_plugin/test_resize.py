"""``mosaic resize``'s target shape and its refusals (pure, on captured Slurm output)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.controller.resize import ResizeError, relaunch_timeline, resize_target
from slurm_plugin.controller.rounddiff import Kind
from slurm_plugin.directives import decode_comment, encode_comment
from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json
from slurm_plugin.submit import split_arguments, submit

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _obs(**changes):
    jobs = parse_squeue_json((DATA / "squeue.json").read_text())
    jobs = [replace(j, **changes) if j.id == "1" else j for j in jobs]
    return build_observation(
        2e9, jobs, parse_sinfo_json((DATA / "sinfo.json").read_text()), {}, ControllerConfig()
    )


def test_a_job_that_still_fits_on_its_node_stays_there():
    # Job 1 runs on n1 GPUs 1-2; GPU 0 is held by a job of another partition.
    r = resize_target(_obs(), "1", 3)
    assert r.target.per_node == (("n1", 3),) and sorted(k for _, k in r.target.gpus) == [1, 2, 3]
    assert (r.target.cpus, r.target.mem_gb) == (12, 48.0)  # 16 CPUs / 64 GB for 4 GPUs: proportional
    stop, start = r.actions(5)
    assert (stop.kind, start.kind, start.request_id, start.reason) == (
        Kind.STOP,
        Kind.START,
        "r5-start-1",
        "resized",
    )


def test_a_job_that_does_not_fit_its_node_takes_the_fewest_nodes_with_the_same_count_each():
    r = resize_target(_obs(), "1", 4)  # n1 and n2 have 3 free GPUs each (n3 down, n4 drained)
    assert r.target.per_node == (("n1", 2), ("n2", 2))


def test_a_resize_never_spans_two_gpu_types():
    # Job 1 accepts any type; n1 and n2 have 3 free GPUs each (job 1's own counted) but of
    # two types now: 4 GPUs would need 2 + 2 across them, which the planner never gives.
    obs = _obs()
    nodes = tuple(replace(n, gpu_type="other") if n.name == "n2" else n for n in obs.snapshot.nodes)
    obs = replace(obs, snapshot=replace(obs.snapshot, nodes=nodes))
    with pytest.raises(ResizeError, match=r"4 GPUs do not fit anywhere .*one GPU type only"):
        resize_target(obs, "1", 4)
    assert resize_target(obs, "1", 3).target.per_node == (("n1", 3),)  # still fits its own node


def test_the_plan_is_rescaled_for_the_new_count_keeping_the_global_batch():
    plan = {"dp": 2, "micro_batch": 4, "grad_accum": 2, "global_batch": 16}
    obs = _obs()
    running = next(j for j in obs.snapshot.jobs if j.id == "1")
    obs = replace(
        obs,
        snapshot=replace(
            obs.snapshot,
            jobs=tuple(
                replace(j, assignment=replace(j.assignment, plan=plan)) if j is running else j
                for j in obs.snapshot.jobs
            ),
        ),
    )
    target = resize_target(obs, "1", 1).target
    assert target.plan == {"dp": 1, "micro_batch": 4, "grad_accum": 4, "global_batch": 16}
    given = resize_target(obs, "1", 2, plan={"zero_stage": 1}, global_batch=16).target
    assert given.plan == {"dp": 2, "zero_stage": 1, "micro_batch": 8, "grad_accum": 1, "global_batch": 16}


@pytest.mark.parametrize(
    ("job", "gpus", "kw", "why"),
    [
        ("2", 2, {}, "job 2 is pending, not running"),
        ("5", 1, {}, "job 5 is not a job Mosaic manages"),
        ("99", 1, {}, "job 99 is not a job Mosaic manages"),
        ("1", 8, {}, "8 GPUs do not fit anywhere (free GPUs per node: n1: 3, n2: 3)"),
        ("1", 2, {"cpus": 64}, "64 CPUs and 32 GB on n1 do not fit (free there: 15 CPUs"),
        ("1", 0, {}, "--gpus must be at least 1"),
    ],
)
def test_resizes_that_cannot_be_done_say_why(job, gpus, kw, why):
    with pytest.raises(ResizeError, match=why.replace("(", r"\(").replace(")", r"\)")):
        resize_target(_obs(), job, gpus, **kw)


def test_an_elastic_job_is_resized_only_within_its_range():
    obs = _obs(comment=encode_comment({"min_gpus": 1, "max_gpus": 3}))
    assert resize_target(obs, "1", 3).target.num_gpus == 3
    with pytest.raises(ResizeError, match="accepts 1 to 3 GPUs"):
        resize_target(obs, "1", 4)


def test_the_relaunch_timeline_splits_checkpoint_relaunch_and_startup():
    beats = [
        {"event": "start", "time": 10.0},
        {"event": "heartbeat", "time": 12.0, "world_size": 2},
        {"event": "start", "time": 105.0},
        {"event": "heartbeat", "time": 111.0, "world_size": 4},
    ]
    t = relaunch_timeline(100.0, {"time": 103.0}, beats)
    assert t is not None and (t.checkpoint_s, t.relaunch_s, t.startup_s, t.world_size) == (3.0, 2.0, 6.0, 4)
    assert relaunch_timeline(100.0, {"time": 50.0}, beats) is None  # an older marker
    assert relaunch_timeline(100.0, {"time": 103.0}, beats[:3]) is None  # no step yet


@pytest.mark.parametrize(
    ("argv", "script", "options"),
    [
        (["job.sh"], "job.sh", []),
        (["job.sh", "--", "--gres=gpu:3", "-c", "4"], "job.sh", ["--gres=gpu:3", "-c", "4"]),
        (["--", "--gres=gpu:3", "job.sh"], "job.sh", ["--gres=gpu:3"]),
        (["--gres=gpu:3", "-c", "4", "job.sh"], "job.sh", ["--gres=gpu:3", "-c", "4"]),
    ],
)
def test_mosaic_submit_takes_sbatch_options_after_the_script_or_before_it(argv, script, options):
    assert split_arguments(argv) == (script, options)


def test_mosaic_submit_without_a_script_says_where_it_goes():
    with pytest.raises(Exception, match="is an option, not a script"):
        split_arguments(["--", "--gres=gpu:3"])


def test_each_submission_carries_its_own_token_for_mosaic_run(tmp_path):
    """A requeue keeps the job's environment, a new job reusing the id gets another token:
    what ``mosaic-run`` tells an earlier job's checkpoints from its own by."""
    sent, comments = [], []

    class Recording:
        def submit(self, script, extra, comment, env):
            sent.append(dict(env))
            comments.append(comment)
            return str(len(sent))

    script = Path(__file__).parents[2] / "contrib" / "examples" / "job.sh"
    assert [submit(Recording(), script, [], tmp_path) for _ in range(2)] == ["1", "2"]
    tokens = [env["MOSAIC_SUBMISSION"] for env in sent]
    assert tokens[0] != tokens[1] and all(len(t) == 16 and int(t, 16) >= 0 for t in tokens)
    assert all(env["MOSAIC_SPOOL"] == str(tmp_path) for env in sent)
    assert [decode_comment(c)["submission"] for c in comments] == tokens  # the controller's copy
