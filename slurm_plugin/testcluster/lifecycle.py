"""Bring a test cluster up and down: a private munged, slurmctld, one slurmd per node
(and, with accounting, a private MariaDB and slurmdbd), all in one directory.

Nothing here touches the host's own Slurm or munge: the cluster has its own ports,
state, spool, logs and munge socket, so two clusters (tests and a demo) can run side by
side. Every daemon is stopped by the PID it wrote, after checking that the process
really is ours (its command line names our directory), never by name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import stat
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import MosaicError
from slurm_plugin.files import write_atomic
from slurm_plugin.slurm.runner import SlurmCommandError, run
from slurm_plugin.testcluster import install
from slurm_plugin.testcluster.shapes import (
    ClusterShape,
    Layout,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/tmp/mosaic-testcluster")
STATE_FILE = "cluster.json"
NVIDIA_MAJOR = 195  # the real NVIDIA character-device major: Slurm treats the files as GPUs
JOB_SUBMIT_LUA = Path(__file__).resolve().parents[2] / "etc" / "job_submit.lua"


class ClusterError(MosaicError):
    """The test cluster could not be started, or is not running."""


@dataclass(frozen=True)
class Cluster:
    """A running (or recorded) test cluster."""

    shape: ClusterShape
    layout: Layout

    @property
    def env(self) -> dict[str, str]:
        """Environment that points Slurm's commands at this cluster."""
        return {"SLURM_CONF": str(self.layout.conf)}

    def node_names(self) -> list[str]:
        return [name for name, _ in self.shape.nodes()]


# -- ports ------------------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _pick_ports(root: Path, count: int) -> list[int]:
    """``count`` consecutive free ports, starting where this directory's hash points.

    Distinct directories start in distinct places, so two clusters rarely even probe the
    same ports; a port in use (by anything) moves the block on.
    """
    base = 20000 + (zlib.crc32(str(root).encode()) % 2000) * 10
    for start in range(base, 60000, count + 1):
        block = list(range(start, start + count))
        if all(_port_free(p) for p in block):
            return block
    raise ClusterError("no free block of ports between 20000 and 60000")


# -- state file -------------------------------------------------------------------------


def _save(cluster: Cluster) -> None:
    doc = {
        "shape": cluster.shape.name,
        "accounting": cluster.shape.accounting,
        "root": str(cluster.layout.root),
        "ctld_port": cluster.layout.ctld_port,
        "node_ports": list(cluster.layout.node_ports),
        "dbd_port": cluster.layout.dbd_port,
        "db_port": cluster.layout.db_port,
    }
    write_atomic(cluster.layout.root / STATE_FILE, json.dumps(doc, indent=2) + "\n")


def load(root: Path = DEFAULT_ROOT) -> Cluster:
    """The cluster recorded in ``root`` (it may or may not be running)."""
    from slurm_plugin.testcluster.shapes import shape_named

    path = root / STATE_FILE
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"{root}: no test cluster here (no {STATE_FILE})") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ClusterError(f"{path}: unreadable: {e}") from e
    shape = shape_named(doc["shape"], bool(doc.get("accounting")))
    layout = Layout(
        root=root,
        ctld_port=int(doc["ctld_port"]),
        node_ports=tuple(int(p) for p in doc["node_ports"]),
        dbd_port=int(doc.get("dbd_port", 0)),
        db_port=int(doc.get("db_port", 0)),
    )
    return Cluster(shape, layout)


# -- processes --------------------------------------------------------------------------


def _pid_files(cluster: Cluster) -> list[tuple[str, Path]]:
    run_dir = cluster.layout.root / "run"
    out = [(f"slurmd {n}", run_dir / f"slurmd-{n}.pid") for n in cluster.node_names()]
    out.append(("slurmctld", run_dir / "slurmctld.pid"))
    if cluster.shape.accounting:
        out += [("slurmdbd", run_dir / "slurmdbd.pid"), ("mariadb", run_dir / "mariadb.pid")]
    out.append(("munged", run_dir / "munged.pid"))
    return out


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _ours(pid: int, root: Path) -> bool:
    """The process is alive, not a zombie, and its command line or environment names our directory."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        # slurmdbd takes its config from $SLURM_CONF, so look at the environment too.
        ident = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    state = status.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and str(root).encode() in ident


def daemon_pids(cluster: Cluster) -> dict[str, int | None]:
    """Each daemon's PID, or ``None`` where it is not running."""
    root = cluster.layout.root
    out: dict[str, int | None] = {}
    for name, path in _pid_files(cluster):
        pid = _read_pid(path)
        out[name] = pid if pid is not None and _ours(pid, root) else None
    return out


def _wait_for(what: str, ready: Any, timeout_s: float, log_file: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.05)
    tail = ""
    if log_file is not None and log_file.exists():
        tail = "; log tail:\n" + "\n".join(log_file.read_text(errors="replace").splitlines()[-8:])
    raise ClusterError(f"{what} not ready after {timeout_s:g} s{tail}")


# -- up ---------------------------------------------------------------------------------


def up(shape: ClusterShape, root: Path = DEFAULT_ROOT, timeout_s: float = 60.0) -> Cluster:
    """Start ``shape`` in ``root`` and wait until every node is idle.

    A cluster already running there is an error (bring it down first); a dead one's
    leftovers are removed.
    """
    if os.geteuid() != 0:
        raise ClusterError(
            "the test cluster needs root (slurmd runs jobs as root; fake GPUs are mknod devices)"
        )
    install.ensure_installed(shape.accounting)
    root = root.resolve()
    if (root / STATE_FILE).exists():
        old = load(root)
        if any(pid is not None for pid in daemon_pids(old).values()):
            raise ClusterError(f"{root}: a test cluster is already running here ('mosaic testcluster down')")
        shutil.rmtree(root)  # a stopped cluster's leftovers
    elif root.exists() and any(root.iterdir()):
        raise ClusterError(f"{root}: exists and is not a test cluster's directory; choose another --dir")
    nodes = shape.nodes()
    extra = 2 if shape.accounting else 0
    ports = _pick_ports(root, 1 + len(nodes) + extra)
    layout = Layout(
        root=root,
        ctld_port=ports[0],
        node_ports=tuple(ports[1 : 1 + len(nodes)]),
        dbd_port=ports[-2] if extra else 0,
        db_port=ports[-1] if extra else 0,
    )
    cluster = Cluster(shape, layout)
    for sub in ("etc", "state", "spool", "run", "log", "munge", "dev", "db"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # munged refuses a group/world-writable path to its socket or key.
    for p in (root, root / "munge", root / "run", root / "log"):
        p.chmod(0o755)
    _make_devices(cluster)
    _write_configs(cluster)
    _save(cluster)
    try:
        _start_munged(cluster)
        if shape.accounting:
            _start_accounting(cluster)
        _start_slurm(cluster, timeout_s)
    except BaseException:
        down(root)
        raise
    return cluster


def _make_devices(cluster: Cluster) -> None:
    for name, group in cluster.shape.nodes():
        (cluster.layout.root / "dev" / name).mkdir(parents=True, exist_ok=True)
        for k in range(group.gpus):
            os.mknod(cluster.layout.gpu_device(name, k), stat.S_IFCHR | 0o666, os.makedev(NVIDIA_MAJOR, k))


def _write_configs(cluster: Cluster) -> None:
    etc = cluster.layout.root / "etc"
    lua = JOB_SUBMIT_LUA.exists()
    # Readable by every user, as at a real site: Slurm's commands read slurm.conf (and
    # sbatch/srun the plugstack) as the user who runs them, such as a non-root operator.
    conf = render_slurm_conf(cluster.shape, cluster.layout, job_submit_lua=lua)
    write_atomic(etc / "slurm.conf", conf, mode=0o644)
    write_atomic(etc / "gres.conf", render_gres_conf(cluster.shape, cluster.layout), mode=0o644)
    write_atomic(etc / "plugstack.conf", "", mode=0o644)
    if lua:
        shutil.copyfile(JOB_SUBMIT_LUA, etc / "job_submit.lua")
    if cluster.shape.accounting:  # slurmdbd refuses a readable config
        write_atomic(etc / "slurmdbd.conf", render_slurmdbd_conf(cluster.layout), mode=0o600)


def _start_munged(cluster: Cluster) -> None:
    r = cluster.layout.root
    key = r / "munge" / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    run(
        [
            "munged",
            f"--socket={cluster.layout.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={r}/run/munged.pid",
            f"--log-file={r}/log/munged.log",
            f"--seed-file={r}/munge/munged.seed",
            "--force",  # running as root is fine for a private test daemon
        ],
        timeout_s=10,
    )
    _wait_for("munged", cluster.layout.munge_socket.exists, 10, r / "log" / "munged.log")


def _start_accounting(cluster: Cluster) -> None:
    r = cluster.layout.root
    data = r / "db" / "data"
    run(
        [
            "mariadb-install-db",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        timeout_s=120,
    )
    _launch_mariadb(cluster)
    # slurmdbd reads slurmdbd.conf from the directory of $SLURM_CONF.
    run(["slurmdbd"], env=cluster.env, timeout_s=30)
    _wait_for("slurmdbd", lambda: _tcp_open(cluster.layout.dbd_port), 60, r / "log" / "slurmdbd.log")


def _launch_mariadb(cluster: Cluster) -> None:
    """Start the cluster's MariaDB on its existing data directory and wait for its port."""
    r = cluster.layout.root
    data = r / "db" / "data"
    log_file = r / "log" / "mariadb.log"
    run(
        [
            "sh",
            "-c",
            # mariadbd does not daemonize itself; a subshell in the background makes init
            # its parent so the test process never holds it as a zombie.
            'nohup "$@" >/dev/null 2>&1 &',
            "mariadbd",
            "mariadbd",
            f"--datadir={data}",
            f"--socket={r}/db/mysql.sock",
            f"--port={cluster.layout.db_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={r}/run/mariadb.pid",
            f"--log-error={log_file}",
            "--user=root",
            "--skip-grant-tables",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
        ],
        timeout_s=10,
    )
    _wait_for("mariadb", lambda: _tcp_open(cluster.layout.db_port), 60, log_file)


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _start_slurm(cluster: Cluster, timeout_s: float) -> None:
    r = cluster.layout.root
    conf = str(cluster.layout.conf)
    if cluster.shape.accounting:
        # The cluster must exist in the database before slurmctld registers with it.
        run(["sacctmgr", "-i", "add", "cluster", _cluster_name(cluster)], env=cluster.env, timeout_s=30)
    run(["slurmctld", "-f", conf, "-c"], env=cluster.env, timeout_s=30)
    ctld_log = r / "log" / "slurmctld.log"
    _wait_for("slurmctld", lambda: _tcp_open(cluster.layout.ctld_port), timeout_s, ctld_log)
    for name in cluster.node_names():
        run(["slurmd", "-f", conf, "-N", name], env=cluster.env, timeout_s=30)
    _wait_for("nodes", lambda: _all_idle(cluster), timeout_s, r / "log" / "slurmctld.log")


def _cluster_name(cluster: Cluster) -> str:
    for line in cluster.layout.conf.read_text().splitlines():
        if line.startswith("ClusterName="):
            return line.split("=", 1)[1]
    raise ClusterError(f"{cluster.layout.conf}: no ClusterName")


def node_states(cluster: Cluster) -> dict[str, str]:
    """Each node's state as ``sinfo`` prints it (``idle``, ``mix``, ``alloc``, ...)."""
    result = run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t"], env=cluster.env, timeout_s=10)
    return dict(line.split() for line in result.stdout.splitlines() if line.strip())


def _all_idle(cluster: Cluster) -> bool:
    try:
        states = node_states(cluster)
    except SlurmCommandError:
        return False
    return set(states) == set(cluster.node_names()) and all(s == "idle" for s in states.values())


# -- down / status ----------------------------------------------------------------------


def down(root: Path = DEFAULT_ROOT, timeout_s: float = 15.0) -> list[str]:
    """Cancel every job, then stop the cluster's daemons by PID; returns what was stopped."""
    root = root.resolve()
    try:
        cluster = load(root)
    except ClusterError:
        return []
    pids = daemon_pids(cluster)
    if pids.get("slurmctld") is not None:
        try:
            # 120 s: cancelling 20,000 queued jobs (benchmarks/performance/live_tick.py) takes slurmctld
            # longer than 10 s, and a job not cancelled outlives the daemons.
            run(["scancel", "--user=root"], env=cluster.env, timeout_s=120, check=False)
        except SlurmCommandError as e:
            log.warning("could not cancel the test cluster's jobs: %s", e)
        wait_jobs_gone(cluster, 10.0)
    stopped: list[str] = []
    for name, pid in pids.items():  # slurmds first, munged last (the order of _pid_files)
        if pid is None:
            continue
        _stop(pid, root, timeout_s)
        stopped.append(name)
    return stopped


def wait_jobs_gone(cluster: Cluster, timeout_s: float) -> None:
    """Until no job of the cluster is running or completing (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            out = run(["squeue", "-h", "-t", "R,CG", "-o", "%i"], env=cluster.env, timeout_s=5).stdout
        except SlurmCommandError:
            return
        if not out.strip():
            return
        time.sleep(0.2)


def _stop(pid: int, root: Path, timeout_s: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _ours(pid, root):
            return
        time.sleep(0.05)
    log.warning("pid %d did not stop on SIGTERM; killing it", pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# -- one daemon down and up again (the dependency-fault tests) ----------------------------

RESTARTABLE = ("slurmctld", "slurmdbd", "mariadb")


def stop_daemon(cluster: Cluster, name: str, timeout_s: float = 30.0) -> int:
    """Stop one of the cluster's daemons (:data:`RESTARTABLE`) by its PID, as a crash or an
    admin would; returns the PID. slurmctld saves its state in ``StateSaveLocation`` on
    SIGTERM, so :func:`start_daemon` brings it back with every job it knew."""
    if name not in RESTARTABLE:
        raise ClusterError(f"cannot stop {name!r}: one of {', '.join(RESTARTABLE)}")
    pid = daemon_pids(cluster).get(name)
    if pid is None:
        raise ClusterError(f"{cluster.layout.root}: {name} is not running")
    _stop(pid, cluster.layout.root, timeout_s)
    if _ours(pid, cluster.layout.root):
        raise ClusterError(f"{name} (pid {pid}) did not stop within {timeout_s:g} s")
    return pid


def start_daemon(cluster: Cluster, name: str, timeout_s: float = 60.0) -> None:
    """Start a daemon :func:`stop_daemon` stopped, on the state it left: slurmctld without
    ``-c`` (it recovers its jobs from ``StateSaveLocation``; returns once every node
    answers again), slurmdbd, MariaDB on its data directory."""
    r = cluster.layout.root
    if name not in RESTARTABLE:
        raise ClusterError(f"cannot start {name!r}: one of {', '.join(RESTARTABLE)}")
    if daemon_pids(cluster).get(name) is not None:
        raise ClusterError(f"{r}: {name} is already running")
    if name == "mariadb":
        _launch_mariadb(cluster)
    elif name == "slurmdbd":
        run(["slurmdbd"], env=cluster.env, timeout_s=30)
        _wait_for(
            "slurmdbd", lambda: _tcp_open(cluster.layout.dbd_port), timeout_s, r / "log" / "slurmdbd.log"
        )
    else:
        run(["slurmctld", "-f", str(cluster.layout.conf)], env=cluster.env, timeout_s=30)
        ctld_log = r / "log" / "slurmctld.log"
        _wait_for("slurmctld", lambda: _tcp_open(cluster.layout.ctld_port), timeout_s, ctld_log)
        _wait_for("nodes", lambda: _all_responding(cluster), timeout_s, ctld_log)


def _all_responding(cluster: Cluster) -> bool:
    """Every node registered with slurmctld (no ``*``: not responding; not down or unknown)."""
    try:
        states = node_states(cluster)
    except SlurmCommandError:
        return False
    return set(states) == set(cluster.node_names()) and not any(
        "*" in s or s.startswith(("down", "unk")) for s in states.values()
    )


def status(root: Path = DEFAULT_ROOT) -> dict[str, Any]:
    """What runs: each daemon's PID and, when slurmctld answers, each node's state."""
    cluster = load(root.resolve())
    pids = daemon_pids(cluster)
    doc: dict[str, Any] = {
        "root": str(cluster.layout.root),
        "shape": cluster.shape.name,
        "slurm_conf": str(cluster.layout.conf),
        "daemons": pids,
        "running": all(pid is not None for pid in pids.values()),
    }
    if pids.get("slurmctld") is not None:
        try:
            doc["nodes"] = node_states(cluster)
        except SlurmCommandError as e:
            doc["error"] = str(e)
    return doc
