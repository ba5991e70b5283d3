"""``mosaic profile --local`` end to end with a real short job, resuming, the budget, and bad input.

The job (``BURN``) does real arithmetic every step, split over one worker process per CPU it
may use, and reports heartbeats through the runtime API under ``mosaic-run``. It also
reports the CPUs it found itself pinned to, so the tests see the pinning directly (this
machine's cores are shared with other work, so throughput ratios are not asserted).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from planner.core.errors import InputError
from profiles.document import profiles_from_document
from profiles.profiler.measure import throughput
from slurm_plugin.cli.main import main
from wrapper import status

pytestmark = pytest.mark.jobs

BURN = """
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

from wrapper import runtime


def chunk(n):
    return sum(i * i % 7 for i in range(n))


def main():
    rt = runtime.current()
    cpus = len(os.sched_getaffinity(0))
    ranks = rt.world_size
    with ProcessPoolExecutor(cpus, mp_context=multiprocessing.get_context("fork")) as pool:
        step = 0
        while True:
            list(pool.map(chunk, [20_000] * 8))
            step += 1
            rt.report(step, samples=step * 8, cpus=cpus, cores=sorted(os.sched_getaffinity(0)), ranks=ranks,
                      plan_seen=os.environ.get("MOSAIC_EXEC_PLAN"), slurm_job=os.environ.get("SLURM_JOB_ID"))


main()
"""

FAST = ["--run-s", "0.6", "--heartbeat-s", "0.2", "--start-timeout-s", "60"]


def job(tmp: Path, name: str = "burn", body: str | None = None, model: str | None = None) -> Path:
    """A batch script running ``body`` (default: BURN) under mosaic-run."""
    py = tmp / f"{name}.py"
    py.write_text(BURN if body is None else body)
    bin_dir = Path(sys.executable).parent
    script = tmp / f"{name}.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH -c 2 --mem=1G\n"
        f"#MOSAIC --model {model or name} --global-batch-size 8\n"
        f"exec {bin_dir / 'mosaic-run'} --framework torch -- {sys.executable} {py}\n"
    )
    return script


def profile(*args: str) -> int:
    return main(["-q", "profile", *args])


def records(directory: Path) -> list[dict[str, object]]:
    return list(status.read_records(directory / status.HEARTBEATS))


def test_local_profile_measures_the_cpu_curve_from_heartbeats_and_resumes(tmp_path, capsys):
    out = tmp_path / "burn.json"
    assert profile(str(job(tmp_path)), "--local", "--cpus", "1,2", *FAST, "--out", str(out), "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] and summary["runs"] == 2 and summary["skipped"] == []
    document = json.loads(out.read_text())
    entry = document["models"]["burn"]
    assert entry["source"].startswith("profiled") and entry["batch_size"] == 8
    curve = entry["optimistic"]["cpu_samples_per_s"]
    assert set(curve) == {"1", "2"}
    for c in (1, 2):
        beats = records(tmp_path / "burn.json.runs" / f"cpu-{c}")
        # Each run was pinned to exactly its CPUs, and the curve is what its heartbeats say.
        assert {b["cpus"] for b in beats if b.get("event") == "heartbeat"} == {c}
        # No Slurm job here (mosaic-run's local ranks get the job id "local").
        assert {b["slurm_job"] for b in beats if b.get("event") == "heartbeat"} == {"local"}
        rate = throughput(beats, warmup=1)
        assert rate is not None and curve[str(c)] == pytest.approx(rate.samples_per_s, rel=1e-3)
    assert profiles_from_document(document)["burn"].sensitivity is not None
    # The same command again: nothing left to run, the same document.
    assert profile(str(job(tmp_path)), "--local", "--cpus", "1,2", *FAST, "--out", str(out), "--json") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["runs"] == 2 and again["runs_this_time"] == 0
    assert json.loads(out.read_text()) == document
    # Asked differently, the saved state is refused rather than mixed in.
    assert profile(str(job(tmp_path)), "--local", "--cpus", "1", *FAST, "--out", str(out)) == 2
    assert "this state is from another profile (request" in capsys.readouterr().err


def test_a_budget_lists_what_it_skipped_and_the_same_command_resumes(tmp_path, capsys):
    out = tmp_path / "p.json"
    script = str(job(tmp_path))
    # Before any run the estimate is --run-s + 10 s: a 6 s budget runs nothing.
    code = profile(
        script, "--local", "--cpus", "1,2", *FAST, "--budget-min", "0.1", "--out", str(out), "--json"
    )
    assert code == 3
    summary = json.loads(capsys.readouterr().out)
    assert not summary["complete"] and summary["runs"] == 0 and not out.exists()
    assert summary["skipped"] == [
        "CPU search: 1 CPU(s) next, then wherever throughput still changes (unmeasured: 1, 2)"
    ]
    assert profile(script, "--local", "--cpus", "1,2", *FAST, "--out", str(out), "--json") == 0
    assert json.loads(capsys.readouterr().out)["complete"]


def test_plan_samples_run_under_each_plan_and_are_fitted(tmp_path, capsys):
    out = tmp_path / "plans.json"
    code = profile(
        str(job(tmp_path)), "--local", "--cpus", "2", *FAST, "--plans", "--model-shape", "10,128,256,4",
        "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["plan_samples"] == 7 and summary["runs"] == 8
    rows = (tmp_path / "plans.samples.csv").read_text().splitlines()
    assert len(rows) == 8 and rows[0].startswith("model,params_m,global_batch")
    perf = json.loads((tmp_path / "plans.perfmodel.json").read_text())
    assert perf["format"] == "mosaic-perfmodel/1" and perf["models"]["burn"]["samples"] == 7
    cpu = json.loads((tmp_path / "plans.cpu-step.json").read_text())
    assert cpu["model"] == "cpu-step" and cpu["models"]["burn"]["samples"] == 7
    assert summary["cpu_step_rmsle"] >= 0
    runs = tmp_path / "plans.json.runs"
    two_ranks = [d for d in runs.iterdir() if d.name.startswith("plan-r2t1")]
    assert len(two_ranks) == 2  # dp and grad_accum=4 on two ranks
    assert [d for d in runs.iterdir() if d.name.startswith("plan-r1t2")]  # and a rank of two threads
    for d in two_ranks:
        beat = [b for b in records(d) if b.get("event") == "heartbeat"][-1]
        assert beat["ranks"] == 2 and json.loads(str(beat["plan_seen"]))["dp"] == 2


def test_repeated_plan_samples_go_round_the_samples_and_the_rows_are_their_medians(tmp_path, capsys):
    out = tmp_path / "rep.json"
    code = profile(
        str(job(tmp_path)), "--local", "--cpus", "2", *FAST, "--plans", "--model-shape", "10,128,256,4",
        "--repeat", "2", "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 1 + 2 * 7 and summary["plan_samples"] == 7
    assert len(summary["plan_repeat_spread"]) == 7
    state = json.loads((tmp_path / "rep.json.state.json").read_text())
    plan_keys = [k for k in state["runs"] if k.startswith("plan-")]
    assert [k.endswith("/2") for k in plan_keys] == [False] * 7 + [True] * 7  # round by round
    with (tmp_path / "rep.samples.csv").open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        label = row["source"].removeprefix("mosaic profile: plan-").removesuffix(" (median of 2 runs)")
        times = [1 / state["runs"][key]["steps_per_s"] for key in (f"plan-{label}", f"plan-{label}/2")]
        assert float(row["iter_time_s"]) == pytest.approx(sum(times) / 2, rel=1e-5)
    assert profile(str(job(tmp_path)), "--local", "--repeat", "2", "--out", str(tmp_path / "x.json")) == 2
    assert "--repeat 2: it repeats the plan samples; give --plans too" in capsys.readouterr().err


def test_a_pair_is_measured_alone_and_together(tmp_path, capsys):
    out = tmp_path / "pair.json"
    partner = job(tmp_path, "other")
    longer = ["--run-s", "1.5", "--heartbeat-s", "0.25"]
    code = profile(
        str(job(tmp_path)),
        "--local",
        "--cpus",
        "1",
        *longer,
        "--pairs",
        str(partner),
        "--out",
        str(out),
        "--json",
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 3  # cpu-1, the partner alone, both together
    entry = json.loads(out.read_text())["models"]["burn"]
    (pair,) = entry["colocation"]
    assert pair["with"] == "other" and pair["steps_per_s"] > 0 and pair["with_steps_per_s"] > 0
    slow = summary["slowdowns"][str(partner)]
    assert slow["self"] > 0 and slow["partner"] > 0
    # Both ran at the same time on the same core. (How much they slowed each other is not
    # asserted: on this machine's two shared, busy cores one more process on a core costs little.)
    (pair_dir,) = (tmp_path / "pair.json.runs").glob("pair-*")
    beats = [
        [b for b in records(pair_dir / who) if b.get("event") == "heartbeat"] for who in ("self", "partner")
    ]
    assert (
        {tuple(b["cores"]) for b in beats[0]}
        == {tuple(b["cores"]) for b in beats[1]}
        == {(min(os.sched_getaffinity(0)),)}
    )
    assert max(b[0]["time"] for b in beats) < min(b[-1]["time"] for b in beats)


def test_bad_input_is_one_clear_error(tmp_path, capsys):
    out = str(tmp_path / "x.json")
    failing = job(tmp_path, "fails", body="import sys\nprint('cannot open the data set')\nsys.exit(3)\n")
    assert profile(str(failing), "--local", "--cpus", "1", *FAST, "--out", out) == 2
    err = capsys.readouterr().err
    assert "exited with status 3 after 0 heartbeat(s)" in err and "cannot open the data set" in err

    silent = job(tmp_path, "silent", body="print('done, no heartbeats')\n")
    assert profile(str(silent), "--local", "--cpus", "1", *FAST, "--out", out) == 2
    assert "must report through the runtime API (rt.report)" in capsys.readouterr().err

    hangs = job(tmp_path, "hangs", body="import time\ntime.sleep(60)\n")
    assert profile(str(hangs), "--local", "--cpus", "1", "--start-timeout-s", "2", "--out", out) == 2
    assert "no heartbeat from" in capsys.readouterr().err

    assert profile(str(failing), "--local", "--out", str(tmp_path / "missing" / "x.json")) == 2
    err = capsys.readouterr().err
    assert f"directory {tmp_path / 'missing'} does not exist" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert profile(str(failing), "--local", "--out", str(blocker / "x.json")) == 2
    assert "--out" in capsys.readouterr().err

    too_many = len(os.sched_getaffinity(0)) + 1
    assert profile(str(failing), "--local", "--cpus", str(too_many), "--out", out) == 2
    assert f"--cpus {too_many}: --local pins each run to its own cores" in capsys.readouterr().err
    assert profile(str(tmp_path / "nope.sh"), "--local", "--out", out) == 2
    assert "nope.sh: no such file" in capsys.readouterr().err
    assert profile("--example", "nope", "--local", "--out", out) == 2
    assert "unknown example 'nope'" in capsys.readouterr().err
    assert profile(str(failing), "--local", "--plans", "--out", out) == 2
    assert "--plans needs --model-shape" in capsys.readouterr().err


def test_an_example_runs_plainly_for_the_cpu_search_and_under_mosaic_run_for_a_plan_sample():
    from profiles.profiler.runs import PlanSample
    from slurm_plugin.profiler import example_target

    target = example_target("text-transformer", steps=50)
    plain = target.command(2, None, 16)
    assert "mosaic-run" not in " ".join(plain) and plain[plain.index("--cpus") + 1] == "2"
    sampled = target.command(2, PlanSample(2, 1), 16)
    assert Path(sampled[0]).name == "mosaic-run" and sampled[sampled.index("--threads") + 1] == "1"
    assert target.task == "language" and target.global_batch is not None
    # --global-batch 32: the script and mosaic-run are told the profile's batch, not the
    # example's 16 (mosaic-run refused a plan whose global batch was not its own).
    other = target.command(2, PlanSample(2, 1), 32)
    assert other[other.index("--global-batch") + 1] == "32" and other[other.index("--batch") + 1] == "32"
    assert target.command(1, None, 32)[target.command(1, None, 32).index("--batch") + 1] == "32"
    # --framework deepspeed: the plan samples train with DeepSpeed, the CPU runs stay plain.
    ds = example_target("text-transformer", steps=50, framework="deepspeed")
    sampled = ds.command(2, PlanSample(1, 2), 16)
    assert sampled[sampled.index("--framework") + 1] == "deepspeed" and ds.framework == "deepspeed"
    assert "mosaic-run" not in " ".join(ds.command(2, None, 16))
    assert ds.identity != target.identity  # a torch profile's state is not resumed as a DeepSpeed one
    with pytest.raises(InputError, match="--framework deepspeed: example 'image-cnn' trains with torch"):
        example_target("image-cnn", steps=50, framework="deepspeed")


def test_the_image_example_caches_its_data_in_a_default_directory_it_measures(tmp_path, monkeypatch):
    # README's form, `mosaic profile --example image-cnn --cpus 1,2 --local --out p.json`, had no
    # --data-dir: the data went to the script's own directory and its size was "unknown".
    from slurm_plugin.profiler import example_target

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    target = example_target("image-cnn", steps=50)
    expected = tmp_path / "mosaic-example-image-cnn"
    assert target.data_dir == expected
    assert target.prepare is not None and target.prepare[-2:] == ["--data", str(expected)]
    plain = target.command(1, None, 32)
    assert plain[plain.index("--data") + 1] == str(expected)
    given = example_target("image-cnn", steps=50, data_dir=tmp_path / "mine")
    assert given.data_dir == tmp_path / "mine"
    assert example_target("text-transformer", steps=50).data_dir is None  # no data set


def test_an_example_without_its_modules_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    out = str(tmp_path / "p.json")
    assert profile("--example", "image-cnn", "--cpus", "1", "--local", "--out", out) == 2
    err = capsys.readouterr().err.strip()
    assert "example 'image-cnn' needs Pillow" in err and "pip install 'slurm-mosaic[examples]'" in err
    assert len(err.splitlines()) == 1


def test_an_install_without_contrib_says_the_examples_need_a_checkout(tmp_path, monkeypatch, capsys):
    from wrapper import examples

    monkeypatch.setattr(examples, "repo_root", lambda: tmp_path / "site-packages")
    out = str(tmp_path / "p.json")
    assert profile("--example", "text-transformer", "--cpus", "1", "--local", "--out", out) == 2
    err = capsys.readouterr().err.strip()
    assert "contrib/examples/ and are not installed with the package: run from a source checkout" in err
    assert len(err.splitlines()) == 1


def test_a_real_example_is_profiled(tmp_path, capsys):
    out = tmp_path / "text.json"
    fast = ["--run-s", "2", "--heartbeat-s", "0.5"]
    args = ["--example", "text-transformer", "--local", "--cpus", "1", *fast, "--out", str(out), "--json"]
    code = profile(*args)
    assert code == 0
    entry = json.loads(out.read_text())["models"]["text-transformer"]
    assert entry["task"] == "language" and entry["batch_size"] == 16
    assert entry["optimistic"]["cpu_samples_per_s"]["1"] > 0


@pytest.mark.jobs
def test_the_deepspeed_defaults_of_the_text_example_are_measured_and_fitted(tmp_path, capsys):
    # Not imported here: DeepSpeed's accelerator warning would go to this process's stdout.
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (extra 'deepspeed')")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the DeepSpeed defaults need 2 CPUs")
    out = tmp_path / "ds.json"
    fast = ["--run-s", "1", "--heartbeat-s", "0.25"]
    code = profile(
        "--example", "text-transformer", "--framework", "deepspeed", "--local", "--cpus", "2", *fast,
        "--plans", "auto", "--model-shape", "0.43776,64,128,2", "--out", str(out), "--json",
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out  # the summary (indented JSON) is the last thing printed
    summary = json.loads(printed[printed.index("{\n") :])
    assert summary["plan_samples"] == 7
    with (tmp_path / "ds.samples.csv").open() as f:
        rows = list(csv.DictReader(f))
    plans = {
        (r["gpus"], r["cpus_per_gpu"], r["zero_stage"], r["offload_optimizer"], r["grad_accum"]) for r in rows
    }
    assert plans == {("1", "1", "0", "0", "1"), ("2", "1", "0", "0", "4"), ("1", "1", "2", "0", "1"),
                     ("2", "1", "2", "0", "1"), ("1", "1", "2", "1", "4"), ("1", "2", "2", "1", "1"),
                     ("2", "1", "2", "1", "1")}  # fmt: skip
    # Each sample ran under DeepSpeed, on the threads its label says (the run's heartbeats).
    runs = sorted((tmp_path / "ds.json.runs").glob("plan-*"))
    assert len(runs) == 7
    for run in runs:
        assert " ranks, deepspeed, " in (run / "output.log").read_text(), run.name  # mosaic-run's start line
        beats = [json.loads(line) for line in (run / "heartbeat.jsonl").read_text().splitlines()]
        threads = {b["threads"] for b in beats if b["event"] == "heartbeat"}
        assert threads == {int(run.name.split("t")[1].split("_")[0])}, run.name
    entry = json.loads((tmp_path / "ds.cpu-step.json").read_text())["models"]["texttransformer"]
    assert entry["samples"] == 7 and "c_zero" in entry
