"""Shared set-up for the job-side tests."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# DeepSpeed JIT-compiles its CPU communication op on first use (~35 s); keep the build in the
# virtual environment so every later test run, and every rank, reuses it.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".venv" / "torch-extensions"))
