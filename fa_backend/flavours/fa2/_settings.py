"""The settings FlashAttention-2 (the root project) takes and no other flavour does: which
upstream release, where its sdist is, and how its kernel sources are cut into parts."""

from __future__ import annotations

from ..api import Setting

OWN = (
    Setting(
        "flash-attn-version",
        None,
        "version",
        "Upstream flash-attn release to build (pinned in [tool.fa-shim]).",
    ),
    Setting(
        "sdist",
        None,
        "path",
        "Explicit path of the upstream sdist (.tar.gz); used before anything else. A known "
        "release's sdist builds that release (its sha256 says which) unless flash-attn-version "
        "is given too (-C or FA_SHIM_*), which it must then match.",
    ),
    Setting(
        "sdist-dir",
        None,
        "path",
        "Directory holding upstream sdists (shared storage, e.g. /efs/shared/flash-attn); it must "
        "exist. Relative paths in any path setting are relative to where the command was run.",
        missing="create it with the flash-attn sdists in it, or correct the sdist-dir setting "
        "(without it the sdist is downloaded from the package index).",
    ),
    Setting(
        "allow-unknown-version",
        False,
        "bool",
        "Build a flash-attn version that has no pinned sha256 in vendored_patches/.",
    ),
    Setting(
        "torch-abi",
        "torch",
        "str",
        "`torch` (a wheel for the installed torch alone) or `stable`: the binding on torch's "
        "stable ABI, one wheel (cp310-abi3) for every torch >= 2.10 of the CUDA major it is "
        "built with, dropout kept; not inside CUDA graph capture with dropout_p > 0 "
        "(docs/guides/stable-abi.md).",
    ),
    Setting(
        "tu-parts",
        None,
        "int",
        "Compile each forward and backward kernel source as this many parts in parallel "
        "(default: the count the build-time model finds fastest for the set and the compile "
        "jobs, e.g. 4 for a 4-source tailored set on 16 cores; with more cores than a larger "
        "set keeps busy, only its longest sources, e.g. 8 of the full set's 72 in 4 parts on "
        "64 cores; 1 = never split; a value splits every source; 2.8.3+ only).",
    ),
)
