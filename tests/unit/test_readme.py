"""The README stays one screen and then links: its test command is the one CI runs, it fits in
80 lines, and every link in it resolves (file and heading). Its quick start's main-job line is
run verbatim by conftest's `quick_start` (tests/e2e/test_quickstart.py), and names every build
requirement. What the README used to hold is on the documentation site, checked by
tests/unit/test_docs.py and tests/integration/test_docs_build.py."""

from __future__ import annotations

import re

from conftest import REPO, quick_start_command
from test_docs import resolves

from fa_backend.toolchain import _requirements

README = (REPO / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    command = "python3 -m pip install -r tests/requirements.txt && python3 -m pytest"
    assert command in README
    assert command in (REPO / ".ci" / "run").read_text()


def test_the_readme_fits_a_screen_then_links():
    assert len(README.splitlines()) <= 80, "the README grew: move the prose to a docs page"
    assert "\n## Quick start\n" in README  # conftest reads the main-job line from this section


def test_every_readme_link_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, "the README links to no docs pages"
    broken = [why for link in local if (why := resolves(link, REPO))]
    assert not broken, "README links that do not resolve:\n" + "\n".join(broken)


def test_quick_start_names_every_build_requirement():
    """A cheap guard: each [build-system] requirement appears in the command (the real run below
    shows the specifiers are enough)."""
    command = quick_start_command()
    assert command.startswith("python3 -m pip install torch==2.11.0 "), command
    assert command.endswith("&& python3 -m pip install --no-build-isolation ."), command
    for requirement in _requirements.requirements():
        assert re.search(rf"(^|[\s\"']){re.escape(requirement.name)}\b", command), (
            f"README's quick start does not install {requirement.name}"
        )
