"""The documentation site (docs/, Sphinx + MyST) stays true and whole.

- It builds in strict mode: a broken link, a `page.md#anchor` naming no heading of that page,
  a page in no toctree or any other warning fails the build (`-W --keep-going -n`); a small
  project with the same configuration shows that each of these does fail it.
- The generated pages (settings, command line, supported versions) are what `docs/generate.py`
  writes now.
- Every docs page or anchor that fa-shim's messages point to exists, and no message names a
  README heading.
- What the pages say about the code holds: each troubleshooting row names a message the code
  produces, each provenance key is one the code writes, each `-C key` is a setting, and each
  picture `bench/plots.py` makes is shown.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, quick_start_command

DOCS = REPO / "docs"
README = REPO / "README.md"
FA_BACKEND = REPO / "fa_backend"
STRICT = ["-W", "--keep-going", "-n", "-q"]


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sphinx", *STRICT, "-b", "html", "-d", out / "doctrees"]
    return subprocess.run(
        [*command, source, out / "html"],
        capture_output=True,
        text=True,
    )


def pages() -> list[Path]:
    """The site's Markdown pages (raw run data and build output are not pages)."""
    skip = {"gpu-runs", "cpu-runs", "_build"}
    return [p for p in DOCS.rglob("*.md") if not skip & set(p.relative_to(DOCS).parts)]


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


# -------------------------------------------------------------------------------- the site


def test_the_site_builds_in_strict_mode(tmp_path):
    proc = sphinx_build(DOCS, tmp_path)
    assert proc.returncode == 0, (
        "the documentation does not build in strict mode (every warning is an error):\n"
        + proc.stderr[-6000:]
    )
    assert (tmp_path / "html" / "guides" / "cluster.html").is_file()


MINIMAL = {
    "index.md": "# Home\n\n[there](page.md#a-heading)\n\n```{toctree}\npage\n```\n",
    "page.md": "# Page\n\n## A heading\n",
}
BREAKAGES = {
    "broken link": ("index.md", "[gone](missing.md)\n", "cross-reference target not found"),
    "missing anchor": ("index.md", "[gone](page.md#no-such-heading)\n", "local id not found"),
    "page in no toctree": ("orphan.md", "# Orphan\n", "isn't included in any toctree"),
}


def _minimal_site(root: Path) -> Path:
    root.mkdir()
    shutil.copy(DOCS / "conf.py", root / "conf.py")
    for name, text in MINIMAL.items():
        (root / name).write_text(text)
    return root


def test_the_minimal_site_builds(tmp_path):
    """The control for the breakage tests: the same small site, unbroken, builds."""
    proc = sphinx_build(_minimal_site(tmp_path / "site"), tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_strict_build_fails_on(breakage, tmp_path):
    site = _minimal_site(tmp_path / "site")
    name, text, warning = BREAKAGES[breakage]
    with (site / name).open("a") as f:
        f.write(text)
    proc = sphinx_build(site, tmp_path)
    assert proc.returncode != 0, f"a {breakage} did not fail the strict build"
    assert warning in proc.stderr, proc.stderr


# ------------------------------------------------------------------------ generated pages


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_current():
    stale = _generator().stale()
    assert not stale, (
        "generated documentation pages are stale; regenerate them with "
        "`python3 docs/generate.py`:\n" + "\n".join(diff for _, diff in stale)[-6000:]
    )


def test_the_staleness_check_can_fail(tmp_path, monkeypatch):
    generate = _generator()
    shutil.copytree(DOCS / "reference", tmp_path / "reference")
    page = tmp_path / "reference" / "settings.md"
    page.write_text(page.read_text().replace("| `max-jobs` |", "| `max-jobz` |"))
    monkeypatch.setattr(generate, "DOCS", tmp_path)
    assert [path for path, _ in generate.stale()] == [page]


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
    for page in [README, *pages()]:
        text = page.read_text(encoding="utf-8")
        used = {f"-C {k}" for k in re.findall(r"-C ([a-z0-9-]+)=", text)}
        used |= set(re.findall(r"\b(FA_SHIM_[A-Z0-9_]+)=", text))
        unknown |= {f"{page.relative_to(REPO)}: {u}" for u in used - known}
    assert not unknown, f"settings the docs use that do not exist: {sorted(unknown)}"


def test_getting_started_shows_the_readme_main_job():
    """The page repeats the README's main-job line (which the quick-start test runs): the same."""
    text = (DOCS / "getting-started.md").read_text()
    assert quick_start_command() in text.split("```bash\n", 1)[1].split("```", 1)[0]


def _job_script() -> str:
    """The cluster guide's sbatch script."""
    text = (DOCS / "guides" / "cluster.md").read_text()
    (script,) = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "#SBATCH" in b]
    return script


def test_the_cluster_job_script_sizes_its_jobs_from_the_allocation(tmp_path):
    """Its job-sizing lines, run by bash with a job's variables: one job per 6 GiB of --mem, at
    most one per CPU, at least one."""
    script = _job_script()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    start = script.index("jobs=$(( SLURM_MEM_PER_NODE")
    sizing = script[start : script.index("export FA_SHIM_MAX_JOBS", start)] + 'echo "$jobs"\n'
    for mem_mb, cpus, jobs in ((98304, 16, 16), (24576, 16, 4), (98304, 2, 2), (4096, 8, 1)):
        env = {"PATH": "/usr/bin:/bin", "SLURM_MEM_PER_NODE": str(mem_mb)}
        env["SLURM_CPUS_PER_TASK"] = str(cpus)
        out = subprocess.run(["bash", "-c", sizing], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == str(jobs), (mem_mb, cpus, out.stdout, out.stderr)


def test_the_cluster_job_script_reaches_fa_shim_through_its_variables(tmp_path):
    """The script up to its `doctor` line, on this machine (no Slurm, no GPU: doctor reports the
    CPU-only torch, but first what a build would run): the job sizing arrives as its settings."""
    script = _job_script()
    head = script[: script.index("python -m fa_backend doctor")] + "python3 -m fa_backend doctor\n"
    head = re.sub(r"^source .*$", ":", head, flags=re.M)
    head = head.replace("/shared/src/fa-shim", str(REPO)).replace("/shared", str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env.update(SLURM_MEM_PER_NODE="24576", SLURM_CPUS_PER_TASK="16")
    proc = subprocess.run(["bash", "-c", head], env=env, capture_output=True, text=True)
    assert "-> 4 compile job(s) x 1 nvcc thread(s)" in proc.stdout, proc.stdout + proc.stderr


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
