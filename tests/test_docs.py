"""The documentation lists every public name, and its sources are consistent.

Building the docs (``python -m sphinx -W -b html docs docs/_build/html``) is a
separate CI step; these checks are fast and catch a name added to the API but
forgotten in the reference.
"""

import importlib
import re
from pathlib import Path

import pytest

import sklearn_calib

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"


def documented_names():
    """Fully qualified names of the autosummary entries of docs/api.rst."""
    names = []
    module = None
    in_autosummary = False
    for line in (DOCS / "api.rst").read_text(encoding="utf-8").splitlines():
        if match := re.match(r"\.\. currentmodule:: (\S+)", line):
            module = match[1]
            in_autosummary = False
        elif line.startswith(".. autosummary::"):
            in_autosummary = True
        elif in_autosummary and line.strip() and not line.startswith(" "):
            in_autosummary = False
        elif in_autosummary and re.match(r"^   [A-Za-z_]\w*$", line):
            names.append(f"{module}.{line.strip()}")
    return names


def public_names():
    names = {
        f"sklearn_calib.{n}" for n in sklearn_calib.__all__ if not n.startswith("__")
    }
    try:
        metrics = importlib.import_module("sklearn_calib.metrics")
    except ImportError:
        metrics = None
    if metrics is not None:
        names |= {f"sklearn_calib.metrics.{n}" for n in getattr(metrics, "__all__", [])}
    try:
        importlib.import_module("sklearn_calib.display")
        names.add("sklearn_calib.display.ReliabilityDisplay")
    except ImportError:
        pass
    names |= {
        "sklearn_calib.datasets.load_logits",
        "sklearn_calib.datasets.list_logits",
    }
    return names


def resolve(qualified):
    module_name, _, attribute = qualified.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


def test_api_reference_lists_every_public_name():
    missing = sorted(public_names() - set(documented_names()))
    assert not missing, f"add to docs/api.rst: {missing}"


def test_api_reference_entries_exist():
    for qualified in documented_names():
        assert resolve(qualified) is not None, qualified


def test_api_reference_has_no_duplicates():
    names = documented_names()
    assert len(names) == len(set(names))


def test_documented_names_are_found_by_the_parser():
    # Guards the parser above: the reference must at least hold these.
    names = documented_names()
    assert "sklearn_calib.TemperatureScaling" in names
    assert "sklearn_calib.datasets.load_logits" in names


def test_public_names_have_docstrings():
    for qualified in sorted(public_names()):
        doc = resolve(qualified).__doc__ or ""
        assert doc.strip(), f"{qualified} has no docstring"


def test_user_guide_toctree_takes_every_page():
    conf = {"__file__": str(DOCS / "conf.py")}
    source = (DOCS / "conf.py").read_text(encoding="utf-8")
    # Only the helper is needed; executing conf.py would import Sphinx themes.
    helper = source[source.index("USER_GUIDE_ORDER = [") : source.index("def _fill_")]
    exec("from pathlib import Path\n" + helper, conf)
    pages = conf["user_guide_pages"](DOCS)
    on_disk = {p.stem for p in (DOCS / "user_guide").glob("*.rst")} - {"index"}
    assert set(pages) == on_disk
    assert pages[0] == "choosing"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_examples_are_gallery_scripts_on_bundled_data(path):
    text = path.read_text(encoding="utf-8")
    assert path.name.startswith("plot_"), "sphinx-gallery runs only plot_*.py"
    assert text.startswith('"""\n'), "a gallery script opens with its title docstring"
    assert "load_logits(" in text, "examples run on the bundled real logits"
    assert "shared/data" not in text and "../shared" not in text


def test_readme_figure_exists_and_has_its_script():
    png = DOCS / "images" / "reliability.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (DOCS / "make_readme_figure.py").is_file()
