"""toolchain/_compilers: ninja as the build's PATH finds it, "not installed" told from
"installed beside the interpreter, not on PATH" (the second case runs ninja: tests/integration/
test_hostile_inputs.py)."""

from __future__ import annotations

from fa_backend.toolchain import _compilers


def test_ninja_nowhere_is_not_installed(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "scripts").mkdir()
    problem = _compilers.ninja_problem(str(tmp_path / "bin"), str(tmp_path / "scripts"))
    assert problem is not None
    assert problem.cause.startswith("ninja is not installed (not on PATH, nor beside")
    assert "-m pip install ninja" in problem.fix


def test_one_list_names_every_variable_that_reaches_nvcc_and_the_fingerprint_holds_them_all():
    """The object key (fleet/_objects) and the wheel fingerprint (pipeline/_provenance) read
    COMPILER_ENV; those that reach nvcc or its host compiler are NVCC_ENV, the key's part."""
    issue = ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "PYTORCH_NVCC", "CPATH"]
    issue += ["C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"]
    assert set(issue) <= set(_compilers.NVCC_ENV) <= set(_compilers.COMPILER_ENV)
    assert {*_compilers.INCLUDE_PATH_ENV, *_compilers.NVCC_FLAGS_ENV} <= set(_compilers.NVCC_ENV)
    # torch's C++ compile of the binding only: objects of every CXX share
    assert not {"CXX", "CXXFLAGS", "LDFLAGS"} & set(_compilers.NVCC_ENV)


def test_the_host_compiler_a_command_names():
    assert _compilers.ccbin_in(["-O3", "-ccbin", "gcc-12", "-c"]) == "gcc-12"
    assert _compilers.ccbin_in(["--compiler-bindir=/opt/gcc/bin"]) == "/opt/gcc/bin"
    assert _compilers.ccbin_in(["-O3", "-ccbin"]) is None  # nvcc's own error, not a name
    assert _compilers.ccbin_in(["-Xcompiler", "-fPIC"]) is None


def test_an_include_path_relative_to_each_compile_cannot_be_keyed():
    assert _compilers.unkeyable_paths({"CPATH": "/opt/a:/opt/b"}) is None
    assert _compilers.unkeyable_paths({"CPATH": None, "C_INCLUDE_PATH": ""}) is None  # unset
    empty = _compilers.unkeyable_paths({"CPLUS_INCLUDE_PATH": ":/opt/a"})  # `$X:/opt/a`, X unset
    assert (
        empty
        == "CPLUS_INCLUDE_PATH=':/opt/a' holds an empty entry (the compile's working directory)"
    )
    relative = _compilers.unkeyable_paths({"CPATH": "/opt/a:include"})
    assert relative and "the relative directory 'include'" in relative


def test_a_program_not_found_or_unsplittable_is_not_keyed(tmp_path):
    assert _compilers.program(str(tmp_path / "no-such-nvcc")) is None
    assert _compilers.program("gcc", search=str(tmp_path)) is None  # not on that PATH
    assert _compilers.program("'unbalanced") is None
    inputs, why = _compilers.nvcc_inputs(tmp_path / "nvcc", None, {"NVCC_APPEND_FLAGS": "-D'x"})
    assert inputs["env"]["NVCC_APPEND_FLAGS"] == "-D'x" and why and "do not split" in why
