"""The settings on `python -m fa_backend`'s command line, in a real process: a -C without a value
is argparse's usage error (exit status 2), never a traceback. The settings model itself:
tests/unit/settings/test_settings.py."""

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
