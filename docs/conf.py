"""Sphinx configuration of fa-shim's documentation (Sphinx + MyST, as scikit-build-core's).

Build: `python3 -m sphinx -W --keep-going -n -b html docs docs/_build/html`
(tests/integration/test_docs_build.py runs it so). The pages are Markdown that also reads on
GitHub: links between pages are relative `page.md#anchor` links, which MyST checks
(`myst_heading_anchors`), and diagrams are ```mermaid blocks, which GitHub draws and
sphinxcontrib-mermaid leaves to the browser (no network at build time). Generated pages:
`python3 docs/generate.py`; pictures: `python3 bench/plots.py`.
"""

from __future__ import annotations

project = "fa-shim"
author = "fa-shim contributors"
copyright = "fa-shim contributors"

extensions = ["myst_parser", "sphinxcontrib.mermaid"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Raw run data lives in bench/results/, outside the site.
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Strictness: every `page.md#anchor` link must name a heading of that page (GitHub's slugs).
myst_heading_anchors = 4
myst_fence_as_directive = ["mermaid"]
myst_enable_extensions = ["colon_fence", "deflist"]
nitpicky = True

html_theme = "furo"
html_title = "fa-shim"
html_static_path: list[str] = []
mermaid_output_format = "raw"  # drawn by the browser: no mermaid-cli, no network when building
