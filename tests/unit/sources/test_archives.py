"""sources/_archives: every unsafe member refused by name before anything is written (a
decompression bomb too), the disk asked for what the members write, and an extraction that
fails removes only the directory it made."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from conftest import SAMPLE_VERSION, pack_bomb

from fa_backend.core._errors import FaShimError
from fa_backend.sources import _archives


def _tarball(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            data = b"x" * info.size if info.isfile() else None
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _typed(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


UNSAFE = {
    "../evil.txt": (_file("../evil.txt"), "a path out of the archive"),
    "pkg/../../evil.txt": (_file("pkg/../../evil.txt"), "a path out of the archive"),
    "/etc/evil.txt": (_file("/etc/evil.txt"), "an absolute path"),
    "pkg/link": (_typed("pkg/link", tarfile.SYMTYPE, "/etc/passwd"), "a symbolic link"),
    "pkg/hard": (_typed("pkg/hard", tarfile.LNKTYPE, "pkg/setup.py"), "a hard link"),
    "pkg/dev": (_typed("pkg/dev", tarfile.CHRTYPE), "a device or special file"),
    "pkg/fifo": (_typed("pkg/fifo", tarfile.FIFOTYPE), "a device or special file"),
}


@pytest.mark.parametrize("name", list(UNSAFE))
def test_an_unsafe_member_is_refused_by_name_and_nothing_is_written(tmp_path, name):
    member, why = UNSAFE[name]
    archive = _tarball(tmp_path / "a.tar.gz", _file("pkg/setup.py"), member)
    dest = tmp_path / "out" / "src"
    with pytest.raises(_archives.UnsafeMember) as info:
        _archives.extract(archive, dest, "extracting")
    assert (info.value.name, info.value.why) == (name, why)
    assert f"unsafe archive member {name} ({why})" in str(info.value)
    assert not dest.exists() and (tmp_path / "out").is_dir()  # only what it made is gone
    assert not (tmp_path / "evil.txt").exists() and not Path("/etc/evil.txt").exists()


def test_the_error_names_the_archive_member_and_the_callers_fix(tmp_path):
    exc = _archives.UnsafeMember("../x", "a path out of the archive")
    error = _archives.unsafe_error(tmp_path / "a.tar.gz", exc, "use the upstream sdist.")
    assert "unsafe archive member ../x (a path out of the archive)" in error.cause
    assert str(tmp_path / "a.tar.gz") in error.cause and error.fix == "use the upstream sdist."


def test_an_existing_destination_is_never_written_into_or_removed(tmp_path):
    archive = _tarball(tmp_path / "a.tar.gz", _file("pkg/setup.py"))
    dest = tmp_path / "src"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        _archives.extract(archive, dest, "extracting")
    assert (dest / "mine.txt").read_text() == "keep"


def test_a_truncated_archive_removes_the_destination_it_made(tmp_path):
    good = _tarball(tmp_path / "a.tar.gz", _file("pkg/setup.py"), _file("pkg/b.txt"))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:-30])
    with pytest.raises(_archives.BROKEN):
        _archives.extract(cut, tmp_path / "src", "extracting")
    assert not (tmp_path / "src").exists()


def test_a_safe_archive_extracts_with_its_top_directory(tmp_path):
    archive = _tarball(tmp_path / "a.tar.gz", _typed("pkg", tarfile.DIRTYPE), _file("pkg/setup.py"))
    _archives.extract(archive, tmp_path / "src", "extracting")
    assert (tmp_path / "src" / "pkg" / "setup.py").read_bytes() == b"x"


def test_more_than_one_top_directory_is_refused_when_asked(tmp_path):
    with pytest.raises(tarfile.TarError, match="more than one top directory"):
        _archives.member_parts(_file("b/x"), top="a")


def test_members_no_build_reads_are_checked_then_left_in_the_archive(tmp_path):
    """FA2's sdist (flavours/fa2/_sdist._not_built): ROCm's composable_kernel and CUTLASS beside
    its headers stay in the archive; an unsafe member among them still refuses the archive."""
    from fa_backend.flavours.fa2 import _sdist

    top = "flash_attn-9.9"
    kept = [f"{top}/{p}" for p in ("setup.py", "csrc/cutlass/include/cutlass/cutlass.h",
            "csrc/cutlass/LICENSE.txt", "csrc/flash_attn/flash_api.cpp")]  # fmt: skip
    left = [f"{top}/csrc/{p}" for p in ("composable_kernel/include/ck.hpp",
            "cutlass/test/unit/a.cu", "cutlass/examples/00/x.cu",
            "cutlass/python/cutlass/__init__.py", "cutlass/tools/util/u.h")]  # fmt: skip
    archive = _tarball(tmp_path / "a.tar.gz", *map(_file, kept + left))
    _archives.extract(archive, tmp_path / "src", "extracting", unused=_sdist._not_built)
    found = {str(p.relative_to(tmp_path / "src")) for p in (tmp_path / "src").rglob("*")}
    assert set(kept) <= found and not found & set(left)
    assert not (tmp_path / "src" / top / "csrc" / "composable_kernel").exists()
    unsafe = _typed(f"{top}/csrc/composable_kernel/link", tarfile.SYMTYPE, "/etc/passwd")
    archive = _tarball(tmp_path / "b.tar.gz", *map(_file, kept), unsafe)
    with pytest.raises(_archives.UnsafeMember, match="a symbolic link"):
        _archives.extract(archive, tmp_path / "src2", "extracting", unused=_sdist._not_built)
    assert not (tmp_path / "src2").exists()


def test_a_decompression_bomb_is_refused_at_its_members_header(tmp_path):
    """64 MiB of zeros in a 0.3 MB sdist (issue 54's S13 at 4 GiB: tests/integration): refused
    by the member's name before its bytes are read; nothing written, the disk never asked."""
    bomb = pack_bomb(tmp_path / "bomb", zeros=64 * 2**20)
    asked = []
    with pytest.raises(_archives.UnsafeMember) as info:
        _archives.extract(bomb, tmp_path / "src", "extracting", room=asked.append)
    assert info.value.name == f"flash_attn-{SAMPLE_VERSION}/zeros.bin"
    assert info.value.why.endswith("more than 100 times its size: a decompression bomb")
    assert not (tmp_path / "src").exists() and asked == []
    error = _archives.unsafe_error(bomb, info.value, "use the upstream sdist.")
    assert "at most 100 times its size, and extracted nothing of it" in error.cause


def test_the_disk_is_asked_for_what_the_members_write_before_any_is_written(tmp_path):
    """Each file rounded up to a block: what a filesystem takes, never gzip's ISIZE (mod 4 GiB);
    a refusal leaves nothing."""
    big = _file("pkg/big.bin")
    big.size = 5000
    archive = _tarball(tmp_path / "a.tar.gz", _typed("pkg", tarfile.DIRTYPE), _file("pkg/a"), big)
    asked = []
    _archives.extract(archive, tmp_path / "src", "extracting", room=asked.append)
    assert asked == [4096 + 4096 + 8192]
    assert (tmp_path / "src" / "pkg" / "big.bin").stat().st_size == 5000

    def full(size: int) -> None:
        raise FaShimError(f"not enough disk space for {size}")

    with pytest.raises(FaShimError, match="not enough disk space for 16384"):
        _archives.extract(archive, tmp_path / "src2", "extracting", room=full)
    assert not (tmp_path / "src2").exists()
