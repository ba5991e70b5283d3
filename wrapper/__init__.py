"""The job side of Mosaic: ``mosaic-run``, which starts a job's training with its plan."""
