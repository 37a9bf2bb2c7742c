"""The package's own structure: its layers hold (docs/contributing.rst).

The import graph is read from the source with :mod:`ast`, so that every
import counts wherever it is written: at the top of a module, or lazily
inside a function (a lazy import hides a cycle from the interpreter, not from
the design). A module's imports are the modules it names; importing
``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``, but that is the
package loading its parts, not a dependency of the module, so it is not
counted.
"""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sklearn_calib
from sklearn_calib.utils.discovery import all_calibrators

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sklearn_calib"


def _module_files():
    """``{dotted module name: (path, is_package)}`` of every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


MODULES = _module_files()


def _imports(module):
    """``(imported module, line)`` of every import statement of ``module``.

    Names of other packages (numpy, torch, ...) are kept as written; names
    inside ``sklearn_calib`` are resolved to the module they load: ``from
    .metrics import _proper`` is the submodule ``sklearn_calib.metrics._proper``,
    ``from .metrics import log_loss`` the package ``sklearn_calib.metrics``.
    """
    path, is_package = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append(
                    (submodule if submodule in MODULES else target, node.lineno)
                )
    return found


def _internal(name):
    """The module of ``sklearn_calib`` that an imported name loads, or None."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def import_graph():
    """``{module: {imported module of the package: first line}}``."""
    graph = {}
    for module in MODULES:
        edges = {}
        for name, line in _imports(module):
            target = _internal(name)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def find_cycle(graph):
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def reachable(graph, start):
    """``{module: the module that imports it}`` for every module ``start`` reaches."""
    parent = {start: None}
    todo = [start]
    while todo:
        node = todo.pop()
        for nxt in graph[node]:
            if nxt not in parent:
                parent[nxt] = node
                todo.append(nxt)
    return parent


def _describe(cycle, graph):
    return (
        " -> ".join(
            f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)
        )
        + f" -> {cycle[-1]}"
    )


def test_parser_sees_top_level_and_lazy_imports():
    # The parser is what the other tests stand on: check it on known imports.
    graph = import_graph()
    assert "sklearn_calib.base" in graph["sklearn_calib"]
    # metrics/__init__ imports its submodules by relative name.
    assert "sklearn_calib.metrics._proper" in graph["sklearn_calib.metrics"]
    # A lazy import inside a function counts (the scorer table, read by the
    # persistence helpers only when they run).
    assert "sklearn_calib.metrics._scorer" in graph["sklearn_calib.utils.persistence"]
    # A cycle is found, and reported as a path.
    toy = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert find_cycle(toy) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_no_import_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + _describe(cycle, graph)


def test_only_the_torch_layer_imports_torch():
    offenders = [
        f"{module} (line {line})"
        for module in MODULES
        if not module.startswith("sklearn_calib._torch")
        for name, line in _imports(module)
        if name == "torch" or name.startswith("torch.")
    ]
    assert not offenders, "torch imported outside sklearn_calib/_torch/: " + ", ".join(
        offenders
    )


def _calibrator_modules():
    """Modules that define a public estimator built on others or a calibrator."""
    classes = [cls for _, cls in all_calibrators()]
    classes += [sklearn_calib.CalibratedClassifier, sklearn_calib.CalibratorSelector]
    return {cls.__module__ for cls in classes}


def test_base_imports_no_calibrator():
    # Directly or through any chain of imports: the base class routes, and
    # knows no subclass.
    graph = import_graph()
    parent = reachable(graph, "sklearn_calib.base")
    calibrators = _calibrator_modules()
    assert "sklearn_calib.base" not in calibrators
    found = sorted(calibrators & set(parent))
    chains = []
    for module in found:
        chain = [module]
        while parent[chain[-1]] is not None:
            chain.append(parent[chain[-1]])
        chains.append(" -> ".join(reversed(chain)))
    assert not chains, "base.py reaches calibrator modules: " + "; ".join(chains)


PUBLIC_MODULES = [
    "sklearn_calib",
    "sklearn_calib.metrics",
    "sklearn_calib.conformal",
    "sklearn_calib.selective",
    "sklearn_calib.display",
    "sklearn_calib.chunked",
    "sklearn_calib.datasets",
    "sklearn_calib.utils.discovery",
    "sklearn_calib.utils.persistence",
]


def test_importing_the_package_loads_neither_torch_nor_matplotlib():
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in PUBLIC_MODULES)
        + "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --- names the documentation imports ----------------------------------------------

DOC_FILES = sorted(
    [ROOT / "README.md"]
    + list((ROOT / "docs").rglob("*.rst"))
    + list((ROOT / "docs").rglob("*.md"))
    + list((ROOT / "docs").glob("*.py"))
    + list((ROOT / "examples").rglob("*.py"))
    + list((ROOT / "examples").rglob("*.rst"))
)
_PROMPT = re.compile(r"^(\s*)(?:>>>|\.\.\.)(?: |$)", re.MULTILINE)
_FROM_IMPORT = re.compile(
    r"\bfrom\s+(sklearn_calib(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n]*(?:\\\n[^\n]*)*)"
)
_IMPORT = re.compile(r"^\s*import\s+(sklearn_calib(?:\.\w+)*)", re.MULTILINE)


def documented_imports(text):
    """``(module, name)`` of every ``sklearn_calib`` import in ``text``.

    Reads imports wherever they are written: code blocks of reStructuredText
    and Markdown, doctest lines (``>>>`` and ``...`` prompts), scripts, and
    parenthesised or continued lines.
    """
    text = _PROMPT.sub(r"\1", text)
    found = [(m[1], "") for m in _IMPORT.finditer(text)]  # import a.b
    for match in _FROM_IMPORT.finditer(text):
        names = match[2].split("#")[0] if "(" not in match[2] else match[2]
        names = re.sub(r"#[^\n]*", "", names).strip("()\\ \n")
        for part in re.split(r"[,\n\\]", names):
            name = part.split(" as ")[0].strip(" ()")
            if re.fullmatch(r"[A-Za-z_]\w*", name):
                found.append((match[1], name))
    return found


def all_documented_imports():
    return sorted(
        {
            (module, name, path.relative_to(ROOT).as_posix())
            for path in DOC_FILES
            for module, name in documented_imports(path.read_text(encoding="utf-8"))
        }
    )


def test_documented_import_parser():
    text = (
        "   from sklearn_calib import (DirichletCalibration, HistogramBinning,\n"
        "                              SMART)  # three\n"
        ">>> from sklearn_calib.metrics import log_loss as nll, brier_score\n"
        ">>> from sklearn_calib.metrics import (\n"
        "...     expected_calibration_error,\n"
        "... )\n"
        "import sklearn_calib.chunked\n"
        "from sklearn_calib.display import ReliabilityDisplay  # a comment, here\n"
    )
    assert documented_imports(text) == [
        ("sklearn_calib.chunked", ""),
        ("sklearn_calib", "DirichletCalibration"),
        ("sklearn_calib", "HistogramBinning"),
        ("sklearn_calib", "SMART"),
        ("sklearn_calib.metrics", "log_loss"),
        ("sklearn_calib.metrics", "brier_score"),
        ("sklearn_calib.metrics", "expected_calibration_error"),
        ("sklearn_calib.display", "ReliabilityDisplay"),
    ]
    # The documentation's own imports are found: each page kind contributes.
    sources = {source.split("/")[0] for _, _, source in all_documented_imports()}
    assert {"README.md", "docs", "examples"} <= sources


@pytest.mark.parametrize(
    "module, name, source",
    [
        pytest.param(
            *item, id=f"{item[2]}:{item[0]}" + (f".{item[1]}" if item[1] else "")
        )
        for item in all_documented_imports()
    ],
)
def test_documented_import_works(module, name, source):
    imported = importlib.import_module(module)
    if name:
        assert hasattr(imported, name) or importlib.util.find_spec(
            f"{module}.{name}"
        ), f"{source}: `from {module} import {name}` fails"
