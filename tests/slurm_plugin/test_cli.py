"""The ``mosaic`` command as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.metrics import JOB_COLUMNS, SUMMARY_KEYS
from planner.traces import parse_trace
from slurm_plugin.cli.main import build_parser, main
from tests.builders import SMALL_CLUSTER_TOML

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

CLUSTER = SMALL_CLUSTER_TOML


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)
    trace = tmp_path / "trace.csv"
    assert (
        main(
            [
                "trace",
                "gen",
                "--kind",
                "gavel",
                "--jobs",
                "30",
                "--rate",
                "6",
                "--seed",
                "7",
                "--out",
                str(trace),
            ]
        )
        == 0
    )
    return cluster, trace


def test_sim_writes_the_contract_files(small, tmp_path, capsys):
    cluster, trace = small
    out = tmp_path / "out"
    code = main(
        [
            "sim",
            "--cluster",
            str(cluster),
            "--trace",
            str(trace),
            "--scheduler",
            "tiresias",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert json.loads(capsys.readouterr().out) == summary
    rows = list(csv.DictReader((out / "jobs.csv").open()))
    assert set(JOB_COLUMNS) <= set(rows[0])
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in parse_trace(trace.read_text()))
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_default_scheduler_is_mosaic(small, tmp_path):
    cluster, trace = small
    out = tmp_path / "out"
    assert (
        main(["sim", "--cluster", str(cluster), "--trace", str(trace), "--out", str(out), "--no-plot"]) == 0
    )
    assert json.loads((out / "summary.json").read_text())["scheduler"] == "mosaic"
    for command in (["plan", "x.json"], ["controller", "--once"], ["demo"]):
        args = build_parser().parse_args(command)
        assert args.default_preset == "mosaic", command


def test_sim_refuses_a_trace_with_jobs_no_node_of_the_cluster_can_hold(tmp_path, capsys):
    # They were simulated to a warning ("can never start ... stopping") and exit 0.
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)  # 2 nodes x 4 v100
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "job_id,submit_time_s,num_gpus,duration_s,model,gpu_type,min_gpus\n"
        "fits,0,8,100,resnet18,v100,\n"
        "big,0,16,100,resnet18,,\n"
        "a100,5,1,100,resnet18,a100,\n"
        "elastic,9,12,100,resnet18,v100,8\n"
    )
    out = tmp_path / "out"
    args = ["sim", "--cluster", str(cluster), "--trace", str(trace), "--out", str(out), "--no-plot"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2 job(s) can never start on this cluster (Slurm would refuse them)" in err
    assert "job big asks for 16 GPUs; the cluster has 8" in err
    assert "job a100 asks for GPU type 'a100'; the cluster has v100" in err
    assert "job fits" not in err and "job elastic" not in err  # 8 of its 8-12 GPUs fit
    assert not out.exists()


def test_sim_defaults_to_the_bundled_demo(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["sim", "--scheduler", "fifo", "--out", str(out), "--no-plot"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs"] == 240 and summary["finished"] == 240 and summary["gpus"] == 64
    assert "avg_jct_s" in capsys.readouterr().out


def test_overrides_and_options_reach_the_scheduler(small, tmp_path):
    cluster, trace = small
    out = tmp_path / "o"
    assert (
        main(
            [
                "sim",
                "--cluster",
                str(cluster),
                "--trace",
                str(trace),
                "--scheduler",
                "las",
                "--policy",
                "tiresias",
                "-o",
                "policy.promote_knob=0",
                "--non-preemptive",
                "--out",
                str(out),
                "--no-plot",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduler"] == "las[policy=tiresias,non-preemptive]"
    assert summary["restarts"] == 0 and summary["migrations"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sim", "--scheduler", "optimus", "--out", "x"],
            "unknown scheduler preset 'optimus'; known presets: fifo",
        ),
        (["sim", "--trace", "/nonexistent.csv", "--out", "x"], "/nonexistent.csv: no such file"),
        (["sim", "--round-s", "0", "--out", "x"], "round_s must be > 0"),
        (["sim", "-o", "policy.nope=1", "--out", "x"], "unknown key 'nope'"),
        (["sim", "-o", "promote_knob=1", "--out", "x"], "expected STAGE.KEY=VALUE"),
        (
            [
                "trace",
                "gen",
                "--kind",
                "synergy",
                "--jobs",
                "5",
                "--rate",
                "1",
                "--split",
                "a,b",
                "--out",
                "-",
            ],
            "--split 'a,b'",
        ),
        (["trace", "philly", "--vc", "zzz", "--out", "-"], "no jobs for virtual cluster 'zzz'"),
    ],
)
def test_errors_are_one_clear_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mosaic: error: ") and message in err
    assert "Traceback" not in err


def test_a_scheduler_typo_is_the_flags_mistake_not_the_config_files(tmp_path, capsys):
    config = tmp_path / "site.toml"
    config.write_text('[scheduler]\npreset = "mosaic"\n')
    assert main(["sim", "--config", str(config), "--scheduler", "tiresas", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--scheduler: unknown scheduler preset 'tiresas'" in err
    assert str(config) not in err


def test_another_preset_on_the_command_line_runs_without_the_config_files_options(small, tmp_path, capsys):
    # etc/mosaic.toml's [scheduler.options] are the mosaic ordering's: fifo has none of them.
    cluster, trace = small
    args = ["sim", "--cluster", str(cluster), "--trace", str(trace), "--no-plot", "--no-progress"]
    etc = ROOT / "etc" / "mosaic.toml"
    assert main([*args, "--config", str(etc), "--scheduler", "fifo", "--out", str(tmp_path / "f")]) == 0
    assert (
        "[scheduler.options] are for preset 'mosaic'; --scheduler fifo runs without them"
        in capsys.readouterr().err
    )
    assert main([*args, "--config", str(etc), "--out", str(tmp_path / "m")]) == 0  # the file's own


def test_a_malformed_trace_loses_nothing(small, tmp_path, capsys):
    cluster, _ = small
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,100,m\n2,0,x,100,m\n")
    out = tmp_path / "never"
    assert main(["sim", "--cluster", str(cluster), "--trace", str(bad), "--out", str(out)]) == 2
    assert "bad.csv:3: column 'num_gpus'" in capsys.readouterr().err
    assert not out.exists()


def test_plan_prints_a_round_plan_for_a_snapshot(tmp_path, capsys):
    snapshot = {
        "time_s": 3600,
        "nodes": [{"name": "n1", "gpus": 4, "gpu_type": "a100", "cpus": 32, "mem_gb": 256}],
        "jobs": [
            {
                "id": "a",
                "num_gpus": 2,
                "model": "gpt2",
                "submit_time_s": 0,
                "state": "running",
                "attained_gpu_s": 7000,
                "assignment": {"gpus": [["n1", 0], ["n1", 1]], "cpus": 16, "mem_gb": 128},
            },
            {
                "id": "b",
                "num_gpus": 4,
                "model": "bert",
                "submit_time_s": 100,
                "state": "pending",
                "attained_gpu_s": 0,
            },
        ],
    }
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snapshot))
    assert main(["plan", str(path), "--scheduler", "las"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # LAS: b (no service) outranks a (7000 GPU-s): a is preempted so b can have the node.
    assert list(plan["assignments"]) == ["b"] and plan["preempted"] == ["a"]
    assert plan["assignments"]["b"]["cpus"] == 32 and plan["decision_time_s"] >= 0
    assert main(["plan", str(path), "--scheduler", "fifo"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert list(plan["assignments"]) == ["a"] and plan["reasons"]["b"] == "no-capacity"


def test_plan_rejects_a_malformed_snapshot_naming_job_and_key(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps({"time_s": 0, "nodes": [], "jobs": [{"id": "j9", "model": "m", "state": "pending"}]})
    )
    assert main(["plan", str(path)]) == 2
    assert "job 'j9'): missing required key 'num_gpus'" in capsys.readouterr().err


def test_trace_gen_is_reproducible(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path in (a, b):
        assert (
            main(
                [
                    "trace",
                    "gen",
                    "--kind",
                    "synergy",
                    "--jobs",
                    "100",
                    "--rate",
                    "9",
                    "--seed",
                    "3",
                    "--out",
                    str(path),
                ]
            )
            == 0
        )
    assert a.read_text() == b.read_text()


def test_trace_philly_lists_and_extracts(tmp_path, capsys):
    assert main(["trace", "philly", "--list"]) == 0
    assert "6214e9\t2000 jobs" in capsys.readouterr().out
    out = tmp_path / "p.csv"
    assert main(["trace", "philly", "--vc", "6214e9", "--count", "50", "--out", str(out)]) == 0
    assert len(parse_trace(out.read_text())) == 50


def test_presets_and_profiles_listings(capsys):
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert "tiresias" in listing and "policy=tiresias preemptive" in listing
    assert main(["profiles", "res18"]) == 0
    assert "resnet18 (image)" in capsys.readouterr().out


def test_console_scripts_are_installed():
    version = subprocess.run([str(BIN / "mosaic"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("mosaic ")


def test_without_the_plots_extra_the_plot_is_skipped_with_a_word(small, tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    cluster, trace = small
    out = tmp_path / "out"
    assert main(["sim", "--cluster", str(cluster), "--trace", str(trace), "--out", str(out)]) == 0
    assert (out / "summary.json").exists() and not (out / "plot.png").exists()
    assert "matplotlib is not installed" in capsys.readouterr().err
