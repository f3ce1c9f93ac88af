"""Sphinx configuration of the cory docs site: ``sphinx-build -W -b html docs docs/_build/html`` (or
``make -C docs html``). Pages are Markdown (MyST); the environment card, the API reference and the option tables
are rendered from the code at every build (``_ext/cory_docs.py``), so no page repeats them by hand."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path[:0] = [str(REPO), str(DOCS / "_ext")]
os.environ.setdefault("OMP_NUM_THREADS", "1")  # importing torch for autodoc needs no threads

project = "cory"
author = "the cory authors"
copyright = "the cory authors, Apache-2.0"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "cory_docs",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Markdown: `$...$` maths, definition lists, heading anchors for links like page.md#a-section, ::: fences
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist", "attrs_inline"]
myst_heading_anchors = 4

# autodoc: Google-style docstrings (napoleon), members in source order, signatures without type noise
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True
default_role = "py:obj"  # `name` in a docstring links to that object when Sphinx knows it
# Optional libraries the adapters import: mocked only where they are not installed
autodoc_mock_imports = [m for m in ("stable_baselines3", "sb3_contrib", "torchrl", "tensordict")
                        if importlib.util.find_spec(m) is None]

html_theme = "furo"
html_title = "cory"
html_static_path = ["_static"]
html_css_files = ["cory.css"]
pygments_style = "friendly"
pygments_dark_style = "monokai"
