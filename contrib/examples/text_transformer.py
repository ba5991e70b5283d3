"""A compute-bound language-model training job: a small transformer on synthetic in-memory tokens.

    mosaic-run --framework torch --global-batch 16 -- python contrib/examples/text_transformer.py --steps 200
    python contrib/examples/text_transformer.py --cpus 2 --steps 50        # plainly, on 2 CPUs

The counterpart of ``image_cnn.py``, like the language models of Synergy (§2-3), whose
throughput does not depend on the CPUs beyond the first: the tokens are generated once, in
memory (a seeded order-2 Markov chain over ``--vocab`` symbols, so there is something to
learn), and a batch is a slice of that tensor: there is no decode and no augmentation, and
no loader worker. The model computes on ``--threads`` torch intra-op threads (default 1,
standing for the accelerator), a number that never follows the CPUs the job is given: so a
second CPU has nothing to do and the throughput stays flat (``benchmarks/cpu_curves.py``
measures it).

Sample order, heartbeats, checkpoints and resume work as in ``image_cnn.py``.
"""

from __future__ import annotations

import argparse
import os

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
    # The compute's thread count is fixed (--threads), never the CPUs the job got: the flat curve.
    torch.set_num_threads(args.threads)
    distributed = rt.world_size > 1
    if distributed:
        dist.init_process_group("gloo")
    train(args, rt, cpus, distributed)
    rt.done()
    if distributed:
        dist.destroy_process_group()


def train(args: argparse.Namespace, rt: runtime.Runtime, cpus: int, distributed: bool) -> None:
    micro, accum, global_batch = batch_split(rt, args.batch, DEFAULT_BATCH)
    corpus = make_corpus(args.sequences, args.length, args.vocab)
    stream = SampleStream(args.sequences, args.seed)
    model: nn.Module = TinyLM(args.vocab, args.length, args.dim, args.layers, args.heads)
    if distributed:
        # The causal mask is a constant buffer: broadcasting it before every forward (DDP's
        # default) would add a collective to each micro-step of gradient accumulation.
        model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = rt.load_checkpoint(model, optimizer)
    timer = Timer(global_batch)
    share = micro * accum
    for step in range(start, args.steps):
        optimizer.zero_grad()
        local = torch.zeros(1, dtype=torch.float64)
        for k in range(accum):
            first = step * global_batch + rt.rank * share + k * micro
            batch = corpus[[stream.index(p) for p in range(first, first + micro)]]
            logits = model(batch[:, :-1])
            # Mean over the tokens of a sequence, summed over sequences: DDP's mean over ranks
            # then makes the gradient the mean over the global batch for any split.
            loss_sum = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1)) * micro
            last = k == accum - 1
            if distributed and not last and isinstance(model, nn.parallel.DistributedDataParallel):
                with model.no_sync():
                    (loss_sum / share).backward()
            else:
                (loss_sum / share).backward()
            local += loss_sum.detach().double()
        optimizer.step()
        if distributed:
            dist.all_reduce(local)
        loss = local.item() / global_batch
        done = step + 1
        tokens = done * global_batch * args.length
        if end_of_step(
            args, rt, timer, done, loss, model, optimizer, tokens=tokens, cpus=cpus, loader_workers=0
        ):
            break
    if rt.rank == 0:
        print_summary(
            timer.summary(
                example="text-transformer",
                start_step=start,
                end_step=timer.last_step or start,
                cpus=cpus,
                loader_workers=0,
                threads=args.threads,
                global_batch=global_batch,
                world_size=rt.world_size,
            )
        )


if __name__ == "__main__":
    main()
