"""The README stays true: its settings table is the one generated from the model, its test
command is the one CI runs, and every message its troubleshooting table names is one fa-shim's
code produces."""

from __future__ import annotations

import ast
import re

from conftest import REPO

from fa_backend.settings import _settings

README = (REPO / "README.md").read_text()


def test_settings_table_is_generated_from_the_model():
    table = re.search(
        r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", README, re.S
    )
    assert table, "settings table markers missing"
    assert table.group(1) == _settings.reference_markdown(), (
        "README settings table is stale: regenerate it with `python -m fa_backend settings`"
    )


def test_ci_runs_the_readme_test_command():
    command = "python3 -m pip install -r tests/requirements.txt && python3 -m pytest"
    assert command in README
    assert command in (REPO / ".ci" / "run").read_text()


# ------------------------------------------------------------------ the troubleshooting table

HOLE = "\0"  # a value only known at run time: {version}, {path!r}, a variable


def _alternatives(node: ast.AST, names: dict[str, list[str]]) -> list[str]:
    """The texts a string expression of fa_backend can take, HOLE for each run-time value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        texts = [""]
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                options = _alternatives(part.value, names)
                if part.conversion == ord("r"):
                    options = [f"'{o}'" for o in options]
            else:
                options = [part.value]
            texts = [t + o for t in texts for o in options][:64]
        return texts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _alternatives(node.left, names), _alternatives(node.right, names)
        return [a + b for a in left for b in right][:64]
    if isinstance(node, ast.IfExp):
        return _alternatives(node.body, names) + _alternatives(node.orelse, names)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    return [HOLE]


def _messages() -> set[str]:
    """Every text fa_backend's code can build from string literals, f-strings, `+` and
    conditional expressions, a local variable holding such a text substituted where used."""
    found: set[str] = set()
    for path in sorted((REPO / "fa_backend").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
            names = {
                n.targets[0].id: _alternatives(n.value, {})
                for n in ast.walk(scope)
                if isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
            }
            for node in ast.walk(scope):
                if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.IfExp)):
                    found.update(t for t in _alternatives(node, names) if t.strip(HOLE))
    return found


def _fits(row: str, message: str) -> bool:
    """Can a message of this shape start as the README row says? In the row, `…` and the end
    stand for any text; in the message, a HOLE stands for one run-time word (CUDA_HOME, 'x')."""
    a, b = row + "…", message
    seen, todo = set(), [(0, 0)]  # (i, j): a[i:] and b[j:] are still to be matched
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "…":
            todo += [(i + 1, j), *([(i, j + 1)] if j < len(b) else [])]
        elif j < len(b) and b[j] == HOLE:
            todo += [(i, j + 1), *([(i + 1, j)] if i < len(a) and a[i] != " " else [])]
        elif i < len(a) and j < len(b) and a[i] == b[j]:
            todo.append((i + 1, j + 1))
    return False


def test_every_troubleshooting_row_names_a_message_fa_shim_produces():
    section = README.split("\n## Troubleshooting\n", 1)[1].split("\n## ", 1)[0]
    cells = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    rows = [text for cell in cells for text in re.findall(r"`([^`]+)`", cell)]
    assert len(rows) >= 15, "the troubleshooting table is missing"
    messages = _messages()
    missing = [row for row in rows if not any(_fits(row, m) for m in messages)]
    assert not missing, f"README troubleshooting rows that no code produces: {missing}"
