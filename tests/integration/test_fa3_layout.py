"""The FA3 layout of docs/fa3-design.md: a second project directory whose `fa_backend` is a
symlink to this checkout's, with `backend-path = ["."]` (a path outside the project is refused by
the frontends). Real pip reaches fa_backend that way, in its FA3 flavour: without a CUDA torch it
gets FA3's own one error (build and uv, through flash-attn-3/'s own link and its sdist:
tests/integration/test_sdists.py). That the repository's flash-attn-3/ is that project,
that the flavour is a fact of [tool.fa-shim] only and that each flavour refuses the other's
settings: tests/unit/flavours/test_registry.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO

# the system interpreter's torch is the CPU build: FA3's plan stops at once, in the FA3 flavour
FA3_NEEDS_CUDA = "FlashAttention-3 compiles CUDA kernels against a CUDA torch"


def _project(tmp_path: Path, backend_path: str = ".") -> Path:
    project = tmp_path / "flash-attn-3"
    project.mkdir()
    (project / "fa_backend").symlink_to(REPO / "fa_backend")
    (project / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = []\nbuild-backend = "fa_backend"\n'
        f'backend-path = ["{backend_path}"]\n\n'
        '[project]\nname = "flash-attn-3"\ndynamic = ["version"]\n\n'
        '[tool.fa-shim]\nflavour = "fa3"\nfa3-release = "2.8.3"\n'
    )
    return project


PIP = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w"]
BUILD = [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir"]


def test_pip_reaches_fa_backend_through_the_symlink(tmp_path):
    """build and uv, through flash-attn-3/'s own link: tests/integration/test_sdists.py."""
    project = _project(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run(
        [*PIP, str(out), str(project)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert FA3_NEEDS_CUDA in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not any(out.glob("*.whl")) if out.exists() else True


def test_a_backend_path_outside_the_project_is_refused_by_the_frontend(tmp_path):
    """Why the layout needs the symlink: `backend-path = [".."]` never reaches fa_backend."""
    project = _project(tmp_path, backend_path="..")
    (project / "fa_backend").unlink()
    proc = subprocess.run(
        [*BUILD, str(tmp_path / "out"), str(project)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "paths must be inside source tree" in proc.stdout + proc.stderr
    assert FA3_NEEDS_CUDA not in proc.stdout + proc.stderr
