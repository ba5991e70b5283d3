"""``mosaic submit``: validate a batch script's ``#MOSAIC`` directives and submit it held.

The job is submitted held (``sbatch --hold``) so only the controller starts it; its
metadata travels in the Slurm comment (:func:`slurm_plugin.directives.encode_comment`) and
``MOSAIC_SPOOL`` in its environment tells ``mosaic-run`` where its plan file is.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from slurm_plugin.directives import SUBMISSION, encode_comment, parse_directives
from slurm_plugin.files import read_text
from slurm_plugin.slurm.backend import SlurmClient

RESERVED_SBATCH = ("--comment", "-H", "--hold")


def split_arguments(tokens: Sequence[str]) -> tuple[str, list[str]]:
    """``mosaic submit``'s positional arguments as (script, sbatch options).

    Two forms: ``SCRIPT [-- SBATCH_OPTIONS...]`` and ``-- SBATCH_OPTIONS... SCRIPT`` (the
    order ``sbatch`` itself takes: options, then the script, which is then the last word).
    """
    words = list(tokens)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise InputError("mosaic submit: no batch script given (mosaic submit SCRIPT [-- SBATCH_OPTIONS])")
    if not words[0].startswith("-"):
        script, options = words[0], words[1:]
        if options and options[0] == "--":
            options = options[1:]
        return script, options
    script = words[-1]
    if script.startswith("-"):
        raise InputError(
            f"mosaic submit: {script!r} is an option, not a script: put the script last "
            "(mosaic submit -- SBATCH_OPTIONS SCRIPT) or first (mosaic submit SCRIPT -- SBATCH_OPTIONS)"
        )
    return script, [w for w in words[:-1] if w != "--"]


def prepare(script: str | Path, sbatch_args: Sequence[str]) -> dict[str, Any]:
    """The metadata of ``script`` (errors name the script, line and directive)."""
    for arg in sbatch_args:
        if arg.split("=", 1)[0] in RESERVED_SBATCH:
            raise InputError(f"mosaic submit: {arg.split('=', 1)[0]} is set by Mosaic (it holds the job)")
    return parse_directives(read_text(script), str(script))


def submit(client: SlurmClient, script: str | Path, sbatch_args: Sequence[str], spool: Path) -> str:
    """Submit ``script`` held with its metadata; returns the Slurm job id."""
    meta = prepare(script, sbatch_args)
    # One token per submission, in the comment and the job's environment: a requeue keeps
    # both, a new job that reuses the id (a Slurm controller started on fresh state numbers
    # from 1 again) has another, so neither the controller's store nor mosaic-run's
    # checkpoints take an earlier job for this one by its id alone
    # (slurm_plugin.controller.observe.reuses_an_earlier_id, wrapper.checkpoint.job_root).
    token = secrets.token_hex(8)
    meta[SUBMISSION] = token
    env = {"MOSAIC_SPOOL": str(spool), "MOSAIC_SUBMISSION": token}
    if isinstance(meta.get("batch_size"), int):
        env["MOSAIC_GLOBAL_BATCH"] = str(meta["batch_size"])  # mosaic-run's default --global-batch
    return client.submit(str(script), list(sbatch_args), encode_comment(meta), env)
