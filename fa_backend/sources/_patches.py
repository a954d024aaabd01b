"""Apply a release's vendored patches to the scratch source tree, strictly: each starts with a
`Reason:` line and must apply with no fuzz, as a patch that half-applies fails silently."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..core import _log, _subprocess
from ..core._digest import sha256_of
from ..core._errors import FaShimError


@dataclasses.dataclass(frozen=True)
class Patch:
    path: Path
    reason: str

    @property
    def name(self) -> str:
        return topic(self.path)

    @property
    def sha256(self) -> str:
        return sha256_of(self.path)


def topic(path: Path) -> str:
    """A patch's name as releases and provenance know it: 10-import-guard.2.6.3.patch (a
    variant first made for 2.6.3) is 10-import-guard.patch."""
    return path.name.partition(".")[0] + ".patch"


def read(paths: Iterable[Path]) -> list[Patch]:
    """The patches at these paths, each with the reason its first line states."""
    result = []
    for path in paths:
        first = path.read_text().splitlines()[0] if path.stat().st_size else ""
        if not first.startswith("Reason:"):
            raise FaShimError(
                f"{path} does not start with a 'Reason:' line.",
                fix="every vendored patch states why it exists on its first line.",
            )
        result.append(Patch(path, first.partition(":")[2].strip()))
    return result


def apply_all(patches: list[Patch], source_root: Path) -> None:
    if patches and not shutil.which("patch"):
        raise FaShimError(
            "the `patch` program is needed to apply fa-shim's vendored patches.",
            fix="install it (apt-get install patch / dnf install patch).",
        )
    for patch in patches:
        command = ["patch", "-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch"]
        command += ["-i", str(patch.path)]
        _subprocess.run(
            [*command, "--dry-run"],
            cwd=source_root,
            cause=f"vendored patch {patch.path} does not apply cleanly to this sdist.",
            fix="the sdist differs from the one the patch was made for: use the pinned "
            "sdist, or regenerate the patch for this version.",
        )
        _subprocess.run(
            command,
            cwd=source_root,
            fix="the dry run of this patch passed: check the disk space and permissions of "
            f"{source_root}.",
        )
        _log.info(f"applied {patch.name}: {patch.reason}")
