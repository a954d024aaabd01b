"""The `cuda-toolkit` decision (auto / system / index) against this machine's real nvccs, with
torch facts given as values (a CUDA 12 torch venv is ~3 GB for one error message). The refusals
that ask no nvcc: tests/unit/toolchain/test_toolkit.py; provisioning from the index:
tests/e2e/test_toolkit_provision.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TESTS, torch_info

from fa_backend.core._errors import FaShimError
from fa_backend.settings import _settings
from fa_backend.toolchain import _compilers, _toolkit


def _torch(version: str, cuda: str | None):
    return torch_info(version, cuda)


def _settings_for(tmp_path, **values) -> _settings.Settings:
    return _settings.Settings(cache_dir=tmp_path / "cache", **values)


SYSTEM_13 = [n for n in _compilers.find_nvccs() if n.version and n.version.major == 13]
needs_system_13 = pytest.mark.skipif(not SYSTEM_13, reason="no CUDA 13 nvcc on this machine")


@needs_system_13
def test_auto_uses_a_system_nvcc_that_fits(tmp_path):
    decision = _toolkit.decide(_torch("2.11.0+cu130", "13.0"), _settings_for(tmp_path))
    assert decision.error is None and decision.provision is None
    assert decision.nvcc.version.major == 13


@needs_system_13
def test_index_provisions_even_where_a_system_nvcc_fits(tmp_path):
    settings = _settings_for(tmp_path, cuda_toolkit="index")
    decision = _toolkit.decide(_torch("2.11.0+cu130", "13.0"), settings)
    assert (decision.nvcc, decision.provision, decision.error) == (None, "13.0", None)


@needs_system_13
def test_auto_provisions_when_no_system_nvcc_fits_and_system_refuses(tmp_path):
    """A CUDA 14.0 torch: the machine's CUDA 13 nvcc does not fit its major."""
    torch = _torch("2.20.0+cu140", "14.0")
    assert _toolkit.decide(torch, _settings_for(tmp_path)).provision == "14.0"
    refused = _toolkit.decide(torch, _settings_for(tmp_path, cuda_toolkit="system"))
    assert refused.provision is None and refused.nvcc is None
    assert "no nvcc found matches torch 2.20.0+cu140" in refused.error.cause
    assert "install CUDA toolkit 14.x" in refused.error.fix


@needs_system_13
def test_auto_never_swaps_an_nvcc_the_user_named(tmp_path):
    named = TESTS / "tools" / "nvcc-11.5"
    settings = _settings_for(tmp_path, nvcc=named)
    decision = _toolkit.decide(_torch("2.11.0+cu130", "13.0"), settings)
    assert decision.provision is None
    assert "the nvcc named by setting nvcc" in decision.error.cause


@pytest.mark.parametrize("mode", ["auto", "index"])
def test_cuda_12_torch_gets_the_no_compiler_on_the_index_error(tmp_path, mode):
    """torch 2.6.0+cu124's facts (the values its probe reports), on a machine whose nvcc is 13."""
    decision = _toolkit.decide(
        _torch("2.6.0+cu124", "12.4"), _settings_for(tmp_path, cuda_toolkit=mode)
    )
    assert decision.provision is None and decision.nvcc is None
    error = decision.error
    assert "torch 2.6.0+cu124 is built with CUDA 12.4" in error.cause
    assert "the package index has no CUDA 12 compiler" in error.cause
    assert "nvidia-cuda-nvcc-cu12 wheels carry ptxas and headers but no bin/nvcc" in error.cause
    assert "install the CUDA toolkit 12.4" in error.fix
    assert "cuda-toolkit-12-4" in error.fix and "cuda-toolkit=12.4" in error.fix
    with pytest.raises(FaShimError) as raised:
        _toolkit.choose(_torch("2.6.0+cu124", "12.4"), _settings_for(tmp_path, cuda_toolkit=mode))
    assert raised.value.cause == error.cause
    assert not (tmp_path / "cache" / "toolkits").exists()  # nothing was fetched


def test_cuda_12_fix_says_torch_takes_another_minor(tmp_path, monkeypatch):
    """torch 2.9.1+cu128 without a CUDA 12 nvcc: the fix names 12.8 and says another 12.x works
    (torch accepts a minor mismatch; nvcc 12.4 builds for it: tests/e2e/test_cuda12_builds.py),
    not "any 12.x from 12.8 on"."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    error = _toolkit.decide(_torch("2.9.1+cu128", "12.8"), _settings_for(tmp_path)).error
    assert "install the CUDA toolkit 12.8, or another 12.x (torch accepts a minor" in error.fix
    assert "from 12.8 on" not in error.fix


def test_one_toolkit_reached_by_a_symlink_is_asked_once(tmp_path, monkeypatch):
    """A symlink to an nvcc already seen needs no dry run (one process fewer per path on every
    build and wheel-cache hit); a wrapper script in another place still gets one."""
    toolkit, log = tmp_path / "toolkit", tmp_path / "calls.log"
    (toolkit / "bin").mkdir(parents=True)
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in\n'
        f'  *--dryrun*) echo "#\\$ TOP={toolkit}" >&2 ;;\n'
        '  *--version*) echo "Cuda compilation tools, release 13.0, V13.0.88" ;;\nesac\n'
    )
    nvcc.chmod(0o755)
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "nvcc").symlink_to(nvcc)
    (tmp_path / "wrap").mkdir()
    wrapper = tmp_path / "wrap" / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {nvcc} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.setenv("PATH", f"{tmp_path / 'wrap'}:/usr/bin:/bin")
    found = _compilers.find_nvccs(tmp_path / "link" / "nvcc")
    ours = [n for n in found if n.cuda_home == toolkit.resolve()]
    assert [(n.path, n.origin) for n in ours] == [(tmp_path / "link" / "nvcc", "setting nvcc")]
    dry_runs = [line for line in log.read_text().splitlines() if "--dryrun" in line]
    # the file (through the link; not again through CUDA_HOME), then the wrapper
    assert len(dry_runs) == 2, dry_runs


@needs_system_13
@pytest.mark.parametrize("row", ["T08", "T09"])
def test_t08_t09_a_named_nvcc_that_is_no_nvcc_names_what_it_is(tmp_path, row):
    """-C nvcc=/usr/bin/true (a program, not nvcc; it read "(…, CUDA None) does not match
    torch") and -C nvcc=<toolkit>/bin (it read "does not exist or is not executable")."""
    torch, real = _torch("2.11.0+cu130", "13.0"), SYSTEM_13[0].path
    named = Path("/usr/bin/true") if row == "T08" else real.parent
    with pytest.raises(FaShimError) as exc:
        _compilers.choose_nvcc(torch, named)
    if row == "T08":
        assert exc.value.cause == (
            f"setting nvcc names {named}, which is not nvcc: `{named} --version` prints no "
            "CUDA release."
        )
        assert exc.value.fix == "point setting nvcc at the bin/nvcc of a CUDA 13.x toolkit."
    else:
        assert exc.value.cause == (
            f"setting nvcc names {named}, which is a directory, not the nvcc program."
        )
        assert exc.value.fix == f"name it: -C nvcc={real}"
    assert _compilers.choose_nvcc(torch, real).path == real  # the fix, as written
