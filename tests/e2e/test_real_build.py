"""The real thing on a CPU box: upstream flash-attn 2.8.3.post2 (the default) compiled, for real.

The wheel checked here is the one the README's quick start built and installed in a fresh venv
(conftest's `quick_start`; tests/e2e/test_quickstart.py checks the newcomer's view of it): one
real build of upstream's forward kernels serves both, as CI has 90 minutes on 2 cores. Its set
(conftest.QUICK_START_SET): head dim 32, bf16, forward only, sm_80, upstream's five DISABLE
switches, so 4 forward kernel sources (fwd and split-KV fwd, causal and not), each whole, as
fa-shim compiles this set on 2 cores (in parts every source would cost what it costs whole, so
twice the work: _costs.best_split), and flash_api.cpp. Then: the wheel's name and tags, its
provenance, `python -m fa_backend verify` on the installed package, the imports, the module's
symbols, calls into the compiled module and the import guard. Sources in parts are compiled and
their kernels compared with the whole source's in test_fa2_backward_parts; the full-featured
kernels, and full sets in parts, are compiled on the GPU machine (docs/benchmarks.md).

Without a GPU no kernel can run, but the module's functions can be entered:
- `flash_attn_func` on CPU tensors stops in torch's dispatcher: upstream registers its ops with
  `device_types="cuda"` (torch.library.custom_op), so there is no CPU kernel to call;
- `flash_attn_2_cuda.fwd` on CPU tensors runs upstream's mha_fwd, whose first statement
  (`at::cuda::CUDAGuard device_guard{q.device()}`) rejects a CPU device; upstream's later
  "q must be on CUDA" check cannot be reached without a GPU;
- `flash_attn_2_cuda.bwd` runs mha_bwd, where fa-shim's dispatch patch refuses the backward pass
  of a forward-only build before anything touches CUDA: fa-shim's own message, from the real
  compiled code.
"""

from __future__ import annotations

import glob
import json
import re
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, clean_env, run
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow]

ARCH = "80"
# upstream's five DISABLE switches keep the build short (6 kernels per source)
KERNEL_SET = "hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"
TORCH_LABEL = "cu130torch2.11cxx11abiTRUE"
VERSION = f"2.8.3.post2+{TORCH_LABEL}.{KERNEL_SET}"
# The 4 forward kernels of the set plus flash_api.cpp: nothing else may be compiled.
KERNELS = {
    f"flash_{p}_hdim32_bf16{c}_sm80.cu" for p in ("fwd", "fwd_split") for c in ("", "_causal")
}
BACKWARD_MESSAGE = (
    f"flash-attn was built by fa-shim without the backward pass (kernel set {KERNEL_SET}); "
    "rebuild it without -C forward-only for training."
)


class Installed:
    def __init__(self, python: Path, site: Path, pip, project: Path, tmp: Path) -> None:
        self.python, self.site, self.pip, self.project, self.tmp = python, site, pip, project, tmp

    def py(self, code: str, check: bool = True, **env: str):
        """Run code in the target environment, from a directory without any flash_attn in it."""
        return run(
            [self.python, "-c", textwrap.dedent(code)],
            check=check,
            cwd=self.tmp,
            env=clean_env(**env),
        )

    @property
    def dist_info(self) -> Path:
        (found,) = self.site.glob("flash_attn-*.dist-info")
        return found


@pytest.fixture(scope="module")
def installed(quick_start) -> Installed:
    proc = quick_start.proc
    if proc.returncode:
        pytest.fail(f"the quick start's build failed: see test_quickstart\n{proc.stderr[-3000:]}")
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([quick_start.python, "-c", purelib]).stdout.strip())
    print(f"\nreal build: the quick start took {quick_start.seconds:.0f} s (torch install too)")
    return Installed(quick_start.python, site, proc, quick_start.checkout, quick_start.tmp)


# ------------------------------------------------------------------------------------ the wheel


def test_wheel_name_and_tags_carry_the_kernel_set(installed):
    interpreter = "cp{}{}".format(
        *installed.py("import sys; print(*sys.version_info[:2])").stdout.split()
    )
    machine = installed.py("import platform; print(platform.machine())").stdout.strip()
    expected = f"flash_attn-{VERSION}-{interpreter}-{interpreter}-linux_{machine}.whl"
    created = re.search(r"Created wheel for flash[-_]attn: filename=(\S+)", installed.pip.stdout)
    assert created, installed.pip.stdout
    assert created.group(1) == expected
    wheel_file = (installed.dist_info / "WHEEL").read_text()
    assert f"Tag: {interpreter}-{interpreter}-linux_{machine}\n" in wheel_file
    assert "Root-Is-Purelib: false" in wheel_file
    metadata = (installed.dist_info / "METADATA").read_text()
    found = re.search(r"^Version: (\S+)$", metadata, re.MULTILINE)
    assert found and Version(found.group(1)) == Version(VERSION)


def test_provenance_names_torch_cuda_abi_archs_and_kernel_set(installed):
    prov = json.loads((installed.dist_info / "fa_shim_provenance.json").read_text())
    assert prov["flash_attn_version"] == "2.8.3.post2"
    assert (
        prov["sdist"]["pinned"] is True and prov["sdist"]["file"] == "flash_attn-2.8.3.post2.tar.gz"
    )
    assert Version(prov["torch"]["version"]).public == "2.11.0"
    assert prov["torch"]["cuda"] == "13.0"
    assert prov["torch"]["cxx11_abi"] == 1
    assert prov["nvcc"]["version"] == "13.0"
    assert prov["cuda_archs"] == [ARCH]
    kernel_set = prov["kernel_set"]
    assert kernel_set["kernel_set"] == KERNEL_SET
    assert kernel_set["head_dims"] == [32]
    assert kernel_set["dtypes"] == ["bf16"]
    assert kernel_set["backward"] is False
    assert prov["tu_parts"] == 1
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": len(KERNELS)}
    assert {p["name"] for p in prov["patches"]} >= {
        "10-import-guard.patch",
        "20-kernel-set-dispatch.patch",
        "30-tu-parts.patch",
    }


def test_the_wheel_holds_the_module_and_the_guard(installed):
    record = (installed.dist_info / "RECORD").read_text()
    suffix = installed.py(
        "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    ).stdout.strip()
    assert f"flash_attn_2_cuda{suffix}," in record
    assert "flash_attn/_fa_shim_guard.py," in record
    assert (installed.site / f"flash_attn_2_cuda{suffix}").is_file()


def test_only_the_kernel_sets_kernels_are_in_the_module(installed):
    """The .so defines the hdim32 bf16 forward launchers and nothing of what was left out."""
    code = r"""
        import glob, json, sys
        from elftools.elf.elffile import ELFFile
        (path,) = glob.glob(sys.argv[1] + "/flash_attn_2_cuda*.so")
        names = set()
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for section in ("symtab", "dynsym"):
                table = elf.get_section_by_name("." + section)
                if table is not None:
                    names |= {s.name for s in table.iter_symbols()
                              if s["st_shndx"] != "SHN_UNDEF" and "run_mha_" in s.name}
        print(json.dumps(sorted(names)))
    """
    proc = run(
        [installed.python, "-c", textwrap.dedent(code), installed.site],
        cwd=installed.tmp,
        env=clean_env(),
    )
    names = json.loads(proc.stdout)
    launchers = [n for n in names if re.search(r"run_mha_(fwd|bwd)_I", n)]
    assert launchers, names
    for name in launchers:
        assert "Li32E" in name and "bfloat16" in name, name
        assert "run_mha_bwd_I" not in name, name


def test_the_module_has_no_debug_info(installed):
    """-g0 after Python's -g (pipeline/_reproducible.py): the debug info of flash_api.cpp was
    decided by the mtimes pip gave torch's headers, so it is not compiled."""
    from elftools.elf.elffile import ELFFile

    (path,) = glob.glob(str(installed.site) + "/flash_attn_2_cuda*.so")
    with open(path, "rb") as f:
        sections = [s.name for s in ELFFile(f).iter_sections()]
    assert ".nv_fatbin" in sections and not [n for n in sections if n.startswith(".debug")]


# --------------------------------------------------------------------------- the installed package


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2", torch="2.11.0+cu130", nvcc="13.0", abi="TRUE", stage="compiled"
)
def test_fa_shim_verify_passes_on_the_installed_package(installed):
    proc = run(
        [installed.python, "-m", "fa_backend", "verify", "flash_attn", "--json"],
        check=False,
        cwd=installed.tmp,
        env=clean_env(PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and report["kind"] == "installed"
    status = {c["name"]: c["status"] for c in report["checks"]}
    for name in ("module", "symbols", "provenance", "cuda archs"):
        assert status.get(name) == "pass", (name, report)
    assert all(s in ("pass", "skip") for s in status.values()), report
    archs = next(c for c in report["checks"] if c["name"] == "cuda archs")
    assert f"sm_{ARCH}" in archs["summary"], archs


def test_flash_attn_and_its_module_import_without_a_gpu(installed):
    proc = installed.py(
        """
        import torch, flash_attn, flash_attn_2_cuda
        from flash_attn import flash_attn_func
        print(torch.cuda.is_available(), flash_attn.__version__)
        print(flash_attn.__file__)
        print(flash_attn_2_cuda.__file__)
        """
    )
    available, version, package, module = proc.stdout.split()
    assert available == "False"
    assert version == "2.8.3.post2"
    assert Path(package).is_relative_to(installed.site)
    assert Path(module).parent == installed.site


def test_calls_reach_the_compiled_module(installed):
    proc = installed.py(
        """
        import json, torch
        import flash_attn_2_cuda
        from flash_attn import flash_attn_func

        q, k, v = (torch.randn(1, 128, 2, 32, dtype=torch.bfloat16) for _ in range(3))
        out = {}

        def catch(name, call):
            try:
                call()
            except Exception as exc:
                out[name] = [type(exc).__name__, str(exc)]
            else:
                out[name] = None

        catch("func", lambda: flash_attn_func(q, k, v, causal=True))
        catch("fwd", lambda: flash_attn_2_cuda.fwd(
            q, k, v, None, None, 0.0, 32 ** -0.5, True, -1, 0, 0.0, False, None))
        o = torch.empty_like(q)
        lse = torch.empty(1, 2, 128, dtype=torch.float32)
        catch("bwd", lambda: flash_attn_2_cuda.bwd(
            o, q, k, v, o, lse, None, None, None, None, 0.0, 32 ** -0.5, True, -1, 0, 0.0,
            False, None, None))
        print(json.dumps(out))
        """
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # Upstream's op, registered for CUDA only: torch finds no CPU kernel for it.
    kind, message = out["func"]
    assert kind == "NotImplementedError", out
    assert "flash_attn::_flash_attn_forward" in message and "'CPU' backend" in message
    # Upstream's mha_fwd ran: its CUDA device guard is the first thing to see the CPU tensor.
    kind, message = out["fwd"]
    assert kind == "RuntimeError", out
    assert "CUDAGuardImpl initialized with non-CUDA DeviceType: cpu" in message
    # fa-shim's dispatch patch, compiled into mha_bwd: forward-only means no backward pass.
    kind, message = out["bwd"]
    assert kind == "RuntimeError", out
    assert BACKWARD_MESSAGE in message


def test_the_module_defines_each_sources_launcher_and_no_part(installed):
    """Each whole source defines its own entry point; the linked module leaves no launcher
    undefined (one would fail the import) and holds no part's renamed copy."""
    code = r"""
        import glob, json, sys
        from elftools.elf.elffile import ELFFile
        (path,) = glob.glob(sys.argv[1] + "/flash_attn_2_cuda*.so")
        defined, undefined = set(), set()
        with open(path, "rb") as f:
            for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols():
                if "fa_shim" in s.name or "run_mha_fwd" in s.name:
                    (undefined if s["st_shndx"] == "SHN_UNDEF" else defined).add(s.name)
        print(json.dumps({"defined": sorted(defined), "undefined": sorted(undefined)}))
    """
    proc = run(
        [installed.python, "-c", textwrap.dedent(code), installed.site],
        cwd=installed.tmp,
        env=clean_env(),
    )
    symbols = json.loads(proc.stdout)
    assert symbols["undefined"] == []
    assert not [n for n in symbols["defined"] if "fa_shim_launch_" in n or "fa_shim_part" in n]
    entry = [n for n in symbols["defined"] if re.search(r"run_mha_fwd_(splitkv_dispatch)?I", n)]
    assert len(entry) == 4, entry  # each source's own entry point


def test_the_import_guard_names_the_torch_and_the_rebuild(installed):
    """The installed provenance says another torch: importing flash_attn says so, with the fix.
    (Runs last: it edits the installed provenance and puts it back.)"""
    provenance = installed.dist_info / "fa_shim_provenance.json"
    original = provenance.read_text()
    data = json.loads(original)
    data["torch"]["version"] = "2.10.0+cu130"
    provenance.write_text(json.dumps(data))
    try:
        proc = installed.py(
            """
            try:
                import flash_attn
            except ImportError as exc:
                print(exc)
            else:
                print("IMPORTED")
            """
        )
        message = proc.stdout
        assert "IMPORTED" not in message
        assert "flash-attn's flash_attn_2_cuda was built for a different torch" in message
        assert "torch version 2.10.0+cu130 vs 2.11.0" in message
        assert "FLASH_ATTN_IGNORE_TORCH_MISMATCH=1" in message
        rebuild = message.rstrip().splitlines()[-1].split()
        assert rebuild[:3] == [str(installed.python), "-m", "pip"], message
        assert {"install", "--no-build-isolation", "--force-reinstall"} <= set(rebuild), message
        assert rebuild[-1] == str(installed.project), message
        forced = installed.py(
            "import flash_attn; print('IMPORTED')", FLASH_ATTN_IGNORE_TORCH_MISMATCH="1"
        )
        assert forced.stdout.strip() == "IMPORTED"
        verify = run(
            [installed.python, "-m", "fa_backend", "verify", "flash_attn", "--json"],
            check=False,
            cwd=installed.tmp,
            env=clean_env(PYTHONPATH=str(REPO)),
        )
        assert verify.returncode == 1, verify.stdout + verify.stderr
        status = {c["name"]: c["status"] for c in json.loads(verify.stdout)["checks"]}
        assert status["provenance"] == "fail" and status["symbols"] == "pass", status
    finally:
        provenance.write_text(original)
    assert installed.py("import flash_attn; print('IMPORTED')").stdout.strip() == "IMPORTED"
