"""The real training examples a profiler can run by name (``mosaic profile --example NAME``).

Two CPU training jobs live in ``contrib/examples/`` of the repository (they are examples,
not part of the installed packages):

``image-cnn`` (``contrib/examples/image_cnn.py``)
    A small CNN fed by a torch ``DataLoader`` that decodes JPEG files and augments every
    sample (random resized crop, flip, colour jitter, normalisation) in ``cpus - 1`` loader
    worker processes. Decoding and augmenting dominate the step, so its throughput grows
    with the CPUs the job is given, like the image models of Synergy (§2-3).
``text-transformer`` (``contrib/examples/text_transformer.py``)
    A small transformer language model on synthetic in-memory tokens. Its step is compute;
    it computes on a fixed number of threads and has no loader workers, so extra CPUs do
    not change its throughput, like Synergy's language models.

The contract a profiler codes against::

    from wrapper import examples

    argv = examples.example_command("image-cnn", cpus=2, steps=60, local=True)
    env = {**os.environ, "MOSAIC_STATUS_DIR": out_dir, "MOSAIC_HEARTBEAT_S": "2"}
    subprocess.run(argv, env=env, check=True)   # heartbeats land in out_dir/heartbeat.jsonl

How a run gets N CPUs: the argv always carries ``--cpus N``; the script restricts itself
(``os.sched_setaffinity``, inherited by its loader workers) to the first N CPUs of the
affinity it started with and sizes its loader from N. To place a run on particular cores
(two runs side by side on disjoint cores, say), start it with that affinity (``taskset -c
LIST`` before the argv, or ``os.sched_setaffinity`` in ``preexec_fn``) and pass N = the
number of those cores. A script refuses ``--cpus`` larger than the CPUs it may use (exit 2,
naming both), so an over-asked run never passes for a measured one.

Throughput: each run reports through the runtime API (:mod:`wrapper.runtime`): rank 0
appends ``heartbeat`` records with ``samples_per_s`` (measured between two heartbeats, so
start-up and data generation are never in it) to ``$MOSAIC_STATUS_DIR/heartbeat.jsonl``
(:mod:`wrapper.status`) at most every ``$MOSAIC_HEARTBEAT_S`` seconds. ``mosaic-run`` sets
``MOSAIC_STATUS_DIR``; a plain (``local=True``) run writes heartbeats only where the caller
sets it. Every run also prints one last line on stdout, ``{"event": "summary", ...}`` with
its steps, samples, seconds and ``samples_per_s`` over the steps after the first.

The image data (JPEG files generated once, deterministically, with Pillow) is cached in a
directory (``data_dir``; the script's default is ``$TMPDIR`` or ``/tmp``,
``mosaic-image-cnn-<spec>``; the profiler's is :func:`default_data_dir`), so only the first
run pays for it; :func:`prepare_command` generates it ahead of measuring.

The examples' Python modules (torch; Pillow for the image example) are the extra
``slurm-mosaic[examples]``; :func:`example_script` names it when one is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.core.errors import InputError


@dataclass(frozen=True)
class Example:
    """One runnable training example.

    ``script`` is relative to the repository root; ``default_args`` are appended to every
    command (a caller's ``extra_args`` come after them and win, argparse taking the last);
    ``batch`` is the examples per optimizer step (``--batch`` of the script, and the global
    batch given to ``mosaic-run``); ``cpu_sensitive`` says whether throughput is expected to
    depend on the CPUs (what the example is there to show).
    """

    name: str
    script: str
    batch: int
    cpu_sensitive: bool
    description: str
    default_args: tuple[str, ...] = ()
    has_data: bool = False
    frameworks: tuple[str, ...] = ("torch",)
    requires: tuple[tuple[str, str], ...] = (("torch", "torch"),)  # (module, distribution)


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example(
            name="image-cnn",
            script="contrib/examples/image_cnn.py",
            batch=32,
            cpu_sensitive=True,
            description="small CNN on JPEG images decoded and augmented by cpus-1 DataLoader workers",
            has_data=True,
            requires=(("torch", "torch"), ("PIL", "Pillow")),
        ),
        Example(
            name="text-transformer",
            script="contrib/examples/text_transformer.py",
            batch=16,
            cpu_sensitive=False,
            description="small transformer LM on synthetic in-memory tokens; compute-bound "
            "(torch DDP, or DeepSpeed ZeRO under mosaic-run --framework deepspeed)",
            frameworks=("torch", "deepspeed"),
        ),
    )
}


def example_names() -> list[str]:
    """The known example names, sorted."""
    return sorted(EXAMPLES)


def get_example(name: str) -> Example:
    """The example called ``name``; an unknown name is an :class:`InputError` listing the known ones."""
    try:
        return EXAMPLES[name]
    except KeyError:
        raise InputError(f"unknown example {name!r} (known: {', '.join(example_names())})") from None


def repo_root() -> Path:
    """The repository this package was installed from (``wrapper/`` sits at its top)."""
    return Path(__file__).resolve().parent.parent


def example_script(name: str) -> Path:
    """The example's script; an :class:`InputError` when this install has no ``contrib/``, or
    when this interpreter lacks a module the example imports (the extra that provides it named).

    The examples are not part of the installed packages: they are found next to the
    packages in a source checkout (``pip install -e .``, or running from the repository).
    """
    example = get_example(name)
    path = repo_root() / example.script
    if not path.is_file():
        raise InputError(
            f"example {name!r}: {path} not found; the examples live in the repository's "
            "contrib/examples/ and are not installed with the package: run from a source checkout"
        )
    missing = [dist for module, dist in example.requires if not _importable(module)]
    if missing:
        raise InputError(
            f"example {name!r} needs {', '.join(missing)}, not installed here: "
            "pip install 'slurm-mosaic[examples]'"
        )
    return path


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module set to None
        return False


def default_data_dir(name: str) -> Path:
    """Where the profiler caches an example's data when given no directory:
    ``$TMPDIR`` (or the system's temporary directory) ``/mosaic-example-NAME``."""
    get_example(name)
    return Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / f"mosaic-example-{name}"


def _mosaic_run() -> str:
    """``mosaic-run`` of this interpreter's environment when it has one, else from ``PATH``."""
    beside = Path(sys.executable).parent / "mosaic-run"
    return str(beside) if beside.is_file() else (shutil.which("mosaic-run") or "mosaic-run")


def example_command(
    name: str,
    cpus: int,
    steps: int,
    *,
    local: bool = True,
    batch: int | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    python: str | None = None,
    extra_args: Sequence[str] = (),
    framework: str = "torch",
) -> list[str]:
    """The argv that runs example ``name`` for ``steps`` optimizer steps on ``cpus`` CPUs.

    Parameters
    ----------
    name
        An example name (:func:`example_names`).
    cpus
        CPUs the run uses (``--cpus``: the first ``cpus`` of the affinity it starts with; see
        the module docstring for placing it on particular cores). At least 1.
    steps
        Optimizer steps of the run (total: a run resumed from step k does ``steps - k``).
    local
        ``True``: the script plainly, as a process of the caller (heartbeats only where the
        caller sets ``MOSAIC_STATUS_DIR``; no checkpoint resume). ``False``: under
        ``mosaic-run --framework torch --global-batch B`` (srun inside a Slurm job, local
        processes outside), which sets the status and checkpoint directories and resumes
        from the newest complete checkpoint.
    batch
        Examples per optimizer step (default: the example's ``batch``); under ``mosaic-run``
        also its ``--global-batch``.
    data_dir
        The image example's data cache (ignored by examples without data).
    seed
        Seeds the model, the data order and the augmentation (the image files themselves are
        always the same: generated from a fixed seed, so every run shares one cache).
    python
        The interpreter (default: this one).
    extra_args
        More script arguments, after the defaults.
    framework
        What trains under ``mosaic-run`` (its ``--framework``): ``torch``, or ``deepspeed`` for
        an example that has a DeepSpeed path (``Example.frameworks``). A plain run is torch.

    Returns
    -------
    list[str]
        The argv, ready for ``subprocess``; no shell involved.
    """
    example = get_example(name)
    if framework not in example.frameworks:
        raise InputError(f"example {name!r} trains with {', '.join(example.frameworks)}, not {framework!r}")
    size = example.batch if batch is None else batch
    for what, value in (("cpus", cpus), ("steps", steps), ("batch", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"example {name!r}: {what} must be a positive integer, got {value!r}")
    script = [python or sys.executable, str(example_script(name))]
    args = ["--cpus", str(cpus), "--steps", str(steps), "--batch", str(size), "--seed", str(seed)]
    if example.has_data and data_dir is not None:
        args += ["--data", str(data_dir)]
    args += [*example.default_args, *extra_args]
    if local:
        return [*script, *args]
    wrapper = [_mosaic_run(), "--framework", framework, "--global-batch", str(size)]
    return [*wrapper, "--", *script, *args]


def prepare_command(
    name: str, data_dir: str | Path | None = None, *, python: str | None = None
) -> list[str] | None:
    """The argv that generates the example's data cache and exits (``None``: it has no data).

    Run it once before measuring so that no measured run pays for the generation (runs
    would not count it anyway: heartbeat rates start after the first step).
    """
    example = get_example(name)
    if not example.has_data:
        return None
    argv = [python or sys.executable, str(example_script(name)), "--prepare-only"]
    if data_dir is not None:
        argv += ["--data", str(data_dir)]
    return argv
