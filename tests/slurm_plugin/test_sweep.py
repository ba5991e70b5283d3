"""``mosaic sweep`` on a local pool: the cells, resuming, a failing cell, results.csv, status and
--dry-run. The Slurm job array is in test_live_sweep.py."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from planner.metrics import SUMMARY_KEYS
from slurm_plugin import sweep as sw
from slurm_plugin.cli import sweep_cmd
from slurm_plugin.cli.main import main
from slurm_plugin.cli.sweep_cmd import array_task_states
from tests.builders import SMALL_CLUSTER_TOML

CLUSTER = SMALL_CLUSTER_TOML


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A small cluster, two 8-job traces (about 0.2 s a cell) and one that does not parse."""
    paths = {"cluster": tmp_path / "cluster.toml", "bad": tmp_path / "bad.csv"}
    paths["cluster"].write_text(CLUSTER)
    paths["bad"].write_text("not,a,trace\n1,2,3\n")
    for name, seed in (("a", 1), ("b", 2)):
        paths[name] = tmp_path / f"{name}.csv"
        argv = ["trace", "gen", "--kind", "gavel", "--jobs", "8", "--rate", "6", "--seed", str(seed)]
        assert main([*argv, "--out", str(paths[name])]) == 0
    return paths


def sweep_argv(inputs: dict[str, Path], out: Path, traces: str = "a,b", **flags: str) -> list[str]:
    argv = ["sweep", "--presets", flags.pop("presets", "fifo,sjf"), "--seeds", flags.pop("seeds", "1-2")]
    argv += ["--traces", ",".join(str(inputs[t]) for t in traces.split(","))]
    argv += ["--cluster", str(inputs["cluster"]), "--round-s", "60", "--out", str(out)]
    for flag, value in flags.items():
        argv += [f"--{flag.replace('_', '-')}", value]
    return argv


def rows(out: Path) -> list[dict[str, str]]:
    with (out / sw.RESULTS_FILE).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cells' ``mosaic sim`` runs, by trace stem and seed (with -j 1 they run in this process)."""
    ran: list[str] = []
    real = sweep_cmd.sim_cmd.run

    def counting(args):
        ran.append(f"{args.scheduler}__{Path(args.trace).stem}__s{args.seed}")
        return real(args)

    monkeypatch.setattr(sweep_cmd.sim_cmd, "run", counting)
    return ran


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("3", (3,)), ("1-5,7", (1, 2, 3, 4, 5, 7)), (" 0 - 2 , 9 ", (0, 1, 2, 9)), ("4-4", (4,))],
)
def test_seeds_are_integers_and_inclusive_ranges(text, seeds):
    assert sw.parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1-x", "'1-x' is not a seed or a range like 1-5"),
        ("1,,2", "'' is not a seed"),
        ("5-3", "the range '5-3' runs backwards"),
        ("1-3,2", "seed 2 given twice"),
    ],
)
def test_a_malformed_seed_list_is_named(text, message):
    with pytest.raises(sw.SweepError, match="--seeds") as e:
        sw.parse_seeds(text)
    assert message in str(e.value)


def test_cells_are_preset_major_then_trace_then_seed():
    sweep = sw.Sweep(("fifo", "sjf"), ("/t/a.csv", "/t/b.csv.gz"), (1, 2), "/c.toml", None, {})
    ids = [c.id for c in sweep.cells]
    assert ids == [
        "fifo__a__s1",
        "fifo__a__s2",
        "fifo__b__s1",
        "fifo__b__s2",
        "sjf__a__s1",
        "sjf__a__s2",
        "sjf__b__s1",
        "sjf__b__s2",
    ]
    assert [c.index for c in sweep.cells] == list(range(8))


def test_array_spec_compresses_runs_of_indices():
    assert sw.array_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert sw.array_spec([4]) == "4"


def test_a_sweep_writes_every_cell_and_one_row_each(inputs, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(inputs, out)) == 0
    assert "8 done, 0 failed, 0 missing of 8 cells" in capsys.readouterr().out
    doc = json.loads((out / sw.SWEEP_FILE).read_text())
    assert doc["presets"] == ["fifo", "sjf"] and doc["seeds"] == [1, 2]
    assert doc["traces"] == [str(inputs["a"]), str(inputs["b"])]  # absolute paths
    assert doc["cluster"] == str(inputs["cluster"]) and doc["config"] is None
    assert doc["sim_options"]["round_s"] == 60.0
    assert [c["cell"] for c in doc["cells"]][:2] == ["fifo__a__s1", "fifo__a__s2"]
    table = rows(out)
    assert [r["cell"] for r in table] == [c["cell"] for c in doc["cells"]]
    header = list(table[0])
    assert header[:5] == ["cell", "preset", "trace", "seed", "status"]
    assert header[5 : 5 + len(SUMMARY_KEYS)] == list(SUMMARY_KEYS)
    assert header.count("seed") == 1
    for row in table:
        cell = out / "cells" / row["cell"]
        summary = json.loads((cell / "summary.json").read_text())
        assert row["status"] == "done" and (cell / "jobs.csv").is_file()
        assert not (cell / "plot.png").exists()  # --no-plot
        assert summary["scheduler"] == row["preset"] and summary["seed"] == int(row["seed"])
        assert float(row["avg_jct_s"]) == summary["avg_jct_s"]
        assert float(row["round_s"]) == 60.0
    assert {r["trace"] for r in table} == {"a", "b"}
    assert not list((out / sw.TMP_DIR).iterdir())


def test_one_failing_cell_is_reported_and_loses_nothing_else(inputs, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(inputs, out, traces="a,bad", seeds="1")) == 1
    printed = capsys.readouterr().out
    assert "2 done, 2 failed, 0 missing of 4 cells" in printed
    assert "fifo__bad__s1" in printed and "missing required column" in printed
    status = {r["cell"]: r["status"] for r in rows(out)}
    assert status == {
        "fifo__a__s1": "done",
        "fifo__bad__s1": "failed",
        "sjf__a__s1": "done",
        "sjf__bad__s1": "failed",
    }
    error = (out / "cells" / "fifo__bad__s1.error").read_text()
    assert str(inputs["bad"]) in error and "missing required column" in error
    assert not (out / "cells" / "fifo__bad__s1").exists()
    assert next(r for r in rows(out) if r["cell"] == "fifo__bad__s1")["avg_jct_s"] == ""


def test_running_again_runs_only_the_missing_and_failed_cells(inputs, tmp_path, capsys, counted):
    out = tmp_path / "sweep"
    assert main(sweep_argv(inputs, out, traces="a,bad", seeds="1-2")) == 1
    assert len(counted) == 8
    first = (out / "cells" / "sjf__a__s2" / "summary.json").read_text()
    shutil.rmtree(out / "cells" / "fifo__a__s1")  # lost
    (out / "cells" / "sjf__a__s2" / "jobs.csv").unlink()  # done: its summary.json is whole
    inputs["bad"].write_text(inputs["b"].read_text())  # the trace is fixed
    counted.clear()
    assert main(sweep_argv(inputs, out, traces="a,bad", seeds="1-2")) == 0
    assert sorted(counted) == sorted(
        ["fifo__a__s1", "fifo__bad__s1", "fifo__bad__s2", "sjf__bad__s1", "sjf__bad__s2"]
    )
    assert {r["status"] for r in rows(out)} == {"done"}
    assert not list((out / "cells").glob("*.error"))
    assert (out / "cells" / "sjf__a__s2" / "summary.json").read_text() == first
    counted.clear()
    assert main(sweep_argv(inputs, out, traces="a,bad", seeds="1-2")) == 0
    assert counted == []
    assert "all 8 cells are done" in capsys.readouterr().out


def test_dry_run_lists_the_cells_and_runs_none(inputs, tmp_path, capsys, counted):
    out = tmp_path / "sweep"
    assert main([*sweep_argv(inputs, out, presets="fifo", seeds="1-2"), "--dry-run"]) == 0
    assert counted == [] and not out.exists()
    printed = capsys.readouterr().out
    assert "4 cells, 4 would run" in printed
    assert "fifo__a__s1" in printed and "fifo__b__s2" in printed and printed.count("(would run)") == 4
    assert main(sweep_argv(inputs, out, traces="a", presets="fifo", seeds="1")) == 0
    capsys.readouterr()
    assert main([*sweep_argv(inputs, out, traces="a", presets="fifo", seeds="1"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "1 cells, 0 would run" in printed and "(would run)" not in printed


def test_status_says_what_is_done_failed_and_missing(inputs, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(inputs, out, traces="a,bad", seeds="1")) == 1
    shutil.rmtree(out / "cells" / "sjf__a__s1")
    (out / sw.RESULTS_FILE).unlink()
    capsys.readouterr()
    assert main(["sweep", "status", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 done, 2 failed, 1 missing of 4 cells" in printed
    assert "sjf__a__s1" in printed and "missing" in printed
    assert "fifo__bad__s1" in printed and "missing required column" in printed
    assert "fifo__a__s1" not in printed  # done cells are only counted
    assert [r["status"] for r in rows(out)] == ["done", "failed", "missing", "failed"]  # regenerated
    doc = json.loads((out / sw.SWEEP_FILE).read_text())
    (out / sw.SWEEP_FILE).write_text(json.dumps({**doc, "slurm_job_id": "42"}))
    assert main(["sweep", "status", str(out)]) == 0
    assert "Slurm array job 42" in capsys.readouterr().out


def test_status_of_a_directory_that_is_no_sweep(tmp_path, capsys):
    assert main(["sweep", "status", str(tmp_path)]) == 2
    assert f"{tmp_path}: not a sweep directory (no sweep.json)" in capsys.readouterr().err


def test_a_different_sweep_in_the_directory_is_refused_naming_what_differs(inputs, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(sweep_argv(inputs, out, traces="a", presets="fifo", seeds="1")) == 0
    capsys.readouterr()
    changed = sweep_argv(inputs, out, traces="a", presets="fifo,sjf", seeds="1")
    changed[changed.index("--round-s") + 1] = "120"
    assert main(changed) == 2
    err = capsys.readouterr().err
    assert "holds a different sweep" in err
    assert "presets: ['fifo'] in sweep.json, ['fifo', 'sjf'] now" in err
    assert "sim_options.round_s: 60.0 in sweep.json, 120.0 now" in err


def test_a_sweep_written_before_a_sim_option_existed_resumes_with_its_default(inputs, tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = sweep_argv(inputs, out, traces="a", presets="fifo", seeds="1")
    assert main(argv) == 0
    doc = json.loads((out / sw.SWEEP_FILE).read_text())
    # As an older mosaic wrote it: without the options added to `mosaic sim` since.
    del doc["sim_options"]["truth"], doc["sim_options"]["launch_s"]
    (out / sw.SWEEP_FILE).write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(argv) == 0
    # A value other than the default is still a different sweep.
    assert main([*argv, "--truth", "rubick-artifact"]) == 2
    assert "sim_options.truth: 'measured' in sweep.json, 'rubick-artifact' now" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"presets": "fifo,nope"}, "--presets: unknown preset nope; known presets: fifo, sjf, "),
        ({"seeds": "1-"}, "--seeds '1-': '1-' is not a seed or a range like 1-5"),
        ({"traces": "a,missing"}, "--traces: no such file: "),
        ({"presets": "fifo,fifo"}, "--presets: fifo given twice"),
    ],
)
def test_bad_input_is_one_clear_error(inputs, tmp_path, capsys, change, message):
    inputs["missing"] = tmp_path / "missing.csv"
    assert main(sweep_argv(inputs, tmp_path / "sweep", **change)) == 2
    err = capsys.readouterr().err
    assert err.startswith("mosaic: error: ") and message in err
    assert not (tmp_path / "sweep").exists()


def test_slurm_flags_without_slurm_are_refused(inputs, tmp_path, capsys):
    argv = [*sweep_argv(inputs, tmp_path / "sweep"), "--wait", "--max-parallel", "4"]
    assert main(argv) == 2
    assert "--max-parallel, --wait go with --slurm" in capsys.readouterr().err


def test_two_traces_of_one_name_are_refused(inputs, tmp_path, capsys):
    other = tmp_path / "elsewhere"
    other.mkdir()
    inputs["a2"] = other / "a.csv"
    shutil.copy(inputs["a"], inputs["a2"])
    assert main(sweep_argv(inputs, tmp_path / "sweep", traces="a,a2")) == 2
    assert "have the same name 'a'" in capsys.readouterr().err


def test_a_bad_scheduler_option_is_refused_before_any_cell_runs(inputs, tmp_path, capsys):
    argv = [*sweep_argv(inputs, tmp_path / "sweep"), "--packing", "no-such-packing"]
    assert main(argv) == 2
    assert "no-such-packing" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


def test_a_process_pool_gives_the_same_results(inputs, tmp_path):
    serial, pooled = tmp_path / "serial", tmp_path / "pooled"
    assert main(sweep_argv(inputs, serial, traces="a", seeds="1-2")) == 0
    assert main([*sweep_argv(inputs, pooled, traces="a", seeds="1-2"), "-j", "2"]) == 0
    wall = ("wall_time_s", "decision_time_s_mean", "decision_time_s_max")
    strip = [{k: v for k, v in r.items() if k not in wall} for r in rows(serial)]
    assert strip == [{k: v for k, v in r.items() if k not in wall} for r in rows(pooled)]


def test_sbatch_runs_one_array_of_the_cells_to_run(tmp_path):
    argv = sweep_cmd.sbatch_argv(
        tmp_path, [0, 1, 2, 6], partition="cpu", max_parallel=3, mem="2G", time_limit="10:00"
    )
    assert argv[:4] == ["sbatch", "--parsable", "--job-name=mosaic-sweep", "--array=0-2,6%3"]
    assert "--partition=cpu" in argv and "--mem=2G" in argv and "--time=10:00" in argv
    assert f"--output={tmp_path}/logs/%A_%a.out" in argv
    assert argv[-1] == str(tmp_path / "sweep.sbatch")
    script = sweep_cmd.task_script(tmp_path)
    assert f'-m slurm_plugin.cli.main sweep run-cell "{tmp_path}" "$SLURM_ARRAY_TASK_ID"' in script
    assert script.splitlines()[1].startswith(f'exec "{sweep_cmd.sys.executable}"')


def test_squeue_array_task_states_are_read_per_task():
    # squeue -h -r -o "%K %T": one line per array task; a job that is no array task has N/A.
    text = "5 RUNNING\n6 PENDING\n7 PENDING\nN/A RUNNING\n\n"
    assert array_task_states(text) == {5: "RUNNING", 6: "PENDING", 7: "PENDING"}
