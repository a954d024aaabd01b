"""The report doctor prints: what a build would use (a line and a --json section per topic) and
the problems found, each with its fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..resources import PROJECT
from ..verify._report import ERROR, WARNING, Check, Report, plural


@dataclasses.dataclass
class DoctorReport(Report):
    """What a build would use (a line and a --json section per topic) and the problems found:
    Checks named after their section, with status ERROR or WARNING."""

    project: Path = PROJECT  # what `pip install --no-build-isolation PROJECT` would build
    sections: dict[str, dict] = dataclasses.field(default_factory=dict)
    lines: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    checks: list[Check] = dataclasses.field(default_factory=list)

    def add(self, section: str, data: dict, *lines: str) -> None:
        self.sections[section] = data
        for i, line in enumerate(lines):
            self.lines.append((section if i == 0 else "", line))

    def problem(self, section: str, severity: str, cause: str, fix: str) -> None:
        self.checks.append(Check(section, severity, cause, fix=fix))

    def heading(self) -> list[str]:
        head = (
            f"fa-shim doctor: what `pip install --no-build-isolation {self.project}` would use here"
        )
        return [head, *(f"  {label:11} {text}" for label, text in self.lines)]

    def body(self) -> list[str]:
        if not self.checks:
            return []
        ordered = sorted(self.checks, key=lambda p: p.status != ERROR)  # errors first
        return ["problems:", *(x for p in ordered for x in p.lines("  ", "    ", f"{p.status}: "))]

    def summary(self) -> str:
        errors, warnings = self.count(ERROR), self.count(WARNING)
        counts = f"{plural(errors, 'error')}, {plural(warnings, 'warning')}"
        return f"{'PROBLEMS' if errors else 'OK'} ({counts})"

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            **self.sections,
            "problems": [
                {"severity": p.status, "cause": p.summary, "fix": p.fix} for p in self.checks
            ],
        }
