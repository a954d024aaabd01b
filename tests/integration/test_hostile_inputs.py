"""Mistaken and hostile inputs (issue 44's table), each run for real in a fresh process on the
sample sdist: one error whose first line names the real cause (or, where the input is fine, a
run that succeeds), no traceback, nothing left behind (the output, the scratch under TMPDIR),
and no file of the user's touched. ROWS is the list docs/generate.py counts for the reliability
page (docs/reference/reliability.md): add a row there and a case below together."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib.machinery
import io
import json
import os
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import venv
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import (
    CAN_MOUNT,
    PY,
    REPO,
    SAMPLE_VERSION,
    assert_one_error_nothing_left,
    clean_env,
    copy_repo,
    hook,
    mounted,
    on_small_disk,
    pack_bomb,
    pack_sample,
    pip_wheel_cmd,
    run,
    sample_settings,
)

from fa_backend.core import _hostlock
from fa_backend.core._errors import FaShimError
from fa_backend.core._ownership import LOCK, RECORD
from fa_backend.resources import process_session

# (id, what the user gives, what fa-shim answers: the start of its error, or "" for a success)
ROWS = [
    (
        "T06-ninja-off-path-prepare",
        "`prepare` with ninja beside the interpreter but not on PATH (a venv not activated)",
        "ninja is installed in",
    ),
    (
        "T07-ninja-off-path-pip",
        "the same, through `pip wheel --no-build-isolation`",
        "ninja is installed in",
    ),
    (
        "B04-re-prepare-over-edits",
        "`prepare` again into its directory after the user added src/my-edit.txt and edited "
        "setup.py",
        "holds files fa-shim did not write or that changed since its last prepare there",
    ),
    (
        "X02-ctrl-c-while-upstream-compiles",
        "Ctrl-C while upstream's build compiles (later than X01's compiler probe)",
        "interrupted",
    ),
    ("X08-ctrl-c-of-pip", "Ctrl-C of `pip wheel`'s process group", "Operation cancelled by user"),
    ("Q01-two-builds-one-outdir", "two builds at once into one output directory, no cache", ""),
    (
        "Q02-two-builds-one-outdir-shared-cache",
        "two builds at once into one output directory, one shared wheel cache",
        "",
    ),
    ("Q03-two-prepares", "two `prepare` runs into one new `--build-dir` at once", ""),
    ("Q04-two-prepares-a-second-apart", "the same, the second 1.5 s after the first", ""),
    (
        "Q05-two-re-prepares",
        "two `prepare` runs into a prepared `--build-dir`, the second 2.5 s after the first",
        "",
    ),
    (
        "killed-re-prepare",
        "a re-prepare killed with SIGKILL mid-way, then `prepare` again into that directory",
        "was made by fa-shim but holds no record of the files it wrote",
    ),
    (
        "D01-doctor-ninja-off-path",
        "`doctor` with ninja beside the interpreter but not on PATH",
        "error: ninja is installed in",
    ),
    ("T01-cxx-missing", "`CXX=/nonexistent/g++`", "the host C++ compiler `/nonexistent/g++`"),
    ("cc-missing", "`CC=/nonexistent/gcc`", "the host C compiler `/nonexistent/gcc`"),
    (
        "V09-verify-foreign-module",
        "`verify` of numpy's module renamed flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
        "FAIL  symbols       the module takes no symbol from torch and embeds no CUDA device code",
    ),
    (
        "K05-empty-archs",
        "`-C cuda-archs=` (an unset $ARCH)",
        "setting 'cuda-archs' from config_settings (-C) is empty",
    ),
    (
        "K25-empty-archs-env",
        "`FA_SHIM_CUDA_ARCHS=`",
        "setting 'cuda-archs' from environment variable FA_SHIM_CUDA_ARCHS is empty",
    ),
    ("empty-int", "`-C max-jobs=`", "setting 'max-jobs' from config_settings (-C) is empty"),
    ("empty-bool", "`-C offline=`", "setting 'offline' from config_settings (-C) is empty"),
    (
        "empty-str",
        "`-C compiler-cache=`",
        "setting 'compiler-cache' from config_settings (-C) is empty",
    ),
    ("K27-empty-path", "`-C sdist=`", "setting 'sdist' from config_settings (-C) is empty"),
    (
        "empty-version",
        "`-C flash-attn-version=`",
        "setting 'flash-attn-version' from config_settings (-C) is empty",
    ),
    (
        "empty-seconds",
        "`-C wheel-cache-heartbeat=`",
        "setting 'wheel-cache-heartbeat' from config_settings (-C) is empty",
    ),
    ("empty-list", "`-C head-dims=`", "setting 'head-dims' from config_settings (-C) is empty"),
    (
        "SA01-torch-abi-typo",
        "`-C torch-abi=stabel`",
        "setting torch-abi is 'stabel', expected one of torch, stable (did you mean 'stable'?)",
    ),
    (
        "torch-abi-no-stable-line",
        "`-C torch-abi=stable` for a release fa-shim has no stable-ABI binding of",
        "has no binding on torch's stable ABI in fa-shim",
    ),
    (
        "SA02-torch-abi-cpu-torch",
        "`-C torch-abi=stable` for 2.8.3.post2 beside a CPU-only torch",
        "has no CUDA: -C torch-abi=stable builds flash-attn's CUDA kernels",
    ),
    ("S06-sdist-is-a-directory", "`-C sdist=` a directory", "(setting sdist) is a directory"),
    (
        "S07-directory-named-like-sdist",
        "a directory named like the sdist in `sdist-dir`",
        "is a directory named like the sdist",
    ),
    (
        "S08-not-gzip-sdist",
        "a user's non-gzip file named as the sdist",
        "is not a readable sdist",
    ),
    (
        "R01-pin-off-by-one-digit",
        "a `release.toml` sha256 pin off by one digit, the genuine sdist",
        "the sha256 pinned in",
    ),
    (
        "A00-prepare-outside-checkout",
        "`prepare` run outside the checkout (no [tool.fa-shim] there)",
        "no flash-attn version is configured",
    ),
    (
        "MX10-gzip-bomb",
        "an sdist of 18.8 MB holding a 4 GiB zero member, whose gzip trailer reads 16 kB (the "
        "size modulo 4 GiB); on a 200 MB disk too (test_full_disk.py)",
        "holds an unsafe archive member flash_attn-0.1.0/zeros.bin",
    ),
    (
        "MX12-wheel-cache-dir-users-directory",
        "`pip wheel … -C wheel-cache-dir=DIR`, DIR a directory of the user's holding their own "
        "install.py",
        "(setting wheel-cache-dir) holds files fa-shim did not make (install.py)",
    ),
    (
        "MX12-wheel-cache-dir-dot-in-a-project",
        "`FA_SHIM_WHEEL_CACHE_DIR=. pip wheel /path/to/fa-shim …` run in the user's project",
        "(setting wheel-cache-dir) holds files fa-shim did not make (install.py, pyproject.toml)",
    ),
    (
        "S14-version-not-its-own",
        "an unpinned sdist whose PKG-INFO says 0.1.0, built as 0.2.0",
        "but its PKG-INFO says 0.1.0",
    ),
    # -- about the process: a signal, a real read-only or full disk (test_a_row_of_the_process)
    (
        "X01-sigint-prepare",
        "Ctrl-C (SIGINT to the group) of a prepare",
        "interrupted: nothing was published",
    ),
    (
        "X03-sigterm-prepare",
        "SIGTERM to the group of a prepare",
        "terminated by SIGTERM: nothing was published",
    ),
    (
        "X04-sighup-prepare",
        "SIGHUP to the group of a prepare (the terminal closed)",
        "terminated by SIGHUP: nothing was published",
    ),
    (
        "X05-sigint-re-prepare",
        "Ctrl-C of a re-prepare into a prepared --build-dir, then `prepare` again",
        "interrupted: nothing was published",
    ),
    ("B03-build-dir-read-only", "`--build-dir` on a read-only mount", "(--build-dir)"),
    (
        "O03-outdir-read-only",
        "the wheel hook's output directory on a read-only mount, a wheel-cache hit",
        "while copying the wheel into the output directory",
    ),
    (
        "O04-outdir-full",
        "the wheel hook's output directory on a full 64 KiB disk, a wheel-cache hit",
        "not enough disk space",
    ),
    (
        "O05-outdir-small-holding-the-wheels-name",
        "the wheel hook's output directory on a 120 KiB disk already holding a file of the "
        "wheel's name, a wheel-cache hit",
        "",
    ),
    ("E03-tmpdir-128-kb", "TMPDIR on a 128 KB disk", "no space left on"),
    ("E04-cache-read-only", "XDG_CACHE_HOME on a read-only mount", "fa-shim's cache directory"),
    (
        "S13-gzip-bomb-small-disk",
        "S13's 4 GiB bomb with TMPDIR on a 200 MB disk",
        "holds an unsafe archive member",
    ),
    # -- answered in-process (test_a_row_answered_in_process; hostile-inputs.md of 2026-12-01)
    (
        "S01-pinned-sdist-truncated",
        "a truncated copy of the pinned sdist, by `-C sdist=`",
        "sha256 mismatch for",
    ),
    (
        "S02-pinned-sdist-byte-flipped",
        "the pinned sdist with one byte flipped",
        "sha256 mismatch for",
    ),
    (
        "S03-other-release-renamed",
        "2.8.3's sdist renamed flash_attn-2.8.3.post2.tar.gz",
        "sha256 mismatch for",
    ),
    (
        "S04-truncated-unpinned-sdist",
        "a truncated unpinned sdist",
        "is a corrupt or truncated archive",
    ),
    (
        "S05-not-gzip-by-sdist",
        "a text file named flash_attn-0.1.0.tar.gz, by `-C sdist=`",
        "is not a readable sdist",
    ),
    ("S09-member-dotdot", "an sdist member `../…`", "holds an unsafe archive member"),
    (
        "S10-member-escaping-symlink",
        "an sdist member, a symlink out of the tree",
        "holds an unsafe archive member",
    ),
    (
        "S11-member-absolute",
        "an sdist member with an absolute path",
        "holds an unsafe archive member",
    ),
    (
        "S12-member-hard-link-out",
        "an sdist member, a hard link out of the tree",
        "holds an unsafe archive member",
    ),
    ("R02-pin-not-hex", "a `release.toml` whose sha256 is not hex", "does not describe a release"),
    ("K01-cuda-arch", "`-C cuda-arch=90`", "unknown setting 'cuda-arch' in config_settings (-C)"),
    ("K02-cuda-archs-underscore", "`-C cuda_archs=90`", ""),
    ("K03-env-cuda-arch", "`FA_SHIM_CUDA_ARCH=90`", "unknown setting 'FA_SHIM_CUDA_ARCH'"),
    ("K04-env-maxjobs", "`FA_SHIM_MAXJOBS=4`", "unknown setting 'FA_SHIM_MAXJOBS'"),
    ("K06-archs-sm-90", "`-C cuda-archs=sm_90`", ""),
    ("K07-archs-90a-semicolon", "`-C 'cuda-archs=90a;'`", ""),
    (
        "K09-archs-ptx",
        "`-C 'cuda-archs=9.0+PTX'`",
        "setting 'cuda-archs' from config_settings (-C)",
    ),
    (
        "K10-archs-compute",
        "`-C cuda-archs=compute_90`",
        "setting 'cuda-archs' from config_settings (-C)",
    ),
    ("K11-max-jobs-negative", "`-C max-jobs=-4`", "setting 'max-jobs' from config_settings (-C)"),
    ("K12-max-jobs-zero", "`-C max-jobs=0`", "setting 'max-jobs' from config_settings (-C)"),
    ("K26-max-jobs-fraction", "`-C max-jobs=4.5`", "setting 'max-jobs' from config_settings (-C)"),
    (
        "K13-nvcc-threads-1000",
        "`-C nvcc-threads=1000`",
        "setting 'nvcc-threads' from config_settings (-C)",
    ),
    ("K14-head-dim-7", "`-C head-dims=7` (2.8.3.post2)", "head-dims has '7'"),
    ("K15-dtype-fp8", "`-C dtypes=fp8` (2.8.3.post2)", "dtypes has 'fp8'"),
    (
        "K16-bool-yes-please",
        "`-C forward-only=yes-please`",
        "setting 'forward-only' from config_settings (-C)",
    ),
    ("K17-disable-unknown", "`-C disable=dropout,flash` (2.8.3.post2)", "disable has 'flash'"),
    ("K18-version-unknown", "`-C flash-attn-version=2.8.4`", "flash-attn 2.8.4 is not a version"),
    (
        "K19-version-latest",
        "`-C flash-attn-version=latest`",
        "setting 'flash-attn-version' from config_settings (-C)",
    ),
    (
        "K20-lock-timeout-soon",
        "`-C wheel-cache-lock-timeout=soon`",
        "setting 'wheel-cache-lock-timeout' from config_settings (-C)",
    ),
    ("K21-no-equals", "`-C max-jobs` (no =)", "'max-jobs' is not KEY=VALUE"),
    ("K22-tu-parts-zero", "`-C tu-parts=0`", "setting 'tu-parts' from config_settings (-C)"),
    (
        "K23-env-max-jobs-empty",
        "`FA_SHIM_MAX_JOBS=`",
        "setting 'max-jobs' from environment variable FA_SHIM_MAX_JOBS is empty",
    ),
    ("K29-progress-loud", "`-C progress=loud`", "setting progress is 'loud'"),
    ("K30-fa3-key-on-fa2", "`-C fa3-release=auto` on flash-attn", "setting 'fa3-release'"),
    (
        "P01-toml-float-version",
        "`flash-attn-version = 2.83` in [tool.fa-shim]",
        "flash-attn 2.83 is not a version",
    ),
    (
        "P02-toml-max-jobs-word",
        '`max-jobs = "eight"` in [tool.fa-shim]',
        "setting 'max-jobs' from [tool.fa-shim] of",
    ),
    (
        "P04-toml-key-underscore",
        '`cuda_archs = "90"` in [tool.fa-shim]',
        "unknown setting 'cuda_archs' in [tool.fa-shim] of",
    ),
    ("P05-toml-invalid", "a pyproject.toml that is not TOML", "is not valid TOML"),
    (
        "SA06-stable-2.8.3",
        "`-C torch-abi=stable -C flash-attn-version=2.8.3`",
        "flash-attn 2.8.3 has no binding on torch's stable ABI",
    ),
    ("SA07-torch-abi-abi3", "`-C torch-abi=abi3`", "setting torch-abi is 'abi3'"),
    (
        "SA15-toml-torch-abi-bool",
        "`torch-abi = true` in [tool.fa-shim]",
        "setting torch-abi is 'True'",
    ),
    (
        "SA16-toml-torch-abi-capital",
        '`torch-abi = "Stable"` in [tool.fa-shim]',
        "flash-attn 0.1.0 has no binding on torch's stable ABI",
    ),
    ("MX01-toml-object-cache-yes", '`object-cache = "yes"` in [tool.fa-shim]', ""),
    (
        "MX02-toml-list-for-a-path",
        "`wheel-cache-dir = [a, b]` in [tool.fa-shim]",
        "setting 'wheel-cache-dir' from [tool.fa-shim] of",
    ),
    (
        "MX03-toml-bool-for-an-int",
        "`tu-parts = true` in [tool.fa-shim]",
        "setting 'tu-parts' from [tool.fa-shim] of",
    ),
    (
        "MX04-toml-heartbeat-zero",
        "`wheel-cache-heartbeat = 0` in [tool.fa-shim]",
        "setting 'wheel-cache-heartbeat' from [tool.fa-shim] of",
    ),
    (
        "MX06-max-jobs-twice",
        "`pip wheel … -C max-jobs=1 -C max-jobs=2`",
        "setting 'max-jobs' from config_settings (-C) is ['1', '2']",
    ),
    (
        "OC15-object-cache-maybe",
        "`-C object-cache=maybe`",
        "setting 'object-cache' from config_settings (-C)",
    ),
    ("OC16-env-object-cache-0", "`FA_SHIM_OBJECT_CACHE=0`", ""),
    (
        "M01-torch-python-without-torch",
        "`-C torch-python=` a Python without torch",
        "torch is not importable by",
    ),
    (
        "M02-torch-python-missing",
        "`-C torch-python=/nonexistent/python`",
        "the interpreter named by setting torch-python (/nonexistent/python)",
    ),
    (
        "M03-torch-python-a-directory",
        "`-C torch-python=` a venv directory",
        "the interpreter named by setting torch-python",
    ),
    ("M04-editable", "`pip install -e` of the checkout", "editable installs are not supported"),
    (
        "B01-build-dir-users-files",
        "`--build-dir` holding the user's files",
        "(--build-dir) holds files fa-shim did not make",
    ),
    ("B02-build-dir-a-file", "`--build-dir` a file", "(--build-dir) is not a directory"),
    (
        "MX11-build-dir-dot-in-the-checkout",
        "`prepare --build-dir .` in the checkout",
        "(--build-dir) holds files fa-shim did not make",
    ),
    (
        "T02-cxx-missing-pip",
        "`CXX=/nonexistent/g++`, the wheel hook",
        "the host C++ compiler `/nonexistent/g++`",
    ),
    (
        "T05-compiler-cache-missing",
        "`-C compiler-cache=/nonexistent/ccache`",
        "the compiler cache '/nonexistent/ccache' (setting compiler-cache) is not on PATH",
    ),
    (
        "D02-doctor-python-missing",
        "`doctor --python /nonexistent/python`",
        "--python /nonexistent/python is not an executable interpreter",
    ),
    (
        "D03-doctor-cxx-missing",
        "`CXX=/nonexistent/g++ doctor`",
        "error: the host C++ compiler `/nonexistent/g++` (from CXX) does not work",
    ),
    ("W02-wheel-cache-dir-a-file", "`-C wheel-cache-dir=` a file", "is a file, not a directory"),
    ("W03-cache-dir-a-file", "`-C cache-dir=` a file", "is a file, not a directory"),
    ("C10-cache-check-missing", "`cache check` of a missing directory", "is not a directory"),
    ("C11-cache-check-a-file", "`cache check` of a file", "is not a directory"),
    ("C12-cache-check-empty", "`cache check` of an empty directory", "holds no wheel-cache entry"),
    ("C13-cache-chek", "`cache chek`", "invalid choice: 'chek'"),
    (
        "MX07-rebuild-other-settings",
        "`cache check --rebuild` with settings of no entry",
        "has no entry for this environment's fingerprint",
    ),
    (
        "MX08-verify-not-installed",
        "`verify flash_attn`, none installed",
        "no flash-attn distribution is installed",
    ),
    (
        "TC01-install-binding-abi3",
        "`install.py --binding abi3`",
        "argument --binding: invalid choice: 'abi3'",
    ),
    (
        "TC02-install-stable-cpu-torch",
        "`install.py --binding stable` on a CPU torch",
        "no flash-attn wheel",
    ),
    (
        "TC03-install-kernel-set-typo",
        "`install.py --kernel-set hdim128.bf16.fwdd`",
        "no flash-attn wheel",
    ),
    ("TC04-install-archs-sm-90", "`install.py --archs sm_90`", ""),
    ("TC05-install-archs-dotted", "`install.py --archs 9.0`", ""),
    (
        "TC06-install-wheel-deleted",
        "`install.py` after the wheel was deleted from its entry",
        "no flash-attn wheel",
    ),
    (
        "TC07-index-links-a-deleted-wheel",
        "`cache check` after a wheel linked by the torch's index was deleted",
        "FAILED  index/",
    ),
    (
        "TC08-install-tampered-wheel",
        "`install.py` of a wheel rewritten in place",
        "is not the wheel its entry recorded",
    ),
    (
        "TC09-install-python-without-pip",
        "`install.py` run by a Python without pip (torch importable)",
        "pip is not installed for",
    ),
    (
        "TC11-install-python-without-torch",
        "`install.py` run by a venv without torch",
        "torch cannot be imported in",
    ),
    ("TC10-install-copied-out", "an install.py copied out of its cache", "is not a wheel cache"),
    ("TC12-install-uv-missing", "`install.py --uv` without uv", "uv not found on PATH"),
    (
        "OC14-doctor-object-cache-a-file",
        "`doctor` with the object cache's directory a regular file",
        "the object cache",
    ),
    (
        "L01-lock-of-a-dead-builder",
        "the entry's lock left by a builder of this host that is gone, then a build",
        "",
    ),
    ("MX05-toml-path-with-tilde", '`wheel-cache-dir = "~/fa-probe6-wheels"` in [tool.fa-shim]', ""),
    (
        "L02-live-lock-of-another-host",
        "the entry's lock held by a live builder on another host, `-C wheel-cache-lock-timeout=1`",
        "waited 1 s for the wheel-cache lock",
    ),
    ("C02-entry-byte-flipped", "a byte flipped in the entry's wheel, then a build", ""),
    ("C04-entry-json-missing", "the entry's entry.json deleted, then a build", ""),
    ("C06-entry-names-outside", "entry.json naming `../../outside.whl`, then a build", ""),
    ("C08-entry-json-not-json", "entry.json that is not JSON, then a build", ""),
    (
        "C07-entry-and-view-links-to-a-users-file",
        "the entry's and the torch view's wheel symlinks to a file of the user's, then a build",
        "",
    ),
    ("TC14-truncated-torch-view", "the torch view's wheel replaced by a truncated copy", ""),
    (
        "N01-cached-sdist-truncated-offline",
        "the pinned sdist in fa-shim's own cache cut in half, then `prepare -C offline=true`",
        "sha256 mismatch for",
    ),
    (
        "B05-build-dir-a-symlink",
        "`--build-dir` a symlink to an empty directory",
        "is a symlink to",
    ),
    (
        "P03-toml-archs-list",
        "`cuda-archs = [80, 90]` in [tool.fa-shim], a TOML list (the probe's `head-dims = 128` "
        "beside it needs a tailored release and a CUDA torch)",
        "",
    ),
    (
        "D04-doctor-project-not-a-project",
        "`doctor --project` a directory of sdists, not a project",
        "a build would stop: no flash-attn version is configured",
    ),
    (
        "C01-cache-check-byte-flipped",
        "`cache check` of a wheel cache whose entry's wheel has a byte flipped",
        "FAILED",
    ),
    (
        "C03-cache-check-entry-json-missing",
        "`cache check` of an entry without entry.json",
        "FAILED",
    ),
    (
        "C05-cache-check-entry-names-outside",
        "`cache check` of an entry whose entry.json names ../../outside.whl, a file of the user's",
        "FAILED",
    ),
    (
        "C09-cache-check-fingerprint-missing",
        "`cache check` of an entry without fingerprint.json",
        "FAILED",
    ),
    (
        "C14-cache-check-the-cache-dir",
        "`cache check` of fa-shim's cache directory, the parent of its wheels/",
        "holds no wheel-cache entry",
    ),
    # the rows that need a CUDA torch: tests/e2e/test_hostile_cuda_torch.py (CUDA_TORCH)
    ("K08-archs-75", "`-C cuda-archs=75`", "setting cuda-archs asks for architectures"),
    ("K28-archs-99", "`-C cuda-archs=99`", "setting cuda-archs asks for architectures"),
    ("K24-head-dims-twice", "`-C head-dims=128,128`", ""),
    ("T03-cuda-home-empty", "`CUDA_HOME` an empty directory", "CUDA_HOME names"),
    ("T04-nvcc-missing", "`-C nvcc=/nonexistent/nvcc`", "setting nvcc names"),
    ("T08-nvcc-true", "`-C nvcc=/usr/bin/true`", "setting nvcc names"),
    ("T09-nvcc-a-directory", "`-C nvcc=<toolkit>/bin`, a directory", "setting nvcc names"),
    (
        "T10-nvcc-a-script-printing-a-version",
        "`-C nvcc=` a script that prints nvcc's version line and nothing else",
        "is not nvcc",
    ),
    ("D05-doctor-cuda-home-empty", "`doctor` with `CUDA_HOME` an empty directory", ""),
    (
        "SA03-stable-on-torch-2.9",
        "`-C torch-abi=stable` under torch 2.9.1",
        "-C torch-abi=stable builds flash-attn 2.8.3.post2 on torch's stable ABI",
    ),
    (
        "SA04-stable-2.6.3-on-torch-2.9",
        "`-C torch-abi=stable -C flash-attn-version=2.6.3` under torch 2.9.1",
        "flash-attn 2.6.3 has no binding on torch's stable ABI",
    ),
    (
        "SA05-doctor-stable-on-torch-2.9",
        "`FA_SHIM_TORCH_ABI=stable doctor` under torch 2.9.1 with no CUDA 12 toolkit",
        "",
    ),
    ("SA09-stable-tu-parts-2", "`-C torch-abi=stable -C tu-parts=2`", ""),
    (
        "TC13-another-torchs-index-url",
        "the guide's pip line with another torch's index URL, then `import flash_attn`",
        "",
    ),
    (
        "E01-tmpdir-50-mb-real-sdist",
        "TMPDIR on a 50 MB tmpfs, the real sdist",
        "not enough disk space: the build needs",
    ),
    (
        "SA08-stable-the-2.8.3-file",
        "`-C torch-abi=stable -C sdist=` the 2.8.3 file",
        "(setting sdist) is flash-attn 2.8.3, which has no binding",
    ),
    (
        "V00-verify-renamed-wheel",
        "`verify` of a wheel renamed flash_attn.whl",
        "is not a valid wheel file name",
    ),
    (
        "V01-verify-text-as-wheel",
        "`verify` of a text file named as the wheel",
        "is not a readable wheel",
    ),
    (
        "V02-verify-sdist-as-wheel",
        "`verify` of the sdist named as the wheel",
        "is not a readable wheel",
    ),
    (
        "V03-verify-record-tampered",
        "`verify` of a wheel whose RECORD has a wrong hash",
        "FAIL  record",
    ),
    (
        "V04-verify-member-edited",
        "`verify` of a wheel with a member edited after its RECORD",
        "FAIL  record",
    ),
    ("V05-verify-no-record", "`verify` of a wheel without RECORD", "FAIL  record"),
    (
        "V06-verify-numpy-module",
        "`verify` of numpy's extension module",
        "is not a flash-attn module",
    ),
    ("V07-verify-missing", "`verify` of a wheel that does not exist", "does not exist"),
    (
        "V08-verify-random-directory",
        "`verify` of a directory of the user's",
        "holds neither a flash-attn distribution",
    ),
    (
        "V10-verify-a-gib-of-zeros",
        "`verify` of a 1 GiB file of zeros named as flash-attn's module",
        "is not a readable ELF shared object",
    ),
    (
        "V11-verify-python-missing",
        "`verify --python /nonexistent/python`",
        "--python /nonexistent/python is not an executable interpreter",
    ),
    # the object cache's rows, each a test of tests/integration/test_object_cache.py (OC13:
    # test_cache_trust.py) on a one-kernel CUDA source through the real launcher and nvcc
    ("OC01-team-share-read-only-a-miss", "a read-only team share, a miss", ""),
    ("OC02-object-truncated", "an object cut to 4000 bytes", ""),
    (
        "OC03-object-planted",
        "an object with a flipped byte, its recorded sha256 edited to match, then "
        "`cache check --rebuild`",
        "FAILED",
    ),
    ("OC04-object-json-not-json", "object.json not JSON", ""),
    ("OC05-objects-a-file", "the objects path a file", ""),
    ("OC06-locks-a-file", "objects/.locks a file, one object missing", ""),
    ("OC07-share-read-only-3-of-4", "a read-only share holding 3 of 4 objects", ""),
    ("OC08-cache-disk-full", "the object cache on a full disk, one object missing", ""),
    ("OC09-cache-disk-full-after-the-lock", "the disk fills after the lock is taken", ""),
    ("OC10-two-builds-one-object", "two builds of one unit at once into one cache", ""),
    ("OC11-killed-builders-lock", "the lock of a builder that was killed", ""),
    ("OC12-cache-check-truncated-object", "`cache check` of a truncated object", "FAILED"),
    ("OC13-a-killed-writers-part", "a killed writer's `.<key>.part-*`, hours old", "FAILED"),
    ("X06-backend-killed-then-rebuilt", "SIGKILL of the backend mid-build, then the build", ""),
    ("SA10-stable-into-a-team-cache", "the stable build into a team cache", ""),
    ("SA11-install-py-cpu-torch-stable-only", "install.py, CPU torch, a stable-only cache", ""),
    ("SA12-install-py-torch-2.9-stable-only", "install.py, torch 2.9.1, a stable-only cache", ""),
    (
        "SA13-install-py-binding-torch-stable-only",
        "install.py --binding torch, a stable-only cache",
        "",
    ),
    ("SA14-install-py-torch-2.11-stable-only", "install.py, torch 2.11, a stable-only cache", ""),
    ("TC15-truncated-cuda-torch-view", "a CUDA torch's view cut short, then a build", ""),
    (
        "MX09-prebuild-an-env-without-packaging",
        "`prebuild --python` an environment without packaging or torch",
        "failed",
    ),
    # a real disk that is read-only, small or full, where fa-shim's answer is to build, or pip's
    (
        "W01-wheel-cache-dir-read-only",
        "`-C wheel-cache-dir=` an empty directory on a read-only mount",
        "",
    ),
    ("E02-tmpdir-2-mb", "TMPDIR on a 2 MB tmpfs, the sample built", ""),
    (
        "O01-pip-wheel-dir-read-only",
        "`pip wheel -w` a directory on a read-only mount",
        "",
    ),
    ("O02-pip-wheel-dir-full", "`pip wheel -w` a full 64 KiB tmpfs", ""),
]


def _digests(*roots: Path, skip: str = "\0") -> dict[str, str]:
    """Every file under roots, by content: what 'no file of the user's touched' compares (but
    names starting with `skip`)."""
    found = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and not path.name.startswith(skip):
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _path_without_ninja(tmp_path: Path) -> str:
    """This PATH with every ninja taken out: each directory holding one is replaced by a
    directory of links to its other entries (g++, as, ld still found where they were)."""
    parts = []
    for i, directory in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(directory) or not os.path.exists(os.path.join(directory, "ninja")):
            parts.append(directory)
            continue
        mirror = tmp_path / "path" / str(i)
        mirror.mkdir(parents=True)
        for entry in os.scandir(directory):
            if entry.name != "ninja":
                (mirror / entry.name).symlink_to(entry.path)
        parts.append(str(mirror))
    return os.pathsep.join(parts)


class Case:
    """One row: the command, where it runs, and what must stay as it was."""

    def __init__(self, tmp_path: Path, sdists: Path, cache: Path) -> None:
        self.tmp = tmp_path
        self.out = tmp_path / "out"  # the build dir or wheel dir: empty or absent after a failure
        self.cwd = REPO
        self.env = clean_env(
            TMPDIR=str(tmp_path / "tmp"),
            XDG_CACHE_HOME=str(cache),  # the rows' one torch probe
            FA_SHIM_COMPILER_CACHE="none",
        )
        self.settings = sample_settings(sdists)
        self.user: list[Path] = [sdists]  # files of the user's, compared byte for byte
        self.argv: list = []
        (tmp_path / "tmp").mkdir()

    def prepare(self, *settings: str) -> None:
        self.argv = [PY, "-m", "fa_backend", "prepare", "--build-dir", self.out, *settings]

    def run(self, argv=None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(a) for a in argv or self.argv],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )


def _sample_sdists(tmp_path: Path) -> Path:
    """A user's sdist-dir of their own, holding the sample."""
    pack_sample(tmp_path / "sdists")
    return tmp_path / "sdists"


def _set_up(row: str, case: Case, tmp_path: Path) -> None:
    sdists = case.user[0]
    if row == "T06-ninja-off-path-prepare":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.prepare(*case.settings)
    elif row == "T07-ninja-off-path-pip":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.env["PIP_NO_CACHE_DIR"] = "1"
        case.argv = [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
        case.argv += ["-w", case.out, copy_repo(tmp_path / "fa-shim"), *case.settings]
    elif row == "B04-re-prepare-over-edits":
        case.prepare(*case.settings)
        first = case.run()
        assert first.returncode == 0, first.stderr
        tree = case.out / "src" / f"flash_attn-{SAMPLE_VERSION}"
        (tree / "my-edit.txt").write_text("mine\n")
        with (tree / "setup.py").open("a") as f:
            f.write("# my change\n")
        case.user += [tree / "my-edit.txt", tree / "setup.py"]
    elif row.startswith(("Q03", "Q04", "Q05")):
        case.prepare(*case.settings)
        if row.startswith("Q05"):  # a tree prepared before
            first = case.run()
            assert first.returncode == 0, first.stderr
    elif row == "killed-re-prepare":
        case.prepare(*case.settings)
        _killed(case)
    elif row == "D01-doctor-ninja-off-path":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.argv = [PY, "-m", "fa_backend", "doctor"]
    elif row in ("T01-cxx-missing", "cc-missing"):
        variable, program = ("CXX", "g++") if row == "T01-cxx-missing" else ("CC", "gcc")
        case.env[variable] = f"/nonexistent/{program}"
        case.prepare(*case.settings)
    elif row == "V09-verify-foreign-module":
        import numpy

        (numpy_module,) = Path(numpy.__file__).parent.glob("_core/_multiarray_umath.*.so")
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        module = tmp_path / "mine" / f"flash_attn_2_cuda{suffix}"
        module.parent.mkdir()
        shutil.copyfile(numpy_module, module)
        case.user.append(module)
        case.argv = [PY, "-m", "fa_backend", "verify", module]
    elif "empty-" in row:
        key = {
            "K05-empty-archs": "cuda-archs",
            "empty-int": "max-jobs",
            "empty-bool": "offline",
            "empty-str": "compiler-cache",
            "K27-empty-path": "sdist",
            "empty-version": "flash-attn-version",
            "empty-seconds": "wheel-cache-heartbeat",
            "empty-list": "head-dims",
        }.get(row)
        if row == "K25-empty-archs-env":
            case.env["FA_SHIM_CUDA_ARCHS"] = ""
            case.prepare(*case.settings)
        else:
            case.prepare(*case.settings, "-C", f"{key}=")
    elif row == "SA01-torch-abi-typo":
        case.prepare(*case.settings, "-C", "torch-abi=stabel")
    elif row == "torch-abi-no-stable-line":
        case.prepare(*case.settings, "-C", "torch-abi=stable")
    elif row == "SA02-torch-abi-cpu-torch":  # refused before its sdist is looked for
        case.prepare("-C", "flash-attn-version=2.8.3.post2", "-C", "torch-abi=stable")
    elif row == "S06-sdist-is-a-directory":
        case.prepare(*case.settings, "-C", f"sdist={sdists}")
    elif row == "S07-directory-named-like-sdist":
        mine = tmp_path / "mine-sdists"
        (mine / f"flash_attn-{SAMPLE_VERSION}.tar.gz").mkdir(parents=True)
        (mine / f"flash_attn-{SAMPLE_VERSION}.tar.gz" / "notes.txt").write_text("mine\n")
        case.user.append(mine)
        case.prepare(*sample_settings(mine))
    elif row == "S08-not-gzip-sdist":
        (sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz").write_text("my notes, not a tarball\n")
        case.prepare(*case.settings)
    elif row in ("R01-pin-off-by-one-digit", "R02-pin-not-hex"):
        # the sample pinned in a copy's registry, its sha256 one digit off (or not hex)
        repo = copy_repo(tmp_path / "fa-shim")
        sdist = sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        wrong = digest[:-1] + ("0" if digest[-1] != "0" else "1")
        if row.startswith("R02"):
            wrong = digest.upper()
        pin = repo / "vendored_patches" / SAMPLE_VERSION / "release.toml"
        pin.parent.mkdir()
        pin.write_text(f'sdist = "{sdist.name}"\nsha256 = "{wrong}"\narchs = "fixed-80-90"\n')
        case.cwd = repo
        case.argv = [PY, "-m", "fa_backend", "prepare", "--build-dir", case.out]
        case.argv += ["-C", f"flash-attn-version={SAMPLE_VERSION}", "-C", f"sdist-dir={sdists}"]
        case.pin = pin  # the message must name it
    elif row == "A00-prepare-outside-checkout":
        case.cwd = tmp_path / "elsewhere"
        case.cwd.mkdir()
        case.env["PYTHONPATH"] = str(REPO)
        case.prepare()
    elif row == "MX10-gzip-bomb":  # refused at its header: nothing extracted, whatever the disk
        case.user.append(pack_bomb(tmp_path / "bomb"))
        case.prepare(*sample_settings(tmp_path / "bomb"))
    elif row.startswith("MX12-"):  # never a file of the user's replaced (MX12)
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "install.py").write_text("print('my own installer')\n")
        settings = case.settings
        if row.endswith("dot-in-a-project"):
            (mine / "pyproject.toml").write_text('[project]\nname = "mine"\n')
            case.cwd, case.env["FA_SHIM_WHEEL_CACHE_DIR"] = mine, "."
            case.env["PWD"] = str(mine)  # as the user's shell sets it (pip moves the cwd)
        else:
            settings = [*settings, "-C", f"wheel-cache-dir={mine}"]
        case.user.append(mine)
        case.mine = mine  # nothing added to it either
        case.argv = [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", case.out]
        case.argv += [copy_repo(tmp_path / "fa-shim"), *settings]
    elif row == "S14-version-not-its-own":
        (sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz").rename(sdists / "flash_attn-0.2.0.tar.gz")
        case.prepare(
            "-C",
            "flash-attn-version=0.2.0",
            "-C",
            f"sdist-dir={sdists}",
            "-C",
            "allow-unknown-version=true",
        )
    else:
        raise AssertionError(row)


def _killed(case: Case) -> None:
    """A prepare, then a re-prepare SIGKILLed once it has laid its tree out (its compiler probe
    hangs): the half tree carries no record of a prepared one, and its lock is a dead run's."""
    first = case.run()
    assert first.returncode == 0, first.stderr
    started = case.tmp / "probe-started"
    hang = case.tmp / "hang-c++"
    hang.write_text(
        f'#!/bin/sh\ncase "$*" in *" -E "*) echo $$ > {started}; exec sleep 600;; esac\n'
        'exec g++ "$@"\n'
    )
    hang.chmod(0o755)
    proc = subprocess.Popen(
        [str(a) for a in case.argv],
        cwd=case.cwd,
        env={**case.env, "CXX": str(hang)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120

    def pid() -> str:  # written by the stand-in once it runs
        return started.read_text().strip() if started.exists() else ""

    while not pid() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid(), "the re-prepare never reached its compiler probe"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # the probe runs in a session of its own (core/_subprocess), which a SIGKILL of fa-shim
    # cannot end: this test's hanging stand-in goes by its pid
    os.kill(int(pid()), signal.SIGKILL)
    assert not (case.out / RECORD).exists()  # no half tree marked as prepared


def _two_at_once(case: Case, delay: float = 0.0) -> None:
    """Both prepares succeed, one after the other (the lock), into one whole tree; the second
    starts `delay` seconds after the first."""
    procs = []
    for _ in range(2):
        procs.append(
            subprocess.Popen(
                [str(a) for a in case.argv],
                cwd=case.cwd,
                env=case.env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        time.sleep(delay)
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "File exists" not in err, err
    assert (case.out / RECORD).is_file()
    assert (case.out / "src" / f"flash_attn-{SAMPLE_VERSION}" / "setup.py").is_file()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile-xdg")


# ------------------------------------------------------------------ rows answered in-process
# The rows below fail (or pass) at settings, plan or cache time, so they run in this process
# through the real CLI (`python -m fa_backend`'s main) or PEP 517 hook: the boundary's exit
# status and its one message, and the exception it caught (SystemExit's __context__) for the
# error's kind: a FaShimError whose cause names what the user gave and whose fix is there.


class Row(NamedTuple):
    cmd: str  # prepare, metadata, wheel, editable, doctor, verify, cache, install
    args: tuple = ()  # -C settings (k=v) for prepare and the hooks, else the command's arguments
    named: tuple = ()  # what the cause names, formatted with the case's paths ({out}, {tmp}…)
    status: int = 1
    env: tuple = ()  # (variable, value): the user's environment
    value: tuple = ()  # a row accepted: (settings attribute, the value read)
    sdist: str = "sample"  # the sample, the pinned upstream sdists, or neither ("")


P = "prepare"
IN_PROCESS = {
    "S01-pinned-sdist-truncated": Row(P, ("sdist={tmp}/bad/flash_attn-2.8.3.post2.tar.gz",),
                                      ("{tmp}/bad/flash_attn-2.8.3.post2.tar.gz",), sdist=""),
    "S02-pinned-sdist-byte-flipped": Row(P, ("sdist-dir={tmp}/bad",), ("{tmp}/bad",), sdist=""),
    "S03-other-release-renamed": Row(P, ("sdist-dir={tmp}/bad",), ("{tmp}/bad",), sdist=""),
    "S04-truncated-unpinned-sdist": Row(P, ("sdist-dir={tmp}/bad",), ("{tmp}/bad",)),
    "S05-not-gzip-by-sdist": Row(P, ("sdist={tmp}/bad/flash_attn-0.1.0.tar.gz",),
                                 ("{tmp}/bad/flash_attn-0.1.0.tar.gz",)),
    "S09-member-dotdot": Row(P, ("sdist-dir={tmp}/bad",), ("../outside",)),
    "S10-member-escaping-symlink": Row(P, ("sdist-dir={tmp}/bad",), ("flash_attn-0.1.0/link",)),
    "S11-member-absolute": Row(P, ("sdist-dir={tmp}/bad",), ("/tmp/fa-shim-hostile-abs",)),
    "S12-member-hard-link-out": Row(P, ("sdist-dir={tmp}/bad",), ("flash_attn-0.1.0/hard",)),
    "K01-cuda-arch": Row(P, ("cuda-arch=90",), ("'cuda-arch'",)),
    "K02-cuda-archs-underscore": Row("metadata", ("cuda_archs=90",), status=0,
                                     value=("cuda_archs", ("90",))),
    "K03-env-cuda-arch": Row(P, (), ("FA_SHIM_CUDA_ARCH",), env=(("FA_SHIM_CUDA_ARCH", "90"),)),
    "K04-env-maxjobs": Row(P, (), ("FA_SHIM_MAXJOBS",), env=(("FA_SHIM_MAXJOBS", "4"),)),
    "K06-archs-sm-90": Row("metadata", ("cuda-archs=sm_90",), status=0,
                           value=("cuda_archs", ("90",))),
    "K07-archs-90a-semicolon": Row("metadata", ("cuda-archs=90a;",), status=0,
                                   value=("cuda_archs", ("90a",))),
    "K09-archs-ptx": Row(P, ("cuda-archs=9.0+PTX",), ("'cuda-archs'", "9.0+PTX")),
    "K10-archs-compute": Row(P, ("cuda-archs=compute_90",), ("'cuda-archs'", "compute_90")),
    "K11-max-jobs-negative": Row(P, ("max-jobs=-4",), ("'max-jobs'", "-4")),
    "K12-max-jobs-zero": Row(P, ("max-jobs=0",), ("'max-jobs'",)),
    "K26-max-jobs-fraction": Row(P, ("max-jobs=4.5",), ("'max-jobs'", "4.5")),
    "K13-nvcc-threads-1000": Row(P, ("nvcc-threads=1000",), ("'nvcc-threads'", "1000")),
    "K14-head-dim-7": Row(P, ("head-dims=7",), ("head-dims", "7"), sdist="upstream"),
    "K15-dtype-fp8": Row(P, ("dtypes=fp8",), ("dtypes", "fp8"), sdist="upstream"),
    "K16-bool-yes-please": Row(P, ("forward-only=yes-please",), ("'forward-only'",)),
    "K17-disable-unknown": Row(P, ("disable=dropout,flash",), ("disable", "flash"),
                               sdist="upstream"),
    "K18-version-unknown": Row(P, ("flash-attn-version=2.8.4", "sdist-dir={sample}"), ("2.8.4",),
                               sdist=""),
    "K19-version-latest": Row(P, ("flash-attn-version=latest", "sdist-dir={sample}"),
                              ("'flash-attn-version'", "latest"), sdist=""),
    "K20-lock-timeout-soon": Row(P, ("wheel-cache-lock-timeout=soon",),
                                 ("'wheel-cache-lock-timeout'",)),
    "K21-no-equals": Row(P, ("max-jobs",), ("'max-jobs'",), status=2),
    "K22-tu-parts-zero": Row(P, ("tu-parts=0",), ("'tu-parts'",)),
    "K23-env-max-jobs-empty": Row(P, (), ("FA_SHIM_MAX_JOBS",), env=(("FA_SHIM_MAX_JOBS", ""),)),
    "K29-progress-loud": Row(P, ("progress=loud",), ("progress", "loud")),
    "K30-fa3-key-on-fa2": Row(P, ("fa3-release=auto",), ("'fa3-release'",)),
    "P01-toml-float-version": Row(P, ("sdist-dir={sample}",), ("2.83",), sdist=""),
    "P02-toml-max-jobs-word": Row(P, (), ("'max-jobs'", "{project}/pyproject.toml")),
    "P04-toml-key-underscore": Row(P, (), ("'cuda_archs'", "{project}/pyproject.toml")),
    "P05-toml-invalid": Row(P, (), ("{project}/pyproject.toml",)),
    "SA06-stable-2.8.3": Row(P, ("torch-abi=stable", "flash-attn-version=2.8.3"), ("2.8.3",),
                             sdist="upstream"),
    "SA07-torch-abi-abi3": Row(P, ("torch-abi=abi3",), ("torch-abi", "abi3")),
    "SA15-toml-torch-abi-bool": Row(P, (), ("torch-abi", "True")),
    "SA16-toml-torch-abi-capital": Row(P, (), ("0.1.0",)),
    "MX01-toml-object-cache-yes": Row("metadata", status=0, value=("object_cache", True)),
    "MX02-toml-list-for-a-path": Row(P, (), ("'wheel-cache-dir'", "{project}/pyproject.toml")),
    "MX03-toml-bool-for-an-int": Row(P, (), ("'tu-parts'", "{project}/pyproject.toml")),
    "MX04-toml-heartbeat-zero": Row(P, (), ("'wheel-cache-heartbeat'", "{project}/pyproject.toml")),
    "MX06-max-jobs-twice": Row("wheel", ("max-jobs=1", "max-jobs=2"), ("'max-jobs'",)),
    "OC15-object-cache-maybe": Row(P, ("object-cache=maybe",), ("'object-cache'", "maybe")),
    "OC16-env-object-cache-0": Row("metadata", status=0, env=(("FA_SHIM_OBJECT_CACHE", "0"),),
                                   value=("object_cache", False)),
    "M01-torch-python-without-torch": Row(P, ("torch-python={tmp}/bare/bin/python",),
                                          ("{tmp}/bare/bin/python",)),
    "M02-torch-python-missing": Row(P, ("torch-python=/nonexistent/python",),
                                    ("/nonexistent/python",)),
    "M03-torch-python-a-directory": Row(P, ("torch-python={tmp}/bare",), ("{tmp}/bare",)),
    "M04-editable": Row("editable"),
    "B01-build-dir-users-files": Row(P, (), ("{out}", "notes.txt")),
    "B02-build-dir-a-file": Row(P, (), ("{out}",)),
    "MX11-build-dir-dot-in-the-checkout": Row(P, (), (str(REPO),)),
    "T02-cxx-missing-pip": Row("wheel", (), ("/nonexistent/g++", "CXX"),
                               env=(("CXX", "/nonexistent/g++"),)),
    "T05-compiler-cache-missing": Row(P, ("compiler-cache=/nonexistent/ccache",),
                                      ("/nonexistent/ccache", "compiler-cache")),
    "D02-doctor-python-missing": Row("doctor", ("--python", "/nonexistent/python"),
                                     ("/nonexistent/python",), sdist=""),
    "D03-doctor-cxx-missing": Row("doctor", ("--json",), ("/nonexistent/g++", "CXX"),
                                  env=(("CXX", "/nonexistent/g++"),), sdist=""),
    "W02-wheel-cache-dir-a-file": Row("wheel", ("wheel-cache-dir={tmp}/a-file",),
                                      ("{tmp}/a-file",)),
    "W03-cache-dir-a-file": Row("wheel", ("cache-dir={tmp}/a-file",), ("{tmp}/a-file",)),
    "C10-cache-check-missing": Row("cache", ("check", "{tmp}/nowc"), ("{tmp}/nowc",), sdist=""),
    "C11-cache-check-a-file": Row("cache", ("check", "{tmp}/a-file"), ("{tmp}/a-file",), sdist=""),
    "C12-cache-check-empty": Row("cache", ("check", "{tmp}/wc"), ("{tmp}/wc",), sdist=""),
    "C13-cache-chek": Row("cache", ("chek", "{tmp}/wc"), ("chek",), status=2, sdist=""),
    "MX07-rebuild-other-settings": Row("cache", ("check", "{wc}", "--rebuild", "-C",
                                       "flash-attn-version=0.1.0", "-C", "sdist-dir={tmp}/bad",
                                       "-C", "allow-unknown-version=true"), ("{wc}",), sdist=""),
    "MX08-verify-not-installed": Row("verify", ("flash_attn",), (PY,), sdist=""),
    "TC01-install-binding-abi3": Row("install", ("--binding", "abi3"), ("abi3",), status=2),
    "TC02-install-stable-cpu-torch": Row("install", ("--binding", "stable", "--dry-run"),
                                         ("--binding stable",)),
    "TC03-install-kernel-set-typo": Row("install", ("--kernel-set", "hdim128.bf16.fwdd",
                                        "--dry-run"), ("hdim128.bf16.fwdd", "{wc}")),
    "TC04-install-archs-sm-90": Row("install", ("--archs", "sm_90", "--dry-run"), status=0),
    "TC05-install-archs-dotted": Row("install", ("--archs", "9.0", "--dry-run"), status=0),
    "TC06-install-wheel-deleted": Row("install", ("--dry-run",), ("{wc}", "pip install")),
    "TC07-index-links-a-deleted-wheel": Row("cache", ("check", "{wc}"), ("{view}",)),
    "TC08-install-tampered-wheel": Row("install", (), ("{entry}", "cache check")),
    "TC09-install-python-without-pip": Row("install", (), ("{tmp}/nopip/bin/python", "ensurepip",
                                           "--uv")),
    "TC11-install-python-without-torch": Row("install", (), ("{tmp}/bare/bin/python",)),
    "TC10-install-copied-out": Row("install", ("--dry-run",), ("{tmp}/elsewhere",)),
    "TC12-install-uv-missing": Row("install", ("--uv",), ("uv",), env=(("PATH", "/nonexistent"),)),
    "OC14-doctor-object-cache-a-file": Row("doctor", ("--json",), ("{objects}",), sdist=""),
    "L01-lock-of-a-dead-builder": Row("wheel", ("wheel-cache-dir={tmp}/wcl",), status=0),
    "MX05-toml-path-with-tilde": Row("metadata", status=0, env=(("HOME", "{tmp}/home"),),
                                     value=("wheel_cache_dir", "{tmp}/home/fa-probe6-wheels")),
    "L02-live-lock-of-another-host": Row("wheel", ("wheel-cache-dir={tmp}/wcl",
                                         "wheel-cache-lock-timeout=1"), ("{lock}", "node-17")),
    "C02-entry-byte-flipped": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "C04-entry-json-missing": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "C06-entry-names-outside": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "C08-entry-json-not-json": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "C07-entry-and-view-links-to-a-users-file": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "TC14-truncated-torch-view": Row("wheel", ("wheel-cache-dir={wc}",), status=0),
    "N01-cached-sdist-truncated-offline": Row(P, ("offline=true",), (
        "{tmp}/xdg/fa-shim/sdists/flash_attn-2.8.3.post2.tar.gz", "fa-shim cache"),
        env=(("XDG_CACHE_HOME", "{tmp}/xdg"),), sdist=""),
    "B05-build-dir-a-symlink": Row(P, (), ("{tmp}/blink", "{tmp}/blinkt")),
    "P03-toml-archs-list": Row("metadata", status=0, value=("cuda_archs", ("80", "90"))),
    "D04-doctor-project-not-a-project": Row("doctor", ("--json", "--project", "{sample}"),
                                            ("no flash-attn version is configured",), sdist=""),
    "C01-cache-check-byte-flipped": Row("cache", ("check", "{wc}"), (
        "not the wheel it stored", "rm -r {wc}/"), sdist=""),
    "C03-cache-check-entry-json-missing": Row("cache", ("check", "{wc}"), (
        "no entry.json", "rm -r {wc}/"), sdist=""),
    "C05-cache-check-entry-names-outside": Row("cache", ("check", "{wc}"), (
        "no entry.json naming a wheel that is there", "rm -r {wc}/"), sdist=""),
    "C09-cache-check-fingerprint-missing": Row("cache", ("check", "{wc}"), (
        "fingerprint.json", "rm -r {wc}/"), sdist=""),
    "C14-cache-check-the-cache-dir": Row("cache", ("check", "{tmp}/xdgc/fa-shim"),
                                         ("{tmp}/xdgc/fa-shim",), sdist=""),
    "V00-verify-renamed-wheel": Row("verify", ("{tmp}/v/flash_attn.whl",), ("flash_attn.whl",),
                                    sdist=""),
    "V01-verify-text-as-wheel": Row("verify", ("{v}",), ("{v}",), sdist=""),
    "V02-verify-sdist-as-wheel": Row("verify", ("{v}",), ("{v}",), sdist=""),
    "V03-verify-record-tampered": Row("verify", ("{v}",), ("record",), sdist=""),
    "V04-verify-member-edited": Row("verify", ("{v}",), ("record",), sdist=""),
    "V05-verify-no-record": Row("verify", ("{v}",), ("record",), sdist=""),
    "V06-verify-numpy-module": Row("verify", ("{v}",), ("{v}",), sdist=""),
    "V07-verify-missing": Row("verify", ("{tmp}/v/missing.whl",), ("{tmp}/v/missing.whl",),
                              sdist=""),
    "V08-verify-random-directory": Row("verify", ("{tmp}/v",), ("{tmp}/v",), sdist=""),
    "V10-verify-a-gib-of-zeros": Row("verify", ("{v}",), ("{v}",), sdist=""),
    "V11-verify-python-missing": Row("verify", ("{entry}", "--python", "/nonexistent/python"),
                                     ("/nonexistent/python",), sdist=""),
}  # fmt: skip

# the [tool.fa-shim] line a row adds to (or puts in place of the version of) the project's
PROJECT_LINES = {
    "P01": "flash-attn-version = 2.83",
    "P02": 'max-jobs = "eight"',
    "P03": "cuda-archs = [80, 90]",
    "P04": 'cuda_archs = "90"',
    "P05": "this is = not toml [",
    "SA15": "torch-abi = true",
    "SA16": 'torch-abi = "Stable"',
    "MX01": 'object-cache = "yes"',
    "MX02": 'wheel-cache-dir = ["/tmp/a", "/tmp/b"]',
    "MX03": "tu-parts = true",
    "MX04": "wheel-cache-heartbeat = 0",
    "MX05": 'wheel-cache-dir = "~/fa-probe6-wheels"',
}
VERSION_LINE = 'flash-attn-version = "2.8.3.post2"\n'


@pytest.fixture(scope="module")
def team_cache(tmp_path_factory, sample_sdist_dir) -> Path:
    """The sample built once into a wheel cache of its own (entry, torch view, index,
    install.py), as a team's directory is; each row gets a copy (`cp -a`: the view stays a hard
    link of its entry's wheel)."""
    tmp = tmp_path_factory.mktemp("hostile-wc")
    settings = [*sample_settings(sample_sdist_dir), "-C", f"wheel-cache-dir={tmp / 'wc'}"]
    env = clean_env(XDG_CACHE_HOME=str(tmp / "xdg"), PIP_NO_CACHE_DIR="1")
    run(pip_wheel_cmd(PY, tmp / "out", *settings), env=env)
    return tmp / "wc"


class InProcess:
    """One row's command, its paths, and the files of the user's it must leave as they were."""

    def __init__(self, row: str, spec: Row, tmp_path: Path, sample: Path) -> None:
        self.row, self.spec, self.tmp = row, spec, tmp_path
        self.out = tmp_path / "out"
        self.paths = {"tmp": tmp_path, "out": self.out, "sample": sample, "project": REPO}
        self.user: list[Path] = [sample]
        self.install = None  # install.py rows: the script run
        self.python = Path(PY)  # the interpreter that runs it

    def fill(self, text: str) -> str:
        return text.format(**{k: str(v) for k, v in self.paths.items()})

    def config(self) -> list[tuple[str, str]]:
        given = {
            "sample": [f"flash-attn-version={SAMPLE_VERSION}", "allow-unknown-version=true",
                       f"sdist-dir={self.paths['sample']}"],
            "upstream": [f"sdist-dir={self.paths.get('upstream')}"],
            "": [],
        }[self.spec.sdist]  # fmt: skip
        return [tuple(self.fill(a).split("=", 1)) for a in [*given, *self.spec.args]]

    def argv(self) -> list[str]:
        if self.spec.cmd == P:
            pairs = [self.fill(a) for a in self.spec.args if "=" not in a]  # K21: no =
            pairs += ["=".join(kv) for kv in self.config() if len(kv) == 2]
            options = [a for pair in pairs for a in ("-C", pair)]
            return ["prepare", "--build-dir", str(self.out), *options]
        return [self.spec.cmd, *(self.fill(a) for a in self.spec.args)]


def _plant(case: InProcess, team_cache: Path | None) -> None:
    """What the row's user has: their bad files, project, cache."""
    tmp, prefix = case.tmp, case.row.split("-")[0]
    bad = tmp / "bad"
    sample = case.paths["sample"] / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    if prefix in ("S01", "S02", "S03"):
        name = "flash_attn-2.8.3.post2.tar.gz"
        source = "flash_attn-2.8.3.tar.gz" if prefix == "S03" else name
        data = bytearray((case.paths["upstream"] / source).read_bytes())
        if prefix == "S01":
            data = data[: len(data) // 2]
        elif prefix == "S02":
            data[len(data) // 2] ^= 0x01
        bad.mkdir()
        (bad / name).write_bytes(data)
        case.user.append(bad)
    elif prefix in ("S04", "S05"):
        bad.mkdir()
        data = sample.read_bytes()[:3000] if prefix == "S04" else b"my notes, not a tarball\n"
        (bad / sample.name).write_bytes(data)
        case.user.append(bad)
    elif prefix in ("S09", "S10", "S11", "S12"):
        top = f"flash_attn-{SAMPLE_VERSION}"
        member = {
            "S09": _member("../outside"),
            "S10": _member(f"{top}/link", tarfile.SYMTYPE, "../../outside"),
            "S11": _member("/tmp/fa-shim-hostile-abs"),
            "S12": _member(f"{top}/hard", tarfile.LNKTYPE, "/etc/passwd"),
        }[prefix]
        bad.mkdir()
        with tarfile.open(sample) as src, tarfile.open(bad / sample.name, "w:gz") as dst:
            for info in src:
                dst.addfile(info, src.extractfile(info) if info.isfile() else None)
            dst.addfile(member, io.BytesIO(b"x") if member.isfile() else None)
        case.user.append(bad)
    elif prefix in PROJECT_LINES:  # a project of the user's: the checkout's pyproject.toml, edited
        project = tmp / "project"
        project.mkdir()
        text = (REPO / "pyproject.toml").read_text()
        line = PROJECT_LINES[prefix] + "\n"
        text = text.replace(VERSION_LINE, line if prefix == "P01" else VERSION_LINE + line, 1)
        (project / "pyproject.toml").write_text(text)
        case.paths["project"] = project
        case.user.append(project)
    elif prefix in ("M01", "M03", "TC11"):
        venv.EnvBuilder(with_pip=False).create(tmp / "bare")  # a Python without torch
        case.python = tmp / "bare" / "bin" / "python"
    elif prefix == "TC09":  # this Python's packages, torch too, but pip
        venv.EnvBuilder(with_pip=False).create(tmp / "nopip")
        case.python = tmp / "nopip" / "bin" / "python"
        seen = tmp / "site"
        seen.mkdir()
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            if not entry.name.startswith(("pip", "_distutils_hack", "distutils-precedence")):
                (seen / entry.name).symlink_to(entry)
        purelib = run(
            [case.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        )
        Path(purelib.stdout.strip(), "site.pth").write_text(f"{seen}\n")
    elif prefix == "B01":
        (case.out / "src").mkdir(parents=True)
        (case.out / "notes.txt").write_text("mine\n")
        case.user.append(case.out)
    elif prefix == "B02":
        case.out.write_text("mine\n")
        case.user.append(case.out)
    elif prefix == "B05":  # the directory is empty: nothing of the user's to keep but itself
        (tmp / "blinkt").mkdir()
        case.out = tmp / "blink"
        case.out.symlink_to(tmp / "blinkt")
    elif prefix == "N01":  # fa-shim's own download, cut in half
        cached = tmp / "xdg" / "fa-shim" / "sdists" / "flash_attn-2.8.3.post2.tar.gz"
        cached.parent.mkdir(parents=True)
        data = (case.paths["upstream"] / cached.name).read_bytes()
        cached.write_bytes(data[: len(data) // 2])
    elif prefix == "MX11":  # `--build-dir .` run in the checkout
        case.out = REPO
    elif prefix == "MX07":  # the sample gzipped again: another sdist, another fingerprint
        bad.mkdir()
        (bad / sample.name).write_bytes(
            gzip.compress(gzip.decompress(sample.read_bytes()), mtime=1)
        )
        case.user.append(bad)
    elif prefix == "OC14":
        objects = Path(os.environ["XDG_CACHE_HOME"], "fa-shim", "objects")
        objects.parent.mkdir(parents=True, exist_ok=True)
        objects.write_text("a file\n")
        case.paths["objects"] = objects
        case.user.append(objects)
    elif prefix in ("L01", "L02"):  # a lock on this build's key: a dead builder's, or node-17's
        config = [a for kv in case.config() for a in ("-C", "=".join(kv))]
        found = run([PY, "-m", "fa_backend", "fingerprint", *config], cwd=REPO, env=clean_env())
        lock = tmp / "wcl" / ".locks" / f"{json.loads(found.stdout)['key']}.lock"
        lock.parent.mkdir(parents=True)
        holder = {"host": "node-17", "pid": 4242, "started": time.time(), "boot": "another"}
        if prefix == "L01":  # this boot and pid namespace, a pid that has exited
            gone = subprocess.Popen(["true"])
            gone.wait()
            holder = {**_hostlock.this_kernel(), "host": socket.gethostname(), "pid": gone.pid}
        lock.write_text(json.dumps(holder))
        case.paths["lock"] = lock
        if prefix == "L02":
            case.user.append(lock)
    elif prefix in ("W02", "W03", "C11"):
        (tmp / "a-file").write_text("mine\n")
        case.user.append(tmp / "a-file")
    elif prefix in ("C12", "C13"):
        (tmp / "wc").mkdir()
    if team_cache is not None:
        wc = tmp / "wc"
        run(["cp", "-a", team_cache, wc])
        (view,) = wc.glob("torch-*/flash_attn-*.whl")
        (entry,) = wc.glob(f"[0-9a-f]*/{view.name}")
        case.paths.update(wc=wc, view=view, entry=entry)
        case.install = wc / "install.py"
        if prefix in ("TC06", "TC07"):
            entry.unlink()
            view.unlink()
        elif prefix == "TC08":  # rewritten in place: the view, a hard link of it, changes too
            with zipfile.ZipFile(io.BytesIO(entry.read_bytes())) as old:
                members = [(i, old.read(i)) for i in old.infolist()]
            with zipfile.ZipFile(entry, "w", zipfile.ZIP_DEFLATED) as new:
                for info, data in members:
                    edited = info.filename.endswith("flash_attn/__init__.py")
                    new.writestr(info, data + b"\n# edited\n" if edited else data)
        elif prefix == "TC10":
            (tmp / "elsewhere").mkdir()
            case.install = Path(shutil.copy(wc / "install.py", tmp / "elsewhere"))
            case.user.append(tmp / "elsewhere")
        elif prefix == "TC14":
            view.unlink()
            data = entry.read_bytes()
            view.write_bytes(data[: len(data) // 2])
        elif prefix in ("C01", "C02"):  # in place: the view, a hard link of it, changes too
            data = bytearray(entry.read_bytes())
            data[len(data) // 2] ^= 0x01
            with entry.open("r+b") as f:
                f.write(data)
        elif prefix in ("C03", "C04"):
            (entry.parent / "entry.json").unlink()
        elif prefix == "C09":
            (entry.parent / "fingerprint.json").unlink()
        elif prefix == "C14":  # the cache directory that holds these wheels as its wheels/
            (tmp / "xdgc" / "fa-shim").mkdir(parents=True)
            run(["cp", "-a", wc, tmp / "xdgc" / "fa-shim" / "wheels"])
        elif prefix in ("C05", "C06", "C08"):
            record = entry.parent / "entry.json"
            if prefix in ("C05", "C06"):  # and a file of the user's where that name leads
                (tmp / "outside.whl").write_text("mine\n")
                case.user.append(tmp / "outside.whl")
                named = {**json.loads(record.read_text()), "wheel": "../../outside.whl"}
                record.write_text(json.dumps(named))
            else:
                record.write_text("{not json")
        elif prefix == "C07":  # both wheels links to a file of the user's
            mine = tmp / "mine" / "flash_attn.whl"
            mine.parent.mkdir()
            mine.write_text("my own file\n")
            for link in (entry, view):
                link.unlink()
                link.symlink_to(mine)
            case.user.append(mine.parent)
        elif prefix.startswith("V"):  # the user's files, given to verify
            _verify_input(case, entry)


def _verify_input(case: InProcess, wheel: Path) -> None:
    """V00-V08: the wheel renamed, a text file or the sdist under its name, its RECORD wrong or
    gone, a member edited; numpy's module; a directory of the user's."""
    prefix, v = case.row.split("-")[0], case.tmp / "v"
    v.mkdir()
    target = v / wheel.name
    with zipfile.ZipFile(wheel) as old:
        members = [(i, old.read(i)) for i in old.infolist()]
    if prefix in ("V03", "V04", "V05"):
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
            for info, data in members:
                record = info.filename.endswith(".dist-info/RECORD")
                if record and prefix == "V03":
                    data = data.replace(b"sha256=", b"sha256=AAAA", 1)
                elif info.filename.endswith("flash_attn/__init__.py") and prefix == "V04":
                    data += b"\n# edited\n"
                if not (record and prefix == "V05"):
                    new.writestr(info, data)
    elif prefix == "V00":
        shutil.copyfile(wheel, v / "flash_attn.whl")
    elif prefix in ("V01", "V02"):
        sample = case.paths["sample"] / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
        target.write_bytes(b"my notes\n" if prefix == "V01" else sample.read_bytes())
    elif prefix == "V06":
        import numpy

        (target,) = Path(numpy.__file__).parent.glob("_core/_multiarray_umath.*.so")
    elif prefix == "V08":
        (v / "notes.txt").write_text("mine\n")
    elif prefix == "V10":  # sparse: a GiB to read, nothing on the disk
        target = v / f"flash_attn_2_cuda{importlib.machinery.EXTENSION_SUFFIXES[0]}"
        with target.open("wb") as f:
            f.truncate(2**30)
    case.paths["v"] = target
    case.user.append(target if prefix == "V06" else v)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


# rows that read the pinned upstream sdists, and those that read the team's wheel cache
UPSTREAM = ("S01", "S02", "S03", "N01")
REBUILT = ("C02", "C04", "C06", "C07", "C08")  # a damaged entry: built again, as a miss
WITH_CACHE = ("V0", "V1", "MX07", "TC", "C01", "C03", "C05", "C09", "C14", *REBUILT)


def _answer(case: InProcess, capfd) -> tuple[int, BaseException | None, str, str]:
    """The command's exit status, the exception the boundary caught, stdout and stderr."""
    import fa_backend
    from fa_backend.cli import _main

    capfd.readouterr()
    caught = None
    if case.spec.cmd == "install" and case.python != Path(PY):  # another environment's Python
        proc = subprocess.run(
            [case.python, case.install, *case.argv()[1:]], capture_output=True, text=True
        )
        return proc.returncode, None, proc.stdout, proc.stderr
    try:
        if case.spec.cmd == "install":  # the teammate's script, run as `python install.py`
            with _argv([str(case.install), *case.argv()[1:]]):
                runpy.run_path(str(case.install), run_name="__main__")
            status = 0
        elif case.spec.cmd in ("metadata", "wheel", "editable"):
            hook = {
                "metadata": fa_backend.prepare_metadata_for_build_wheel,
                "wheel": fa_backend.build_wheel,
                "editable": fa_backend.build_editable,
            }[case.spec.cmd]
            config: dict = {}
            for key, value in case.config():  # a key given twice: pip passes the list
                config[key] = [config[key], value] if key in config else value
            hook(str(case.out), config)
            status = 0
        else:
            status = _main.main(case.argv())
    except SystemExit as stop:
        status, caught = stop.code, stop.__context__
    out, err = capfd.readouterr()
    return status, caught, out, err


@contextlib.contextmanager
def _argv(argv: list[str]):
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def _params():
    for row in IN_PROCESS:
        marks = (
            [pytest.mark.network]
            if row.startswith(UPSTREAM) or (IN_PROCESS[row].sdist == "upstream")
            else []
        )
        yield pytest.param(row, marks=marks, id=row)


@pytest.mark.parametrize("row", _params())
def test_a_row_answered_in_process(row, tmp_path, monkeypatch, capfd, sample_sdist_dir, request):
    spec = IN_PROCESS[row]
    case = InProcess(row, spec, tmp_path, sample_sdist_dir)
    if row.startswith(UPSTREAM) or spec.sdist == "upstream":
        case.paths["upstream"] = request.getfixturevalue("upstream_sdists")
    cache = request.getfixturevalue("team_cache") if row.startswith(WITH_CACHE) else None
    _plant(case, cache)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    monkeypatch.setenv("FA_SHIM_COMPILER_CACHE", "none")
    for name, value in spec.env:
        monkeypatch.setenv(name, case.fill(value))
    monkeypatch.chdir(case.paths["project"])
    before = _digests(*case.user)
    status_of = ["git", "-C", REPO, "status", "--porcelain"]
    checkout = run(status_of).stdout if row.startswith("MX11") else None
    status, caught, out, err = _answer(case, capfd)
    text = out + err
    assert status == spec.status and "Traceback" not in text, text
    named = [case.fill(n) for n in spec.named]
    if spec.cmd == "install" and status:  # the script's one line (test_install_py._one_error)
        (line,) = [ln for ln in err.splitlines() if ln.startswith("install.py:")] or [
            ln for ln in err.splitlines() if "error:" in ln
        ]
        assert all(n in line for n in named), (named, text)
    elif status == 2:  # argparse's: the command line itself, before fa-shim reads a setting
        assert isinstance(caught, argparse.ArgumentError), (caught, text)
        assert all(n in str(caught) for n in named), (named, text)
    elif status and caught is None:  # a report (doctor --json, cache check): its finding says why
        if spec.cmd == "doctor":
            problems = json.loads(out)["problems"]
            assert any(
                p["severity"] == "error" and p["fix"] and all(n in p["cause"] for n in named)
                for p in problems
            ), problems
        else:
            assert "FAILED" in out and all(n in out for n in named), (named, text)
    elif status:
        assert isinstance(caught, FaShimError), (caught, text)  # one of fa-shim's kinds, no crash
        assert all(n in caught.cause for n in named), (named, caught.cause)
        own = "fa-shim/sdists/"  # only fa-shim's own download is fa-shim's to delete
        assert caught.fix and ("delete" not in caught.fix or own in caught.fix), caught.fix
        assert err.count("fa-shim: error:") == 1, err
    elif spec.value:  # accepted, and read as the user meant it
        from fa_backend.flavours import _registry

        attribute = spec.value[0]
        settings = _registry.load_settings(dict(case.config()), project_dir=case.paths["project"])
        read, given = getattr(settings, attribute), spec.value[1]
        if isinstance(given, str):  # a path: as the user's paths fill it
            read, given = str(read), case.fill(given)
        assert read == given, (read, given)
    if spec.cmd == "install" and not status:  # the entry's wheel, from its own directory
        assert f"from {case.paths['entry'].parent}" in err, err
    if row.startswith(REBUILT):  # built again: a whole entry, the view its wheel (no link)
        view, entry = case.paths["view"], case.paths["entry"]
        recorded = json.loads((entry.parent / "entry.json").read_text())
        assert recorded["sha256"] == hashlib.sha256(entry.read_bytes()).hexdigest()
        assert not view.is_symlink() and not entry.is_symlink()
        assert view.read_bytes() == entry.read_bytes()
    if row.startswith("L01"):  # the dead builder's lock taken over, the entry built, released
        assert "took over the wheel-cache lock" in err, err
        assert not case.paths["lock"].exists() and list((tmp_path / "wcl").glob("*/entry.json"))
    if row.startswith("TC14"):  # the hit put the entry's wheel back in its view
        assert case.paths["view"].read_bytes() == case.paths["entry"].read_bytes()
    if status and case.out not in case.user and case.out != REPO and case.out.exists():
        assert list(case.out.iterdir()) == [], list(case.out.iterdir())
    assert _digests(*case.user) == before  # data lost: none
    if checkout is not None:  # MX11: nothing in the checkout changed
        assert run(status_of).stdout == checkout
    assert list(scratch.iterdir()) == []  # leftovers: none


# ------------------------------------------------------------------ rows about the process
# A signal to the run's process group, or a disk that is really read-only or full (a mount in a
# namespace of its own, for root): one fresh process each, its exit status and stderr.
SIGNALS = {"X01": signal.SIGINT, "X03": signal.SIGTERM, "X04": signal.SIGHUP, "X05": signal.SIGINT}
MOUNTED = ("B03", "O03", "O04", "E03", "E04", "S13")
ON_A_DISK = ("W01", "E02", "O01", "O02", "O05")  # test_a_row_on_a_real_disk
TWO_BUILDS = ("Q01", "Q02")  # test_two_builds_at_once_into_one_directory
LATER_SIGNALS = ("X02", "X08")  # test_a_signal_later_in_the_build
# rows whose answer a test of another module checks, each naming its row in a comment or docstring
ANSWERED_ELSEWHERE = {
    **{f"OC{n:02d}": "integration/test_object_cache.py" for n in range(1, 13)},
    "OC13": "integration/test_cache_trust.py",
    "X06": "integration/test_build_speed.py",
    "TC15": "unit/fleet/test_wheel_cache.py",
    "MX09": "integration/test_settings_cli.py",
    **{f"SA{n}": "e2e/test_fa2_stable_abi.py" for n in range(10, 15)},
}
PROCESS_ROWS = [r[0] for r in ROWS if r[0].split("-")[0] in (*SIGNALS, *MOUNTED)]


@pytest.mark.parametrize("row", PROCESS_ROWS)
def test_a_row_of_the_process(row, tmp_path, request):
    _, _, expected = next(r for r in ROWS if r[0] == row)
    prefix = row.split("-")[0]
    if prefix in MOUNTED and not CAN_MOUNT:
        pytest.skip("needs root and a mount namespace (unshare -m) for a real small disk")
    sdists = _sample_sdists(tmp_path)
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    # a cache of its own: no other test's probes or sdist facts decide where the signal lands
    env = clean_env(
        TMPDIR=str(scratch), FA_SHIM_COMPILER_CACHE="none", XDG_CACHE_HOME=str(tmp_path / "c")
    )
    config = {"flash-attn-version": SAMPLE_VERSION, "allow-unknown-version": "true"}
    config["sdist-dir"] = str(sdists)
    named = [str(out)]
    prepare = [PY, "-m", "fa_backend", "prepare", "--build-dir", out, *sample_settings(sdists)]
    if prefix == "X05":  # a tree prepared before the interrupted re-prepare
        run(prepare, cwd=REPO, env=env)
    if prefix in SIGNALS:
        proc = _signalled(tmp_path, sdists, env, SIGNALS[prefix])
        interrupted = SIGNALS[prefix] == signal.SIGINT  # Ctrl-C: 130, as a shell reports it
        assert proc.returncode == (130 if interrupted else 128 + SIGNALS[prefix]), proc.stderr
        assert proc.stderr.count("fa-shim: error:") == 1, proc.stderr
        named = []
    else:
        if prefix == "B03":
            out.mkdir()
            command = [*mounted(out, "ro"), PY, "-m", "fa_backend", "prepare", "--build-dir", out]
            command += sample_settings(sdists)
        elif prefix in ("O03", "O04"):  # a hit: only the copy into the output directory fails
            config["sdist-dir"] = str(request.getfixturevalue("sample_sdist_dir"))
            wc = tmp_path / "wc"
            run(["cp", "-a", request.getfixturevalue("team_cache"), wc])
            config["wheel-cache-dir"] = str(wc)
            out.mkdir()
            command = [
                *mounted(out, "ro" if prefix == "O03" else "full"),
                *hook("build_wheel", out, config),
            ]
            if prefix == "O03":  # where the wheel is: the hit stays in the cache
                named.append(str(wc))
        elif prefix == "E04":
            (tmp_path / "xdg").mkdir()
            env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
            command = [*mounted(tmp_path / "xdg", "ro"), *hook("build_wheel", out, config)]
            named = [str(tmp_path / "xdg")]
        else:  # E03, S13: the scratch itself on a small disk
            if prefix == "S13":
                config["sdist-dir"] = str(pack_bomb(tmp_path / "bomb").parent)
            size = "size=128k" if prefix == "E03" else "size=200m"
            env.pop("TMPDIR")  # the small disk's
            proc = on_small_disk(tmp_path, hook("build_wheel", out, config), size, **env)
            named = [str(tmp_path / "disk")] if prefix == "E03" else ["zeros.bin"]
            command = None
        if command:
            proc = subprocess.run(
                [str(c) for c in command], cwd=REPO, env=env, capture_output=True, text=True
            )
        text = assert_one_error_nothing_left(proc, out)  # conftest's: status 1, one error
        assert "fa-shim: fix:" in text, text
    first = proc.stderr[proc.stderr.index("fa-shim: error:") :].splitlines()[0]
    assert expected in first and all(n in first for n in named), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert list(scratch.iterdir()) == []  # leftovers: none
    if prefix == "X05":  # no half tree marked as prepared, and the next prepare takes it
        assert not (out / RECORD).exists()
        run(prepare, cwd=REPO, env=env)
        assert (out / RECORD).is_file()
    else:
        assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize("row", [r[0] for r in ROWS if r[0][:3] in ON_A_DISK])
def test_a_row_on_a_real_disk(row, tmp_path, request):
    """The build's own outputs on a disk it cannot fill (W01: the wheel cache read-only, E02: a
    2 MB TMPDIR): the wheel, and W01's one warning naming that cache; pip's -w directory
    read-only or full (O01, O02): pip's error, and nothing of fa-shim's there or under TMPDIR;
    the hook's own output directory too small beside a file of the wheel's name (O05): one
    error naming that directory and the wheel's space, that file as it was."""
    if not CAN_MOUNT:
        pytest.skip("needs root and a mount namespace (unshare -m) for a real small disk")
    prefix = row.split("-")[0]
    sdists = _sample_sdists(tmp_path)
    out, scratch, wc = tmp_path / "out", tmp_path / "tmp", tmp_path / "wc"
    for directory in (out, scratch, wc):
        directory.mkdir()
    env = clean_env(
        TMPDIR=str(scratch), FA_SHIM_COMPILER_CACHE="none", XDG_CACHE_HOME=str(tmp_path / "c")
    )
    env["PIP_NO_CACHE_DIR"] = "1"
    config = {"flash-attn-version": SAMPLE_VERSION, "allow-unknown-version": "true"}
    config["sdist-dir"] = str(sdists)
    if prefix == "O05":  # a hit; the old file fills the disk but a page, and must stay as it was
        run(["cp", "-a", request.getfixturevalue("team_cache"), wc / "t"])
        config.update({"sdist-dir": str(request.getfixturevalue("sample_sdist_dir"))})
        config["wheel-cache-dir"] = str(wc / "t")
        (name,) = {p.name for p in (wc / "t").glob("*/flash_attn-*.whl")}
        old = out / name
        shell = (
            f"mount -t tmpfs -o size=120k tmpfs {out} && head -c 118784 /dev/urandom > {old} && "
            f'sha256sum {old} && "$@"; status=$?; sha256sum {old}; ls -A {out}; exit $status'
        )
        command = ["unshare", "-m", "sh", "-c", shell, "sh", *hook("build_wheel", out, config)]
    elif prefix == "W01":
        config["wheel-cache-dir"] = str(wc)
        command = [*mounted(wc, "ro"), *hook("build_wheel", out, config)]
    elif prefix == "E02":
        config["wheel-cache"] = "false"
        env.pop("TMPDIR")  # the small disk's
        proc = on_small_disk(tmp_path, hook("build_wheel", out, config), "size=2m", **env)
        command = None
    else:
        how = "ro" if prefix == "O01" else "full"
        command = [*mounted(out, how), *pip_wheel_cmd(PY, out, *sample_settings(sdists))]
        command += ["-C", "wheel-cache=false"]
    if command:
        proc = subprocess.run(
            [str(c) for c in command], cwd=REPO, env=env, capture_output=True, text=True
        )
    text = proc.stdout + proc.stderr
    if prefix == "O05":  # one error; the user's file byte for byte, and nothing beside it
        assert proc.returncode == 1 and text.count("fa-shim: error:") == 1, text
        assert "Traceback" not in text and "not enough disk space: the build needs" in text
        assert f"on {out}, has 4 kB (the wheel " in text, text  # before the cache is asked
        before, after, listing = proc.stdout.splitlines()
        assert before == after and listing == name, proc.stdout
        assert list(scratch.iterdir()) == []
        return
    assert "Traceback" not in text and "fa-shim: error:" not in text, text
    if prefix in ("W01", "E02"):
        assert proc.returncode == 0 and len(list(out.glob("*.whl"))) == 1, text
        if prefix == "W01":
            warnings = [ln for ln in text.splitlines() if "fa-shim: warning:" in ln]
            warnings = [ln for ln in warnings if "is not pinned by fa-shim" not in ln]  # the sample
            assert len(warnings) == 1, warnings
            assert f"{wc} is not writable (Read-only file system)" in warnings[0], warnings
            assert list(wc.iterdir()) == []
    else:  # pip's own error, copying the wheel into -w: nothing of fa-shim's is left there
        errno = "Read-only file system" if prefix == "O01" else "No space left on device"
        assert proc.returncode != 0 and errno in text, text
        assert not [p for p in out.iterdir() if ".part" in p.name or "fa-shim" in p.name]
    assert list(scratch.iterdir()) == []  # leftovers: none


@pytest.mark.parametrize("row", [r[0] for r in ROWS if r[0][:3] in TWO_BUILDS])
def test_two_builds_at_once_into_one_directory(row, tmp_path):
    """Q01: two builds of the sample at once into one output directory, no cache: both succeed
    and one whole wheel is there; Q02: the same with one shared wheel cache: the second waits
    for the first's lock and is served its wheel (one entry)."""
    sdists = _sample_sdists(tmp_path)
    out, scratch, wc = tmp_path / "out", tmp_path / "tmp", tmp_path / "wc"
    out.mkdir()
    scratch.mkdir()
    env = clean_env(
        TMPDIR=str(scratch), FA_SHIM_COMPILER_CACHE="none", XDG_CACHE_HOME=str(tmp_path / "c")
    )
    config = {"flash-attn-version": SAMPLE_VERSION, "allow-unknown-version": "true"}
    config["sdist-dir"] = str(sdists)
    if row.startswith("Q01"):
        config["wheel-cache"] = "false"
    else:
        config["wheel-cache-dir"] = str(wc)
    procs = [
        subprocess.Popen(
            hook("build_wheel", out, config), cwd=REPO, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]  # fmt: skip
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert not any("Traceback" in e for e in errs), errs
    (wheel,) = out.iterdir()  # one wheel, no temporary beside it
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None
    if row.startswith("Q02"):
        assert len(list(wc.glob("*/entry.json"))) == 1
        assert any("wheel cache hit" in e for e in errs), errs
    assert list(scratch.iterdir()) == []  # leftovers: none


@pytest.mark.parametrize("row", [r[0] for r in ROWS if r[0][:3] in ("X02", "X08")])
def test_a_signal_later_in_the_build(row, tmp_path):
    """X02: Ctrl-C (SIGINT to the group) while upstream's build compiles, later than X01's
    compiler probe: status 130, one error, nothing published or left, no compile outliving it.
    X08: the same to `pip wheel`'s group: pip's own "Operation cancelled by user", and nothing
    of fa-shim's left."""
    sdists = _sample_sdists(tmp_path)
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    scratch.mkdir()
    env = clean_env(
        TMPDIR=str(scratch), FA_SHIM_COMPILER_CACHE="none", XDG_CACHE_HOME=str(tmp_path / "c")
    )
    env["PIP_NO_CACHE_DIR"] = "1"
    if row.startswith("X02"):
        config = {"flash-attn-version": SAMPLE_VERSION, "allow-unknown-version": "true"}
        config.update({"sdist-dir": str(sdists), "wheel-cache": "false"})
        argv = hook("build_wheel", out, config)
    else:
        argv = pip_wheel_cmd(PY, out, *sample_settings(sdists), project=copy_repo(tmp_path / "fa"))
    proc = _signalled(tmp_path, sdists, env, signal.SIGINT, argv, '*" -c "*flash_api.cpp*')
    if row.startswith("X02"):
        assert proc.returncode == 130 and proc.stderr.count("fa-shim: error:") == 1, proc.stderr
        assert "interrupted" in proc.stderr, proc.stderr
    else:
        assert proc.returncode != 0 and "Operation cancelled by user" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert list(out.iterdir()) == [] and list(scratch.iterdir()) == []


def _signalled(
    tmp_path: Path, sdists: Path, env: dict, sig: int, argv=None, when: str = '*" -E "*'
) -> subprocess.CompletedProcess:
    """A prepare (or `argv`) whose compiler hangs where its arguments match `when` (the probe's
    -E by default), sent `sig` as a terminal sends it: to its group."""
    started, hang = tmp_path / "probe-started", tmp_path / "hang-c++"
    hang.write_text(
        f'#!/bin/sh\ncase "$*" in {when}) echo $$ > {started}; exec sleep 600;; esac\n'
        'exec g++ "$@"\n'
    )
    hang.chmod(0o755)
    if argv is None:
        argv = [PY, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "out"]
        argv += sample_settings(sdists)
    proc = subprocess.Popen(
        [str(a) for a in argv],
        cwd=REPO,
        env={**env, "CXX": str(hang)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as a terminal starts it: a run under nohup or `&` inherits SIGINT and SIGHUP ignored,
        # which the backend rightly keeps (Python installs no Ctrl-C handler then)
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in SIGNALS.values()],
    )
    deadline = time.monotonic() + 120
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the prepare never reached its compiler probe"
    os.killpg(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=180)  # a loaded CI box
    # pip does not wait for its backend after Ctrl-C: the backend may still be cleaning up
    deadline = time.monotonic() + 60
    while (left := process_session.members(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes {left} of the signalled run outlived it by a minute"
    probe = int(started.read_text().strip())
    try:  # the compile's session ends with the run; dead but not yet reaped (a zombie) is gone
        state = Path(f"/proc/{probe}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = b"X"
    if state not in (b"Z", b"X"):
        os.kill(probe, signal.SIGKILL)
        raise AssertionError(f"the hanging compile (pid {probe}, state {state}) outlived its run")
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


# the rows tests/e2e/test_hostile_cuda_torch.py runs
CUDA_TORCH = ("K08", "K28", "K24", "T03", "T04", "T08", "T09", "T10", "D05")
CUDA_TORCH += ("SA03", "SA04", "SA05", "SA08", "SA09", "E01")  # SA03-05 under torch 2.9.1
CUDA_TORCH += ("TC13",)
ELSEWHERE = (*IN_PROCESS, *PROCESS_ROWS)
ELSEWHERE += tuple(
    r[0]
    for r in ROWS
    if r[0].split("-")[0] in (*ON_A_DISK, *TWO_BUILDS, *LATER_SIGNALS, *ANSWERED_ELSEWHERE)
)


def test_each_row_answered_elsewhere_is_listed_and_named_by_its_test():
    """ROWS (the reliability page's list) holds each, and the module that answers it names it."""
    listed = [r[0].split("-")[0] for r in ROWS]
    tests = Path(__file__).parent.parent
    unnamed = [
        (row, module)
        for row, module in ANSWERED_ELSEWHERE.items()
        if row not in listed or not re.search(rf"\b{row}\b", (tests / module).read_text())
    ]
    assert unnamed == []


@pytest.mark.parametrize(
    "row", [r[0] for r in ROWS if r[0] not in ELSEWHERE and r[0].split("-")[0] not in CUDA_TORCH]
)
def test_a_hostile_input_gets_one_true_error_and_leaves_nothing(row, tmp_path, cache):
    _, _, expected = next(r for r in ROWS if r[0] == row)
    case = Case(tmp_path, _sample_sdists(tmp_path), cache)
    _set_up(row, case, tmp_path)
    before = _digests(*case.user)
    before_out = _digests(case.out, skip=LOCK) if case.out.exists() else {}
    before_mine = [p.name for p in case.mine.iterdir()] if hasattr(case, "mine") else []
    if not expected:
        _two_at_once(case, {"Q04": 1.5, "Q05": 2.5}.get(row.split("-")[0], 0.0))
    else:
        proc = case.run()
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Traceback" not in text, text
        if row == "V09-verify-foreign-module":  # a report, not an error: its failed check says why
            assert expected in proc.stdout and "_multiarray_umath" in proc.stdout, text
            assert "result: FAILED" in proc.stdout
        elif row.startswith("D01-"):  # a report too: its problem says why, with the fix
            report = " ".join(proc.stdout.split())
            assert expected in report and "not on PATH" in report, text
            assert "pip install ninja" not in report, text
        else:
            assert text.count("fa-shim: error:") == 1, text
            first = text[text.index("fa-shim: error:") :].splitlines()[0]
            assert expected in first, text
            fix = text[text.index("fa-shim: fix:") :]
            assert "delete" not in fix.split("\n\n")[0], text  # never a user's file
            if hasattr(case, "pin"):
                assert str(case.pin) in first, text
                assert row.startswith("R02") or "the sdist is fine" in fix, text
            if hasattr(case, "mine"):
                assert f"{case.mine} (setting wheel-cache-dir)" in first, text
                assert sorted(p.name for p in case.mine.iterdir()) == sorted(before_mine), text
            if row == "A00-prepare-outside-checkout":
                assert "FA_SHIM_FLASH_ATTN_VERSION=2.8.3.post2" in fix, text
        if row == "killed-re-prepare":  # the dead run's lock was taken over, and released
            assert "took over the --build-dir lock" in text, text
        if row in ("B04-re-prepare-over-edits", "killed-re-prepare"):  # its tree stays as it was
            assert _digests(case.out, skip=LOCK) == before_out
        elif case.out.exists():
            assert list(case.out.iterdir()) == [], list(case.out.iterdir())
    assert _digests(*case.user) == before  # data lost: none
    assert list((tmp_path / "tmp").iterdir()) == []  # leftovers: none
