"""``benchmarks.soak.live_fidelity --trace``: the result file it writes is named by the trace."""

from __future__ import annotations

from benchmarks.soak.live_fidelity import parse_args, result_name


def test_fidelity_benchmark_names_its_result_by_trace():
    assert result_name(parse_args([])) == "live_fidelity"  # the 10-job result is kept
    assert result_name(parse_args(["--trace", "fidelity24"])) == "live_fidelity_24"
    assert result_name(parse_args(["--trace", "/x/mine.csv"])) == "live_fidelity_mine"
    assert result_name(parse_args(["--trace", "fidelity24", "--result", "r"])) == "r"
