"""A torch-free kernel's nvcc flags (resources/upstream_driver.torch_free): torch's and Python's
include paths and torch's defines go, the tree's and the toolkit's paths and the C++ ABI define
stay, in a venv and in a conda-style environment whose prefix is also the toolkit's."""

from __future__ import annotations

import shlex

from fa_backend.resources.upstream_driver import torch_and_python_dirs, torch_free


def _layout(root, conda: bool = False) -> dict:
    env = root / "env"
    dirs = {
        "torch": env / "lib/python3.12/site-packages/torch",
        "python": env / "include/python3.12",
        "venv_include": env / "include",
        "cuda_include": env / "include" if conda else root / "cuda/include",
        "tree": root / "src/csrc/flash_attn",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def _flags(d: dict) -> tuple[list[str], list[str]]:
    """cuda_cflags and cuda_post_cflags as torch's cpp_extension passes them (quoted words)."""
    cflags = [
        f"-I{d['tree']}",
        f"-I{d['torch'] / 'include'}",
        f"-I{d['torch'] / 'include/torch/csrc/api/include'}",
        f"-I{d['cuda_include']}",
        f"-I{d['venv_include']}",
        f"-I{d['python']}",
    ]
    post = [
        "-O3",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        '-DPYBIND11_COMPILER_TYPE="_gcc"',
        '-DPYBIND11_STDLIB="_libstdcpp"',
        '-DPYBIND11_BUILD_ABI="_cxxabi1018"',
        "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
        "-DPy_LIMITED_API=0x030a0000",
        "-gencode=arch=compute_80,code=sm_80",
        "-std=c++17",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
    ]
    return [shlex.quote(f) for f in cflags], [shlex.quote(f) for f in post]


def _dirs(d: dict) -> list[str]:
    return torch_and_python_dirs(
        str(d["torch"]), [str(d["python"])], str(d["venv_include"]), str(d["cuda_include"])
    )


def test_a_venvs_torch_and_python_paths_and_torchs_defines_go(tmp_path):
    d = _layout(tmp_path)
    cflags, post = _flags(d)
    assert torch_free(cflags, _dirs(d)) == [f"-I{d['tree']}", f"-I{d['cuda_include']}"]
    assert [shlex.split(f)[0] for f in torch_free(post, _dirs(d))] == [
        "-O3",
        "-gencode=arch=compute_80,code=sm_80",
        "-std=c++17",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
    ]


def test_in_a_conda_environment_the_toolkits_include_directory_stays(tmp_path):
    d = _layout(tmp_path, conda=True)  # CUDA_HOME is the environment's prefix
    cflags, _ = _flags(d)
    assert torch_free(cflags, _dirs(d)) == [
        f"-I{d['tree']}",
        f"-I{d['cuda_include']}",
        f"-I{d['venv_include']}",  # the same directory: the toolkit's headers are in it
    ]


def test_two_torch_environments_give_the_same_kernel_flags(tmp_path):
    one, other = _layout(tmp_path / "a"), _layout(tmp_path / "b")
    other["tree"], other["cuda_include"] = one["tree"], one["cuda_include"]  # one source slot
    assert torch_free(_flags(one)[0], _dirs(one)) == torch_free(_flags(other)[0], _dirs(other))
