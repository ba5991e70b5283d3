"""Coverage-guided fuzzing of one Mosaic parser with atheris (optional; CI uses hypothesis).

    .venv/bin/pip install atheris
    .venv/bin/python contrib/fuzz/atheris_fuzz.py TARGET [libFuzzer options: -runs=N, -max_total_time=S]
    .venv/bin/python contrib/fuzz/atheris_fuzz.py --list

TARGET is a name from ``tests/fuzz/targets.py`` (``directives``, ``snapshot``, ``heartbeats``,
...). Run from the repository root. The seeds are written to a corpus directory
(``out/fuzz-corpus/TARGET``, passed to libFuzzer first) so that coverage starts from valid
input. A finding (any exception but the parser's own error) stops the run with the input
saved by libFuzzer as ``crash-*``; findings already reported in modules the test suite does
not own (``Target.known``) are skipped.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import atheris

    with atheris.instrument_imports():
        from tests.fuzz.targets import TARGETS, KnownBug

    if len(sys.argv) < 2 or sys.argv[1] in {"-h", "--help", "--list"}:
        print(__doc__)
        print("targets:", ", ".join(sorted(TARGETS)))
        raise SystemExit(0 if len(sys.argv) >= 2 else 2)
    name = sys.argv[1]
    if name not in TARGETS:
        raise SystemExit(f"unknown target {name!r}; known: {', '.join(sorted(TARGETS))}")
    target = TARGETS[name]
    corpus = ROOT / "out" / "fuzz-corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    for k, seed in enumerate(target.seeds):
        (corpus / f"seed-{k}").write_bytes(seed if isinstance(seed, bytes) else seed.encode("utf-8"))

    def one(data: bytes) -> None:
        value = data if target.kind == "bytes" else data.decode("utf-8", "replace")
        with contextlib.suppress(KnownBug):  # reported in a module the tests do not own
            target.check(value)

    atheris.Setup([sys.argv[0], *sys.argv[2:], str(corpus)], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
