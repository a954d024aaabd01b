"""What CI says is what ran: under CI=true a `realbuild` or `cell` test that skips or xfails, at
any level, fails, keeping its reason (conftest's pytest_runtest_makereport and
pytest_make_collect_report); off CI it still skips. Shown on small test files run by a real pytest
whose conftest takes the suite's hooks from tests/conftest.py. And a CUDA 12.4 toolkit whose nvcc
does not run is broken, not unreachable: it fails, never skips."""

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
pytest_make_collect_report = _suite.pytest_make_collect_report
"""
CELL = 'pytest.mark.cell(flavour="FA2", torch="2.9.1+cu128", nvcc="12.4", abi="TRUE")'
# every level a test's skip or xfail can come from; each test's name says which
FILES = {
    "test_items.py": f"""
import pytest

@pytest.fixture
def toolkit():
    pytest.skip("no nvcc 12.4 here")

@pytest.fixture(scope="module")
def trees():
    pytest.skip("no FA3 trees here")

@pytest.mark.realbuild
def test_skip_in_call():
    pytest.skip("a skip in the call")

@pytest.mark.realbuild
def test_skip_in_fixture(toolkit):
    pass

@{CELL}
def test_skip_in_module_fixture(trees):
    pass

@{CELL}
@pytest.mark.skipif(True, reason="a skipif mark")
def test_skipif_mark():
    pass

@pytest.mark.realbuild
@pytest.mark.xfail(reason="a strict xfail", strict=True)
def test_xfail_strict():
    assert False

@pytest.mark.realbuild
@pytest.mark.xfail(reason="an xfail that fails")
def test_xfail_fails():
    assert False

@pytest.mark.realbuild
@pytest.mark.xfail(reason="an xfail that passes")
def test_xfail_passes():
    pass

@pytest.mark.realbuild
@pytest.mark.xfail(reason="an xfail not run", run=False)
def test_xfail_not_run():
    pass

@pytest.mark.realbuild
def test_xfail_called():
    pytest.xfail("an xfail call")

@pytest.mark.realbuild
@pytest.mark.skip(reason="a class's skip mark")
class TestClassSkip:
    def test_in_class(self):
        pass

class TestClassPytestmark:
    pytestmark = [{CELL}, pytest.mark.skipif(True, reason="a class's pytestmark")]

    def test_in_class(self):
        pass

@pytest.mark.realbuild
class TestSetupClass:
    @classmethod
    def setup_class(cls):
        pytest.skip("a setup_class skip")

    def test_in_class(self):
        pass

@pytest.mark.realbuild
def test_runs():
    pass

def test_plain_skip():
    pytest.skip("an ordinary skip")

@pytest.mark.xfail(reason="an ordinary xfail")
def test_plain_xfail():
    assert False
""",
    "test_module_pytestmark.py": """
import pytest

pytestmark = [pytest.mark.realbuild, pytest.mark.skipif(True, reason="a module's pytestmark")]

def test_in_module():
    pass
""",
    # skipped as they are imported: their tests and the tests' marks are never made
    "test_module_skip.py": """
import pytest

pytest.skip("a module-level skip", allow_module_level=True)
pytestmark = pytest.mark.realbuild

def test_in_module():
    pass
""",
    "test_module_importorskip.py": f"""
import pytest

pytest.importorskip("fa_shim_no_such_module")

@{CELL}
def test_in_module():
    pass
""",
    "test_module_skip_plain.py": """
import pytest

pytest.skip("an ordinary module's skip", allow_module_level=True)

def test_in_module():
    pass
""",
}
# under CI=true: how each marked test ends (a failure in the call, an error in setup or
# collection), and the reason it keeps
REFUSED = {
    "FAILED test_items.py::test_skip_in_call": ("realbuild", "Skipped: a skip in the call"),
    "ERROR test_items.py::test_skip_in_fixture": ("realbuild", "Skipped: no nvcc 12.4 here"),
    "ERROR test_items.py::test_skip_in_module_fixture": ("cell", "Skipped: no FA3 trees here"),
    "ERROR test_items.py::test_skipif_mark": ("cell", "Skipped: a skipif mark"),
    "FAILED test_items.py::test_xfail_strict": ("realbuild", "xfail (a strict xfail)"),
    "FAILED test_items.py::test_xfail_fails": ("realbuild", "xfail (an xfail that fails)"),
    "FAILED test_items.py::test_xfail_passes": ("realbuild", "xfail (an xfail that passes)"),
    "ERROR test_items.py::test_xfail_not_run": ("realbuild", "xfail ([NOTRUN] an xfail not run)"),
    "FAILED test_items.py::test_xfail_called": ("realbuild", "xfail (an xfail call)"),
    "ERROR test_items.py::TestClassSkip::test_in_class": ("realbuild", "Skipped: a class's skip"),
    "ERROR test_items.py::TestClassPytestmark::test_in_class": (
        "cell",
        "Skipped: a class's pytestmark",
    ),
    "ERROR test_items.py::TestSetupClass::test_in_class": ("realbuild", "Skipped: a setup_class"),
    "ERROR test_module_pytestmark.py::test_in_module": ("realbuild", "Skipped: a module's"),
    "ERROR test_module_skip.py": (
        "realbuild",
        "its module skipped as it was imported: Skipped: a module-level skip",
    ),
    "ERROR test_module_importorskip.py": (
        "cell",
        "its module skipped as it was imported: Skipped: could not import 'fa_shim_no_such_module'",
    ),
}
REFUSAL = " - a {} test did not run in CI (CI=true), which may not skip or xfail it: {}"


def _pytest(tmp_path, ci: str | None, *args: str):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    # wide enough that the short summary keeps each reason whole
    env = {k: v for k, v in clean_env(COLUMNS="400").items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *args],
        check=False,
        cwd=tmp_path,
        env=env,
    )


def test_in_ci_a_realbuild_or_cell_test_that_skips_or_xfails_at_any_level_fails_naming_why(
    tmp_path,
):
    proc = _pytest(tmp_path, "true", "--continue-on-collection-errors")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    for node, (mark, reason) in REFUSED.items():
        assert node + REFUSAL.format(mark, reason) in out, f"{node} not refused:\n{out}"
    # the unmarked tests and module still skip and xfail; the marked test that runs passes
    assert "5 failed, 1 passed, 2 skipped, 1 xfailed, " in out and " 10 errors " in out, out
    assert "PASSED test_items.py::test_runs" in out
    assert "XFAIL test_items.py::test_plain_xfail - an ordinary xfail" in out
    assert "an ordinary skip" in out and "an ordinary module's skip" in out


def test_in_ci_a_module_that_skips_as_it_is_imported_stops_the_run(tmp_path):
    proc = _pytest(tmp_path, "true", "test_module_skip.py", "test_module_skip_plain.py")
    out = proc.stdout
    assert proc.returncode == 2, out + proc.stderr  # pytest's "interrupted": nothing else ran
    assert "Interrupted: 1 error during collection" in out, out
    node = "ERROR test_module_skip.py"
    assert node + REFUSAL.format(*REFUSED[node]) in out, out


def test_off_ci_they_skip_and_xfail_saying_why(tmp_path):
    proc = _pytest(tmp_path, "false")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "1 passed, 12 skipped, 5 xfailed, 1 xpassed" in out, out
    for reason in ("no nvcc 12.4 here", "a module-level skip", "fa_shim_no_such_module"):
        assert reason in out, reason


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
