"""Built-in profiles: Mosaic's model catalog plus real measurements by others.

``builtin/catalog.json`` names the canonical models, their aliases and task. The
measurements are read from the published files in ``builtin/data/`` as they are (see
``builtin/README.md`` for provenance):

* Gavel's isolated throughputs (steps/s per GPU type, GPU count and batch size, and
  the ``_unconsolidated`` variants for jobs spread over servers);
* Synergy's CPU/memory sensitivity matrices (the 1-GPU profiles, as Synergy's own
  simulator uses for every GPU count) and best-case demands;
* Gavel's co-located throughputs (pairs of jobs sharing GPUs), loaded on first use;
* one profile per model that Crius measured (``bert_760M``, ``wide_resnet_2B``,
  ``moe_2.4B``, ...; :mod:`profiles.perfmodel.crius`), so trace names of that form resolve
  (case and punctuation ignored, ``bert__760M`` too). Such a profile has no throughputs of
  its own: the simulator's speed comes from the measured best-plan iteration times at the
  job's global batch (:func:`profiles.speed.table_factor`).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from profiles.names import normalise, split_batch_suffix
from profiles.schema import ColocationKey, Profile, SensitivityMatrix, ThroughputKey

GAVEL_SOURCE = "Gavel simulation_throughputs.json (stanford-futuredata/gavel, MIT)"
SYNERGY_SOURCE = "Synergy simulator/models (msr-fiddle/synergy @1bb2bed6, MIT)"
CRIUS_TASKS = {"wide_resnet": "image", "bert": "language", "moe": "language"}


def _read_text(name: str) -> str:
    data = resources.files("profiles").joinpath("builtin", *name.split("/")).read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8")


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    task: str
    aliases: tuple[str, ...]
    batch_size: int | None


def load_catalog() -> dict[str, CatalogEntry]:
    raw = json.loads(_read_text("catalog.json"))
    catalog = {}
    for name, entry in raw["models"].items():
        catalog[name] = CatalogEntry(
            name=name,
            task=entry["task"],
            aliases=tuple(entry.get("aliases", ())),
            batch_size=entry.get("batch_size"),
        )
    return catalog


def _alias_index(catalog: Mapping[str, CatalogEntry]) -> dict[str, str]:
    index: dict[str, str] = {}
    for entry in catalog.values():
        for label in (entry.name, *entry.aliases):
            index[normalise(label)] = entry.name
    return index


def _gavel_isolated(aliases: Mapping[str, str]) -> dict[str, dict[ThroughputKey, float]]:
    table: dict[str, dict[ThroughputKey, float]] = {}
    for row in csv.DictReader(io.StringIO(_read_text("data/gavel_isolated_throughputs.csv"))):
        label, batch = split_batch_suffix(row["model"])
        model = aliases[normalise(label)]
        worker = row["worker_type"]
        consolidated = not worker.endswith("_unconsolidated")
        gpu_type = worker.removesuffix("_unconsolidated")
        key = ThroughputKey(gpu_type, int(row["scale_factor"]), batch, consolidated)
        table.setdefault(model, {})[key] = float(row["steps_per_s"])
    return table


def _synergy(aliases: Mapping[str, str]) -> dict[str, tuple[SensitivityMatrix, float, float]]:
    raw = json.loads(_read_text("data/synergy_model_profiles.json"))
    rows = tuple(float(c) for c in raw["tput_row_cpus"])
    cols = tuple(float(m) for m in raw["tput_col_mem_gb"])
    out = {}
    for key, prof in raw["profiles"]["models"].items():
        label, _, gpus = key.rpartition("_")
        if gpus != "1":  # Synergy's simulator uses the 1-GPU profile for every GPU count
            continue
        matrix = SensitivityMatrix(rows, cols, tuple(tuple(float(v) for v in r) for r in prof["tput"]))
        out[aliases[normalise(label)]] = (matrix, float(prof["cpus"]), float(prof["mem_gb"]))
    return out


@cache
def builtin_profiles() -> dict[str, Profile]:
    """Every catalog model, with the measurements that exist for it (cached)."""
    catalog = load_catalog()
    aliases = _alias_index(catalog)
    gavel = _gavel_isolated(aliases)
    synergy = _synergy(aliases)
    profiles = {}
    for name, entry in catalog.items():
        sources = []
        throughput = gavel.get(name, {})
        if throughput:
            sources.append(GAVEL_SOURCE)
        sensitivity = ideal_cpus = ideal_mem = None
        if name in synergy:
            sensitivity, ideal_cpus, ideal_mem = synergy[name]
            sources.append(SYNERGY_SOURCE)
        profiles[name] = Profile(
            name=name,
            task=entry.task,
            aliases=entry.aliases,
            batch_size=entry.batch_size,
            throughput=throughput,
            sensitivity=sensitivity,
            ideal_cpus_per_gpu=ideal_cpus,
            ideal_mem_gb_per_gpu=ideal_mem,
            sources=tuple(sources),
        )
    # Imported here: profiles.perfmodel's package imports the store, which imports this module.
    from profiles.perfmodel.crius import SOURCE as CRIUS_SOURCE
    from profiles.perfmodel.crius import builtin_crius

    index = {normalise(label): name for name, p in profiles.items() for label in (name, *p.aliases)}
    for model in builtin_crius().models():
        if normalise(model) in index:  # a catalog name wins; none collides today
            continue
        family = model.rpartition("_")[0]
        profiles[model] = Profile(
            name=model,
            task=CRIUS_TASKS.get(family, "unknown"),
            sources=(f"{CRIUS_SOURCE}: best-plan iteration times",),
        )
    return profiles


@cache
def builtin_colocation() -> dict[ColocationKey, tuple[float, float]]:
    """Gavel's measured co-located steps/s (A's, B's); ``(0, 0)`` means the pair cannot share.

    Only consolidated measurements are kept (the ``*_unconsolidated`` worker types are
    pairs spread over servers). Both orders of every pair are present.
    """
    aliases = _alias_index(load_catalog())
    table: dict[ColocationKey, tuple[float, float]] = {}
    text = _read_text("data/gavel_colocated_throughputs.csv.gz")
    for row in csv.DictReader(io.StringIO(text)):
        gpu = row["worker_type"]
        if gpu.endswith("_unconsolidated"):
            continue
        label_a, batch_a = split_batch_suffix(row["model_a"])
        label_b, batch_b = split_batch_suffix(row["model_b"])
        key = ColocationKey(
            gpu_type=gpu,
            model_a=aliases[normalise(label_a)],
            batch_a=batch_a,
            gpus_a=int(row["scale_factor_a"]),
            model_b=aliases[normalise(label_b)],
            batch_b=batch_b,
            gpus_b=int(row["scale_factor_b"]),
        )
        ta, tb = float(row["steps_per_s_a"]), float(row["steps_per_s_b"])
        table[key] = (ta, tb)
        table.setdefault(key.swapped(), (tb, ta))
    return table
