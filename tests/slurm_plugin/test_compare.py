"""``mosaic compare``: its statistics, its grouping of runs, its errors, and its report as a browser
shows it."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from slurm_plugin.cli.main import main
from slurm_plugin.compare import (
    CompareError,
    Run,
    bootstrap_mean,
    format_interval,
    group,
    load,
    summarise,
    summary_csv,
    trace_label,
)
from tests.builders import SMALL_CLUSTER_TOML

CLUSTER = SMALL_CLUSTER_TOML

# Two tenants, enough contention that the presets differ.
TRACE = "job_id,submit_time_s,num_gpus,duration_s,model,tenant\n" + "".join(
    f"j{i},{i * 300},{(1, 2, 4, 1)[i % 4]},{1800 + 700 * (i % 5)},{('resnet50', 'bert', 'vgg19')[i % 3]},"
    f"{('vision', 'nlp')[i % 2]}\n"
    for i in range(14)
)
PRESETS = ("fifo", "sjf", "tiresias")
SEEDS = (0, 1)


def _sim(cluster: Path, trace: Path, preset: str, seed: int, out: Path) -> None:
    argv = ["-q", "sim", "--cluster", str(cluster), "--trace", str(trace), "--scheduler", preset]
    argv += ["--seed", str(seed), "--out", str(out), "--no-plot", "--round-s", "300"]
    assert main(argv) == 0


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep-like directory as `mosaic sweep` lays it out: 3 presets x 2 seeds on one trace, plus
    one failed and one missing cell in results.csv."""
    root = tmp_path_factory.mktemp("sweep")
    cluster, trace = root / "cluster.toml", root / "tiny.csv"
    cluster.write_text(CLUSTER)
    trace.write_text(TRACE)
    (root / "sweep.json").write_text(
        json.dumps({"presets": PRESETS, "seeds": SEEDS, "cluster": str(cluster)})
    )
    rows = []
    for preset in PRESETS:
        for seed in SEEDS:
            cell = f"{preset}__tiny__s{seed}"
            _sim(cluster, trace, preset, seed, root / "cells" / cell)
            summary = json.loads((root / "cells" / cell / "summary.json").read_text())
            rows.append(
                {"cell": cell, "preset": preset, "trace": str(trace), "seed": seed, "status": "done"}
                | {k: v for k, v in summary.items() if isinstance(v, int | float)}
            )
    keys = list(rows[0])
    rows.append(
        {"cell": "las__tiny__s0", "preset": "las", "trace": str(trace), "seed": 0, "status": "failed"}
    )
    rows.append(
        {"cell": "las__tiny__s1", "preset": "las", "trace": str(trace), "seed": 1, "status": "missing"}
    )
    with (root / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)
    return root


# --- statistics ---------------------------------------------------------------------------------


def test_the_bootstrap_interval_holds_the_mean_and_is_deterministic():
    values = [10.0, 12.0, 9.0, 15.0, 11.0]
    first = bootstrap_mean(values)
    assert first is not None
    assert first.low <= first.mean <= first.high
    assert first.mean == pytest.approx(11.4)
    assert first.low < first.high and not first.degenerate
    assert bootstrap_mean(values) == first  # fixed RNG seed: the same interval every time
    assert min(values) <= first.low and first.high <= max(values)  # means of resamples stay inside


def test_more_spread_gives_a_wider_interval():
    narrow = bootstrap_mean([10.0, 10.5, 9.5, 10.2])
    wide = bootstrap_mean([10.0, 20.0, 0.0, 10.2])
    assert narrow is not None and wide is not None
    assert wide.high - wide.low > narrow.high - narrow.low


def test_one_seed_gives_a_degenerate_interval_and_says_so():
    one = bootstrap_mean([7200.0])
    assert one is not None
    assert (one.mean, one.low, one.high, one.seeds) == (7200.0, 7200.0, 7200.0, 1)
    assert one.degenerate
    assert format_interval(one, "h") == "2.00 (1 seed)"
    two = bootstrap_mean([3600.0, 7200.0])
    assert two is not None and format_interval(two, "h").startswith("1.50 [")


def test_no_values_give_no_interval():
    assert bootstrap_mean([]) is None
    assert format_interval(None, "h") == "-"


def test_equal_values_give_a_zero_width_interval():
    stat = bootstrap_mean([0.5, 0.5, 0.5])
    assert stat is not None and stat.low == stat.high == 0.5 and not stat.degenerate


# --- grouping -----------------------------------------------------------------------------------


def test_runs_group_by_trace_and_preset_with_seeds_in_order():
    runs = [
        Run("a", "fifo", "t1.csv", 2, {}),
        Run("b", "sjf", "t1.csv", 0, {}),
        Run("c", "fifo", "t1.csv", 0, {}),
        Run("d", "fifo", "t2.csv", 0, {}),
    ]
    groups = group(runs)
    assert list(groups) == [("t1.csv", "fifo"), ("t1.csv", "sjf"), ("t2.csv", "fifo")]
    assert [r.name for r in groups[("t1.csv", "fifo")]] == ["c", "a"]


def test_each_trace_and_preset_is_summarised_over_its_own_seeds():
    def run(preset: str, trace: str, seed: int, jct: float) -> Run:
        tenants = {"a": {"jobs": 2, "avg_jct_s": jct / 2, "p99_jct_s": jct}}
        return Run(f"{preset}-{trace}-{seed}", preset, trace, seed, {"avg_jct_s": jct, "tenants": tenants})

    runs = [run("fifo", "t1", 0, 10.0), run("fifo", "t1", 1, 20.0), run("fifo", "t2", 0, 5.0)]
    rows = summarise(group(runs))
    assert [(r.trace, r.preset, r.tenant, r.seeds) for r in rows] == [
        ("t1", "fifo", None, [0, 1]),
        ("t1", "fifo", "a", [0, 1]),  # no jobs.csv: the tenant's JCTs from summary.json
        ("t2", "fifo", None, [0]),
        ("t2", "fifo", "a", [0]),
    ]
    assert rows[0].stats["avg_jct_s"].mean == 15.0  # type: ignore[union-attr]
    assert rows[1].stats["avg_jct_s"].mean == 7.5  # type: ignore[union-attr]
    assert rows[1].stats["p50_jct_s"] is None
    assert rows[2].stats["avg_jct_s"].degenerate  # type: ignore[union-attr]
    assert rows[0].stats["makespan_s"] is None  # not measured: no interval, an empty cell
    assert summary_csv(rows).splitlines()[3].startswith("t2,fifo,,0,5,5,5,")


def test_trace_labels_drop_the_directory_and_suffix():
    assert trace_label("bundled:demo_trace.csv") == "demo_trace"
    assert trace_label("/x/y/philly.csv.gz") == "philly"


def test_a_sweep_directory_is_read_from_results_csv_and_reports_skipped_cells(sweep):
    runs = load([sweep])
    assert len(runs.runs) == len(PRESETS) * len(SEEDS)
    assert runs.skipped == [("las__tiny__s0", "failed"), ("las__tiny__s1", "missing")]
    assert {(r.preset, r.seed) for r in runs.runs} == {(p, s) for p in PRESETS for s in SEEDS}


def test_a_sweep_directory_without_results_csv_is_read_from_its_cells(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep / "cells", copy / "cells")
    (copy / "cells" / "broken").mkdir()
    runs = load([copy])
    assert len(runs.runs) == len(PRESETS) * len(SEEDS)
    assert runs.skipped == [("broken", "no summary.json")]


def test_run_directories_group_by_their_summary(sweep):
    cells = sorted((sweep / "cells").iterdir())
    runs = load(cells)
    groups = group(runs.runs)
    assert sorted(preset for _, preset in groups) == sorted(PRESETS)
    assert all([r.seed for r in members] == list(SEEDS) for members in groups.values())


# --- errors -------------------------------------------------------------------------------------


def _copy_cell(sweep: Path, tmp_path: Path, name: str = "run") -> Path:
    target = tmp_path / name
    shutil.copytree(sweep / "cells" / f"fifo__tiny__s{SEEDS[0]}", target)
    return target


def test_a_directory_without_summary_json_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "mosaic: error:" in err and "empty: no summary.json" in err


def test_a_malformed_summary_names_the_file_and_key(sweep, tmp_path):
    run = _copy_cell(sweep, tmp_path)
    doc = json.loads((run / "summary.json").read_text())
    doc["avg_jct_s"] = "fast"
    (run / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(CompareError, match=r"run/summary.json: 'avg_jct_s' is 'fast', not a number"):
        load([run])
    del doc["avg_jct_s"], doc["scheduler"]
    (run / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(CompareError, match=r"run/summary.json: no 'scheduler' key"):
        load([run])
    (run / "summary.json").write_text("{not json")
    with pytest.raises(CompareError, match=r"run/summary.json: not JSON"):
        load([run])


def test_runs_of_different_clusters_are_an_error(sweep, tmp_path):
    first = _copy_cell(sweep, tmp_path, "a")
    second = tmp_path / "b"
    shutil.copytree(sweep / "cells" / "sjf__tiny__s0", second)
    doc = json.loads((second / "summary.json").read_text())
    doc["cluster"] = "other.toml"
    (second / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(CompareError, match=r"different clusters.*other\.toml"):
        load([first, second])


def test_the_same_preset_trace_and_seed_twice_is_an_error(sweep, tmp_path):
    first, second = _copy_cell(sweep, tmp_path, "a"), _copy_cell(sweep, tmp_path, "b")
    with pytest.raises(CompareError, match="are both fifo"):
        load([first, second])


# --- the command and its report -----------------------------------------------------------------


@pytest.fixture(scope="module")
def report(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compare")
    assert main(["-q", "compare", str(sweep), "--out", str(out)]) == 0
    return out


def test_the_jobs_table_carries_the_tenant(sweep):
    with (sweep / "cells" / "fifo__tiny__s0" / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["tenant"] for r in rows} == {"vision", "nlp"}


def test_sim_writes_the_timeline_compare_draws_utilisation_from(sweep):
    cell = sweep / "cells" / "fifo__tiny__s0"
    gpus = json.loads((cell / "summary.json").read_text())["gpus"]
    with (cell / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["time_s", "busy_gpus", "running", "pending"]
    assert max(int(r["busy_gpus"]) for r in rows) <= gpus
    assert [float(r["time_s"]) for r in rows] == sorted(float(r["time_s"]) for r in rows)


def test_compare_writes_summary_csv_pngs_and_a_self_contained_report(report, sweep, capsys):
    assert main(["-q", "compare", str(sweep), "--out", str(report)]) == 0
    out = capsys.readouterr().out
    for preset in PRESETS:
        assert preset in out
    assert "skipped 2 cells: las__tiny__s0 (failed), las__tiny__s1 (missing)" in out
    with (report / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["preset"], r["tenant"]) for r in rows] == [
        (p, t) for p in PRESETS for t in ("", "nlp", "vision")
    ]
    fifo = rows[0]
    assert fifo["seeds"] == "0 1"
    assert float(fifo["avg_jct_s_lo"]) <= float(fifo["avg_jct_s"]) <= float(fifo["avg_jct_s_hi"])
    summaries = [
        json.loads((sweep / "cells" / f"fifo__tiny__s{s}" / "summary.json").read_text()) for s in SEEDS
    ]
    assert float(fifo["avg_jct_s"]) == pytest.approx(np.mean([s["avg_jct_s"] for s in summaries]), rel=1e-5)
    assert {p.name for p in report.glob("*.png")} == {"cdf-tiny.png", "util-tiny.png"}
    page = (report / "report.html").read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 2


def _chromium() -> str:
    """The browser, or skip (fail under CI, which must exercise the report in a real browser)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "chromium is not installed (contrib/setup.sh installs it as root: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {why}")
    pytest.skip(why)


def _headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless chromium with its own profile directory (tests on several workers at once
    would otherwise share ~/.config/chromium) and without /dev/shm (small in containers)."""
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    argv += ["--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


def test_a_browser_renders_the_report_tables(report, tmp_path):
    browser = _chromium()
    dom = _headless(browser, tmp_path / "profile", "--dump-dom", (report / "report.html").as_uri()).stdout
    assert "<table>" in dom
    for preset in PRESETS:
        assert f'<td class="name">{preset}</td>' in dom
    assert '<td class="name">fifo / nlp</td>' in dom
    with (report / "summary.csv").open() as f:
        fifo = next(csv.DictReader(f))
    assert f"{float(fifo['avg_jct_s']) / 3600:.2f}" in dom  # the numbers, in hours
    assert dom.count("<img") == 2


def test_a_browser_screenshot_of_the_report_is_not_blank(report, tmp_path):
    from PIL import Image

    browser = _chromium()
    shot = tmp_path / "report.png"
    _headless(
        browser,
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1200,1600",
        (report / "report.html").as_uri(),
    )
    with Image.open(shot) as image:
        assert image.size == (1200, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # tables and plots, not one flat colour
