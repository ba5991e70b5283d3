"""A real Slurm cluster on one host, for tests and demos (``mosaic testcluster``).

:mod:`.shapes` describes clusters and renders their configuration (pure);
:mod:`.install` installs Debian's packages; :mod:`.lifecycle` starts and stops the
daemons by PID in a private directory.
"""
