"""The README stays one screen and then links: its test command is the one CI runs, it fits in
150 lines, and every link in it resolves (file and heading). Its quick start's main-job line is
run verbatim by conftest's `quick_start` (tests/test_quickstart.py). What the README used to
hold is on the documentation site, checked by tests/test_docs.py."""

from __future__ import annotations

import re

from conftest import REPO
from test_docs import resolves

README = (REPO / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    command = "python3 -m pip install -r tests/requirements.txt && python3 -m pytest"
    assert command in README
    assert command in (REPO / ".ci" / "run").read_text()


def test_the_readme_fits_a_screen_then_links():
    assert len(README.splitlines()) <= 150, "the README grew: move the prose to a docs page"
    assert "\n## Quick start\n" in README  # conftest reads the main-job line from this section


def test_every_readme_link_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, "the README links to no docs pages"
    broken = [why for link in local if (why := resolves(link, REPO))]
    assert not broken, "README links that do not resolve:\n" + "\n".join(broken)
