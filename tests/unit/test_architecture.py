"""The shape docs/architecture.md draws, checked on the code: subpackages import only those above
them in its table, no module imports itself back through others (lazy imports and imports for
type checkers alone count too), no module is over 400 lines, and every subpackage's __init__
says what it owns in two lines and does nothing else."""

from __future__ import annotations

import ast
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
    "fleet",
    "pipeline",
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
