"""Slurm in three layers: pure argv builders (:mod:`.commands`), pure parsers
of Slurm's output (:mod:`.parse`), and one :func:`.runner.run` that executes a command
with a timeout, kills its process group on expiry and raises an error carrying the argv,
exit code and stderr. :mod:`.backend` puts them behind a small protocol.

pyslurm is not used: the only pyslurm on PyPI (25.11) refuses Slurm 22.05, the Slurm of
Debian 12, so the backend reads the CLI's ``--json`` and ``-o`` output.
"""
