"""The live-cluster fixtures (``slurm_cluster``, ``live``, ``slurm_cluster_of``) are in tests/conftest.py."""
