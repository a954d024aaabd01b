"""Reading build.ninja with a real ninja: the commands of a good file, and one FaShimError (not a
CalledProcessError) for a file ninja cannot read."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _compile_commands

pytestmark = pytest.mark.skipif(not shutil.which("ninja"), reason="needs the ninja program")

GOOD = """\
rule compile
  command = c++ -c $in -o $out -D_GLIBCXX_USE_CXX11_ABI=1
rule cuda_compile
  command = nvcc -c $in -o $out -gencode arch=compute_90,code=sm_90
build a.o: compile a.cpp
build k.o: cuda_compile k.cu
"""


def test_commands_of_a_good_build_ninja(tmp_path):
    (tmp_path / "build.ninja").write_text(GOOD)
    commands = _compile_commands.read(tmp_path / "build.ninja")
    assert [(c.kind, c.file) for c in commands] == [("cxx", "a.cpp"), ("nvcc", "k.cu")]
    assert commands[0].last_define(_compile_commands.ABI_DEFINE) == "1"
    assert commands[1].values("-gencode") == ["arch=compute_90,code=sm_90"]


def test_a_broken_build_ninja_is_one_fa_shim_error(tmp_path):
    ninja_file = tmp_path / "build.ninja"
    ninja_file.write_text(GOOD + "build b.o: no_such_rule b.cpp\n")
    with pytest.raises(FaShimError) as caught:
        _compile_commands.read(ninja_file)
    error = caught.value
    assert not isinstance(error.__context__, subprocess.CalledProcessError)
    assert "ninja -f build.ninja -t compdb compile" in error.cause
    assert f"in {tmp_path}" in error.cause
    assert "unknown build rule 'no_such_rule'" in error.details  # ninja's own words
    assert error.fix and str(ninja_file) in error.fix
