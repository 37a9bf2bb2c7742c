"""Sphinx configuration of the sklearn-calib documentation.

Build (offline, warnings as errors)::

    python -m sphinx -W -b html docs docs/_build/html

The gallery runs every ``examples/plot_*.py`` on the logits bundled with the
package, so the build needs no download.
"""

import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sklearn_calib  # noqa: E402

project = "sklearn-calib"
author = "sklearn-calib developers"
copyright = "sklearn-calib developers"
release = sklearn_calib.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "gen_modules/backreferences/*.examples"]
root_doc = "index"
default_role = "literal"

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": True}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

html_theme = "pydata_sphinx_theme"
html_title = f"sklearn-calib {release}"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
# Keep the build offline: no web fonts, no external search services.
html_copy_source = False

sphinx_gallery_conf = {
    "examples_dirs": ["../examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    "backreferences_dir": "gen_modules/backreferences",
    "doc_module": ("sklearn_calib",),
    "reference_url": {"sklearn_calib": None},
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "write_computation_times": False,
    # A failing example fails the build.
    "only_warn_on_example_error": False,
}


# Reading order of the user guide. Every .rst file of docs/user_guide/ is
# listed in its toctree: those named here in this order, any other after
# them alphabetically, so a page added by another part of the project
# appears without editing the index (and a missing one is no error).
USER_GUIDE_ORDER = [
    "choosing",
    "methods",
    "smart",
    "classifier",
    "logits",
    "temperature",
    "metrics",
    "binning",
    "clinical_validation",
    "conformal",
    "decisions",
    "label_shift",
    "command_line",
    "datasets",
]
_USER_GUIDE_PLACEHOLDER = "   USER_GUIDE_PAGES"


def user_guide_pages(srcdir):
    folder = Path(srcdir) / "user_guide"
    present = {p.stem for p in folder.glob("*.rst")} - {"index"}
    ordered = [name for name in USER_GUIDE_ORDER if name in present]
    return ordered + sorted(present - set(ordered))


def _fill_user_guide_toctree(app, docname, source):
    if docname == "user_guide/index":
        entries = "\n".join(f"   {name}" for name in user_guide_pages(app.srcdir))
        source[0] = source[0].replace(_USER_GUIDE_PLACEHOLDER, entries)


def _skip_scikit_learn_members(app, what, name, obj, skip, options):
    """Document our own methods; leave those inherited from scikit-learn.

    ``get_params``, ``set_output``, ``score``, ``set_fit_request`` and friends
    are scikit-learn's, documented there; their docstrings point to labels of
    scikit-learn's documentation that do not exist here.
    """
    module = getattr(obj, "__module__", None) or ""
    if module == "sklearn" or module.startswith("sklearn."):
        return True
    return None


_SHAPE = re.compile(r"(of shape \()([^)]*)(\))")
_TRAILING_UNDERSCORE = re.compile(r"(?<![`\w])([A-Za-z]\w*_)(?![`\w])")


def _quote_fitted_names_in_shapes(app, what, name, obj, options, lines):
    """Quote names like ``n_features_in_`` inside "of shape (...)".

    In reStructuredText a word ending in an underscore is a hyperlink
    reference, so "ndarray of shape (n_features_in_,)" in a numpydoc type
    would be an error; scikit-learn writes these names in backquotes.
    """
    for i, line in enumerate(lines):
        lines[i] = _SHAPE.sub(
            lambda m: m[1] + _TRAILING_UNDERSCORE.sub(r"``\1``", m[2]) + m[3], line
        )


def setup(app):
    app.connect("source-read", _fill_user_guide_toctree)
    app.connect("autodoc-process-docstring", _quote_fitted_names_in_shapes)
    app.connect("autodoc-skip-member", _skip_scikit_learn_members)
