"""The test suite's shape (docs/development.md, "Tiers"), checked on its files: tests/unit mirrors
fa_backend's subpackages, test file names are unique across the tiers, there is no __init__.py,
and every module of the pipeline is imported by a test of its own tier's choosing: a unit test,
or for a module whose functions start processes themselves, an integration test (named below)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, TESTS, TIERS

PACKAGE = REPO / "fa_backend"
# pipeline modules whose own functions start a process (a probe), so that their direct tests are
# integration tests, and the file that has them
DIRECT_INTEGRATION_TESTS = {
    # fingerprint() and provenance() run `c++ --version` and `unshare --net true` each time
    "fa_backend.pipeline._provenance": "integration/test_provenance.py",
}


def _test_files() -> list[Path]:
    return [p for tier in TIERS for p in (TESTS / tier).rglob("test_*.py")]


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("fa_backend")
        ):
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_unit_tests_mirror_the_subpackages():
    subpackages = {
        p.relative_to(PACKAGE) for p in PACKAGE.rglob("*") if (p / "__init__.py").is_file()
    }
    unit = TESTS / "unit"
    # the directories that hold tests (a directory of recorded data beside them is not one)
    directories = {p.parent.relative_to(unit) for p in unit.rglob("test_*.py")} - {Path()}
    assert directories <= subpackages, directories - subpackages


def test_test_file_names_are_unique_and_there_is_no_init_py():
    names = Counter(p.name for p in _test_files())
    assert not [n for n, count in names.items() if count > 1]
    assert not [p for p in TESTS.rglob("__init__.py") if "packages" not in p.parts]


@pytest.mark.parametrize(
    "module",
    sorted(
        ".".join(p.relative_to(REPO).with_suffix("").parts)
        for p in (PACKAGE / "pipeline").glob("_*.py")
        if p.name != "__init__.py"
    ),
)
def test_every_pipeline_module_has_direct_tests(module):
    where = DIRECT_INTEGRATION_TESTS.get(module)
    files = [TESTS / where] if where else list((TESTS / "unit").rglob("test_*.py"))
    assert any(module in _imported(path) for path in files), (
        f"no {where or 'unit test'} imports {module}"
    )
