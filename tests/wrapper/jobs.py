"""Running a job under mosaic-run from a test: launch, signal after N logged steps, collect."""

import json
import signal
import subprocess
import time
from pathlib import Path

from wrapper import status


def losses(log: Path) -> list[dict]:
    """The loss log's records (rank 0 appends one JSON line per step)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def run_mosaic_run(argv, env, log, spool, job_id, signal_after=None, progress_s=120, timeout_s=300):
    """Run ``argv``; once ``log`` has ``signal_after`` steps send SIGUSR1. Returns the exit code,
    stderr and the job's checkpoint marker (None if none was written)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if signal_after is not None:
        deadline = time.monotonic() + progress_s
        while len(losses(log)) < signal_after:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training made no progress"
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # its ranks die with it (PR_SET_PDEATHSIG): nothing is left running
        proc.communicate()
        raise
    marker = status.read_marker(status.status_dir(spool, job_id) / status.CHECKPOINT_MARKER)
    return proc.returncode, err, marker
