"""The documentation site (docs/, Sphinx + MyST) stays true and whole, read without running
anything (tests/integration/test_docs_build.py builds it, checks the generated pages and runs the
cluster guide's job script):

- Every docs page or anchor that fa-shim's messages point to exists, and no message names a
  README heading.
- What the pages say about the code holds: each troubleshooting row names a message the code
  produces, each provenance key is one the code writes, each `-C key` is a setting, and each
  picture `bench/plots.py` makes is shown.
- bench/ holds only scripts that a page, the README or a test cites, or that such a script runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO, quick_start_command

DOCS = REPO / "docs"
README = REPO / "README.md"
FA_BACKEND = REPO / "fa_backend"


def pages() -> list[Path]:
    """The site's Markdown pages (the build output is not a page)."""
    return [p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts]


def anchors(page: Path) -> set[str]:
    """The `#anchor`s MyST gives a page's headings (GitHub's slugs, levels 1-4, as conf.py's
    myst_heading_anchors), numbered -1, -2 ... where a slug repeats."""
    from markdown_it import MarkdownIt

    try:
        from myst_parser.slugs import github_slugify as slugify
    except ImportError:  # myst-parser < 5.2
        from myst_parser.mdit_to_docutils.base import default_slugify as slugify

    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and int(token.tag[1:]) <= 4:
            inline = tokens[i + 1].children or []
            slug = slugify("".join(c.content for c in inline if c.type in ("text", "code_inline")))
            unique, n = slug, 0
            while unique in found:
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


def resolves(target: str, base: Path) -> str | None:
    """Why a relative link `page.md#anchor` from `base` (a directory) does not resolve, or None."""
    path, _, anchor = target.partition("#")
    page = (base / path).resolve() if path else None
    if page is None or not page.exists():
        return f"{target}: no such file"
    if anchor and page.suffix == ".md" and anchor not in anchors(page):
        return f"{target}: {page.name} has no heading with the anchor #{anchor}"
    return None


# ----------------------------------------------------------- what fa-shim's messages name


def _strings() -> list[tuple[Path, str]]:
    """Every string constant of fa_backend (f-strings' literal parts included)."""
    found = []
    for path in sorted(FA_BACKEND.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((path, node.value))
    return found


def test_every_docs_reference_of_fa_backend_resolves():
    references = {
        (path.relative_to(REPO), m.group(1))
        for path, text in _strings()
        for m in re.finditer(r"\bdocs/([\w./-]+\.md(?:#[\w-]+)?)", text)
    }
    assert references, "fa_backend names no docs page: is the scan broken?"
    broken = [f"{path}: {why}" for path, ref in references if (why := resolves(ref, DOCS))]
    assert not broken, "docs references in fa_backend that do not resolve:\n" + "\n".join(broken)


def test_no_message_points_to_a_readme_heading():
    """Messages point to docs pages (checked above), never to README headings: the README is one
    screen of links and its headings move."""
    named = {
        (str(path.relative_to(REPO)), m.group(0))
        for path, text in _strings()
        for m in re.finditer(r"README, ['\"]?([A-Z][\w -]*?)['\"]?(?=[).,]|$)", text)
    }
    assert not named, named


# --------------------------------------------------------- what the pages say about the code

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
    for path in sorted(FA_BACKEND.rglob("*.py")):
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
    """Can a message of this shape start as the row says? In the row, `…` and the end stand for
    any text; in the message, a HOLE stands for one run-time word (CUDA_HOME, 'x')."""
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


def _section(page: Path, heading: str) -> str:
    return page.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_every_troubleshooting_row_names_a_message_fa_shim_produces():
    section = _section(DOCS / "troubleshooting.md", "Messages and fixes")
    cells = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    rows = [text for cell in cells for text in re.findall(r"`([^`]+)`", cell)]
    assert len(rows) >= 15, "the troubleshooting tables are missing"
    messages = _messages()
    missing = [row for row in rows if not any(_fits(row, m) for m in messages)]
    assert not missing, f"troubleshooting rows that no code produces: {missing}"


def test_every_provenance_key_is_one_the_code_writes():
    table = (DOCS / "reference" / "provenance.md").read_text().split("\n## ", 1)[0]
    keys = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert len(keys) >= 15, "the provenance table is missing"
    strings = {text for _, text in _strings()}
    assert not [k for k in keys if k not in strings], "provenance keys the code does not write"


def test_every_setting_the_docs_use_exists():
    table = (DOCS / "reference" / "settings.md").read_text()
    keys = set(re.findall(r"^\| `([a-z0-9-]+)` \| `FA_SHIM_", table, re.M))
    variables = set(re.findall(r"\| `(FA_SHIM_[A-Z0-9_]+)` \|", table))
    assert len(keys) >= 20 and len(variables) == len(keys), "the settings table is missing"
    # `-C key=value` is the placeholder; fa3-design.md names `-C flavour=fa3` as a rejected design
    known = {f"-C {k}" for k in keys | {"key", "flavour"}} | variables
    unknown = set()
    # the reliability page lists mistyped inputs on purpose (K01: `-C cuda-arch=90`), each
    # with the answer the suite holds it to (tests/integration/test_hostile_inputs.py)
    for page in [README, *(p for p in pages() if p.name != "reliability.md")]:
        text = page.read_text(encoding="utf-8")
        used = {f"-C {k}" for k in re.findall(r"-C ([a-z0-9-]+)=", text)}
        used |= set(re.findall(r"\b(FA_SHIM_[A-Z0-9_]+)=", text))
        unknown |= {f"{page.relative_to(REPO)}: {u}" for u in used - known}
    assert not unknown, f"settings the docs use that do not exist: {sorted(unknown)}"


def test_getting_started_shows_the_readme_main_job():
    """The page repeats the README's main-job line (which the quick-start test runs): the same."""
    text = (DOCS / "getting-started.md").read_text()
    assert quick_start_command() in text.split("```bash\n", 1)[1].split("```", 1)[0]


def test_every_picture_is_made_by_plots_py_and_shown():
    tree = ast.parse((REPO / "bench" / "plots.py").read_text())
    (images,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "IMAGES"
    ]
    assert sorted(p.name for p in (DOCS / "images").iterdir()) == sorted(images), (
        "docs/images/ differs from what bench/plots.py makes: run `python3 bench/plots.py`"
    )
    shown = "".join(page.read_text(encoding="utf-8") for page in pages())
    assert not [i for i in images if f"images/{i})" not in shown], "pictures no page shows"


def test_every_bench_script_is_cited_or_run_by_one_that_is():
    """bench/ keeps what a reader can rerun: a script a docs page, the README or a test names, or
    one such a script runs (bench/results/ is recorded data, not a citation)."""
    scripts = {
        p.name: p.read_text(encoding="utf-8") for p in (REPO / "bench").iterdir() if p.is_file()
    }
    texts = [p.read_text(encoding="utf-8") for p in pages()] + [README.read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("*.py")]

    def named(name: str, text: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(name)}\b", text) is not None

    cited = {name for name in scripts if any(named(name, text) for text in texts)}
    grown = True
    while grown:  # what a cited script runs is cited too
        more = {n for n in scripts.keys() - cited if any(named(n, scripts[c]) for c in cited)}
        cited |= more
        grown = bool(more)
    assert not scripts.keys() - cited, (
        f"bench/ scripts nothing cites: {sorted(scripts.keys() - cited)}"
    )
