"""Reading upstream's archives safely, one rule for FA2's sdist and FA3's trees: a member is a
regular file or a directory at a relative path inside the archive; anything else is refused by
name, never "re-rooted" or skipped."""

from __future__ import annotations

import gzip
import shutil
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from ..core import _failures
from ..core._errors import FaShimError

# what a truncated or corrupt .tar.gz raises while it is read
BROKEN = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


class UnsafeMember(tarfile.TarError):
    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"unsafe archive member {name} ({why})")
        self.name, self.why = name, why


def member_parts(member: tarfile.TarInfo, top: str | None = None) -> tuple[str, ...]:
    """The member's path parts; UnsafeMember unless it is a regular file or directory at a
    relative path, under the archive's one top directory `top` when given."""
    name = member.name
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or parts[0] == "/":
        raise UnsafeMember(name, "an absolute path")
    if ".." in parts:
        raise UnsafeMember(name, "a path out of the archive")
    if member.issym() or member.islnk():
        raise UnsafeMember(name, f"a {'symbolic' if member.issym() else 'hard'} link")
    if not (member.isfile() or member.isdir()):
        raise UnsafeMember(name, "a device or special file")
    if top is not None and parts[0] != top:
        raise tarfile.TarError(f"more than one top directory ({top}, {parts[0]})")
    return parts


def unsafe_error(archive: Path, exc: UnsafeMember, fix: str) -> FaShimError:
    return FaShimError(
        f"{archive} holds an unsafe archive member {exc.name} ({exc.why}); fa-shim extracts "
        "only regular files and directories inside the archive, and extracted nothing of it.",
        fix=fix,
    )


def extract(
    archive: Path, dest: Path, what: str, unused: Callable[[tuple[str, ...]], bool] | None = None
) -> None:
    """Unpack a .tar.gz into dest, made here and removed again if anything fails. UnsafeMember
    and the BROKEN errors propagate; a full disk is the one no-space error naming `what`.
    Members `unused` says no build reads (by their path parts) are checked like the others,
    then left in the archive."""
    dest.mkdir(parents=True)  # FileExistsError: never write into a directory we did not make
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for member in tar.getmembers():
                parts = member_parts(member)  # all checked before the first byte is written
                if unused is None or not unused(parts):
                    members.append(member)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members, filter="data")
            else:  # pragma: no cover - Python without PEP 706: every member checked above
                tar.extractall(dest, members)
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in _failures.NO_SPACE:
            raise _failures.no_space(dest, what) from None
        raise
