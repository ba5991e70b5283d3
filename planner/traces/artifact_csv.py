"""Reading the research artifacts' workload CSVs (Rubick's workloads, Crius's traces): rows
by column name, every error naming the source, the line and the column.

Both converters read a header of required columns (extra columns are carried and
ignored), then one job per row; a cell is text, a finite number or a whole number, each
with its own refusal. The ``csv`` module's own failures (a field over its size limit, a
NUL byte) become the same :class:`TraceError` as any other bad cell.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping, Sequence

from planner.core.errors import TraceError


class Cells:
    """One row's cells by column name."""

    def __init__(self, row: Mapping[str, str | None], source: str, line: int) -> None:
        self.row, self.line, self.where = row, line, f"{source}:{line}"

    def fail(self, column: str, message: str) -> TraceError:
        return TraceError(f"{self.where}: column '{column}': {message}")

    def text(self, column: str) -> str:
        value = (self.row.get(column) or "").strip()
        if not value:
            raise self.fail(column, "is empty")
        return value

    def number(self, column: str, minimum: float = 0.0) -> float:
        text = self.text(column)
        try:
            value = float(text)
        except ValueError:
            raise self.fail(column, f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < minimum:
            raise self.fail(column, f"expected a finite number >= {minimum:g}, got {text!r}")
        return value

    def integer(self, column: str, minimum: int = 1) -> int:
        value = self.number(column)
        if not value.is_integer() or value < minimum:
            raise self.fail(column, f"expected a whole number >= {minimum}, got {self.text(column)!r}")
        return int(value)


def artifact_rows(text: str, source: str, required: Sequence[str]) -> Iterator[Cells]:
    """The data rows of ``text`` under a header holding every ``required`` column."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip() for h in reader.fieldnames or ()]
    except csv.Error as e:
        raise TraceError(f"{source}:1: not valid CSV: {e}") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(
            f"{source}:1: missing column(s) {', '.join(missing)}; the header has {', '.join(header)}"
        )
    reader.fieldnames = header
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # raised before the reader counts the line it failed on
            raise TraceError(f"{source}:{reader.line_num + 1}: not valid CSV: {e}") from None
        if None in row:
            raise TraceError(f"{source}:{reader.line_num}: more cells than the header has columns")
        yield Cells(row, source, reader.line_num)
