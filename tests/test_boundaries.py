"""planner/ and profiles/ stay pure (STYLE.md "Boundaries"), checked by reading their sources."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = sorted(p for pkg in ("planner", "profiles") for p in (ROOT / pkg).rglob("*.py"))
FORBIDDEN_MODULES = {
    "subprocess",
    "time",
    "datetime",
    "socket",
    "shutil",
    "tempfile",
    "multiprocessing",
    "threading",
}
FORBIDDEN_CALLS = {"print", "open", "exec", "eval"}
FORBIDDEN_ATTRS = {"system", "popen", "basicConfig", "write_text", "write_bytes", "mkdir", "unlink", "remove"}


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_packages_do_no_io_and_read_no_clock(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            problems += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] in FORBIDDEN_MODULES
        ):
            problems.append(node.module)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                problems.append(f"{f.id}()")
            if isinstance(f, ast.Attribute) and f.attr in FORBIDDEN_ATTRS:
                problems.append(f".{f.attr}()")
    assert not problems, f"{path.relative_to(ROOT)} uses {problems}"


def test_the_scan_finds_something_to_check():
    assert len(PURE) > 20
