"""The torch x CUDA x ABI table of docs/reference/versions.md is made from the tests' own
`pytest.mark.cell` marks (docs/generate.py, checked current by tests/integration/
test_docs_build.py): each mark is whole, names a stage the page explains, sits on a test of a
tier that runs real programs, and names a torch a venv of the suite really installs."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "docs"))
import generate

# the torch each of the suite's CUDA torch venvs installs (conftest) and the quick start's
INSTALLED = {
    "2.11.0+cu130": "torch==2.11.0",
    "2.14.1+cu130": "torch==2.14.1",
    "2.6.0+cu124": "torch==2.6.0",
    "2.9.1+cu128": "torch==2.9.1",
}


def test_every_cell_mark_is_whole_and_names_a_stage_and_an_installed_torch():
    cells = generate.cells()
    assert {c["stage"] for c in cells} == set(generate.STAGES)
    conftest = (REPO / "tests").rglob("*.py")
    sources = "\n".join(p.read_text() for p in conftest)
    for cell in cells:
        assert set(cell) == {"flavour", "torch", "nvcc", "abi", "stage", "test"}, cell
        assert cell["test"].startswith(("tests/e2e/", "tests/integration/")), cell
        assert f'"{INSTALLED[cell["torch"]]}"' in sources, cell


def test_the_untested_cells_say_why():
    for cell in generate.UNTESTED:
        assert cell["why"] and cell["torch"] not in INSTALLED
