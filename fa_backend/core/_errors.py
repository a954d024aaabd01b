"""The one error type: a failure the user can act on, rendered as one readable message (the
boundary, _failures, turns every other failure into one)."""

from __future__ import annotations


class FaShimError(Exception):
    """A failure the user can act on: what went wrong (cause) and what to do (fix)."""

    def __init__(self, cause: str, fix: str | None = None, details: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.details = details

    def render(self) -> str:
        lines = [f"fa-shim: error: {self.cause}"]
        if self.details:
            lines += ["", *("  " + line for line in self.details.rstrip().splitlines()), ""]
        if self.fix:
            lines.append(f"fa-shim: fix: {self.fix}")
        return "\n".join(lines)


class NotLocal(FaShimError):
    """Sources a build needs are not on this machine and downloading is off: a build allowed to
    download fetches them (doctor predicts that from this type, never from the message)."""


class UnknownSetting(FaShimError):
    """A setting that no declared one reads: the flavour registry then asks the plug-ins too,
    whose scan it otherwise spares every build (flavours/_registry.load_settings)."""
