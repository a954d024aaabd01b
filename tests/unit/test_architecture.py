"""The shape docs/architecture.md draws, checked on the code: subpackages import only those above
them in its table, no module imports itself back through others (lazy imports and imports for
type checkers alone count too), no module is over 400 lines, every subpackage's __init__
says what it owns in two lines and does nothing else, and a flavour's facts stay in flavours/."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "fa_backend"
# docs/architecture.md's table, top to bottom
LAYERS = [
    "core",
    "resources",
    "settings",
    "sources",
    "wheel",
    "toolchain",
    "schedule",
    "flavours",
    "verify",
    "pipeline",
    "fleet",
    "cli",
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The fa_backend modules a module imports, anywhere in it (in functions, for type checkers)."""
    tree = ast.parse(path.read_text())
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.startswith("fa_backend"):
            target = node.module
        else:
            continue
        for alias in node.names:
            candidate = f"{target}.{alias.name}"
            found.add(candidate if _exists(candidate) else target)
    return found


def _exists(module: str) -> bool:
    path = REPO.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None


def test_subpackages_import_only_those_above_them():
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if _layer(module) is not None
        and _layer(target) is not None
        and _layer(target) > _layer(module)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_build_is_reached_only_through_its_seam():
    """The hooks, fleet/ and the CLI wrap the build: pipeline/api.py is all they see of it."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if not module.startswith("fa_backend.pipeline.")
        for target in targets
        if target.startswith("fa_backend.pipeline.") and target != "fa_backend.pipeline.api"
    ]
    assert not wrong, "\n".join(wrong)
    assert "fa_backend.pipeline.api" in GRAPH["fa_backend.fleet._cached"]


# what the files run by path or shipped in wheels act on, never helpers they lean on
ACTED_ON = {"torch", "setuptools"}


def test_resources_import_only_the_standard_library():
    """They run by path in other interpreters (a teammate's, upstream's build), without
    fa_backend or packaging there; a wrapper the launcher is given is named, not imported."""
    wrong = []
    for path in sorted((PACKAGE / "resources").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or "")]
            wrong += [
                f"{path.name} imports {name}"
                for name in names
                if name.startswith(".")
                or name.split(".")[0] not in sys.stdlib_module_names | ACTED_ON
            ]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back():
    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in GRAPH.get(node, ()):
                if nxt == start:
                    return [*path, start]
                if nxt not in path and nxt in GRAPH:
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = {" -> ".join(c) for m in GRAPH if (c := cycle_from(m))}
    assert not cycles, "\n".join(sorted(cycles))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_400_lines(module):
    assert len(MODULES[module].read_text().splitlines()) <= 400


def test_each_subpackage_says_what_it_owns_and_does_nothing_else():
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == PACKAGE:
            continue
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc.splitlines()) == 2, init
        assert len(tree.body) == 1 or init.parent.name == "resources", init  # paths only there


def _flavour_words() -> tuple[set[str], set[str], set[str]]:
    """(the built-in flavours' names, their knobs of several words, their one-word knobs): the
    knobs are each built-in flavour's own settings (in both spellings, `tu-parts`/`tu_parts`)
    and the names of its compile shape (Sizing.shape), read off the code."""
    from fa_backend.flavours import _registry
    from fa_backend.flavours.fa2 import _flavour as fa2
    from fa_backend.flavours.fa3 import _flavour as fa3

    knobs = {s.key for name in _registry.BUILT_IN for s in _registry.get(name).own_settings}
    knobs |= {k.replace("-", "_") for k in knobs} | {fa2.PARTS, fa3.GROUP}
    several = {k for k in knobs if re.search(r"[-_]", k)}
    return set(_registry.BUILT_IN), several, knobs - several


def _names_a_flavour(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    flavours, several, single = _flavour_words()
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    words = sorted(flavours | several, key=len, reverse=True)
    in_text = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, words)) + r")(?![\w-])")
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if id(node) not in docstrings and (text in single or in_text.search(text)):
                lines.add(node.lineno)
            continue
        if isinstance(node, ast.Attribute):  # `m.group(1)` is re's, not FA3's group
            name, one_word_counts = node.attr, id(node) not in called or node.attr != "group"
        elif isinstance(node, (ast.Name, ast.arg, ast.keyword, ast.FunctionDef, ast.ClassDef)):
            name, one_word_counts = getattr(node, "id", None) or getattr(node, "arg", None), False
            name = name or getattr(node, "name", None)
        else:
            continue
        if not name:
            continue
        bare = name.strip("_")
        if (
            bare in several
            or set(bare.split("_")) & flavours
            or (one_word_counts and bare in single)
        ):
            lines.add(node.lineno)
    return sorted(lines)


def test_outside_flavours_at_most_five_lines_name_a_flavour_or_its_knobs():
    """A flavour owns its facts (docs/architecture.md): outside fa_backend/flavours/, at most 5
    lines name one. A line names a flavour or one of its knobs when, comments and docstrings
    aside, it holds one of the built-in flavours' names ("fa2", "fa3") or their knobs
    (_flavour_words: each one's own settings, both spellings, and its compile shape's names):
    - an identifier (a name, an attribute, a parameter, a keyword, a def) that is one, or of
      which a flavour's name is a `_`-separated part (`fa3_sources`);
    - a string, docstrings aside, that is one, or that holds a flavour's name or a knob of
      several words as a whole word (`"-C sdist-dir=DIR"`).
    A one-word knob (`sdist`, `group`) is also a plain word of packaging and of `re`: it counts
    as a whole string or an attribute (`settings.sdist`), never as a local name, a parameter or
    prose, and `.group(...)` called is a regex match's."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {path.read_text().splitlines()[line - 1].strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "flavours" not in path.relative_to(PACKAGE).parts
        for line in _names_a_flavour(path)
    ]
    assert len(found) <= 5, "\n".join(found)
