"""Throughput vs CPUs of the two CPU training examples, measured on this machine.

    python -m benchmarks.tools.cpu_curves                      # 1..all CPUs, 30 s a run, 2 repeats
    python -m benchmarks.tools.cpu_curves --cpus 1,2 --run-s 30 --repeats 3

Each run is ``wrapper.examples.example_command(NAME, N, ...)`` started plainly (no Slurm, no
mosaic-run) with its affinity set to the first N CPUs of this process's (``os.sched_setaffinity``
before exec; the script's ``--cpus N`` then sizes its loader from it), reporting heartbeats
every ``--heartbeat-s`` seconds into its own status directory. After ``--run-s`` seconds of
training (counted from its first heartbeat, so start-up and torch's import are not in it)
it gets SIGUSR1 and stops at the end of the step, as a checkpoint request stops it. Its
throughput is read from the heartbeats as the profiler reads them: samples between the
first heartbeat after ``--warmup-s`` and the last, over the time between them.

Configurations: ``image-cnn`` (one loader worker per CPU, the default), ``image-cnn`` with
``cpus - 1`` workers (the other common rule, for comparison), and ``text-transformer``. The
runs are interleaved (repeat, then CPU count, then configuration), so a change in the load
other processes put on the machine spreads over all of them; the load average is recorded
around each run (``--quiet-load L`` waits before each run, up to ``--quiet-wait-s``, for it
to fall below L; ``--nice -10`` gives the runs priority over the other processes). Besides
the wall-clock throughput, each run records the CPU time its processes used over the timed
window: ``cores_busy`` (CPU-seconds per second) and ``samples_per_cpu_s``. Writes
``benchmarks/results/cpu_curves.json`` and, when matplotlib is installed, ``cpu_curves.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine, write_result
from wrapper import examples, status

CONFIGS: dict[str, tuple[str, list[str]]] = {
    # label -> (example, extra arguments)
    "image-cnn": ("image-cnn", []),
    "image-cnn (cpus-1 workers)": ("image-cnn", ["--workers", "{cpus_minus_1}"]),
    "text-transformer": ("text-transformer", []),
}


def parse_cpus(text: str, available: int) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise SystemExit(f"--cpus {text!r}: expected a comma-separated list of CPU counts") from None
    if not values or values[0] < 1 or values[-1] > available:
        raise SystemExit(
            f"--cpus {text!r}: counts must be between 1 and the {available} CPUs this process may use"
        )
    return values


def measure(
    label: str, cpus: int, cores: list[int], args: argparse.Namespace, work: Path, data: Path | None
) -> dict[str, Any]:
    """One run of configuration ``label`` on ``cores``: its heartbeat throughput and context."""
    name, extra = CONFIGS[label]
    extra = [a.replace("{cpus_minus_1}", str(cpus - 1)) for a in extra]
    status_dir = Path(tempfile.mkdtemp(prefix=f"{name}-{cpus}-", dir=work))
    argv = examples.example_command(name, cpus, 1_000_000, data_dir=data, extra_args=extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MOSAIC_"))}
    env.update(MOSAIC_STATUS_DIR=str(status_dir), MOSAIC_HEARTBEAT_S=str(args.heartbeat_s))
    heartbeats = status_dir / status.HEARTBEATS
    load_before = os.getloadavg()[0]
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: _pin(cores, args.nice),  # noqa: PLW1509 - two syscalls before exec
    )
    seen: list[tuple[dict[str, Any], float]] = []  # (heartbeat, the run's CPU seconds when we saw it)
    try:
        deadline = time.monotonic() + args.start_timeout_s
        stop_at = None
        while stop_at is None or time.monotonic() < stop_at:
            if proc.poll() is not None:
                raise SystemExit(
                    f"{label} on {cpus} CPU(s) exited {proc.returncode}: {proc.stderr.read()[-2000:]}"
                )
            beats = [r for r in status.read_records(heartbeats) if r.get("event") == "heartbeat"]
            if len(beats) > len(seen):
                cpu = tree_cpu_seconds(proc.pid)
                seen += [(b, cpu) for b in beats[len(seen) :]]
            if stop_at is None and seen:
                stop_at = time.monotonic() + args.run_s
            elif stop_at is None and time.monotonic() > deadline:
                raise SystemExit(f"{label} on {cpus} CPU(s): no heartbeat in {args.start_timeout_s} s")
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR1)  # stop at the end of the step, as a checkpoint request does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{label} on {cpus} CPU(s) exited {proc.returncode}: {err[-2000:]}")
    t0 = seen[0][0]["time"]
    timed = [(b, cpu) for b, cpu in seen if b["time"] - t0 >= args.warmup_s]
    if len(timed) < 2:
        raise SystemExit(
            f"{label} on {cpus} CPU(s): fewer than 2 heartbeats after the warm-up; raise --run-s"
        )
    (first, cpu_first), (last, cpu_last) = timed[0], timed[-1]
    seconds = last["time"] - first["time"]
    samples = last["samples"] - first["samples"]
    summary = next((line for line in reversed(out.splitlines()) if '"summary"' in line), None)
    return {
        "config": label,
        "example": name,
        "cpus": cpus,
        "cores": cores,
        "loader_workers": last.get("loader_workers"),
        "samples_per_s": round(samples / seconds, 2),
        "heartbeat_rates": [b["samples_per_s"] for b, _ in timed[1:]],
        "timed_s": round(seconds, 1),
        "steps": last["step"],
        "loss_first_last": [round(seen[0][0]["loss"], 4), round(last["loss"], 4)],
        # CPU time of the run's processes (trainer and loader workers) over the timed heartbeats:
        # how many of its cores it kept busy, and its samples per CPU-second (contention-proof).
        "cores_busy": round((cpu_last - cpu_first) / seconds, 2),
        "samples_per_cpu_s": round(samples / (cpu_last - cpu_first), 2) if cpu_last > cpu_first else None,
        "load_avg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "summary_line": summary,
    }


STAGE_PROBE = r"""
import json, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import image_cnn, text_transformer
torch.set_num_threads(1)
spec = image_cnn.data_spec(2000, 256, 10)
data = Path(sys.argv[2]) if sys.argv[2] else image_cnn.default_data_dir(spec)
labels = image_cnn.prepare_data(data, spec)
ds = image_cnn.JpegDataset(data, labels, 96, 0)
t = time.process_time()
items = [ds[(i % len(labels), i)] for i in range(256)]
decode = (time.process_time() - t) / 256
def step_cost(model, batch_fn, n):
    opt = torch.optim.Adam(model.parameters())
    for k in range(n + 2):
        if k == 2:
            t = time.process_time()
        opt.zero_grad(); batch_fn(model).backward(); opt.step()
    return (time.process_time() - t) / n
x = torch.stack([a for a, _ in items[:32]]); y = torch.tensor([b for _, b in items[:32]])
cnn = step_cost(image_cnn.build_model(10, 8), lambda m: F.cross_entropy(m(x), y), 20) / 32
corpus = text_transformer.make_corpus(256, 64, 256)[:16]
lm = text_transformer.TinyLM(256, 64, 128, 2, 4)
def lm_loss(m):
    return F.cross_entropy(m(corpus[:, :-1]).reshape(-1, 256), corpus[:, 1:].reshape(-1))
text = step_cost(lm, lm_loss, 10) / 16
print(json.dumps({"image_decode_augment": decode, "image_train_step": cnn, "text_train_step": text}))
"""


def stage_costs(data: Path | None, core: int) -> dict[str, Any]:
    """CPU milliseconds per sample of each stage, measured with process CPU time on one core
    (contention stretches the wall clock, hardly the CPU time), and the throughput they imply
    on dedicated cores: the image example with N loader workers at most N / (decode + step)
    and never more than 1 / step; the language example 1 / step at any N. Derived, not measured."""
    examples_dir = examples.example_script("image-cnn").parent
    done = subprocess.run(
        [sys.executable, "-c", STAGE_PROBE, str(examples_dir), str(data or "")],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, [core]),
    )
    seconds = json.loads(done.stdout.strip().splitlines()[-1])
    ms = {k: round(v * 1000, 3) for k, v in seconds.items()}
    decode, step, text = (seconds[k] for k in ("image_decode_augment", "image_train_step", "text_train_step"))
    return {
        "cpu_ms_per_sample": ms,
        "derived_dedicated_samples_per_s": {
            "image-cnn": {str(n): round(min(n / (decode + step), 1 / step), 1) for n in (1, 2, 4, 8, 16)},
            "text-transformer": {str(n): round(1 / text, 1) for n in (1, 2, 4, 8, 16)},
        },
        "image_saturates_at_cpus": round((decode + step) / step, 1),
    }


def _pin(cores: list[int], nice: int) -> None:
    os.sched_setaffinity(0, cores)
    if nice:
        os.nice(nice)


def wait_for_quiet(threshold: float | None, limit_s: float) -> float | None:
    """Seconds waited for the load average to fall below ``threshold`` (decided before a run,
    never by its result); ``None`` when not asked to wait."""
    if threshold is None:
        return None
    started = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - started < limit_s:
        time.sleep(5)
    return round(time.monotonic() - started, 1)


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its living descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _mean(values: Any) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(statistics.fmean(numbers), 1) if numbers else None


def curves(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per configuration and CPU count: the median of the repeats, their range, and the speed-up
    over the smallest CPU count."""
    out: dict[str, dict[str, Any]] = {}
    for label in CONFIGS:
        mine = [r for r in runs if r["config"] == label]
        if not mine:
            continue
        by_cpus: dict[int, list[float]] = {}
        busy: dict[int, list[float]] = {}
        per_cpu_s: dict[int, list[float]] = {}
        for r in mine:
            by_cpus.setdefault(r["cpus"], []).append(r["samples_per_s"])
            busy.setdefault(r["cpus"], []).append(r["cores_busy"])
            if r["samples_per_cpu_s"] is not None:
                per_cpu_s.setdefault(r["cpus"], []).append(r["samples_per_cpu_s"])
        medians = {c: statistics.median(v) for c, v in sorted(by_cpus.items())}
        base = next(iter(medians.values()))
        out[label] = {
            "cpus": list(medians),
            "samples_per_s_median": [round(v, 2) for v in medians.values()],
            "samples_per_s_min_max": [
                [round(min(v), 2), round(max(v), 2)] for _, v in sorted(by_cpus.items())
            ],
            "speedup_vs_fewest_cpus": [round(v / base, 3) for v in medians.values()],
            "cores_busy_median": [round(statistics.median(busy[c]), 2) for c in medians],
            "samples_per_cpu_s_median": [
                round(statistics.median(per_cpu_s[c]), 2) if c in per_cpu_s else None for c in medians
            ],
        }
    return out


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib, or the 'plots' extra)")
        return False
    fig, (left, right, busy) = plt.subplots(1, 3, figsize=(14, 4))
    for label, curve in result["curves"].items():
        cpus, med = curve["cpus"], curve["samples_per_s_median"]
        low = [m - lo for m, (lo, _) in zip(med, curve["samples_per_s_min_max"], strict=True)]
        high = [hi - m for m, (_, hi) in zip(med, curve["samples_per_s_min_max"], strict=True)]
        style = "--" if "cpus-1" in label else "-"
        left.errorbar(cpus, med, yerr=[low, high], marker="o", linestyle=style, capsize=3, label=label)
        right.plot(cpus, curve["speedup_vs_fewest_cpus"], marker="o", linestyle=style, label=label)
        busy.plot(cpus, curve["cores_busy_median"], marker="o", linestyle=style, label=label)
    left.set(xlabel="CPUs", ylabel="samples/s (median of repeats, range)", title="Throughput")
    right.set(xlabel="CPUs", ylabel="speed-up over the fewest CPUs", title="Relative")
    busy.set(xlabel="CPUs", ylabel="CPU-seconds per second", title="Cores the run kept busy")
    for ax in (left, right, busy):
        ax.set_xticks(result["cpus"])
        ax.grid(alpha=0.3)
    right.legend(fontsize=8)
    machine = result.get("machine", {})
    loads = [v for r in result["runs"] for v in r["load_avg_before_after"]]
    fig.suptitle(
        f"CPU training examples on {machine.get('cpu', 'this machine')} ({machine.get('cores')} cores; "
        f"load average {min(loads):.1f}-{max(loads):.1f} during the runs)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def replot(path: Path) -> None:
    """Draw a result file's PNG again, beside it."""
    plot(json.loads(path.read_text()), path.with_suffix(".png"))


def main(argv: list[str] | None = None) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cpus", default=",".join(str(n) for n in range(1, len(allowed) + 1)))
    parser.add_argument(
        "--run-s", type=float, default=30.0, help="training seconds per run, after its first heartbeat"
    )
    parser.add_argument(
        "--warmup-s", type=float, default=4.0, help="heartbeats this early in a run are not timed"
    )
    parser.add_argument("--heartbeat-s", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--start-timeout-s", type=float, default=300.0)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated labels")
    parser.add_argument(
        "--quiet-load",
        type=float,
        help="before each run, wait (up to --quiet-wait-s) until the 1-minute load average is below this",
    )
    parser.add_argument("--quiet-wait-s", type=float, default=300.0)
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness of the runs (negative, as root: the runs take their cores from other processes)",
    )
    parser.add_argument("--data", help="the image example's data cache (default: the example's)")
    parser.add_argument("--name", default="cpu_curves", help="result file name (without .json)")
    parser.add_argument(
        "--stage-costs-only",
        action="store_true",
        help="only measure the stages' CPU cost per sample and add it to the existing result file",
    )
    args = parser.parse_args(argv)
    if args.stage_costs_only:
        path = RESULTS / f"{args.name}.json"
        result = json.loads(path.read_text())
        result["stage_costs"] = stage_costs(Path(args.data) if args.data else None, allowed[0])
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["stage_costs"], indent=2))
        return
    # Killed with TERM: unwind (the run's ``finally`` kills the example it started), never orphan it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cpu_counts = parse_cpus(args.cpus, len(allowed))
    labels = [c for c in args.configs.split(",") if c]
    unknown = [c for c in labels if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown} (known: {list(CONFIGS)})")

    prepare = examples.prepare_command("image-cnn", args.data)
    assert prepare is not None
    subprocess.run(prepare, check=True)
    data = Path(args.data) if args.data else None
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cpu-curves-") as tmp:
        for repeat in range(args.repeats):
            for cpus in cpu_counts:
                for label in labels:
                    waited = wait_for_quiet(args.quiet_load, args.quiet_wait_s)
                    run = measure(label, cpus, allowed[:cpus], args, Path(tmp), data)
                    run["waited_for_quiet_s"] = waited
                    run["repeat"] = repeat
                    runs.append(run)
                    print(
                        f"repeat {repeat} {label:28s} {cpus} CPU(s): {run['samples_per_s']:8.1f} samples/s "
                        f"(load {run['load_avg_before_after']})",
                        flush=True,
                    )
    result = {
        "command": "python -m benchmarks.tools.cpu_curves "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "cpus": cpu_counts,
        "run_s": args.run_s,
        "warmup_s": args.warmup_s,
        "heartbeat_s": args.heartbeat_s,
        "nice": args.nice,
        "repeats": args.repeats,
        "curves": curves(runs),
        "stage_costs": stage_costs(data, allowed[0]),
        "runs": runs,
    }
    write_result(args.name, result)
    result["machine"] = machine()
    png = RESULTS / f"{args.name}.png"
    if plot(result, png):
        print(f"wrote {png.relative_to(RESULTS.parent.parent)}")
    for label, curve in result["curves"].items():
        points = zip(
            curve["cpus"], curve["samples_per_s_median"], curve["speedup_vs_fewest_cpus"], strict=True
        )
        print(f"{label:28s} " + "  ".join(f"{c} CPU: {v:.1f}/s (x{x:.2f})" for c, v, x in points))


if __name__ == "__main__":
    main()
