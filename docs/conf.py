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
# Members inherited from structboost's own bases are listed (fit, predict,
# save_model, ...: the estimators inherit them); a default "inherited-members"
# of False would hide them. scikit-learn's own methods are left out below.
autodoc_default_options = {"members": True, "inherited-members": True}
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
    """Leave out scikit-learn's generated ``set_*_request`` methods and its inherited ones."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    module = getattr(obj, "__module__", None) or ""
    if what == "class" and module.startswith("sklearn"):
        return True  # get_params, set_params, get_metadata_routing: scikit-learn's own
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_routing_requests)
