"""What CI says is what ran: under CI=true a `realbuild` or `cell` test that skips fails, keeping
its reason (conftest's pytest_runtest_makereport); off CI it still skips. Shown on a small test
file run by a real pytest whose conftest takes the suite's hook from tests/conftest.py. And a CUDA
12.4 toolkit whose nvcc does not run is broken, not unreachable: it fails, never skips."""

from __future__ import annotations

import sys

import cuda12_toolkit
import pytest
from conftest import TESTS, clean_env, run

CONFTEST = f"""
import importlib.util
import sys

_spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
_suite = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_runtest_makereport = _suite.pytest_runtest_makereport
"""
TESTS_FILE = """
import pytest

@pytest.mark.realbuild
def test_compiles():
    pytest.skip("no nvcc 12.4 here")

@pytest.mark.cell(flavour="FA2", torch="2.9.1+cu128", nvcc="12.4", abi="TRUE", stage="compiled")
@pytest.mark.skipif(True, reason="needs the FA3 trees")
def test_a_cell():
    pass

def test_plain():
    pytest.skip("an ordinary skip")

@pytest.mark.realbuild
@pytest.mark.xfail(reason="known", run=False)
def test_expected_to_fail():
    pass

@pytest.mark.realbuild
def test_runs():
    pass
"""


def _pytest(tmp_path, ci: str | None):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cells.py").write_text(TESTS_FILE)
    env = {k: v for k, v in clean_env().items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_cells.py"],
        check=False,
        cwd=tmp_path,
        env=env,
    )


def test_in_ci_a_skipped_realbuild_or_cell_test_fails_naming_why(tmp_path):
    proc = _pytest(tmp_path, "true")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # a skip in setup (skipif, a fixture's) fails as an error, one in the call as a failure
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed" in out and " 1 error " in out, out
    assert "FAILED test_cells.py::test_compiles" in out
    assert "ERROR test_cells.py::test_a_cell" in out
    assert "a realbuild test did not run in CI (CI=true), which may not skip it" in out
    assert "Skipped: no nvcc 12.4 here" in out
    assert "a cell test did not run in CI" in out and "needs the FA3 trees" in out
    assert "SKIPPED [1] test_cells.py:" in out and "an ordinary skip" in out


def test_off_ci_they_skip_saying_why(tmp_path):
    proc = _pytest(tmp_path, "false")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "1 passed, 3 skipped, 1 xfailed" in out, out
    assert "no nvcc 12.4 here" in out and "needs the FA3 trees" in out


def test_an_assembled_nvcc_that_does_not_run_fails_rather_than_skips(tmp_path):
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'nvcc: libcudart.so.12: cannot open' >&2\nexit 127\n")
    nvcc.chmod(0o755)
    with pytest.raises(AssertionError, match=r"nvcc --version exited 127: nvcc: libcudart"):
        cuda12_toolkit._nvcc_release(tmp_path)
    nvcc.write_bytes(b"\x7fELF not a program")
    with pytest.raises(AssertionError, match="does not run"):
        cuda12_toolkit._nvcc_release(tmp_path)
