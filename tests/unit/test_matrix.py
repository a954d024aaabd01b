"""The torch x CUDA x ABI table of docs/reference/versions.md is made from the tests' own
`pytest.mark.cell` marks and the recorded run (docs/generate.py, checked current by
tests/integration/test_docs_build.py): each mark is whole, names a stage the page explains, sits
on a test of a tier that runs real programs, and its torch is the one a fixture of that test
installs (the `torch==X` of the venv fixture it depends on, followed through the fixtures; the
quick start's from the README line it runs). A cell reads its stage only where the recorded run
shows its test passing."""

from __future__ import annotations

import ast
import re
import sys
from functools import cache

from conftest import REPO, TESTS, quick_start_command
from packaging.version import Version

sys.path.insert(0, str(REPO / "docs"))
import generate

PIN = re.compile(r"torch==(\d[\w.]*)")


@cache
def _functions(path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _installed(test_file, function: str) -> set[str]:
    """The torch releases the fixtures (and helpers) `function` depends on install: every
    `torch==X` in their bodies, followed through their arguments and calls, in the test's own
    module then conftest; a call of quick_start_command() installs the README line's torch."""
    scopes = [_functions(test_file), _functions(TESTS / "conftest.py")]
    pins, seen, todo = set(), set(), [function]
    while todo:
        name = todo.pop()
        node = next((scope[name] for scope in scopes if name in scope), None)
        if node is None or name in seen:
            continue
        seen.add(name)
        todo += [a.arg for a in node.args.args]
        for inner in ast.walk(node):
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                pins |= set(PIN.findall(inner.value))
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name):
                todo.append(inner.func.id)
        if name == "quick_start_command":
            pins |= set(PIN.findall(quick_start_command()))
    return pins


@cache
def _cells() -> list[dict[str, str]]:
    return generate.cells()


def test_every_cell_mark_is_whole_and_names_a_stage():
    cells = _cells()
    assert {c["stage"] for c in cells} == set(generate.STAGES)
    marks = [
        node
        for path in TESTS.rglob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.cell"
    ]
    assert len(cells) == len(marks)  # every mark decorates a test function (none in pytestmark)
    for cell in cells:
        assert set(cell) == {"flavour", "torch", "nvcc", "abi", "stage", "test", "function"}
        assert cell["test"].startswith(("tests/e2e/", "tests/integration/")), cell


def test_each_cells_torch_is_the_one_its_fixtures_install():
    for cell in _cells():
        installed = _installed(REPO / cell["test"], cell["function"])
        assert Version(cell["torch"]).public in installed, (cell, installed)


def test_the_check_sees_a_venv_of_another_torch(tmp_path, monkeypatch):
    """The 2.9.1 venv switched to torch 2.11.0: its CUDA 12 cell no longer matches."""
    conftest = tmp_path / "conftest.py"
    text = (TESTS / "conftest.py").read_text()
    assert text.count('"torch==2.9.1"') == 1
    conftest.write_text(text.replace('"torch==2.9.1"', '"torch==2.11.0"'))
    monkeypatch.setattr(sys.modules[__name__], "TESTS", tmp_path)
    test_file = REPO / "tests" / "e2e" / "test_cuda12_builds.py"
    installed = _installed(test_file, "test_torch_2_9_1_cu128_for_the_l4")
    assert "2.9.1" not in installed and "2.11.0" in installed


def test_a_cell_reads_its_stage_only_where_its_test_passed():
    cell = {"test": "tests/e2e/test_x.py", "function": "test_y", "stage": "compiled"}
    passed = {"id": "tests/e2e/test_x.py::test_y[a]", "outcome": "passed"}
    assert generate.shown(cell, {"tests": [passed]}) is None
    failed = {**passed, "id": "tests/e2e/test_x.py::test_y[b]", "outcome": "failed"}
    assert generate.shown(cell, {"tests": [passed, failed]}) == "failed in the recorded run"
    skipped = {**passed, "outcome": "skipped"}
    assert generate.shown(cell, {"tests": [skipped]}) == "skipped in the recorded run"
    other = {**passed, "id": "tests/e2e/test_x.py::test_yz"}
    assert generate.shown(cell, {"tests": [other]}) == "not in the recorded run"
