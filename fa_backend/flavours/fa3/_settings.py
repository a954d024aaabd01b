"""The settings FlashAttention-3 (flash-attn-3/) takes and no other flavour does: which upstream
line, where its two trees are, and how many forward variants share a compile unit."""

from __future__ import annotations

from ..api import Setting

OWN = (
    Setting(
        "fa3-source",
        None,
        "path",
        "flash-attn-3: a flash-attention clone of the release with its csrc/cutlass submodule "
        "(`git clone --recursive --branch v2.8.3`).",
    ),
    Setting(
        "fa3-hopper",
        None,
        "path",
        "flash-attn-3: flash-attention's LICENSE + hopper/ tree, as a directory or .tar.gz; "
        "used before fa3-source.",
    ),
    Setting(
        "fa3-cutlass",
        None,
        "path",
        "flash-attn-3: CUTLASS's LICENSE.txt + include/ at the submodule commit, as a "
        "directory or .tar.gz; used before fa3-source.",
    ),
    Setting(
        "fa3-source-dir",
        None,
        "path",
        "flash-attn-3: a (shared) directory holding both trees as "
        "flash-attention-<tag>-hopper.tar.gz and cutlass-<commit>-include.tar.gz; it must "
        "exist. Then fa-shim's cache, then a download from GitHub unless offline.",
        missing="create it with the two FlashAttention-3 tarballs in it, or correct the "
        "fa3-source-dir setting.",
    ),
    Setting(
        "fa3-group",
        None,
        "int",
        "FlashAttention-3: compile the forward variants of one head dim and dtype (split, "
        "paged, softcap, packgqa) at most this many to a unit, which share most of their "
        "compile (default: the count the build-time model finds fastest for the set, the jobs "
        "and the memory, e.g. 1 for a training set; 1 = upstream's units).",
    ),
    Setting(
        "fa3-release",
        "auto",
        "str",
        "flash-attn-3: the upstream state to build (vendored_patches/fa3/): `auto` (the newest "
        "line built against torch's stable ABI that the installed torch meets, `main-0251105a` "
        "for torch >= 2.9, else the tagged `2.8.3`), a line's name, its tag (`v2.8.3`) or a "
        "commit prefix of at least 7 hex digits.",
    ),
)
