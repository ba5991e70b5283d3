"""Counts the inputs the fuzz tests feed each parser, and prints them after the run."""

from __future__ import annotations

from collections import Counter

import pytest

TRIED: Counter[str] = Counter()
"""Inputs fed per parser in this test run (incremented by ``tests/fuzz/test_parsers.py``)."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TRIED:
        return
    terminalreporter.section("fuzz: inputs tried per parser")
    for name, count in sorted(TRIED.items()):
        terminalreporter.write_line(f"{name:24s} {count:6d}")
    terminalreporter.write_line(f"{'total':24s} {sum(TRIED.values()):6d}")
