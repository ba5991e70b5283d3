"""planner/ and profiles/ stay pure (README.md "Layout"), checked by reading their sources."""

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


# -- the import graph between the packages ---------------------------------------------------

PACKAGES = ("planner", "profiles", "slurm_plugin", "wrapper")
# Which package may import which. planner plans with what profiles knows; profiles builds on
# planner's leaf modules only (LEAVES: errors, field readers, execution plans, host lists,
# which import nothing else), so the two form no cycle; slurm_plugin (the side effects) uses
# them all, the plan-file document and paths included (wrapper.plandoc); the job side
# (wrapper) needs only planner: it never imports the controller's package.
ALLOWED = {
    "planner": {"profiles"},
    "profiles": {"planner"},
    "slurm_plugin": {"planner", "profiles", "wrapper"},
    "wrapper": {"planner"},
}
LEAVES = {"planner.errors", "planner.fields", "planner.execplan", "planner.hostlist"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Modules of the four packages that ``path`` imports when it runs (its own package's
    included; what only type checkers read, under ``if TYPE_CHECKING:``, is not imported)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(n for n in names if n.split(".")[0] in PACKAGES)
    return found


def _graph() -> dict[str, set[str]]:
    sources = {
        _module_name(p): p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parents = {".".join(m.split(".")[:k]) for m in _imports(path) for k in range(1, m.count(".") + 1)}
        graph[name] = {m for m in _imports(path) | parents if m in sources and m != name}
    return graph


GRAPH = _graph()


def test_packages_import_only_what_the_layering_allows():
    wrong = sorted(
        f"{src} imports {dst}"
        for src, targets in GRAPH.items()
        for dst in targets
        if src.split(".")[0] != dst.split(".")[0] and dst.split(".")[0] not in ALLOWED[src.split(".")[0]]
    )
    assert wrong == []


def test_profiles_builds_on_planners_leaf_modules_only_and_they_import_nothing_back():
    used = {dst for src, targets in GRAPH.items() if src.startswith("profiles") for dst in targets}
    assert {m for m in used if m.split(".")[0] == "planner"} - {"planner"} <= LEAVES
    for leaf in LEAVES:  # "planner" is its package's __init__, which imports nothing when run
        assert GRAPH[leaf] <= LEAVES | {"planner"}, f"{leaf} imports {GRAPH[leaf] - LEAVES}"
    assert GRAPH["planner"] == set()


def test_no_import_cycle_crosses_a_package():
    # A cycle between modules of different packages means the layering is broken somewhere.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    crossing: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len({m.split(".")[0] for m in component}) > 1:
                crossing.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert crossing == []


# -- one atomic write --------------------------------------------------------------------------

ATOMIC_WRITE = ROOT / "wrapper" / "atomic.py"


def _renames_or_temporaries(path: Path) -> list[str]:
    """The calls in ``path`` that replace a file by renaming (``os.replace``, ``Path.replace``:
    ``.replace`` with one argument, where ``str.replace`` takes two) or make a temporary file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            on_os = isinstance(node.func.value, ast.Name) and node.func.value.id == "os"
            if name in {"mkstemp", "NamedTemporaryFile"} or (
                name == "replace" and (on_os or len(node.args) + len(node.keywords) == 1)
            ):
                found.append(f"line {node.lineno}: .{name}()")
    return found


def test_files_are_replaced_atomically_in_one_place_only():
    # wrapper.atomic.write_atomic is the one atomic write (a temporary file beside the target,
    # fsynced, renamed over it); every writer uses it rather than its own copy.
    sources = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts]
    wrong = {
        str(p.relative_to(ROOT)): calls
        for p in sources
        if p != ATOMIC_WRITE and (calls := _renames_or_temporaries(p))
    }
    assert wrong == {}
    assert _renames_or_temporaries(ATOMIC_WRITE)  # the scan does find the one
