"""Upstream's bdist_wheel output repacked as fa-shim's wheel (fa_backend/pipeline/_build.repack), on
a real small wheel written by fa-shim's own writer (wheel/_wheelfile.py) the way upstream's
setup.py lays one out: upstream's files travel with their modes, its license files into our
.dist-info and the rest of its .dist-info stays behind; ours carries the plan's METADATA and tag,
the provenance and the runtime guard, and RECORD checks out (read back by `wheel`'s reader,
which verifies every hash). A wheel without the compiled module is refused."""

from __future__ import annotations

import json
import stat
import zipfile

import pytest
from conftest import fa2_plan
from wheel.wheelfile import WheelFile

from fa_backend.core._errors import FaShimError
from fa_backend.pipeline import _build
from fa_backend.resources import GUARD
from fa_backend.resources.runtime_guard import PROVENANCE
from fa_backend.wheel._wheelfile import WheelWriter

UPSTREAM_INFO = "flash_attn-0.1.0.dist-info"
MODULE = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
UPSTREAM = {  # name: (bytes, mode)
    "flash_attn/__init__.py": (b"__version__ = '0.1.0'\n", 0o644),
    "flash_attn/ops/run.sh": (b"#!/bin/sh\n", 0o755),
    MODULE: (b"\x7fELF" + bytes(4096), 0o755),
    f"{UPSTREAM_INFO}/METADATA": (
        b"Metadata-Version: 2.1\nName: flash_attn\nVersion: 0.1.0\n",
        0o644,
    ),
    f"{UPSTREAM_INFO}/WHEEL": (b"Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n", 0o644),
    f"{UPSTREAM_INFO}/LICENSE": (b"BSD 3-Clause License\n", 0o644),
    f"{UPSTREAM_INFO}/licenses/AUTHORS": (b"Tri Dao\n", 0o644),
    f"{UPSTREAM_INFO}/top_level.txt": (b"flash_attn\nflash_attn_2_cuda\n", 0o644),
    f"{UPSTREAM_INFO}/entry_points.txt": (b"[console_scripts]\nx = y:z\n", 0o644),
}
PROV = {"fa_shim_version": "test", "kernel_set": {"kernel_set": "full"}}


def _upstream_wheel(path, files=UPSTREAM):
    writer = WheelWriter(path, UPSTREAM_INFO)
    for name, (data, mode) in files.items():
        writer.add(name, data, mode)
    return writer.write()


@pytest.fixture
def plan(sample_sdist_dir):
    return fa2_plan(sample_sdist_dir)


@pytest.fixture
def repacked(plan, tmp_path):
    upstream = _upstream_wheel(tmp_path / "upstream" / "flash_attn-0.1.0-cp311-linux_x86_64.whl")
    target = tmp_path / "out" / plan.wheel_name
    target.parent.mkdir()
    assert _build.repack(plan, upstream, target, PROV) == target
    return target


def test_upstreams_files_travel_with_their_modes(repacked):
    with zipfile.ZipFile(repacked) as zf:
        for name in ("flash_attn/__init__.py", "flash_attn/ops/run.sh", MODULE):
            data, mode = UPSTREAM[name]
            assert zf.read(name) == data
            assert stat.S_IMODE(zf.getinfo(name).external_attr >> 16) == mode


def test_only_upstreams_license_files_and_top_level_join_our_dist_info(plan, repacked):
    with zipfile.ZipFile(repacked) as zf:
        names = set(zf.namelist())
        ours = {n.split("/", 1)[1] for n in names if n.startswith(plan.dist_info + "/")}
        assert ours == {
            "METADATA",
            "WHEEL",
            "RECORD",
            PROVENANCE,
            "LICENSE",
            "licenses/AUTHORS",
            "top_level.txt",
        }
        assert not [n for n in names if n.startswith(UPSTREAM_INFO)]
        assert zf.read(f"{plan.dist_info}/LICENSE") == UPSTREAM[f"{UPSTREAM_INFO}/LICENSE"][0]


def test_our_metadata_tag_provenance_and_guard(plan, repacked):
    with zipfile.ZipFile(repacked) as zf:
        assert zf.read(f"{plan.dist_info}/METADATA").decode() == plan.metadata
        wheel = zf.read(f"{plan.dist_info}/WHEEL").decode()
        assert f"Tag: {plan.tag}\n" in wheel and "Generator: fa-shim " in wheel
        assert json.loads(zf.read(f"{plan.dist_info}/{PROVENANCE}")) == PROV
        assert zf.read(plan.names.guard_path) == GUARD.read_bytes()


def test_record_lists_every_file_and_every_hash_checks_out(repacked):
    with WheelFile(repacked) as wf:  # raises on a hash or size that does not match
        for name in wf.namelist():
            wf.read(name)
        record = wf.read(wf.record_path).decode().splitlines()
        assert {line.rsplit(",", 2)[0] for line in record} == set(wf.namelist())


def test_a_wheel_without_the_compiled_module_is_refused(plan, tmp_path):
    files = {k: v for k, v in UPSTREAM.items() if k != MODULE}
    upstream = _upstream_wheel(tmp_path / "flash_attn-0.1.0-py3-none-any.whl", files)
    target = tmp_path / plan.wheel_name
    with pytest.raises(FaShimError) as info:
        _build.repack(plan, upstream, target, PROV)
    assert info.value.cause == (
        "the upstream wheel contains no compiled flash_attn_2_cuda*.so; it would fail with "
        "\"No module named 'flash_attn_2_cuda'\"."
    )
    assert "FLASH_ATTENTION_SKIP_CUDA_BUILD" in info.value.fix
    assert not target.exists() and not list(tmp_path.glob("*.part"))
