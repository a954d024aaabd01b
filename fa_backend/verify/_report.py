"""The report model `verify` and `doctor` share: findings, each with a status, a summary,
details and a fix, rendered as wrapped text or as a dict for --json; ok when none failed."""

from __future__ import annotations

import dataclasses
import textwrap

PASS, FAIL, SKIP = "pass", "fail", "skip"  # verify's checks
ERROR, WARNING = "error", "warning"  # doctor's problems
_BLOCKING = (FAIL, ERROR)
WIDTH = 100


def wrap(text: str, first: str, rest: str) -> list[str]:
    """text in lines of WIDTH, indented (words kept whole: commands and paths stay copyable)."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def first(items: list[str], limit: int = 15) -> list[str]:
    """A check's details: the first `limit` items, then how many more there are."""
    return items[:limit] + [f"... and {len(items) - limit} more"] * (len(items) > limit)


@dataclasses.dataclass
class Check:
    """One finding: a check of verify, or a problem doctor found (status ERROR or WARNING)."""

    name: str
    status: str
    summary: str
    details: list[str] = dataclasses.field(default_factory=list)
    fix: str | None = None

    def lines(self, head: str, indent: str, label: str = "") -> list[str]:
        """head + label + summary wrapped at indent; details below it; the fix, if any."""
        out = wrap(label + self.summary, head, indent)
        out += [indent + "  " + d for d in self.details]
        if self.fix is not None:
            out += wrap("fix: " + self.fix, indent, indent + "  ")
        return out


class Report:
    """Findings under a heading, then one `result:` line; dataclass subclasses write heading(),
    body(), summary() and as_dict()."""

    checks: list[Check]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status in _BLOCKING]

    @property
    def ok(self) -> bool:
        return not self.failures

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    def render(self) -> str:
        return "\n".join([*self.heading(), *self.body(), f"result: {self.summary()}"])
