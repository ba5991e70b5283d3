"""planner/ and profiles/ stay pure (README.md "Layout") and the packages import one way, in
layers: checked by reading their sources."""

import ast
import sys
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


# -- the import graph: one-way layers ---------------------------------------------------------

PACKAGES = ("planner", "profiles", "slurm_plugin", "wrapper")
# The layers, lowest first. A module imports modules of its own layer and of the layers below
# it, never above, with no exception: planner.core is the shared vocabulary (errors, field
# readers, execution plans, host lists, the data model and its codec, the plan-file document),
# which imports only the standard library; profiles (what is known of each job's speed) builds
# on it; the rest of planner (the pure scheduling rounds) plans with what profiles knows;
# wrapper (the job side, mosaic-run) reads the plans; slurm_plugin (the side effects: the
# controller, the CLI) uses them all. A module belongs to the layer of the longest name in
# LAYERS it starts with.
LAYERS = ("planner.core", "profiles", "planner", "wrapper", "slurm_plugin")
CORE = LAYERS[0]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


SOURCES = {
    _module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts
}


def _runtime_tree(path: Path) -> ast.Module:
    """``path`` parsed, less what only type checkers read (under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    return tree


def _lazy_names() -> dict[str, str]:
    """``package.name`` -> the module a package's ``__init__`` loads it from on first use
    (PEP 562: the ``_HOME`` table beside its ``__getattr__``, as in planner/__init__.py)."""
    lazy: dict[str, str] = {}
    for name, path in SOURCES.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_HOME" for t in node.targets):
                lazy.update({f"{name}.{k}": v for k, v in ast.literal_eval(node.value).items()})
    return lazy


LAZY = _lazy_names()


def _imported(name: str, path: Path) -> set[str]:
    """Every module name ``path`` (module ``name``) imports when it runs, the standard
    library's included; relative imports resolved, and a package's lazily loaded name
    (``from planner import plan_round``, ``planner.plan_round``) as the module it comes from."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    imported: set[str] = set()
    attributes: set[str] = set()
    for node in ast.walk(_runtime_tree(path)):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] if node.level else [])
            module = ".".join(p for p in (base, node.module or "") if p)
            imported.add(module)
            imported.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attributes.add(f"{node.value.id}.{node.attr}")
    return {LAZY.get(m, m) for m in imported | (attributes & LAZY.keys())}


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of the four packages it imports when it runs (its own package's
    included)."""
    graph: dict[str, set[str]] = {}
    for name, path in SOURCES.items():
        imports = {m for m in _imported(name, path) if m.split(".")[0] in PACKAGES}
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parents = {".".join(m.split(".")[:k]) for m in imports for k in range(1, m.count(".") + 1)}
        graph[name] = {m for m in imports | parents if m in SOURCES and m != name}
    return graph


GRAPH = _graph()


def _layer(module: str) -> int:
    """The layer of ``module``: that of the longest name in LAYERS it is or starts with; a
    package's ``__init__`` runs whenever any module under it is imported, so it belongs to the
    lowest layer of those (``planner``, the package, is in planner.core's layer)."""
    under = [m for m in SOURCES if m == module or m.startswith(module + ".")]

    def own(m: str) -> int:
        return max(
            (i for i, top in enumerate(LAYERS) if m == top or m.startswith(top + ".")),
            key=lambda i: len(LAYERS[i]),
        )

    return min(own(m) for m in under)


def test_every_module_imports_only_its_layer_and_those_below():
    wrong = sorted(
        f"{src} (layer {LAYERS[_layer(src)]}) imports {dst} (layer {LAYERS[_layer(dst)]})"
        for src, targets in GRAPH.items()
        for dst in targets
        if _layer(dst) > _layer(src)
    )
    assert wrong == []


def test_the_scan_sees_every_layer_and_the_imports_between_them(tmp_path):
    assert {LAYERS[_layer(m)] for m in SOURCES} == set(LAYERS)
    assert _layer("planner") == _layer("planner.core.model") == 0 < _layer("planner.pipeline")
    assert "planner.core.errors" in GRAPH["planner.core.fields"]
    assert {"planner", "planner.core", "planner.core.model"} <= GRAPH["planner.pipeline"]
    assert any(d.startswith("profiles") for s in GRAPH if s.startswith("planner.") for d in GRAPH[s])
    # A name planner/__init__.py loads on first use counts as an import of its home module,
    # and a relative import as the module it names.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import planner\nfrom planner import plan_round\nfrom .fields import Fields\nplanner.preset()\n"
    )
    imported = _imported("planner.core.probe", probe)
    assert {"planner.pipeline", "planner.config", "planner.core.fields"} <= imported


def _vocabulary(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def test_the_vocabulary_imports_only_the_standard_library_and_itself():
    # What runs when planner.core is imported: its modules and planner/__init__.py (which
    # loads its names only on first use, and imports nothing of planner when it runs).
    runs = {m: p for m, p in SOURCES.items() if m == "planner" or _vocabulary(m)}
    vocabulary = ("errors", "fields", "execplan", "hostlist", "model", "codec", "plandoc")
    assert {"planner", CORE} | {f"{CORE}.{m}" for m in vocabulary} <= runs.keys()
    wrong = sorted(
        f"{name} imports {m}"
        for name, path in runs.items()
        for m in _imported(name, path)
        if not _vocabulary(m) and m.split(".")[0] not in sys.stdlib_module_names
    )
    assert wrong == []


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
