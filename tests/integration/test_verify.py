"""`python -m fa_backend verify` against real torch libraries, real compilers and real wheels. The
symbol rules and ELF reading in-process: tests/unit/toolchain/test_mangling.py and
tests/unit/verify/test_elf.py; upstream's flash_api.cpp against a CUDA torch:
tests/e2e/test_verify_cuda_torch.py."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import (
    CHECK_FAIL_OLD,
    PY,
    REPO,
    SAMPLE,
    SHARED_SDISTS,
    TOOLS,
    run,
    sample_settings,
)

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.verify import _checks, _elf, _targets, _verify

OLD_ABI_CXX = str(TOOLS / "oldabi-g++")
NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")
OLD_ABI_SENTENCE = (
    "built for the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0), torch uses the new one "
    "(_GLIBCXX_USE_CXX11_ABI=1)"
)


def verify(*args, python=PY) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run([python, "-m", "fa_backend", "verify", *args], check=False, env=env)


def test_missing_path_is_one_readable_error(tmp_path):
    proc = verify(str(tmp_path / "nothing.whl"))
    assert proc.returncode == 1
    assert "fa-shim: error:" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def _some_other_extension() -> Path:
    """A real extension module of this interpreter that is not flash-attn's."""
    import importlib

    for name in ("markupsafe._speedups", "_ssl", "_ctypes", "_json"):
        with contextlib.suppress(ImportError):
            path = getattr(importlib.import_module(name), "__file__", None)
            if path and path.endswith(".so"):
                return Path(path)
    pytest.skip("no extension module (.so) found in this interpreter")


def test_an_unrelated_extension_is_not_a_flash_attn_module():
    """It used to pass: "OK (2 passed, 5 skipped)", exit 0."""
    other = _some_other_extension()
    proc = verify(str(other))
    assert proc.returncode == 1, proc.stdout
    assert f"{other} is not a flash-attn module" in proc.stderr
    assert "Traceback" not in proc.stderr and "OK" not in proc.stdout


def test_a_wheel_without_flash_attn_is_not_a_flash_attn_wheel(tmp_path):
    """It used to be told to "rebuild flash-attn"."""
    wheel = tmp_path / "markupsafe_like-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(_some_other_extension(), "markupsafe_like/_speedups.so")
        z.writestr("markupsafe_like-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    proc = verify(str(wheel))
    assert proc.returncode == 1
    assert f"{wheel} is not a flash-attn wheel" in proc.stderr
    assert "rebuild flash-attn" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_module_inside_a_wheel_is_named_by_the_wheel(tmp_path):
    """The module is read from a temporary copy; the message names the user's wheel."""
    wheel = tmp_path / "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"
    module = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("flash_attn/__init__.py", "")
        z.writestr(module, "not an ELF file\n")
    proc = verify(str(wheel))
    assert proc.returncode == 1
    assert f"{module} in {wheel} is not a readable ELF shared object" in proc.stderr
    assert "fa-shim-verify-" not in proc.stderr


# --------------------------------------------------------------------------- CUDA fatbin (nvcc)


@pytest.mark.slow
@pytest.mark.skipif(not NVCC.is_file(), reason="needs /usr/local/cuda-13.0")
def test_fatbin_archs_of_a_real_nvcc_build(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    module = tmp_path / "k.so"
    run(
        [NVCC, "-shared", "-Xcompiler", "-fPIC", "-o", module, source,
         "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90a,code=sm_90a",
         "-gencode", "arch=compute_120,code=compute_120"]
    )  # fmt: skip
    elf = _elf.read_module(module)
    codes = elf.cuda
    assert [str(c) for c in codes] == ["sm_80", "sm_90a", "compute_120"]
    cuobjdump = NVCC.parent / "cuobjdump"
    if cuobjdump.is_file():  # the reference, where the toolkit ships it
        listed = run([cuobjdump, "--list-elf", module]).stdout
        assert "sm_80" in listed and "sm_90a" in listed

    fa2 = _registry.get("fa2")
    target = _targets.Target(str(module), "module", None, [("k.so", module)], None, fa2)

    def archs(gpus, provenance=None):
        target.provenance = provenance
        return _checks.check_archs([elf], target, gpus)

    gpu = lambda sm: _checks.Gpu(0, f"GPU sm_{sm}", divmod(sm, 10))  # noqa: E731
    assert archs(None).status == "pass"
    assert archs([gpu(86)]).status == "pass"  # sm_80 SASS runs on 8.6
    assert archs([gpu(90)]).status == "pass"  # sm_90a runs on exactly 9.0
    assert archs([gpu(121)]).status == "pass"  # compute_120 PTX JIT-compiles for 12.1
    failed = archs([gpu(75)])
    assert failed.status == "fail" and "GPU 0 GPU sm_75: sm_75" in failed.details
    assert "8.0 (Ampere)" in failed.fix
    # What the build meant to compile must be there.
    assert archs(None, {"cuda_archs": ["80", "90a"]}).status == "pass"
    missing = archs(None, {"cuda_archs": ["80", "100"]})
    assert missing.status == "fail" and "sm_100 missing" in missing.summary


# ----------------------------------------------------- the sample: wrong ABI vs built by fa-shim


def _plain_old_abi_wheel(tmp_path: Path) -> Path:
    """The sample built by its own setup.py (no fa-shim) with a g++ defaulting to the old ABI."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample-src")
    out = tmp_path / "plain-wheel"
    run(
        [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", out, source],
        env={**os.environ, "CXX": OLD_ABI_CXX, "FLASH_ATTENTION_FORCE_BUILD": "TRUE"},
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.mark.slow
def test_old_abi_sample_fails_and_the_fa_shim_build_passes(tmp_path, host_venv, sample_sdist_dir):
    wheel = _plain_old_abi_wheel(tmp_path)
    proc = verify(wheel)
    assert proc.returncode == 1, proc.stdout
    report, text = proc.stdout, " ".join(proc.stdout.split())
    assert "FAIL  symbols" in report and "FAIL  abi" in report
    assert "c10::detail::torchCheckFail" in report or CHECK_FAIL_OLD in report
    assert OLD_ABI_SENTENCE in text
    assert "provenance    no fa_shim_provenance.json (not built by fa-shim)" in report
    assert "result: FAILED (2 of 9 checks: symbols, abi)" in report

    # A colleague's wheel for another CPython is refused by its tag, with the reason.
    ours = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    foreign = shutil.copy(wheel, tmp_path / wheel.name.replace(ours, "cp399"))
    proc = verify(foreign)
    assert proc.returncode == 1
    assert f"it was built for cp399, this interpreter is {ours}" in " ".join(proc.stdout.split())

    data = json.loads(verify(wheel, "--json").stdout)
    assert data["ok"] is False and data["kind"] == "wheel"
    symbols = next(c for c in data["checks"] if c["name"] == "symbols")
    assert any("torchCheckFail" in d for d in symbols["details"])

    # The build function's view of it: one FaShimError naming the failed checks and the fix.
    with pytest.raises(FaShimError) as caught:
        _verify.verify_wheel(wheel).raise_for_failures()
    assert "failed: symbols, abi" in caught.value.cause
    assert "--no-build-isolation --no-deps --force-reinstall" in caught.value.fix

    # The same sample built right: through fa-shim, into a venv, verified as installed.
    run(
        [host_venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", REPO,
         *sample_settings(sample_sdist_dir)]
    )  # fmt: skip
    ok = verify("flash_attn", "--python", host_venv)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS  symbols" in ok.stdout and "PASS  abi" in ok.stdout
    assert "PASS  provenance    built by fa-shim for torch 2.13.0" in ok.stdout
    assert "result: OK" in ok.stdout
    site = run([host_venv, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    by_dir = verify(site.stdout.strip(), "--python", host_venv, "--json")
    assert by_dir.returncode == 0 and json.loads(by_dir.stdout)["kind"] == "installed"


@pytest.mark.slow
def test_pure_python_upstream_wheel_is_refused_with_the_reason(tmp_path):
    """Upstream's FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE build of the real sdist: py3-none-any."""
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        tar.extractall(tmp_path)
    out = tmp_path / "wheels"
    env = {
        **os.environ,
        "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE",
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",  # no attempt to download a release wheel
    }
    run(
        [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", out,
         tmp_path / "flash_attn-2.8.3"],
        env=env,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "flash_attn-2.8.3-py3-none-any.whl"
    proc = verify(wheel)
    assert proc.returncode == 1
    text = " ".join(proc.stdout.split())
    assert "FAIL tags py3-none-any is a pure-Python wheel tag" in text
    assert "FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE" in text
    assert "No module named 'flash_attn_2_cuda'" in text
    assert "FAIL module" in text


# ------------------------------------------------- a second C++ runtime (libstdc++ linked in)


def test_a_module_with_its_own_libstdcxx_fails_and_a_shared_one_passes(tmp_path):
    """The H100 image's CXX linked libstdc++.a into FA3's module: its first error message then
    crashed the process. g++ -static-libstdc++ reproduces that link here."""
    source = tmp_path / "m.cpp"
    source.write_text(
        "#include <sstream>\n#include <stdexcept>\n"
        "void fail(int x) { std::ostringstream s; s << x; throw std::runtime_error(s.str()); }\n"
    )
    modules = {}
    for name, extra in (("shared", []), ("static", ["-static-libstdc++"])):
        modules[name] = tmp_path / f"{name}.so"
        run(["g++", "-O2", "-fPIC", "-shared", source, "-o", modules[name], *extra])
    flavour = _registry.get("fa2")
    shared = _elf.read_module(modules["shared"])
    static = _elf.read_module(modules["static"])
    assert shared.runtime_copy == []
    assert "__gxx_personality_v0" in static.runtime_copy
    assert _checks.check_cxx_runtime([shared], flavour).status == "pass"
    failed = _checks.check_cxx_runtime([shared, static], flavour)
    assert failed.status == "fail"
    assert "its own copy of the C++ runtime" in failed.summary
    assert "__gxx_personality_v0" in failed.summary and "unset CXX and CC" in failed.fix
