"""The PEP 517 hooks, called the way pip and build call them (pyproject_hooks, in a subprocess),
on the sample package: metadata consistency, RECORD, provenance, determinism, sdist, editable."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib
from conftest import REPO, SAMPLE, SAMPLE_VERSION
from packaging import tags
from packaging.utils import parse_wheel_filename
from pyproject_hooks import BuildBackendHookCaller

EPOCH = 1700000000  # 2023-11-14


def _caller(sdist_dir: Path, log: list[str], **env: str) -> BuildBackendHookCaller:
    def runner(cmd, cwd=None, extra_environ=None):
        full = {
            **os.environ,
            **(extra_environ or {}),
            **env,
            "FA_SHIM_FLASH_ATTN_VERSION": SAMPLE_VERSION,
            "FA_SHIM_SDIST_DIR": str(sdist_dir),
            "FA_SHIM_ALLOW_UNKNOWN_VERSION": "1",
        }
        proc = subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True)
        log.append(proc.stdout + proc.stderr)
        proc.check_returncode()

    return BuildBackendHookCaller(str(REPO), "fa_backend", backend_path=["."], runner=runner)


@pytest.fixture(scope="module")
def built(tmp_path_factory, sample_sdist_dir):
    """prepare_metadata_for_build_wheel, then build_wheel given that metadata directory."""
    tmp = tmp_path_factory.mktemp("hooks")
    log: list[str] = []
    hooks = _caller(
        sample_sdist_dir, log, SOURCE_DATE_EPOCH=str(EPOCH), XDG_CACHE_HOME=str(tmp / "cache")
    )
    meta_dir = tmp / "meta"
    dist_info = hooks.prepare_metadata_for_build_wheel(str(meta_dir))
    name = hooks.build_wheel(str(tmp / "wheels"), metadata_directory=str(meta_dir / dist_info))
    return {
        "wheel": tmp / "wheels" / name,
        "meta": meta_dir / dist_info,
        "log": log,
        "dist_info": dist_info,
    }


def test_build_requires_are_static():
    hooks = BuildBackendHookCaller(str(REPO), "fa_backend", backend_path=["."])
    assert hooks.get_requires_for_build_wheel() == []
    assert hooks.get_requires_for_build_sdist() == []


def test_wheel_carries_exactly_the_prepared_metadata(built):
    with zipfile.ZipFile(built["wheel"]) as zf:
        metadata = zf.read(f"{built['dist_info']}/METADATA").decode()
    assert metadata == (built["meta"] / "METADATA").read_text()
    assert f"Version: {SAMPLE_VERSION}+cputorch2.13cxx11abiTRUE" in metadata
    assert "Requires-Dist: torch" in metadata


def test_wheel_name_and_tags(built):
    name, version, _, wheel_tags = parse_wheel_filename(built["wheel"].name)
    assert name == "flash-attn" and str(version) == f"{SAMPLE_VERSION}+cputorch2.13cxx11abitrue"
    assert built["wheel"].name.startswith(f"flash_attn-{SAMPLE_VERSION}+cputorch2.13cxx11abiTRUE-")
    (tag,) = wheel_tags
    assert tag in set(tags.sys_tags()) and tag.platform.startswith("linux_")
    with zipfile.ZipFile(built["wheel"]) as zf:
        wheel_meta = zf.read(f"{built['dist_info']}/WHEEL").decode()
    assert f"Tag: {tag}" in wheel_meta and "Root-Is-Purelib: false" in wheel_meta


def test_upstreams_license_files_travel_into_the_wheel(built):
    """setuptools puts upstream's LICENSE in its wheel's <dist-info>/licenses/; the repack keeps
    it under fa-shim's dist-info."""
    with zipfile.ZipFile(built["wheel"]) as zf:
        carried = zf.read(f"{built['dist_info']}/licenses/LICENSE")
    assert carried == (SAMPLE / "LICENSE").read_bytes()


def test_record_lists_every_file_with_its_hash(built):
    with zipfile.ZipFile(built["wheel"]) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/RECORD")]
        rows = zf.read(f"{built['dist_info']}/RECORD").decode().splitlines()
        recorded = {}
        for row in rows:
            path, digest, size = row.rsplit(",", 2)
            recorded[path] = (digest, size)
        assert set(recorded) == {*names, f"{built['dist_info']}/RECORD"}
        for name in names:
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert recorded[name] == (f"sha256={expected.decode()}", str(len(data)))
        assert any(n.startswith("flash_attn_2_cuda") and n.endswith(".so") for n in names)


def test_source_date_epoch_sets_every_timestamp(built):
    import time

    expected = time.gmtime(EPOCH)[:6]
    with zipfile.ZipFile(built["wheel"]) as zf:
        assert {info.date_time for info in zf.infolist()} == {expected}


def test_provenance_records_what_the_build_used(built):
    import torch

    with zipfile.ZipFile(built["wheel"]) as zf:
        prov = json.loads(zf.read(f"{built['dist_info']}/fa_shim_provenance.json"))
    assert prov["torch"]["version"] == torch.__version__
    assert prov["torch"]["cxx11_abi"] == int(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert prov["flash_attn_version"] == SAMPLE_VERSION
    assert prov["sdist"]["pinned"] is False and len(prov["sdist"]["sha256"]) == 64
    assert prov["python_tag"] == str(next(iter(parse_wheel_filename(built["wheel"].name)[3])))
    assert prov["nvcc"] is None  # the sample has no CUDA sources
    # the first line of the compiler's own --version, from the compiler the build ran
    cxx = os.environ.get("CXX", "c++")
    banner = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    assert prov["host_compiler"]["command"] == cxx
    assert prov["host_compiler"]["version"] == banner.stdout.splitlines()[0].strip()
    injected = prov["injected_flags"][0]["injected"]
    assert injected["cxx"][-1] == f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    assert injected["cxx"][-2] == "-std=c++20"  # torch 2.13's headers need C++20
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": 0}


def test_logs_go_to_stderr_only(built, tmp_path, sample_sdist_dir):
    log: list[str] = []
    hooks = _caller(sample_sdist_dir, log)

    def stdout_runner(cmd, cwd=None, extra_environ=None):
        env = {
            **os.environ,
            **(extra_environ or {}),
            "FA_SHIM_FLASH_ATTN_VERSION": SAMPLE_VERSION,
            "FA_SHIM_SDIST_DIR": str(sample_sdist_dir),
            "FA_SHIM_ALLOW_UNKNOWN_VERSION": "1",
        }
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=True)
        log.append(proc.stdout)

    with hooks.subprocess_runner(stdout_runner):
        hooks.prepare_metadata_for_build_wheel(str(tmp_path / "m"))
    assert "fa-shim" not in log[-1]


def test_mismatching_prepared_metadata_fails_loudly_and_writes_nothing(
    built, tmp_path, sample_sdist_dir
):
    meta = tmp_path / built["dist_info"]
    meta.mkdir()
    text = (built["meta"] / "METADATA").read_text()
    (meta / "METADATA").write_text(text.replace("cputorch2.13", "cu128torch2.9"))
    log: list[str] = []
    out = tmp_path / "out"
    with pytest.raises(subprocess.CalledProcessError):
        _caller(sample_sdist_dir, log).build_wheel(str(out), metadata_directory=str(meta))
    assert "the metadata prepared earlier differs from what this build would produce" in log[-1]
    assert "-Version: 0.1.0+cu128torch2.9cxx11abiTRUE" in log[-1]
    assert not out.exists() or not list(out.iterdir())


def test_build_editable_is_refused_with_a_reason(tmp_path, sample_sdist_dir):
    log: list[str] = []
    with pytest.raises(subprocess.CalledProcessError):
        _caller(sample_sdist_dir, log).build_editable(str(tmp_path))
    assert "editable installs are not supported" in log[-1]
    assert "pip install --no-build-isolation ./fa-shim" in log[-1]


def test_build_sdist_contains_the_backend_and_patches_and_honours_relative_dirs(tmp_path):
    # Frontends pass absolute paths; a relative, not yet existing one must work too.
    relative = os.path.relpath(tmp_path / "nested" / "out", REPO)
    code = f"import fa_backend; print(fa_backend.build_sdist({relative!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    name = proc.stdout.strip()
    assert name == "flash_attn-2.8.3.post2.tar.gz"
    sdist = tmp_path / "nested" / "out" / name
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        pkg_info = tar.extractfile("flash_attn-2.8.3.post2/PKG-INFO").read().decode()
    assert "flash_attn-2.8.3.post2/pyproject.toml" in names
    assert "flash_attn-2.8.3.post2/fa_backend/resources/upstream_driver.py" in names
    assert "flash_attn-2.8.3.post2/vendored_patches/2.8.3/release.toml" in names
    assert not any("/tests/" in n or "__pycache__" in n for n in names)
    assert "Name: flash-attn\nVersion: 2.8.3.post2\n" in pkg_info


def test_build_sdist_for_another_version_builds_that_version(tmp_path):
    code = f"import fa_backend; print(fa_backend.build_sdist({str(tmp_path)!r}, "
    code += "{'flash-attn-version': '2.7.4.post1'}))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "flash_attn-2.7.4.post1.tar.gz"
    with tarfile.open(tmp_path / "flash_attn-2.7.4.post1.tar.gz") as tar:
        pyproject = tar.extractfile("flash_attn-2.7.4.post1/pyproject.toml").read().decode()
    assert tomllib.loads(pyproject)["tool"]["fa-shim"]["flash-attn-version"] == "2.7.4.post1"


def test_the_hooks_module_loads_no_compile_pipeline():
    """Importing the backend (every hook, get_requires and build_sdist included) loads neither
    the plan (the flavour registry, the torch probe) nor the pipeline, the toolchain's compilers
    and verify: each hook that needs them imports them."""
    code = (
        "import sys, fa_backend; "
        "print(sorted(m for m in sys.modules if m.startswith('fa_backend.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    heavy = ("pipeline._build", "pipeline._plan", "flavours._registry", "toolchain._torch")
    for module in (*heavy, "verify._verify", "fleet._wheel_cache", "toolchain._toolkit"):
        assert f"fa_backend.{module}'" not in loaded, module


def test_a_wheel_cache_hits_modules_load_no_build_and_no_network():
    """What a hit whose bytes passed before runs (the hooks, the plan through the build's seam,
    fleet/_cached, the fa2 flavour) loads neither the compile pipeline nor the network's
    modules: pipeline/api.py and the flavour API load those only where one of their names is
    used."""
    code = (
        "import sys, fa_backend._hooks, fa_backend.fleet._cached, fa_backend.pipeline.api; "
        "from fa_backend.flavours import _registry; _registry.get('fa2'); "
        "print(sorted(m for m in sys.modules if m.startswith('fa_backend.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "fa_backend.fleet._cached'" in loaded and "fa_backend.pipeline._plan'" in loaded
    for module in ("pipeline._build", "pipeline._upstream", "fleet._compiling", "sources._index"):
        assert f"fa_backend.{module}'" not in loaded, module
