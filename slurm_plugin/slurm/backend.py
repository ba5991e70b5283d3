"""The Slurm backend behind a small protocol, and its CLI implementation.

:class:`SlurmClient` is what the observer, the actuator, ``mosaic submit`` and
``mosaic report`` need from Slurm. :class:`CliSlurm` implements it with Slurm's
commands (argv builders + parsers + one runner); tests can put a fake behind the same
protocol. (pyslurm would be a second implementation where it matches the installed
Slurm; it does not for Debian 12's 22.05.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from slurm_plugin.slurm import commands, parse
from slurm_plugin.slurm.runner import DEFAULT_TIMEOUT_S, run


class SlurmClient(Protocol):
    def jobs(self) -> list[parse.SlurmJob]: ...

    def nodes(self) -> list[parse.SlurmNode]: ...

    def update(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> None: ...

    def requeue_hold(self, job_ids: Sequence[str]) -> None: ...

    def hold(self, job_ids: Sequence[str]) -> None: ...

    def release(self, job_ids: Sequence[str]) -> None: ...

    def signal(self, job_id: str, name: str) -> None: ...

    def submit(
        self, script: str, extra: Sequence[str], comment: str | None, env: Mapping[str, str]
    ) -> str: ...

    def sacct_runs(self, since: str, until: str | None) -> list[dict[str, str]]: ...


class CliSlurm:
    """Slurm through its commands. ``env`` points them at a cluster (``SLURM_CONF``)."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.env = dict(env or {})
        self.timeout_s = timeout_s

    def _run(self, argv: list[str], extra_env: Mapping[str, str] | None = None) -> str:
        env = {**self.env, **(extra_env or {})}
        return run(argv, env=env, timeout_s=self.timeout_s).stdout

    def jobs(self) -> list[parse.SlurmJob]:
        return parse.parse_squeue_json(self._run(commands.squeue_json()))

    def nodes(self) -> list[parse.SlurmNode]:
        return parse.parse_sinfo_json(self._run(commands.sinfo_json()))

    def update(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> None:
        self._run(commands.update_job(job_ids, fields))

    def requeue_hold(self, job_ids: Sequence[str]) -> None:
        self._run(commands.requeue_hold(job_ids))

    def hold(self, job_ids: Sequence[str]) -> None:
        self._run(commands.hold(job_ids))

    def release(self, job_ids: Sequence[str]) -> None:
        self._run(commands.release(job_ids))

    def signal(self, job_id: str, name: str) -> None:
        self._run(commands.signal(job_id, name))

    def submit(self, script: str, extra: Sequence[str], comment: str | None, env: Mapping[str, str]) -> str:
        return parse.parse_sbatch_id(self._run(commands.sbatch(script, extra, comment), env))

    def sacct_runs(self, since: str, until: str | None) -> list[dict[str, str]]:
        return parse.parse_parsable(self._run(commands.sacct_runs(since, until)))
