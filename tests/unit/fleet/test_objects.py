"""fleet/_objects.Keys over real files, with what reaches nvcc beyond its command line given as
values (toolchain/_compilers.nvcc_inputs' shape; its probes: tests/integration/
test_object_cache.py): each input changes the key, and an include directory of torch's, Python's
or outside the tree and the toolkit, wherever it is named, is excluded."""

from __future__ import annotations

from pathlib import Path

from fa_backend.fleet import _objects
from fa_backend.toolchain._compilers import NVCC_ENV


def _inputs(**env: str) -> dict:
    return {
        "env": {**dict.fromkeys(NVCC_ENV), **env},
        "nvcc": ["/cuda/bin/nvcc", "release 13.0, V13.0.88"],
        "host": ["/usr/bin/gcc-12", "gcc 12.2.0"],
    }


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    tree, toolkit = tmp_path / "scratch", tmp_path / "env"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "k.cu").write_text('#include "k.h"\n')
    (tree / "csrc" / "k.h").write_text("#define K 1\n")
    (toolkit / "include").mkdir(parents=True)
    return tree.resolve(), toolkit.resolve()


def _key(tree: Path, toolkit: Path, inputs: dict, *args: str, **kw) -> tuple[str, set[Path]]:
    keys = _objects.Keys(tree, toolkit, inputs, **kw)
    source = str(tree / "csrc" / "k.cu")
    key = keys.key([f"-I{tree / 'csrc'}", "-c", source, "-o", "k.o", *args], source, tree)
    return key, keys.excluded


def test_each_input_beyond_the_command_line_changes_the_key(tmp_path):
    tree, toolkit = _layout(tmp_path)
    base, _ = _key(tree, toolkit, _inputs())
    for name in NVCC_ENV:
        assert _key(tree, toolkit, _inputs(**{name: "/opt/x"}))[0] != base, name
    for program in ("nvcc", "host"):
        other = {**_inputs(), program: ["/other", "9.9"]}
        assert _key(tree, toolkit, other)[0] != base, program


def test_include_directories_from_the_environment_are_classified_as_the_commands_are(tmp_path):
    """An -I in NVCC_PREPEND_FLAGS to the tree is keyed by its place in the tree (the files read
    there: the entry's includes); a CPATH or NVCC_APPEND_FLAGS directory outside the tree and
    the toolkit is excluded (a unit reading it is not kept)."""
    tree, toolkit = _layout(tmp_path)
    (tree / "extra").mkdir()
    outside = tmp_path / "opt"
    inputs = _inputs(
        NVCC_PREPEND_FLAGS=f"-I{tree / 'extra'}",
        NVCC_APPEND_FLAGS=f"-I {outside / 'a'}",
        CPATH=f"{outside / 'b'}:{toolkit / 'include'}",
    )
    before, excluded = _key(tree, toolkit, inputs)
    assert excluded == {(outside / "a").resolve(), (outside / "b").resolve()}
    (tree / "extra" / "x.h").write_text("#define X 1\n")  # read or not: the manifest's to say
    assert _key(tree, toolkit, inputs)[0] == before
    keys = _objects.Keys(tree, toolkit, inputs)
    source = str(tree / "csrc" / "k.cu")
    key = keys.key(["-c", source, "-o", str(tree / "k.o")], source, tree)
    assert keys.flags[key] == ["-I./extra", "-c"]  # the command line as keyed, paths relative


def test_torch_and_python_inside_the_toolkit_root_are_excluded_not_toolkit(tmp_path):
    """conda: the toolkit root is the environment, which holds torch and Python's headers."""
    tree, toolkit = _layout(tmp_path)
    torch = toolkit / "lib" / "python3.11" / "site-packages" / "torch"
    python = toolkit / "include" / "python3.11"
    args = (f"-I{torch / 'include'}", f"-I{python}", f"-I{toolkit / 'include'}")
    _, excluded = _key(tree, toolkit, _inputs(), *args, foreign=[str(torch), str(python)])
    assert excluded == {torch, python, torch / "include"}  # the toolkit's own include is not
    assert _key(tree, toolkit, _inputs(), *args)[1] == set()  # without them: all "toolkit"
