"""A stand-in rank for the launcher tests: records its environment and the signals it gets.

``python rank_probe.py OUT MODE``: writes ``OUT/env-<rank>.json`` and ``OUT/ready-<rank>``,
then waits. On USR1/TERM it records ``OUT/got-<rank>-<SIGNAL>`` and exits 0, except in mode
``ignore1`` where rank 1 ignores both (a stuck rank), and mode ``fail1`` where rank 1 exits 3
at once. Modes ``done-abort1`` / ``abort1``: every rank ends at once, rank 1 by aborting
(SIGABRT, as gloo's threads can at interpreter exit), after saying its work is done
(``Runtime.done``) or without.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
rank = os.environ["RANK"]
stop = []


def on_signal(signum, _frame):
    (out / f"got-{rank}-{signal.Signals(signum).name}").touch()
    stop.append(signum)


env = {k: v for k, v in os.environ.items() if k.isupper()}
(out / f"env-{rank}.json").write_text(json.dumps({**env, "MOSAIC_PROBE_PID": str(os.getpid())}))
if mode == "fail1" and rank == "1":
    sys.exit(3)
if mode in {"done-abort1", "abort1"}:
    if mode == "done-abort1":
        from wrapper import runtime

        runtime.Runtime(install_handlers=False).done()
    if rank == "1":
        os.abort()
    sys.exit(0)
for sig in (signal.SIGUSR1, signal.SIGTERM):
    if mode == "ignore1" and rank == "1":
        signal.signal(sig, signal.SIG_IGN)
    else:
        signal.signal(sig, on_signal)
print(f"rank {rank} ready", flush=True)
(out / f"ready-{rank}").touch()
deadline = time.monotonic() + 60
while not stop and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(0 if stop else 9)
