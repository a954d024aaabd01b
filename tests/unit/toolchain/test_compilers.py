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
