"""mosaic sim --truth: Mosaic's measurements or the Rubick artifact's rule for Rubick's models."""

from __future__ import annotations

import json

import pytest

from planner.core.execplan import plan_from_mapping
from profiles.perfmodel.rubick_artifact import artifact_time, builtin_artifact_tables
from profiles.perfmodel.rubick_measured import builtin_rubick_measured
from slurm_plugin.cli.main import main

CLUSTER = '[[nodes]]\ncount = 6\ngpus = 8\ngpu_type = "a800"\ncpus = 96\nmem_gb = 1600\n'
ITERATIONS = 100


def _sim(tmp_path, *extra: str) -> dict:
    mosaic_s = builtin_rubick_measured().time_s("llama30", plan_from_mapping({"pp": 3, "tp": 4}), (8,) * 6, 4)
    assert mosaic_s is not None
    (tmp_path / "c.toml").write_text(CLUSTER)
    (tmp_path / "t.csv").write_text(
        "job_id,submit_time_s,num_gpus,duration_s,model,batch_size,iterations,gpu_type,plan\n"
        f'a,0,48,{ITERATIONS * mosaic_s.time_s},llama30,4,{ITERATIONS},a800,"{{""pp"": 3, ""tp"": 4}}"\n'
    )
    out = tmp_path / ("out" + "".join(extra))
    args = ["sim", "--cluster", str(tmp_path / "c.toml"), "--trace", str(tmp_path / "t.csv")]
    args += ["--scheduler", "fifo", "--out", str(out), "--no-plot", "--no-progress", *extra]
    assert main(args) == 0
    return json.loads((out / "summary.json").read_text())


def test_truth_chooses_the_rubick_artifacts_rule_and_is_recorded(tmp_path):
    default = _sim(tmp_path)
    measured = _sim(tmp_path, "--truth", "measured")
    artifact = _sim(tmp_path, "--truth", "rubick-artifact")
    assert default["truth"] == measured["truth"] == "measured" and artifact["truth"] == "rubick-artifact"
    assert default["avg_jct_s"] == measured["avg_jct_s"]
    # LLaMA-30B's plan 344 on 6 x 8: the artifact interpolates (2.53 s) where Mosaic measured 2.23 s.
    theirs, how = artifact_time(builtin_artifact_tables()["llama30"], (8,) * 6, "344")
    assert how == "interpolated"
    assert artifact["avg_jct_s"] == pytest.approx(ITERATIONS * theirs)
    assert artifact["avg_jct_s"] > default["avg_jct_s"] * 1.1


def test_an_unknown_truth_is_refused_with_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sim", "--out", str(tmp_path / "o"), "--truth", "paper"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--truth: invalid choice: 'paper'" in err and "'measured', 'rubick-artifact'" in err
