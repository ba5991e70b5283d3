"""Mosaic's side of the world outside the planner: the ``mosaic`` command line, files,
and (as the live path grows) Slurm itself. The planner stays pure; everything here may
read files, write files, read clocks and run commands."""
