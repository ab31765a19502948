"""Sphinx configuration: ``sphinx-build -W -b html docs docs/_build/html``."""

import structboost

project = "structboost"
author = "structboost developers"
copyright = "2026, structboost developers"
release = structboost.__version__
version = release

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
root_doc = "index"

# Markdown (MyST): GitHub-style anchors for the section links of the
# benchmark page, ```python fences as code blocks.
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# XGBCRFClassifier and DaskXGBCRFClassifier both document transitions_.
suppress_warnings = ["ref.python"]

html_theme = "pydata_sphinx_theme"
html_title = "structboost"
html_theme_options = {"navigation_with_keys": False}
templates_path = ["_templates"]


def _skip_routing_requests(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated ``set_*_request`` methods (metadata routing)."""
    return True if name.startswith("set_") and name.endswith("_request") else skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_routing_requests)
