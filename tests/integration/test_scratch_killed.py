"""A scratch directory whose run was SIGKILLed (the OOM killer, a batch system's hard limit) is
removed by the next fa-shim run on the host, which says so (core/_scratch)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from conftest import REPO

from fa_backend.core import _scratch

KILLED = """
import os, signal
from fa_backend.core import _scratch
path = _scratch.make("build")
(path / "src").mkdir()
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runs_scratch_goes_with_the_next_run_and_the_run_says_so(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", KILLED],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr
    left = proc.stdout.strip()
    assert os.path.isdir(left) and os.path.basename(left).startswith("fa-shim-build-")
    with _scratch.directory("verify") as mine:
        assert not os.path.exists(left)
        assert mine.is_dir()
    assert not mine.exists()
    assert "removed 1 scratch directory that killed fa-shim runs left under" in (
        capsys.readouterr().err
    )
