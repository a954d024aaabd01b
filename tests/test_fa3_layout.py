"""The FA3 layout of docs/fa3-design.md: a second project directory whose `fa_backend` is a
symlink to this checkout's, with `backend-path = ["."]` (a path outside the project is refused by
the frontends). Real pip, build and uv reach fa_backend that way, in its FA3 flavour: without a
CUDA torch they get FA3's own one error. The repository's flash-attn-3/ is that project. The
flavour is a fact of [tool.fa-shim] only, and each flavour refuses the other's settings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.settings import _settings

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
        '[tool.fa-shim]\nflavour = "fa3"\nflash-attn-version = "2.8.3"\n'
    )
    return project


FRONTENDS = {
    "pip": [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w"],
    "build": [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir"],
    "uv": ["uv", "build", "--no-build-isolation", "--wheel", "--out-dir"],
}


@pytest.mark.parametrize("frontend", list(FRONTENDS))
def test_frontends_reach_fa_backend_through_the_symlink(frontend, tmp_path):
    if frontend == "uv" and not shutil.which("uv"):
        pytest.skip("uv is not on PATH")
    project = _project(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run(
        [*FRONTENDS[frontend], str(out), str(project)],
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
        [*FRONTENDS["build"], str(tmp_path / "out"), str(project)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "paths must be inside source tree" in proc.stdout + proc.stderr
    assert FA3_NEEDS_CUDA not in proc.stdout + proc.stderr


def test_flavour_is_read_from_the_project_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavour = "fa2"\n')
    assert _settings.load({}, environ={}, project_dir=tmp_path).flash_attn_version is None
    with pytest.raises(FaShimError, match="unknown setting 'flavour' in config_settings"):
        _settings.load({"flavour": "fa3"}, environ={}, project_dir=tmp_path)
    with pytest.raises(FaShimError, match="unknown setting 'FA_SHIM_FLAVOUR' in the environment"):
        _settings.load({}, environ={"FA_SHIM_FLAVOUR": "fa3"}, project_dir=tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavour = "fa4"\n')
    with pytest.raises(FaShimError, match=r"is not one of fa2, fa3\. Did you mean 'fa3'"):
        _registry.load({}, environ={}, project_dir=tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavor = "fa3"\n')
    with pytest.raises(FaShimError, match="Did you mean 'flavour'"):
        _settings.load({}, environ={}, project_dir=tmp_path)


def test_the_repository_flash_attn_3_project_is_that_layout():
    project = REPO / "flash-attn-3"
    assert (project / "fa_backend").is_symlink()
    assert (project / "fa_backend").resolve() == (REPO / "fa_backend").resolve()
    assert _settings.load({}, environ={}, project_dir=project).flavour == "fa3"
    assert _settings.load({}, environ={}, project_dir=REPO).flavour == "fa2"


def test_each_flavour_refuses_the_other_flavours_settings(tmp_path):
    fa3 = REPO / "flash-attn-3"
    with pytest.raises(FaShimError, match=r"'sdist-dir' .* applies to fa-shim's root only"):
        _registry.load({"sdist-dir": str(tmp_path)}, environ={}, project_dir=fa3)
    with pytest.raises(FaShimError, match="FA_SHIM_TU_PARTS"):
        _registry.load({}, environ={"FA_SHIM_TU_PARTS": "2"}, project_dir=fa3)
    with pytest.raises(FaShimError, match=r"'fa3-source' .* applies to flash-attn-3/"):
        _registry.load({"fa3-source": str(tmp_path)}, environ={}, project_dir=REPO)
    with pytest.raises(FaShimError, match=r"fa3-source-dir .* does not exist"):
        _settings.load({"fa3-source-dir": str(tmp_path / "no")}, environ={}, project_dir=fa3)
