"""A CPU-bound image training job: JPEG decode and augmentation in DataLoader workers feed a small CNN.

    mosaic-run --framework torch --global-batch 32 -- python contrib/examples/image_cnn.py --steps 200
    python contrib/examples/image_cnn.py --cpus 2 --steps 50          # plainly, on 2 CPUs

Like the image models of Synergy (§2-3), each sample costs CPU work before the model sees it:
the JPEG file is decoded, randomly resized-cropped, flipped, colour-jittered (brightness,
contrast, saturation), turned into a tensor and normalised, all with Pillow and numpy in the
loader's worker processes. The model is small and trains on ``--threads`` (default 1) torch
threads, standing for the accelerator: the CPUs beyond it are what decodes and augments.
So throughput grows with the CPUs the job gets, up to where the model step is the
bottleneck. Loader workers: ``--workers`` (default: the run's CPUs; see ``default_workers``).

The images (``--images`` files of ``--size`` pixels square, in ``--classes`` classes, each a
textured background with a class-coloured shape) are generated once, deterministically, into
the data directory (``--data``; default ``$TMPDIR`` or ``/tmp``) and reused by every later
run with the same shape of data; ``--prepare-only`` generates them and exits.

The sample order depends only on the seed and the optimizer step, never on the number of
ranks or on where a run resumed (``example_common.SampleStream``), and each sample's
augmentation is seeded by its stream position: a run resumed from a checkpoint computes what
an uninterrupted one would. Heartbeats (``samples_per_s``), checkpoints and resume go
through the runtime API (``wrapper/runtime.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

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
from PIL import Image, ImageDraw, ImageEnhance
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from wrapper import runtime

DEFAULT_BATCH = 32
DATA_VERSION = 1  # bump when the generated images change
DATA_SEED = 20240  # the images never depend on --seed: every run shares one cache
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# -- the data, generated once -------------------------------------------------------------
def data_spec(images: int, size: int, classes: int) -> dict[str, int]:
    return {"version": DATA_VERSION, "images": images, "size": size, "classes": classes}


def default_data_dir(spec: dict[str, int]) -> Path:
    base = Path(os.environ.get("TMPDIR") or tempfile.gettempdir())
    return base / f"mosaic-image-cnn-v{spec['version']}-{spec['images']}x{spec['size']}-c{spec['classes']}"


def draw_image(index: int, size: int, classes: int) -> tuple[Image.Image, int]:
    """Image ``index``: a noisy two-colour gradient with a shape whose kind and colour give its class."""
    rng = np.random.default_rng([DATA_SEED, index])
    label = int(rng.integers(classes))
    a, b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0.0, 1.0, size, dtype=np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    ramp = np.clip(0.5 + 0.5 * (np.cos(angle) * t[None, :] + np.sin(angle) * t[:, None] - 0.5), 0, 1)
    pixels = a[None, None, :] * (1 - ramp[..., None]) + b[None, None, :] * ramp[..., None]
    pixels += rng.normal(0.0, 18.0, (size, size, 3))  # texture: JPEG has real work to do
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    hue = label / classes
    colour = tuple(int(255 * (0.5 + 0.5 * math.cos(2 * math.pi * (hue + k / 3)))) for k in range(3))
    r = int(rng.uniform(0.15, 0.35) * size)
    cx, cy = (int(v) for v in rng.uniform(r, size - r, 2))
    box = (cx - r, cy - r, cx + r, cy + r)
    kind = label % 4
    if kind == 0:
        draw.ellipse(box, fill=colour)
    elif kind == 1:
        draw.rectangle(box, fill=colour)
    elif kind == 2:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    else:
        for k in range(-2, 3):
            draw.line(
                [(cx - r, cy + k * r // 3), (cx + r, cy + k * r // 3)], fill=colour, width=max(2, r // 8)
            )
    return image, label


def prepare_data(directory: Path, spec: dict[str, int]) -> list[int]:
    """The labels of the cached images in ``directory``; generate them first when absent.

    Generated into a temporary sibling and renamed into place, so two runs starting at once
    never see half a data set (the slower one's copy is discarded).
    """
    manifest = directory / "manifest.json"
    if manifest.is_file():
        found = json.loads(manifest.read_text())
        if found.get("spec") != spec:
            fail(
                f"--data {directory}: holds images generated as {found.get('spec')}, not {spec}; "
                "give another directory"
            )
        return [int(v) for v in found["labels"]]
    if directory.exists() and any(directory.iterdir()):
        fail(f"--data {directory}: not empty and has no manifest.json; give another directory")
    directory.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    labels = []
    for i in range(spec["images"]):
        image, label = draw_image(i, spec["size"], spec["classes"])
        image.save(tmp / f"img-{i:05d}.jpg", quality=90)
        labels.append(label)
    (tmp / "manifest.json").write_text(json.dumps({"spec": spec, "labels": labels}) + "\n")
    try:
        if directory.exists():
            directory.rmdir()  # empty (checked above)
        tmp.rename(directory)
    except OSError:
        if not manifest.is_file():
            raise
        for f in tmp.iterdir():  # another run finished first: use its copy
            f.unlink()
        tmp.rmdir()
    print(
        f"image_cnn: generated {spec['images']} JPEG images in {directory} "
        f"({time.perf_counter() - started:.1f} s)",
        file=sys.stderr,
    )
    return prepare_data(directory, spec)


# -- decode and augmentation (the loader workers' CPU work) ---------------------------------
class JpegDataset(Dataset[tuple[torch.Tensor, int]]):
    """Item ``(index, position)``: image ``index`` decoded and augmented with a generator seeded
    by the stream position (random resized crop, flip, colour jitter, to tensor, normalise)."""

    def __init__(self, directory: Path, labels: list[int], crop: int, seed: int) -> None:
        self.directory, self.labels, self.crop, self.seed = directory, labels, crop, seed
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, item: tuple[int, int]) -> tuple[torch.Tensor, int]:  # type: ignore[override]
        index, position = item
        rng = random.Random(f"{self.seed}:{position}")
        with Image.open(self.directory / f"img-{index:05d}.jpg") as f:
            image = f.convert("RGB")  # the decode
        image = image.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box=crop_box(image.size, rng))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        jitters = [ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color]
        rng.shuffle(jitters)
        for enhance in jitters:
            image = enhance(image).enhance(rng.uniform(0.6, 1.4))
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return (x - self.mean) / self.std, self.labels[index]


def crop_box(size: tuple[int, int], rng: random.Random) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box: 25-100 % of the area, aspect ratio 3/4-4/3; the centre square
    when ten tries do not fit."""
    width, height = size
    for _ in range(10):
        area = width * height * rng.uniform(0.25, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < w <= width and 0 < h <= height:
            x, y = rng.randint(0, width - w), rng.randint(0, height - h)
            return x, y, x + w, y + h
    side = min(width, height)
    x, y = (width - side) // 2, (height - side) // 2
    return x, y, x + side, y + side


class StepSampler(Sampler[list[tuple[int, int]]]):
    """This rank's micro-batches of optimizer steps ``start..steps-1``, as ``(index, position)`` items."""

    def __init__(
        self,
        stream: SampleStream,
        start: int,
        steps: int,
        global_batch: int,
        micro: int,
        accum: int,
        rank: int,
    ) -> None:
        self.stream, self.start, self.steps = stream, start, steps
        self.global_batch, self.micro, self.accum, self.rank = global_batch, micro, accum, rank

    def __len__(self) -> int:
        return (self.steps - self.start) * self.accum

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        share = self.micro * self.accum
        for step in range(self.start, self.steps):
            for k in range(self.accum):
                first = step * self.global_batch + self.rank * share + k * self.micro
                yield [(self.stream.index(p), p) for p in range(first, first + self.micro)]


def quiet_worker(_worker_id: int) -> None:
    """Loader workers ignore the checkpoint signals: mosaic-run signals the rank's whole process
    group, and only the training loop decides when to stop (a worker killed by USR1 would fail it)."""
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(1)


def default_workers(cpus: int) -> int:
    """Loader workers for ``cpus`` CPUs: one per CPU. The training step runs on its own thread
    beside them; while it waits for data (the common case in a CPU-bound job) its CPU decodes
    too, which ``cpus - 1`` workers would leave idle (measured: benchmarks/tools/cpu_curves.py)."""
    return cpus


# -- the model and the loop -------------------------------------------------------------------
def build_model(classes: int, width: int) -> nn.Module:
    """Three convolutions (a stride-4 stem, like a ResNet's stride-2 stem and pooling, then two
    stride-2 layers), global pooling and a linear classifier: cheap next to the decode and
    augmentation of its input, which is the point (a few hundred thousand multiply-adds per
    sample at ``--width 8`` and a 96-pixel crop)."""
    return nn.Sequential(
        nn.Conv2d(3, width, 5, stride=4, padding=2),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    common_arguments(parser, DEFAULT_BATCH)
    parser.add_argument(
        "--data", help="the image cache (default: $TMPDIR or /tmp, named by the data's shape)"
    )
    parser.add_argument("--images", type=int, default=2000, help="images in the data set")
    parser.add_argument("--size", type=int, default=256, help="side of each generated image, pixels")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--crop", type=int, default=96, help="side of the augmented crop the model sees")
    parser.add_argument("--width", type=int, default=8, help="channels of the CNN's first layer")
    parser.add_argument("--workers", type=int, help="DataLoader worker processes (default: one per CPU)")
    parser.add_argument("--prepare-only", action="store_true", help="generate the images and exit")
    args = parser.parse_args(argv)
    check_positive(args, "steps", "batch", "threads", "images", "size", "classes", "crop", "width")
    if args.workers is not None and args.workers < 0:
        fail(f"--workers: expected 0 or more, got {args.workers}")
    return args


def main() -> None:
    args = parse_args()
    spec = data_spec(args.images, args.size, args.classes)
    directory = Path(args.data) if args.data else default_data_dir(spec)
    labels = prepare_data(directory, spec)
    if args.prepare_only:
        return
    rt = runtime.current()
    cpus = take_cpus(args.cpus, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    workers = default_workers(cpus) if args.workers is None else args.workers
    check_checkpointing(rt, args.checkpoint_every)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    distributed = rt.world_size > 1
    if distributed:
        dist.init_process_group("gloo")
    train(args, rt, directory, labels, cpus, workers, distributed)
    rt.done()
    if distributed:
        dist.destroy_process_group()


def train(
    args: argparse.Namespace,
    rt: runtime.Runtime,
    directory: Path,
    labels: list[int],
    cpus: int,
    workers: int,
    distributed: bool,
) -> None:
    micro, accum, global_batch = batch_split(rt, args.batch, DEFAULT_BATCH)
    model: nn.Module = build_model(args.classes, args.width)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = rt.load_checkpoint(model, optimizer)
    timer = Timer(global_batch)
    share = micro * accum
    if start < args.steps:
        sampler = StepSampler(
            SampleStream(len(labels), args.seed), start, args.steps, global_batch, micro, accum, rt.rank
        )
        dataset = JpegDataset(directory, labels, args.crop, args.seed)
        loader = DataLoader(dataset, batch_sampler=sampler, num_workers=workers, worker_init_fn=quiet_worker)
        batches = iter(loader)
        for step in range(start, args.steps):
            optimizer.zero_grad()
            local = torch.zeros(1, dtype=torch.float64)
            for k in range(accum):
                x, y = next(batches)
                loss_sum = F.cross_entropy(model(x), y, reduction="sum")
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
            if end_of_step(args, rt, timer, done, loss, model, optimizer, cpus=cpus, loader_workers=workers):
                break
        del batches  # stops the loader workers before the end-of-run barrier
    if rt.rank == 0:
        print_summary(
            timer.summary(
                example="image-cnn",
                start_step=start,
                end_step=timer.last_step or start,
                cpus=cpus,
                loader_workers=workers,
                threads=args.threads,
                global_batch=global_batch,
                world_size=rt.world_size,
            )
        )


if __name__ == "__main__":
    main()
