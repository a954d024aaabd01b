"""Every user-facing error of the core, triggered for real: one readable message naming cause and
fix on stderr, exit status 1, and nothing written to the output directory. Those that need the
CUDA torch 2.11 venv: tests/e2e/test_errors_cuda_torch.py."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

from conftest import (
    BUILD_TOOLS,
    PY,
    SHARED_SDISTS,
    make_venv,
    pack_sample,
    pip_wheel_cmd,
)
from conftest import build_wheel_error as build_wheel

SDIST = SHARED_SDISTS / "flash_attn-2.8.3.post2.tar.gz"  # the default release's


def test_missing_build_requirements_under_no_build_isolation(tmp_path):
    python = make_venv(tmp_path / "bare", ["packaging"])
    err = build_wheel(python, tmp_path, {"sdist": str(SDIST)})
    assert "fa-shim's build requirements are missing" in err
    assert "ninja, pyelftools>=0.31" in err
    assert f"fix: {python} -m pip install" in err


def test_torch_not_importable(tmp_path):
    python = make_venv(tmp_path / "no-torch", BUILD_TOOLS)
    err = build_wheel(python, tmp_path, {"sdist": str(SDIST)})
    assert f"torch is not importable by {python}" in err
    assert "No module named 'torch'" in err
    assert "--no-build-isolation" in err


def test_cpu_only_torch_cannot_build_cuda_kernels(tmp_path):
    err = build_wheel(PY, tmp_path, {"sdist": str(SDIST)})
    assert "is a CPU-only build: it cannot compile flash-attn's CUDA kernels" in err
    assert "pip install torch==2.11.0" in err


def test_offline_without_a_local_sdist(tmp_path):
    err = build_wheel(PY, tmp_path, {"offline": "true"})
    assert "the flash-attn 2.8.3.post2 sdist is not in" in err and "offline is set" in err
    assert "-C sdist=FILE or -C sdist-dir=DIR" in err


def test_no_network_and_no_sdist(tmp_path):
    env = {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_EXTRA_INDEX_URL": "",
    }
    err = build_wheel(PY, tmp_path, {}, env=env)
    assert (
        "could not download the flash-attn 2.8.3.post2 sdist (offline, or not on the index)" in err
    )
    assert "http://127.0.0.1:9/simple" in err and "Connection refused" in err
    assert "-C sdist-dir=DIR" in err


def test_one_byte_changed_sdist_is_refused(tmp_path):
    bad = tmp_path / "sdists" / SDIST.name
    bad.parent.mkdir()
    data = bytearray(SDIST.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    err = build_wheel(PY, tmp_path, {"sdist-dir": str(bad.parent)})
    assert f"sha256 mismatch for {bad}" in err
    assert (
        "release.toml pins d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b" in err
    )
    assert f"put the original {SDIST.name} from PyPI in its place (move {bad} aside" in err
    assert "delete" not in err  # the user's own file


def test_a_damaged_sdist_in_fa_shims_cache_is_refused_naming_the_file_to_delete(tmp_path):
    cache = tmp_path / "cache"
    bad = cache / "sdists" / SDIST.name
    bad.parent.mkdir(parents=True)
    bad.write_bytes(SDIST.read_bytes()[: 1 << 20])
    err = build_wheel(PY, tmp_path, {"cache-dir": str(cache)})
    assert f"sha256 mismatch for {bad} (from fa-shim cache)" in err
    assert f"fix: delete {bad} and let fa-shim download it again." in err


def test_an_unwritable_cache_directory_is_one_error(tmp_path):
    blocker = tmp_path / "a-file"  # not a directory: refused even for root
    blocker.write_text("")
    err = build_wheel(PY, tmp_path, {"sdist": str(SDIST), "cache-dir": str(blocker / "c")})
    assert f"fa-shim's cache directory {blocker / 'c'} is not writable (Not a directory)" in err
    assert "-C cache-dir=DIR (or XDG_CACHE_HOME)" in err


def test_truncated_pinned_sdist_is_refused(tmp_path):
    bad = tmp_path / SDIST.name
    bad.write_bytes(SDIST.read_bytes()[: 1 << 20])
    err = build_wheel(PY, tmp_path, {"sdist": str(bad)})
    assert "sha256 mismatch" in err and "truncated" in err


def test_truncated_unpinned_sdist_is_a_corrupt_archive(tmp_path):
    good = pack_sample(tmp_path / "good")
    bad = tmp_path / "bad" / good.name
    bad.parent.mkdir()
    raw = gzip.decompress(good.read_bytes())
    bad.write_bytes(gzip.compress(raw[: len(raw) // 2])[:-8])  # cut mid-stream
    err = build_wheel(
        PY,
        tmp_path,
        {"sdist": str(bad), "flash-attn-version": "0.1.0", "allow-unknown-version": "true"},
    )
    assert f"{bad} is a corrupt or truncated archive" in err
    assert f"replace {bad} (setting sdist) with an intact copy" in err
    assert "delete" not in err  # the user's own file: never "delete it"


def test_unknown_version_needs_an_explicit_opt_in(tmp_path):
    err = build_wheel(PY, tmp_path, {"flash-attn-version": "2.5.0"})
    assert "flash-attn 2.5.0 is not a version fa-shim knows" in err
    assert "2.8.3" in err and "-C allow-unknown-version=true" in err


def test_upstream_compile_failure_shows_the_first_errors_and_the_log(tmp_path):
    sample = pack_sample(tmp_path / "src")
    broken = tmp_path / "broken" / sample.name
    broken.parent.mkdir()
    import tarfile

    with tarfile.open(sample) as src, tarfile.open(broken, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name.endswith("flash_api.cpp"):
                data = data.replace(b"return head_dim;", b"return head_dim  // missing ;\n")
                member.size = len(data)
            import io

            dst.addfile(member, io.BytesIO(data))
    err = build_wheel(
        PY,
        tmp_path,
        {"sdist": str(broken), "flash-attn-version": "0.1.0", "allow-unknown-version": "true"},
    )
    assert "the upstream build failed (exit status 1)" in err
    assert "flash_api.cpp" in err and "error:" in err
    log = Path(err.split("read the full log: ")[1].split()[0])
    assert log.is_file() and "error:" in log.read_text()


def test_unknown_setting_gets_a_did_you_mean(tmp_path):
    err = build_wheel(PY, tmp_path, {"cuda_arch": "90"})
    assert "unknown setting 'cuda_arch'" in err and "Did you mean 'cuda-archs'?" in err


def test_pip_reports_the_error_once_and_readably(tmp_path):
    """The boundary's message survives pip's wrapping of a failed build."""
    proc = subprocess.run(
        pip_wheel_cmd(sys.executable, tmp_path / "w", "-C", "max-jobs=zero"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert proc.stderr.count("setting 'max-jobs' from config_settings (-C) is 'zero'") == 1
