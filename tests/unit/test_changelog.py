"""CHANGELOG.md (Keep a Changelog) is where fa-shim's versions come from: its newest released
version is fa_backend's `__version__`, and its releases are listed newest first."""

from __future__ import annotations

import datetime
import re

from conftest import REPO
from packaging.version import Version
from test_docs import resolves

import fa_backend

RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def releases() -> list[tuple[Version, datetime.date]]:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.count("\n## [Unreleased]\n") == 1, "CHANGELOG.md needs one [Unreleased] section"
    return [
        (Version(m["version"]), datetime.date.fromisoformat(m["date"]))
        for m in RELEASE.finditer(text)
    ]


def test_fa_backend_is_the_newest_released_version():
    found = releases()
    assert found, "CHANGELOG.md lists no released version (## [X.Y.Z] - YYYY-MM-DD)"
    assert Version(fa_backend.__version__) == found[0][0], (
        f"fa_backend/core/_version.py says {fa_backend.__version__}, CHANGELOG.md's newest "
        f"release is {found[0][0]}: release in both"
    )


def test_releases_are_listed_newest_first():
    found = releases()
    assert found == sorted(found, reverse=True), "CHANGELOG.md's releases are out of order"
    assert len({version for version, _ in found}) == len(found), "a version is listed twice"


def test_every_changelog_link_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    broken = [why for link in local if (why := resolves(link, REPO))]
    assert not broken, "CHANGELOG.md links that do not resolve:\n" + "\n".join(broken)
