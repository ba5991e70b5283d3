"""Test-cluster shapes and the Slurm configuration they render to (pure).

Each fake node is one ``slurmd`` on this host (``NodeHostname=localhost`` with its own
port, Slurm's multiple-slurmd mode) with fake GPUs: character devices created with
``mknod`` (regular files register but jobs then get no ``CUDA_VISIBLE_DEVICES``).
GPUs are untyped in GRES; the GPU type is a node *feature* because Slurm cannot change
the GPU type of a pending job, while it can change its ``Features``: a typed
request merged with the old one leaves the job in ``BadConstraints``.

The fast-relaunch settings below are the ones a real site running Mosaic needs too:

* ``cred_expire`` (``AuthInfo``): a requeued job waits this long (default 120 s)
  before it may start again; Mosaic restarts jobs every round, so 10 s here.
* ``KillWait``: seconds between SIGTERM and SIGKILL on requeue/cancel; the
  controller signals the checkpoint itself before it requeues, so this only bounds a
  job that ignores SIGTERM.
* ``SchedulerParameters=batch_sched_delay=0,sched_min_interval=0``: a released job
  starts in under a second rather than waiting for the next scheduler pass.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from planner.core.errors import ConfigError

MANAGED_PARTITION = "gpu"
"""The partition Mosaic schedules."""

OTHER_PARTITION = "other"
"""A second partition on the same nodes that Mosaic never touches."""

CRED_EXPIRE_S = 10
MAX_JOB_COUNT = 50000
KILL_WAIT_S = 5


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical fake nodes named ``{prefix}{k}``."""

    count: int
    gpus: int
    gpu_type: str
    cpus: int
    mem_gb: int
    prefix: str = "n"
    shards_per_gpu: int = 0


@dataclass(frozen=True)
class ClusterShape:
    """A test cluster: node groups (names numbered across groups sharing a prefix)."""

    name: str
    groups: tuple[NodeGroup, ...]
    accounting: bool = False

    def nodes(self) -> list[tuple[str, NodeGroup]]:
        """(node name, its group) in order: n1, n2, ... across groups with one prefix."""
        counters: dict[str, int] = {}
        out: list[tuple[str, NodeGroup]] = []
        for group in self.groups:
            for _ in range(group.count):
                counters[group.prefix] = counters.get(group.prefix, 0) + 1
                out.append((f"{group.prefix}{counters[group.prefix]}", group))
        return out

    @property
    def uses_shards(self) -> bool:
        return any(g.shards_per_gpu for g in self.groups)


SHAPES: dict[str, ClusterShape] = {
    "homogeneous": ClusterShape("homogeneous", (NodeGroup(4, 4, "a100", 16, 64),)),
    "hetero": ClusterShape("hetero", (NodeGroup(2, 4, "a100", 16, 64), NodeGroup(2, 4, "v100", 16, 64))),
    "shard": ClusterShape("shard", (NodeGroup(2, 4, "a100", 16, 64, shards_per_gpu=2),)),
    # One node whose GPU-proportional CPU share (1) is below what a 2-core machine can pin
    # and measure, and whose memory share (32 GB) holds Synergy's smallest grid point
    # (20.83 GB), for the closed loop (benchmarks/soak/closed_loop.py).
    "cpu-scarce": ClusterShape("cpu-scarce", (NodeGroup(1, 4, "a100", 4, 128),)),
}


def shape_named(name: str, accounting: bool = False) -> ClusterShape:
    try:
        shape = SHAPES[name]
    except KeyError:
        raise ConfigError(f"unknown test-cluster shape {name!r}; known: {', '.join(SHAPES)}") from None
    return ClusterShape(shape.name, shape.groups, accounting)


@dataclass(frozen=True)
class Layout:
    """Where one cluster lives: its private directory and ports."""

    root: Path
    ctld_port: int
    node_ports: tuple[int, ...]
    dbd_port: int = 0
    db_port: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def gpu_device(self, node: str, index: int) -> Path:
        return self.root / "dev" / node / f"nvidia{index}"


def render_slurm_conf(shape: ClusterShape, layout: Layout, job_submit_lua: bool = True) -> str:
    """``slurm.conf`` for ``shape`` living in ``layout``."""
    r = layout.root
    nodes = shape.nodes()
    if len(nodes) != len(layout.node_ports):
        raise ConfigError(f"{len(nodes)} nodes but {len(layout.node_ports)} ports")
    gres_types = "gpu,shard" if shape.uses_shards else "gpu"
    lines = [
        f"# Mosaic test cluster '{shape.name}' (generated; private to {r})",
        f"ClusterName=mosaic{zlib.crc32(str(r).encode()) % 100000}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={layout.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={r}/state",
        f"SlurmdSpoolDir={r}/spool/%n",
        f"SlurmctldPidFile={r}/run/slurmctld.pid",
        f"SlurmdPidFile={r}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={r}/log/slurmctld.log",
        f"SlurmdLogFile={r}/log/slurmd-%n.log",
        f"PlugStackConfig={r}/etc/plugstack.conf",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"GresTypes={gres_types}",
        "SlurmdParameters=config_overrides",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        f"KillWait={KILL_WAIT_S}",
        "MinJobAge=600",
        f"MaxJobCount={MAX_JOB_COUNT}",  # Slurm's default, 10,000, refuses the 20,000-job benchmark
        "ReturnToService=1",  # an admin's DOWN stays down; a node that only stopped responding returns
        "JobRequeue=1",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
    ]
    if shape.accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={layout.dbd_port}",
            f"AccountingStoragePass={layout.munge_socket}",
            "AccountingStoreFlags=job_comment",
            # gres/shard too where GPUs are shared, so sacct's AllocTRES shows the shards.
            "AccountingStorageTRES=gres/gpu,gres/shard"
            if shape.uses_shards
            else "AccountingStorageTRES=gres/gpu",
        ]
    else:
        lines.append("AccountingStorageType=accounting_storage/none")
    if job_submit_lua:
        lines.append("JobSubmitPlugins=lua")
    for (name, group), port in zip(nodes, layout.node_ports, strict=True):
        gres = f"gpu:{group.gpus}"
        if group.shards_per_gpu:
            gres += f",shard:{group.gpus * group.shards_per_gpu}"
        lines.append(
            f"NodeName={name} NodeHostname=localhost Port={port} CPUs={group.cpus} "
            f"RealMemory={group.mem_gb * 1024} Gres={gres} Features={group.gpu_type} State=UNKNOWN"
        )
    names = ",".join(name for name, _ in nodes)
    lines += [
        f"PartitionName={MANAGED_PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName={OTHER_PARTITION} Nodes={names} MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def render_gres_conf(shape: ClusterShape, layout: Layout) -> str:
    """``gres.conf``: each node's GPUs are its own fake character devices."""
    lines = ["AutoDetect=off"]
    for name, group in shape.nodes():
        for k in range(group.gpus):
            device = layout.gpu_device(name, k)
            lines.append(f"NodeName={name} Name=gpu File={device}")
            if group.shards_per_gpu:
                lines.append(f"NodeName={name} Name=shard Count={group.shards_per_gpu} File={device}")
    return "\n".join(lines) + "\n"


def render_slurmdbd_conf(layout: Layout) -> str:
    r = layout.root
    return (
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={layout.munge_socket}",
                "DbdHost=localhost",
                f"DbdPort={layout.dbd_port}",
                "SlurmUser=root",
                f"LogFile={r}/log/slurmdbd.log",
                f"PidFile={r}/run/slurmdbd.pid",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={layout.db_port}",
                "StorageUser=root",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )
