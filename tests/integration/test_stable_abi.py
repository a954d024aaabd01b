"""verify's rule for a module built against torch's stable ABI (verify/_stable_abi.py), on
modules and torches described here: which symbols are torch's, what is refused and named, and
how the headers' declarations and their feature-version gates are read. The real module against
real torches: tests/test_fa3_build.py."""

from __future__ import annotations

from pathlib import Path

from fa_backend.toolchain._torch import TorchInfo
from fa_backend.verify import _stable_abi
from fa_backend.verify._elf import ElfModule
from fa_backend.verify._report import FAIL, PASS

SHIM_H = """\
#pragma once
#include <torch/csrc/inductor/aoti_torch/c/macros.h>
#ifdef __cplusplus
extern "C" {
#endif
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle t, void** ret);
AOTI_TORCH_EXPORT AOTITorchError
aoti_torch_library_impl(TorchLibraryHandle self, const char* name, void (*fn)(void));
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device, void** ret);
#endif
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError torch_call_dispatcher(const char* op, void* stack);
#else
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_call_dispatcher(const char* op, void* stack);
#endif
#ifdef __cplusplus
}
#endif
"""
STD = "_ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev"  # libc10 re-exports it
C10 = "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


class Exports:
    """What torch's libraries export here, by library (TorchExports' interface)."""

    def __init__(self, by_lib: dict[str, set[str]]) -> None:
        self.by_lib = by_lib
        self.libs = list(by_lib)

    def provider(self, name: str) -> str | None:
        return next((lib for lib, names in self.by_lib.items() if name in names), None)


TORCH_211 = Exports(
    {
        "libc10.so": {STD, C10},
        "libtorch_cpu.so": {
            "aoti_torch_get_data_ptr",
            "aoti_torch_library_impl",
            "aoti_torch_call_dispatcher",
            "torch_call_dispatcher",
        },
        "libtorch_cuda.so": {"aoti_torch_get_current_cuda_stream"},
    }
)


def _torch(tmp_path: Path, version: str = "2.11.0+cu130", headers: str | None = SHIM_H):
    package = tmp_path / version / "torch"
    shim = package / "include" / "torch" / "csrc" / "inductor" / "aoti_torch" / "c"
    shim.mkdir(parents=True)
    if headers is not None:
        (shim / "shim.h").write_text(headers)
    return TorchInfo(version, "13.0", 1, None, str(package), "c++17", "python", False)


def _module(*undefined: str) -> list[ElfModule]:
    needed = ["libc10.so", "libtorch_cpu.so", "libcudart.so.13", "libstdc++.so.6"]
    return [ElfModule(Path("_C.abi3.so"), list(undefined), needed, None)]


GOOD = _module(
    "aoti_torch_get_data_ptr",
    "aoti_torch_library_impl",
    "aoti_torch_get_current_cuda_stream",
    "aoti_torch_call_dispatcher",
    STD,  # std::, exported by libc10 too: libstdc++'s all the same
    "cudaLaunchKernelExC",
    "PyModule_Create2",
    "memcpy",
)


def test_declarations_and_their_gates():
    found = _stable_abi._declarations_in(SHIM_H, "shim.h")
    assert set(found) == {
        "aoti_torch_get_data_ptr",
        "aoti_torch_library_impl",  # declared over two lines
        "aoti_torch_get_current_cuda_stream",  # under #ifdef USE_CUDA: not a gate
        "torch_call_dispatcher",
        "aoti_torch_call_dispatcher",  # the #else branch: ungated
    }
    assert found["torch_call_dispatcher"].gate == "2.10.0"
    assert found["aoti_torch_call_dispatcher"].gate is None
    assert found["aoti_torch_library_impl"].gate is None


def test_a_stable_module_passes_and_says_why(tmp_path):
    check = _stable_abi.check(GOOD, _torch(tmp_path), TORCH_211, "2.9.0", "rebuild")
    assert check.status == PASS, check
    assert check.summary.startswith("stable ABI (torch >= 2.9.0): the module takes 4 symbols from")
    assert "libtorch_cpu.so, libtorch_cuda.so export; no C++ symbol of torch" in check.summary
    assert _stable_abi.looks_stable(GOOD)


def test_a_cxx_symbol_of_torch_is_refused_by_name(tmp_path):
    modules = _module(*GOOD[0].undefined, C10)
    check = _stable_abi.check(modules, _torch(tmp_path), TORCH_211, "2.9.0", "pip install x")
    assert check.status == FAIL
    assert "takes 1 C++ symbol of torch" in check.summary
    assert "it is not a stable-ABI module" in check.summary
    assert "torchCheckFail" in check.details[0] and "(from libc10.so)" in check.details[0]
    assert not _stable_abi.looks_stable(modules)


def test_an_older_torch_without_a_shim_function_is_named(tmp_path):
    older = Exports({k: v - {"aoti_torch_library_impl"} for k, v in TORCH_211.by_lib.items()})
    older_headers = SHIM_H.replace("aoti_torch_library_impl", "aoti_torch_other")
    check = _stable_abi.check(GOOD, _torch(tmp_path, "2.8.0", older_headers), older, "2.9.0", "r")
    assert check.status == FAIL
    assert (
        "aoti_torch_library_impl: torch 2.8.0 neither declares nor exports it (older than the "
        "module needs)"
    ) in check.details
    assert "install a torch that has them (>= 2.9.0)" in check.fix


def test_a_shim_function_newer_than_the_floor_is_refused(tmp_path):
    """torch_call_dispatcher is declared from 2.10 on: a module claiming 2.9 must not take it."""
    modules = _module("aoti_torch_get_data_ptr", "torch_call_dispatcher")
    check = _stable_abi.check(modules, _torch(tmp_path), TORCH_211, "2.9.0", "rebuild")
    assert check.status == FAIL
    assert any("declare it for torch >= 2.10.0 only" in d for d in check.details), check.details
    later = _stable_abi.check(modules, _torch(tmp_path / "b"), TORCH_211, "2.10.0", "r")
    assert later.status == PASS


def test_a_cpu_torch_declares_the_cuda_shim_without_exporting_it(tmp_path):
    cpu = Exports({k: v for k, v in TORCH_211.by_lib.items() if k != "libtorch_cuda.so"})
    check = _stable_abi.check(GOOD, _torch(tmp_path, "2.11.0+cpu"), cpu, "2.9.0", "rebuild")
    assert check.details == [
        "aoti_torch_get_current_cuda_stream: torch 2.11.0+cpu's headers declare it, its "
        "libraries do not export it (a CPU-only torch?)"
    ]


def test_an_exported_c_symbol_no_header_declares_is_refused(tmp_path):
    exports = Exports({**TORCH_211.by_lib, "libtorch_cpu.so": {"at_internal_thing"}})
    modules = _module("at_internal_thing")
    check = _stable_abi.check(modules, _torch(tmp_path), exports, "2.9.0", "rebuild")
    assert check.status == FAIL
    assert "not a C shim function torch 2.11.0+cu130's headers declare" in check.details[0]


def test_an_ungated_shim_function_the_floor_lacks_is_refused(tmp_path):
    """torch declares aoti_torch_* functions without a version gate: one that torch 2.10.0's
    headers lack (vendored_patches/stable-abi/shim-2.10.0.txt) refuses a module of that floor."""
    newer = "aoti_torch_mps_gcd"  # declared, ungated, by torch 2.14.1's headers; not by 2.10.0's
    assert newer not in _stable_abi.declared_at("2.10.0")
    headers = SHIM_H.replace(
        "#ifdef USE_CUDA", f"AOTI_TORCH_EXPORT AOTITorchError {newer}();\n#ifdef USE_CUDA"
    )
    cpu = TORCH_211.by_lib["libtorch_cpu.so"] | {newer}
    exports = Exports({**TORCH_211.by_lib, "libtorch_cpu.so": cpu})
    modules = _module("aoti_torch_get_data_ptr", newer)
    check = _stable_abi.check(modules, _torch(tmp_path, headers=headers), exports, "2.10.0", "r")
    assert check.status == FAIL
    assert check.details == [
        f"{newer}: torch 2.10.0's headers, the module's floor, do not declare it (torch "
        "2.11.0+cu130's declare it without a version gate)"
    ]
    floor_has = _module("aoti_torch_get_data_ptr", "aoti_torch_library_impl")
    assert (
        _stable_abi.check(floor_has, _torch(tmp_path / "b"), TORCH_211, "2.10.0", "r").status
        == PASS
    )
    assert _stable_abi.declared_at("2.9.0") is None  # not recorded: ungated ones pass unchecked
