"""Rubick's performance model (MLSys'25, §4): iteration time from execution plan and resources.

* ``query.py``: what is asked (:class:`ModelShape`, :class:`Query`) and the cluster
  (:class:`Environment`);
* ``terms.py``: the formulas of §4 (:class:`PerfParams`, :func:`iteration_breakdown`);
* ``fit.py``: fitting the seven parameters by RMSLE (§4.3) across models, per-model
  values pooled toward shared ones (:func:`fit_perfmodel` -> :class:`PerfModel`), and
  the leave-one-out error on the samples that chose the pooling (:func:`leave_one_out`);
* ``memory.py``: per-GPU memory of a plan and the :func:`fits` check;
* ``table.py``: the :class:`IterationTimeModel` interface and :class:`MeasuredTable`;
* ``crius.py``, ``gavel.py``: the same interface over Crius's measured best-plan times
  (:class:`CriusTable`) and Gavel's measured throughputs (:class:`GavelTable`);
* ``csvio.py``, ``document.py``, ``accuracy.py``: the measurement CSV, the
  ``mosaic-perfmodel/1`` JSON document and the error table of ``mosaic perfmodel``.

Pure code: the callers read and write the files.
"""

from profiles.perfmodel.accuracy import Accuracy, ErrorStats, PointError, accuracy, format_accuracy
from profiles.perfmodel.crius import CriusRecord, CriusTable, builtin_crius
from profiles.perfmodel.fit import FitOptions, Measurement, ModelFit, PerfModel, fit_perfmodel, leave_one_out
from profiles.perfmodel.gavel import GavelTable
from profiles.perfmodel.memory import MemoryEstimate, fits, memory_estimate
from profiles.perfmodel.query import Environment, ModelShape, Query, make_query, plan_label
from profiles.perfmodel.table import IterationTimeModel, MeasuredTable
from profiles.perfmodel.terms import Breakdown, PerfParams, iteration_breakdown, overlap

__all__ = [
    "Accuracy",
    "Breakdown",
    "CriusRecord",
    "CriusTable",
    "Environment",
    "ErrorStats",
    "FitOptions",
    "GavelTable",
    "IterationTimeModel",
    "MeasuredTable",
    "Measurement",
    "MemoryEstimate",
    "ModelFit",
    "ModelShape",
    "PerfModel",
    "PerfParams",
    "PointError",
    "Query",
    "accuracy",
    "builtin_crius",
    "fit_perfmodel",
    "fits",
    "format_accuracy",
    "iteration_breakdown",
    "leave_one_out",
    "make_query",
    "memory_estimate",
    "overlap",
    "plan_label",
]
