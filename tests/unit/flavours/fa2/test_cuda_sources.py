"""flavours/fa2/_sdist.has_cuda_sources: asked on every build, wheel-cache hits included, so
the answer is remembered under the sdist's sha256 (listing the 7,533 members of 2.8.3's 8 MB
archive took 0.9-1.8 s of every hit), and an archive is read only up to its first CUDA source."""

from __future__ import annotations

import io
import tarfile

from fa_backend.flavours.fa2 import _sdist


def _sdist_of(tmp_path, *names: str) -> _sdist.Sdist:
    path = tmp_path / "flash_attn-0.1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return _sdist.Sdist(path, "0.1.0", _sdist.sha256_of(path), False, "sdist-dir x")


def test_the_answer_is_read_once_per_sdist(tmp_path):
    sdist, memo = _sdist_of(tmp_path, "p/setup.py", "p/csrc/k.cu"), tmp_path / "facts"
    assert _sdist.has_cuda_sources(sdist, memo)
    sdist.path.unlink()  # remembered: the archive is not read again
    assert _sdist.has_cuda_sources(sdist, memo)
    assert (memo / f"{sdist.sha256}.json").is_file()


def test_an_archive_without_cuda_sources_says_so(tmp_path):
    assert not _sdist.has_cuda_sources(_sdist_of(tmp_path, "p/setup.py", "p/csrc/api.cpp"))
