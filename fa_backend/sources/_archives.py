"""Reading upstream's archives safely, one rule for FA2's sdist and FA3's trees: a member is a
regular file or a directory at a relative path inside the archive; anything else is refused by
name, never "re-rooted" or skipped. An extracted archive is also bounded by its size: one that
unpacks to more than MAX_RATIO times its size is a decompression bomb, refused at the member's
header, before its bytes are read."""

from __future__ import annotations

import gzip
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from ..core import _failures
from ..core._errors import FaShimError

# what a truncated or corrupt .tar.gz raises while it is read
BROKEN = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)
# flash-attn's sdists (2.6.3 to 2.8.3.post2) unpack to about 11 times their size; a 4 GiB zero
# member gzips to 18.8 MB, 228 times
MAX_RATIO = 100
BLOCK = 4096  # what a file takes on disk is rounded up to its filesystem's block


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


def checked(tar: tarfile.TarFile, archive: Path) -> Iterator[tuple[tarfile.TarInfo, tuple]]:
    """Each member of an archive being read, with its path parts (member_parts), header by
    header: the member that takes what it unpacks to past MAX_RATIO times its size is refused at
    its header, before its bytes are read (a 4 GiB bomb in milliseconds, not seconds)."""
    bound, listed = MAX_RATIO * archive.stat().st_size, 0
    for member in tar:
        parts = member_parts(member)
        listed += member.size
        if listed > bound:
            why = f"{member.size:,} bytes; the archive unpacks to more than {MAX_RATIO} times"
            raise UnsafeMember(member.name, f"{why} its size: a decompression bomb")
        yield member, parts


def unsafe_error(archive: Path, exc: UnsafeMember, fix: str) -> FaShimError:
    return FaShimError(
        f"{archive} holds an unsafe archive member {exc.name} ({exc.why}); fa-shim extracts "
        f"only regular files and directories inside the archive, at most {MAX_RATIO} times its "
        "size, and extracted nothing of it.",
        fix=fix,
    )


def extract(
    archive: Path,
    dest: Path,
    what: str,
    unused: Callable[[tuple[str, ...]], bool] | None = None,
    room: Callable[[int], None] | None = None,
) -> None:
    """Unpack a .tar.gz into dest, made here and removed again if anything fails. UnsafeMember
    (a decompression bomb too) and the BROKEN errors propagate; a full disk is the one no-space
    error naming `what`. Members `unused` says no build reads (by their path parts) are checked
    like the others, then left in the archive. `room(bytes)` is told what the extraction writes
    (each file rounded up to a block), before it writes anything."""
    dest.mkdir(parents=True)  # FileExistsError: never write into a directory we did not make
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = [  # all checked before the first byte is written
                m for m, parts in checked(tar, archive) if unused is None or not unused(parts)
            ]
            if room is not None:
                room(sum(-(-m.size // BLOCK) * BLOCK or BLOCK for m in members))
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members, filter="data")
            else:  # pragma: no cover - Python without PEP 706: every member checked above
                tar.extractall(dest, members)
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in _failures.NO_SPACE:
            raise _failures.no_space(dest, what) from None
        raise
