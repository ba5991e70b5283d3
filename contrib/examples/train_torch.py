"""A tiny model trained with DDP or FSDP under mosaic-run, using the runtime API.

On CPU the ranks talk over gloo. With ``--device cuda``, or with ``auto`` (the default) where
torch sees a GPU for every rank of the node (or Slurm bound one GPU to each task), each rank
trains on its own GPU and the ranks talk over NCCL (which refuses two ranks on one GPU).

    mosaic-run --framework torch --global-batch 16 --workers 2 \\
        -- python contrib/examples/train_torch.py --steps 50

The data order is deterministic and depends only on the global step, never on the number
of ranks: global step ``s`` trains on examples ``[s*G, (s+1)*G)`` of a seeded permutation
(``G`` the global batch; indices wrap around the dataset), rank ``r`` takes its contiguous
share and splits it into ``grad_accum`` micro-batches. So a run stopped on 2 ranks and
resumed on 4 computes the same updates as an uninterrupted run, up to floating-point
summation order.

Fault injection for the tests: ``--hang-rank R`` makes rank R hang (never save, never exit)
when asked to checkpoint, like a rank stuck in I/O; mosaic-run kills it after the grace.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from wrapper import runtime

EXAMPLES = 4096  # fixed, so the data order does not depend on how many steps a run asks for


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def dataset(examples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(examples, 8, generator=g, dtype=torch.float64).float()
    w = torch.randn(8, 1, generator=g, dtype=torch.float64).float()
    y = torch.sin(x @ w) + 0.1 * torch.randn(examples, 1, generator=g, dtype=torch.float64).float()
    order = torch.randperm(examples, generator=g)
    return x[order], y[order]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loss-log", help="rank 0 appends {step, loss, world_size, device} per step")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the GPU of this rank's local rank where there is one per "
                             "local rank, else the CPU")  # fmt: skip
    args = parser.parse_args()

    rt = runtime.current()
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device = pick_device(args.device, rt.local_rank, local_world_size, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if device.type == "cuda":
        # cuBLAS is deterministic only with a fixed workspace (required before its first use
        # once deterministic algorithms are on); one GPU per rank, chosen before NCCL starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    # One intra-op thread: the model is tiny, ranks share the node's cores, and a fixed thread
    # count keeps the CPU kernels' summation order the same from run to run.
    torch.set_num_threads(1)
    distributed = rt.world_size > 1
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    assert rt.plan is not None and rt.plan.is_resolved, "run under mosaic-run with a global batch"
    train(args, rt, distributed, device)
    # Say the work is done and flushed (a barrier, every rank's done-marker, a barrier):
    # mosaic-run then counts a rank that aborts in gloo's thread destructors at interpreter
    # exit ("terminate called without an active exception", SIGABRT) as a success.
    rt.done()
    if distributed:
        # The model, its DDP reducer and the optimizer are gone (train returned) before the group
        # is: destroying DDP after its process group can hang at exit (pytorch/pytorch#75097).
        dist.destroy_process_group()


def pick_device(
    choice: str, local_rank: int, local_world_size: int, visible: str | None = None
) -> torch.device:
    """The rank's device: the GPU of its local rank where every local rank has one; the one GPU
    a task sees where Slurm bound one to each task (``--gpu-bind``, ``--gpus-per-task``:
    ``CUDA_VISIBLE_DEVICES``, ``visible``, names a single GPU); else the CPU (``auto``)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "cpu":
        return torch.device("cpu")
    if gpus >= local_world_size:
        return torch.device("cuda", local_rank)
    if gpus == 1 and visible and "," not in visible:
        return torch.device("cuda", 0)
    if choice == "auto":
        return torch.device("cpu")
    raise SystemExit(
        f"train_torch.py: error: --device cuda for local rank {local_rank} of {local_world_size}, "
        f"but torch sees {gpus} GPU(s)"
    )


def end_of_step(
    args: argparse.Namespace,
    rt: runtime.Runtime,
    step: int,
    loss: float,
    global_batch: int,
    device: torch.device,
) -> None:
    """Rank 0 logs the step's loss (and where it trained); every rank reports its heartbeat;
    optional pacing."""
    if rt.rank == 0 and args.loss_log:
        record = {"step": step, "loss": loss, "world_size": rt.world_size, "device": device.type}
        with open(args.loss_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    rt.report(step, samples=step * global_batch, loss=loss, progress=step / args.steps)
    if args.step_sleep:
        time.sleep(args.step_sleep)


def train(args: argparse.Namespace, rt: runtime.Runtime, distributed: bool, device: torch.device) -> None:
    assert rt.plan is not None
    micro, accum, global_batch = rt.plan.micro_batch, rt.plan.grad_accum, rt.plan.global_batch
    assert micro is not None and accum is not None and global_batch is not None

    model: nn.Module = build_model().to(device)
    if distributed and args.mode == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    elif distributed and args.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = rt.load_checkpoint(model, optimizer)
    x, y = (t.to(device) for t in dataset(EXAMPLES, args.seed))
    share = micro * accum

    for step in range(start, args.steps):
        base = step * global_batch + rt.rank * share
        optimizer.zero_grad()
        local = torch.zeros(1, dtype=torch.float64, device=device)
        for k in range(accum):
            index = torch.arange(base + k * micro, base + (k + 1) * micro, device=device) % EXAMPLES
            xb, yb = x[index], y[index]
            # Sum over the micro-batch / examples per rank: DDP and FSDP average over ranks,
            # so each gradient is the mean over the global batch for any dp x micro x accum.
            loss_sum = ((model(xb) - yb) ** 2).sum()
            sync = k == accum - 1 or not distributed or args.mode != "ddp"
            ctx = (
                model.no_sync()
                if not sync and isinstance(model, nn.parallel.DistributedDataParallel)
                else _null()
            )
            with ctx:
                (loss_sum / share).backward()
            local += loss_sum.detach().double()
        optimizer.step()
        if distributed:
            dist.all_reduce(local)
        mean_loss = local.item() / global_batch
        end_of_step(args, rt, step + 1, mean_loss, global_batch, device)
        if rt.should_checkpoint():
            if rt.rank == args.hang_rank:
                while True:  # a rank that ignores the checkpoint request: killed after the grace
                    time.sleep(1)
            rt.save_checkpoint(step + 1, model, optimizer, extra={"loss": mean_loss})
            break
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
            rt.save_checkpoint(step + 1, model, optimizer, extra={"loss": mean_loss})


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
