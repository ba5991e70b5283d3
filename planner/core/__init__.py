"""Mosaic's shared vocabulary, the lowest layer every other package builds on.

Errors (:mod:`~planner.core.errors`), typed field readers (:mod:`~planner.core.fields`),
execution plans (:mod:`~planner.core.execplan`), Slurm host lists
(:mod:`~planner.core.hostlist`), the data model (:mod:`~planner.core.model`) and its JSON
codec (:mod:`~planner.core.codec`), and the plan-file document (:mod:`~planner.core.plandoc`).

These modules import only the standard library and each other, so ``profiles``, the rest of
``planner``, ``wrapper`` and ``slurm_plugin`` can all use them without importing one another
(the layers are stated in ``tests/test_boundaries.py``). This file imports nothing.
"""
