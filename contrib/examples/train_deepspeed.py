"""The tiny model of ``train_torch.py`` trained with DeepSpeed ZeRO under mosaic-run.

The device is DeepSpeed's accelerator: CUDA where torch sees a GPU (one per local rank, NCCL),
else the CPU (gloo); ``DS_ACCELERATOR=cpu`` keeps a GPU machine's run on the CPU.

    mosaic-run --framework deepspeed --global-batch 16 --workers 2 --plan '{"zero_stage": 1}' \\
        -- python contrib/examples/train_deepspeed.py --steps 50

mosaic-run renders the plan into a DeepSpeed config (``MOSAIC_DEEPSPEED_CONFIG``: batch
split, ZeRO stage, offload) and, when the data-parallel size changed since the checkpoint,
converts it to a universal checkpoint and sets ``checkpoint.load_universal``; the script
only asks the runtime where to resume from (:meth:`wrapper.runtime.Runtime.deepspeed_resume`).
Same deterministic data order as ``train_torch.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_torch import EXAMPLES, build_model, dataset, end_of_step

from wrapper import runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--loss-log")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument(
        "--no-universal-info",
        action="store_true",
        help="save as a plain client would (cannot change DP size)",
    )
    args = parser.parse_args()

    rt = runtime.current()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # as in train_torch.py: a fixed summation order, no oversubscription
    on_gpu = get_accelerator().device_name() == "cuda"
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    train(args, rt)
    # Say the work is done and flushed (a barrier, every rank's done-marker, a barrier):
    # mosaic-run then counts a rank that aborts in gloo's thread destructors at interpreter
    # exit ("terminate called without an active exception", SIGABRT) as a success. The engine
    # is gone (train returned) before the process group is.
    rt.done()
    torch.distributed.destroy_process_group()


def train(args: argparse.Namespace, rt: runtime.Runtime) -> None:
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=os.environ["MOSAIC_DEEPSPEED_CONFIG"]
    )
    start = 0
    resume = rt.deepspeed_resume()
    if resume is not None:
        engine.load_checkpoint(resume[0], tag=resume[1])
        start = rt.resume_step()
    micro = engine.train_micro_batch_size_per_gpu()
    accum = engine.gradient_accumulation_steps()
    global_batch = engine.train_batch_size()
    x, y = (t.to(engine.device) for t in dataset(EXAMPLES, args.seed))
    dp_rank, share = rt.rank, micro * accum

    for step in range(start, args.steps):
        base = step * global_batch + dp_rank * share
        local = torch.zeros(1, dtype=torch.float64, device=engine.device)
        for k in range(accum):
            index = torch.arange(base + k * micro, base + (k + 1) * micro, device=engine.device) % EXAMPLES
            out = engine(x[index])
            loss = ((out - y[index]) ** 2).mean()  # DeepSpeed divides by accum and averages over dp
            engine.backward(loss)
            engine.step()
            local += loss.detach().double() * micro
        torch.distributed.all_reduce(local)
        mean_loss = local.item() / global_batch
        end_of_step(args, rt, step + 1, mean_loss, global_batch, torch.device(engine.device))
        stop = rt.should_checkpoint()
        if stop or (args.checkpoint_every and (step + 1) % args.checkpoint_every == 0):
            save_dir, tag = rt.deepspeed_tag(step + 1)
            client_state = {} if args.no_universal_info else rt.deepspeed_client_state()
            engine.save_checkpoint(save_dir, tag=tag, client_state=client_state)
            rt.mark_complete(Path(save_dir) / tag, step + 1, "deepspeed", extra={"loss": mean_loss})
        if stop:
            break


if __name__ == "__main__":
    main()
