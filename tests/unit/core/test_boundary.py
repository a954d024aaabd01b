"""The one boundary (fa_backend/core/_failures.py): whatever fails behind a hook or a command
ends in one readable message on stderr and an exit status: 1 for a FaShimError, an OSError or
a failed helper program (each named with its fix), 130 for Ctrl-C; what succeeds passes
through untouched."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys

import pytest

from fa_backend.core import _failures
from fa_backend.core._errors import FaShimError
from fa_backend.core._failures import boundary


def _raising(exc: BaseException):
    @boundary
    def hook(*args, **kwargs):
        """A hook's docstring."""
        raise exc

    return hook


def _exit(hook, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        hook()
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is a frontend's (pip's) or a command's JSON
    return info.value.code, captured.err


def test_a_result_passes_through_and_the_hook_keeps_its_name():
    @boundary
    def build_wheel(directory, config_settings=None):
        """The hook."""
        return f"{directory}:{config_settings}"

    assert build_wheel("out", config_settings={"k": "v"}) == "out:{'k': 'v'}"
    assert build_wheel.__name__ == "build_wheel" and build_wheel.__doc__ == "The hook."


def test_a_fa_shim_error_is_its_message_and_status_1(capsys):
    error = FaShimError("the cause.", fix="the fix.", details="line 1\nline 2")
    code, err = _exit(_raising(error), capsys)
    assert code == 1
    assert err == "\n" + error.render() + "\n"
    assert err.count("fa-shim: error:") == 1 and "Traceback" not in err


def test_an_oserror_becomes_one_message_naming_the_path(capsys, tmp_path):
    exc = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "out" / "x.whl"))
    code, err = _exit(_raising(exc), capsys)
    assert code == 1
    assert err.strip() == _failures.from_oserror(exc).render()
    assert f"cannot write {tmp_path}" in err and "Read-only file system" in err


def test_a_full_disk_is_no_space_not_a_write_error(capsys, tmp_path):
    code, err = _exit(_raising(OSError(errno.ENOSPC, "No space left", str(tmp_path))), capsys)
    assert code == 1 and f"no space left on {tmp_path}" in err


def test_a_failed_helper_program_is_named_with_its_own_words(capsys):
    exc = subprocess.CalledProcessError(2, ["/usr/bin/ninja", "-t", "compdb"], stderr="bad file")
    code, err = _exit(_raising(exc), capsys)
    assert code == 1
    assert "the helper program ninja failed (exit status 2): `/usr/bin/ninja -t compdb`." in err
    assert "  bad file" in err  # its output, as details


def test_ctrl_c_is_status_130_and_one_line(capsys):
    code, err = _exit(_raising(KeyboardInterrupt()), capsys)
    assert code == _failures.INTERRUPTED_STATUS == 130
    assert err.strip() == "fa-shim: error: interrupted: nothing was published"


def test_other_exceptions_are_bugs_and_keep_their_traceback():
    with pytest.raises(ZeroDivisionError):
        _raising(ZeroDivisionError("a bug"))()


def test_a_closed_stderr_still_ends_in_the_exit_status(monkeypatch):
    """stderr is a pipe whose reader is gone (a frontend killed meanwhile): a real EPIPE."""
    read, write = os.pipe()
    os.close(read)
    closed = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stderr", closed)
    try:
        with pytest.raises(SystemExit) as info:
            _raising(FaShimError("the cause."))()
    finally:
        monkeypatch.undo()
        with contextlib.suppress(BrokenPipeError):
            closed.close()  # what the boundary could not write is still buffered
    assert info.value.code == 1 and info.value.__suppress_context__


def test_an_oserror_naming_no_file_is_told_against_the_working_directory(
    capsys, monkeypatch, tmp_path
):
    """os.getcwd() in a checkout removed under the run (what a re-sync or a clone over it does)
    names no file: the message names the directory the run started in and what happened to it;
    where the directory is still there, it is named as where fa-shim ran."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)

    @boundary
    def build_wheel():
        checkout.rmdir()
        os.getcwd()

    code, err = _exit(build_wheel, capsys)
    assert code == 1
    assert f"the working directory {checkout} was removed or replaced while fa-shim ran" in err
    assert "(No such file or directory, ENOENT)" in err and "nothing was published" in err
    monkeypatch.chdir(tmp_path)
    code, err = _exit(_raising(OSError(errno.EIO, "Input/output error")), capsys)
    assert "Input/output error (EIO); the system named no file" in err
    assert f"(fa-shim ran in {tmp_path})" in err


def test_after_a_wheel_was_published_no_error_says_nothing_was(capsys, tmp_path):
    cached = tmp_path / "wheels" / "k" / "x.whl"

    @boundary
    def build_wheel():
        _failures.published("the wheel cache", cached)
        with _failures.doing(f"copying the wheel into the output directory {tmp_path / 'out'}"):
            raise FileNotFoundError(
                errno.ENOENT, "No such file or directory", str(tmp_path / "out")
            )

    code, err = _exit(build_wheel, capsys)
    assert code == 1 and "nothing was published" not in err
    assert f"{tmp_path / 'out'} (ENOENT) while copying the wheel into the output directory" in err
    assert f"the wheel is in the wheel cache ({cached})" in err
    code, err = _exit(_raising(KeyboardInterrupt()), capsys)  # the next run starts afresh
    assert err.strip() == "fa-shim: error: interrupted: nothing was published"
