"""The import guard fa-shim ships as flash_attn/_fa_shim_guard.py, in real processes: it runs on
the standard library alone, the vendored patches that import it apply to the real sdists (GNU
patch), and an installed sample wheel names the torch and the rebuild. Its policy:
tests/unit/resources/test_runtime_guard.py."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, SHARED_SDISTS, run, sample_settings

from fa_backend.flavours.fa2 import _releases
from fa_backend.sources import _patches

GUARD_SOURCE = REPO / "fa_backend" / "resources" / "runtime_guard.py"


def test_guard_is_standard_library_only():
    """It runs inside user environments that have neither packaging nor fa-shim."""
    proc = run(
        [sys.executable, "-I", "-S", "-c",
         "import sys; sys.modules['packaging'] = None; sys.modules['fa_backend'] = None; "
         f"exec(compile(open({str(GUARD_SOURCE)!r}).read(), 'guard', 'exec'))"]
    )  # fmt: skip
    assert proc.returncode == 0


# ------------------------------------------------------------------ the vendored patches (fast)


@pytest.mark.parametrize("version", ["2.8.3", "2.8.3.post2"])
def test_import_guard_patch_applies_to_the_real_sdist(tmp_path, version):
    patches = [p for p in _releases.patches(version) if p.name == "10-import-guard.patch"]
    assert patches and patches[0].path.read_text().startswith("Reason: ")
    with tarfile.open(SHARED_SDISTS / f"flash_attn-{version}.tar.gz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if "/flash_attn/" in m.name])
    root = tmp_path / f"flash_attn-{version}"
    _patches.apply_all(patches, root)  # patch -p1 --fuzz=0, dry run first
    interface = (root / "flash_attn" / "flash_attn_interface.py").read_text()
    compile(interface, "flash_attn_interface.py", "exec")
    assert "import flash_attn_2_cuda" not in interface
    assert 'flash_attn_gpu = load_extension("flash_attn_2_cuda")' in interface
    # Upstream imports the extension in this one place only (ROCm's triton path aside).
    others = [
        p
        for p in root.rglob("*.py")
        if "flash_attn_2_cuda" in p.read_text() and p.name != "setup.py"
    ]
    assert others == [root / "flash_attn" / "flash_attn_interface.py"]


# ------------------------------------------------- an installed fa-shim build of the sample (slow)


@pytest.fixture
def installed_sample(host_venv, sample_sdist_dir):
    """The sample built by fa-shim and installed into a venv seeing system torch 2.13."""
    run(
        [host_venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", REPO,
         *sample_settings(sample_sdist_dir)]
    )  # fmt: skip
    site = Path(
        run(
            [host_venv, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]
        ).stdout.strip()
    )
    return host_venv, site


def _import(python, **env):
    return run(
        [python, "-c", "import flash_attn; print(flash_attn.check_head_dim(64))"],
        check=False,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_torch_changed_since_the_build(installed_sample):
    python, site = installed_sample
    assert (site / "flash_attn" / "_fa_shim_guard.py").read_bytes() == GUARD_SOURCE.read_bytes()
    assert _import(python).stdout.strip() == "64"  # as built: loads

    (provenance,) = site.glob("flash_attn-*.dist-info/fa_shim_provenance.json")
    data = json.loads(provenance.read_text())
    data["torch"].update(version="2.6.0+cu124", cuda="12.4", cxx11_abi=0)
    provenance.write_text(json.dumps(data))

    proc = _import(python)
    assert proc.returncode != 0
    err = proc.stderr
    assert "ImportError: flash-attn's flash_attn_2_cuda was built for a different torch" in err
    assert "torch version 2.6.0+cu124 vs 2.13.0+cpu" in err
    assert "CUDA 12.4 vs none" in err and "_GLIBCXX_USE_CXX11_ABI=0 vs 1" in err
    assert "built for:  torch 2.6.0+cu124 (CUDA 12.4, _GLIBCXX_USE_CXX11_ABI=0)" in err
    assert "installed:  torch 2.13.0+cpu (CUDA none, _GLIBCXX_USE_CXX11_ABI=1)" in err
    # pip recorded where it installed from (direct_url.json): the command names that checkout.
    assert f"{python} -m pip install --no-build-isolation --no-deps --force-reinstall {REPO}" in err

    # The escape hatch: the comparison is skipped, the import itself still happens.
    assert _import(python, FLASH_ATTN_IGNORE_TORCH_MISMATCH="1").stdout.strip() == "64"


@pytest.mark.slow
def test_failed_import_names_the_fix_and_chains_the_error(installed_sample):
    python, site = installed_sample
    (module,) = site.glob("flash_attn_2_cuda*.so")
    module.write_bytes(b"\x7fELF truncated by a bad copy")
    proc = _import(python)
    assert proc.returncode != 0
    err = proc.stderr
    assert "flash-attn's compiled extension flash_attn_2_cuda failed to import" in err
    assert "built for:  torch 2.13.0+cpu" in err and "installed:  torch 2.13.0+cpu" in err
    assert f"--force-reinstall {REPO}" in err
    # The original error comes first, chained with `raise ... from exc`.
    assert "The above exception was the direct cause of the following exception" in err
    first = err.split("The above exception")[0]
    assert "ImportError" in first and str(module) in first

    module.unlink()
    proc = _import(python)
    assert "No module named 'flash_attn_2_cuda'" in proc.stderr
    assert "The above exception was the direct cause" in proc.stderr
