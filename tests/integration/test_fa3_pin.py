"""FlashAttention-3's tree pin (fa_backend/flavours/fa3/_trees.py) is what the one-liner its
docs give prints: `sha256sum` over the sorted file list, hashed again, run by a real shell. The
pins and the trees themselves: tests/unit/flavours/fa3/test_fa3_sources.py."""

from __future__ import annotations

import subprocess

from fa_backend.flavours.fa3 import _releases as _fa3_releases

RELEASE = _fa3_releases.release("2.8.3")


def test_pin_is_what_the_sha256sum_one_liner_prints(fa3_trees):
    """The recipe in release.toml and docs/fa3-design.md, run with the real tools."""
    for name, members in (("hopper", "LICENSE hopper"), ("cutlass", "LICENSE.txt include")):
        out = subprocess.run(
            f"find {members} -type f | LC_ALL=C sort | xargs sha256sum | sha256sum",
            shell=True,
            cwd=fa3_trees[name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[0]
        assert out == (RELEASE.hopper_pin if name == "hopper" else RELEASE.cutlass_pin)
