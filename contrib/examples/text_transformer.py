"""A compute-bound language-model training job: a small transformer on synthetic in-memory tokens.

    mosaic-run --framework torch --global-batch 16 -- python contrib/examples/text_transformer.py --steps 200
    python contrib/examples/text_transformer.py --cpus 2 --steps 50        # plainly, on 2 CPUs

The counterpart of ``image_cnn.py``, like the language models of Synergy (§2-3), whose
throughput does not depend on the CPUs beyond the first: the tokens are generated once, in
memory (a seeded order-2 Markov chain over ``--vocab`` symbols, so there is something to
learn), and a batch is a slice of that tensor: there is no decode and no augmentation, and
no loader worker. The model computes on ``--threads`` torch intra-op threads (default 1,
standing for the accelerator), a number that never follows the CPUs the job is given: so a
second CPU has nothing to do and the throughput stays flat (``benchmarks/tools/cpu_curves.py``
measures it).

Under ``mosaic-run --framework deepspeed`` the same model trains with DeepSpeed (ZeRO on gloo,
the config mosaic-run rendered from the plan: ZeRO stage, optimizer offload, batch split), on
``--threads`` threads as well, so the profiler's DeepSpeed plan samples (``mosaic profile
--framework deepspeed``) measure what their labels say. The loss per step is the torch run's:
DeepSpeed divides each micro-batch's mean loss by the accumulation steps and averages over the
ranks, which is what the torch path's scaling does.

Sample order, heartbeats, checkpoints and resume work as in ``image_cnn.py`` (a DeepSpeed run
saves with ``engine.save_checkpoint``, which mosaic-run converts when the data-parallel size
changes).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from example_common import (
    SampleStream,
    Timer,
    batch_split,
    check_checkpointing,
    check_positive,
    common_arguments,
    end_of_step,
    fail,
    print_summary,
    take_cpus,
)
from torch import nn

from wrapper import runtime

DEFAULT_BATCH = 16
DATA_SEED = 7  # the corpus never depends on --seed


def make_corpus(sequences: int, length: int, vocab: int) -> torch.Tensor:
    """``sequences x (length + 1)`` token ids from a fixed random order-2 Markov chain."""
    rng = np.random.default_rng(DATA_SEED)
    # Each (previous two tokens) context prefers 4 next tokens: a model can learn it.
    favourites = rng.integers(0, vocab, (vocab, vocab, 4))
    tokens = np.empty((sequences, length + 1), dtype=np.int64)
    tokens[:, :2] = rng.integers(0, vocab, (sequences, 2))
    noise = rng.random((sequences, length + 1))
    choice = rng.integers(0, 4, (sequences, length + 1))
    random_tokens = rng.integers(0, vocab, (sequences, length + 1))
    for t in range(2, length + 1):
        preferred = favourites[tokens[:, t - 2], tokens[:, t - 1], choice[:, t]]
        tokens[:, t] = np.where(noise[:, t] < 0.8, preferred, random_tokens[:, t])
    return torch.from_numpy(tokens)


class TinyLM(nn.Module):
    """Token and position embeddings, ``layers`` pre-norm causal transformer blocks, a tied output."""

    def __init__(self, vocab: int, length: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        block = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        mask = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        h = self.tokens(ids) + self.positions(torch.arange(n))
        h = self.blocks(h, mask=self.mask[:n, :n], is_causal=True)
        return self.norm(h) @ self.tokens.weight.T


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    common_arguments(parser, DEFAULT_BATCH)
    parser.add_argument("--sequences", type=int, default=4096, help="sequences in the in-memory corpus")
    parser.add_argument("--length", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--dim", type=int, default=128, help="model width")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args(argv)
    check_positive(
        args, "steps", "batch", "threads", "sequences", "length", "vocab", "dim", "layers", "heads"
    )
    if args.dim % args.heads:
        fail(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    return args


def main() -> None:
    args = parse_args()
    rt = runtime.current()
    cpus = take_cpus(args.cpus, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    check_checkpointing(rt, args.checkpoint_every)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode also fills every torch.empty with NaN, and DeepSpeed's ZeRO allocates
    # its reduce bucket (5e8 elements by default, 2 GB) with torch.empty at every backward:
    # 0.29 s per micro-step in torch.empty under cProfile, against a 40 ms step. The algorithms stay
    # deterministic; only the fill of memory that is written before it is read goes.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    # The compute's thread count is fixed (--threads), never the CPUs the job got: the flat curve.
    torch.set_num_threads(args.threads)
    use_deepspeed = rt.env.get("MOSAIC_FRAMEWORK") == "deepspeed"
    if use_deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
    elif rt.world_size > 1:
        dist.init_process_group("gloo")
    train(args, rt, cpus, use_deepspeed)
    rt.done()
    if dist.is_initialized():
        dist.destroy_process_group()


def train(args: argparse.Namespace, rt: runtime.Runtime, cpus: int, use_deepspeed: bool) -> None:
    micro, accum, global_batch = batch_split(rt, args.batch, DEFAULT_BATCH)
    corpus = make_corpus(args.sequences, args.length, args.vocab)
    stream = SampleStream(args.sequences, args.seed)
    model: nn.Module = TinyLM(args.vocab, args.length, args.dim, args.layers, args.heads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if use_deepspeed:
        engine, start = deepspeed_engine(rt, model, optimizer, (micro, accum, global_batch))
        step_fn, save = engine_step(engine, args.vocab, micro), deepspeed_saver(rt, engine)
    else:
        if rt.world_size > 1:
            # The causal mask is a constant buffer: broadcasting it before every forward (DDP's
            # default) would add a collective to each micro-step of gradient accumulation.
            model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
        start = rt.load_checkpoint(model, optimizer)
        step_fn, save = torch_step(model, optimizer, args.vocab, micro, accum), None
    timer = Timer(global_batch)
    share = micro * accum
    for step in range(start, args.steps):
        local = torch.zeros(1, dtype=torch.float64)
        for k in range(accum):
            first = step * global_batch + rt.rank * share + k * micro
            batch = corpus[[stream.index(p) for p in range(first, first + micro)]]
            local += step_fn(batch, k == accum - 1)
        if dist.is_initialized():
            dist.all_reduce(local)
        loss = local.item() / global_batch
        done = step + 1
        tokens = done * global_batch * args.length
        if end_of_step(
            args, rt, timer, done, loss, model, optimizer, save,
            tokens=tokens, cpus=cpus, loader_workers=0, threads=args.threads,
        ):  # fmt: skip
            break
    if rt.rank == 0:
        print_summary(
            timer.summary(
                example="text-transformer",
                framework="deepspeed" if use_deepspeed else "torch",
                start_step=start,
                end_step=timer.last_step or start,
                cpus=cpus,
                loader_workers=0,
                threads=args.threads,
                global_batch=global_batch,
                world_size=rt.world_size,
            )
        )


def torch_step(model: nn.Module, optimizer: torch.optim.Optimizer, vocab: int, micro: int, accum: int) -> Any:
    """One micro-step of plain torch (DDP when distributed); the optimizer steps after the last.
    Returns the micro-batch's loss summed over its sequences."""
    share = micro * accum

    def step(batch: torch.Tensor, last: bool) -> torch.Tensor:
        logits = model(batch[:, :-1])
        # Mean over the tokens of a sequence, summed over sequences: DDP's mean over ranks
        # then makes the gradient the mean over the global batch for any split.
        loss_sum = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1)) * micro
        if not last and isinstance(model, nn.parallel.DistributedDataParallel):
            with model.no_sync():
                (loss_sum / share).backward()
        else:
            (loss_sum / share).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
        return loss_sum.detach().double()

    return step


def deepspeed_engine(
    rt: runtime.Runtime, model: nn.Module, optimizer: torch.optim.Optimizer, split: tuple[int, int, int]
) -> tuple[Any, int]:
    """The DeepSpeed engine of the config mosaic-run rendered, resumed; and the step to start at."""
    import deepspeed

    config = rt.env.get("MOSAIC_DEEPSPEED_CONFIG")
    if not config:
        fail("MOSAIC_FRAMEWORK is deepspeed but mosaic-run gave no MOSAIC_DEEPSPEED_CONFIG")
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    rendered = (
        engine.train_micro_batch_size_per_gpu(),
        engine.gradient_accumulation_steps(),
        engine.train_batch_size(),
    )
    if rendered != split:
        fail(f"the DeepSpeed config splits the batch as {rendered}, the plan as {split}")
    resume = rt.deepspeed_resume()
    if resume is None:
        return engine, 0
    engine.load_checkpoint(resume[0], tag=resume[1])
    return engine, rt.resume_step()


def engine_step(engine: Any, vocab: int, micro: int) -> Any:
    """One micro-step through the engine, which divides the loss by the accumulation steps,
    averages gradients over the ranks and steps the optimizer at the accumulation boundary."""

    def step(batch: torch.Tensor, last: bool) -> torch.Tensor:
        logits = engine(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
        return loss.detach().double() * micro

    return step


def deepspeed_saver(rt: runtime.Runtime, engine: Any) -> Any:
    """Saves with ``engine.save_checkpoint`` into the runtime's ``step-N/`` (convertible to a
    universal checkpoint when the data-parallel size changes), then marks it complete."""

    def save(step: int, loss: float) -> None:
        save_dir, tag = rt.deepspeed_tag(step)
        engine.save_checkpoint(save_dir, tag=tag, client_state=rt.deepspeed_client_state())
        rt.mark_complete(Path(save_dir) / tag, step, "deepspeed", extra={"loss": loss})

    return save


if __name__ == "__main__":
    main()
