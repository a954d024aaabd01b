"""Logging (fa_backend/core/_log.py): every line goes to stderr with fa-shim's prefix (stdout is
the frontend's, or a command's JSON); debug lines only when verbose; commands that report rather
than build keep info lines quiet, never warnings."""

from __future__ import annotations

import pytest

from fa_backend.core import _log


@pytest.fixture(autouse=True)
def _not_verbose():
    yield
    _log.set_verbose(False)


def test_info_and_warnings_go_to_stderr_only(capsys):
    _log.info("building against torch 2.13.0")
    _log.warn("flash-attn 0.1.0 is not pinned")
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "fa-shim: building against torch 2.13.0\nfa-shim: warning: flash-attn 0.1.0 is not pinned\n"
    )


def test_debug_lines_only_when_verbose(capsys):
    _log.debug("hidden")
    _log.set_verbose(True)
    assert _log.is_verbose()
    _log.debug("shown")
    assert capsys.readouterr().err == "fa-shim: shown\n"


def test_quiet_hides_info_not_warnings_and_ends_with_its_block(capsys):
    with _log.quiet():
        _log.info("using nvcc ...")
        _log.warn("still said")
    _log.info("said again")
    assert capsys.readouterr().err == "fa-shim: warning: still said\nfa-shim: said again\n"
