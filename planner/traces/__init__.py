"""Job traces: the CSV format, seeded generators from the papers, and real-trace import."""

from planner.traces.csvio import TRACE_COLUMNS, format_trace, parse_trace
from planner.traces.records import TraceJob

__all__ = ["TRACE_COLUMNS", "TraceJob", "format_trace", "parse_trace"]
