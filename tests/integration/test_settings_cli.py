"""The settings on `python -m fa_backend`'s command line, in a real process: a -C without a value
is argparse's usage error (exit status 2), never a traceback; `prebuild` of an environment that
cannot run fa-shim names the install that lets it (issue 54's MX09). The settings model itself:
tests/unit/settings/test_settings.py; prebuild's builds: tests/e2e/test_prebuild.py."""

from __future__ import annotations


def test_a_command_line_setting_without_a_value_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "fa_backend", "prepare", "--build-dir", str(tmp_path), "-C", "foo"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'foo' is not KEY=VALUE (e.g. -C max-jobs=8)" in proc.stderr


def test_mx09_prebuild_of_an_environment_without_fa_shims_imports_names_the_install(
    tmp_path, host_venv, capsys
):
    import venv

    from fa_backend.cli import _main

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")  # no packaging, no torch
    bare = str(tmp_path / "bare" / "bin" / "python")
    row = _main.prebuild_one(bare, {"wheel-cache-dir": str(tmp_path / "wc")})
    assert (row.result, row.reason) == (
        "failed",
        f"{bare} cannot run fa-shim: ModuleNotFoundError: No module named 'elftools'.",
    )
    assert row.fix == (
        f"install what fa-shim reads tags and ELF with: `{bare} -m pip install pyelftools "
        "packaging`."
    )
    assert f"failed: {row.reason}\n  fix: {row.fix}\n" in _main.render([row])
    assert not (tmp_path / "wc").exists()  # nothing made
    _main._runs_fa_shim(str(host_venv))  # with them (the venv over this interpreter): it runs
