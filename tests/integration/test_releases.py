"""The registry of upstream releases (fa_backend/flavours/fa2/_releases.py): a release is added
by adding its directory under vendored_patches/ (and its patches to vendored_patches/patches/)
and nothing else, and a malformed description is
one readable error. The synthetic release 9.9.9 is the sample project packed like an upstream
sdist, in a copy of this checkout. This checkout's own releases: tests/unit/flavours/fa2/
test_fa2_releases.py."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from conftest import PY, REPO, copy_repo, pack_sample, pip_wheel_cmd, run

SYNTHETIC = "9.9.9"
NVCC13 = Path("/usr/local/cuda-13.0/bin/nvcc")
# One patch for each feature the synthetic release declares (the registry insists on them):
# each creates a file, so the prepared source shows that it was applied. Their files are named
# for the release, as a variant of a shared patch is (the name shown is the patch's).
PATCHES = {
    "02-cuda-archs.patch": "backports FLASH_ATTN_CUDA_ARCHS (synthetic)",
    "20-kernel-set-dispatch.patch": "left-out kernels raise at dispatch (synthetic)",
    "30-tu-parts.patch": "forward sources compile in parts (synthetic)",
}


def _patch(name: str, reason: str) -> str:
    created = f"fa_shim_{name.split('-')[0]}.txt"
    return f"Reason: {reason}\n--- /dev/null\n+++ b/{created}\n@@ -0,0 +1 @@\n+{name}\n"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, Path, str]:
    """(checkout copy with release 9.9.9 added, directory holding its sdist, the sdist's sha256)."""
    root = tmp_path_factory.mktemp("registry")
    repo = copy_repo(root / "fa-shim")
    sdist = pack_sample(root / "sdists", SYNTHETIC)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    release = repo / "vendored_patches" / SYNTHETIC
    release.mkdir()
    files = [name.replace(".patch", f".{SYNTHETIC}.patch") for name in PATCHES]
    for file, (name, reason) in zip(files, PATCHES.items()):
        (repo / "vendored_patches" / "patches" / file).write_text(_patch(name, reason))
    (release / "release.toml").write_text(
        f'sdist = "{sdist.name}"\nsha256 = "{digest}"\narchs = "cuda-archs-patch"\n'
        f'kernel-space = "fa2"\ntu-parts = true\npatches = {files!r}\n'
    )
    return repo, sdist.parent, digest


def _config(sdists: Path, *extra: str) -> list[str]:
    items = [f"flash-attn-version={SYNTHETIC}", f"sdist-dir={sdists}", "offline=true", *extra]
    return [arg for item in items for arg in ("-C", item)]


def _prepare(repo: Path, build: Path, sdists: Path, *extra: str, check: bool = True):
    cmd = [PY, "-m", "fa_backend", "prepare", "--build-dir", build, *_config(sdists, *extra)]
    return run(cmd, cwd=repo, check=check)


def test_a_new_release_is_its_directory_alone(synthetic, tmp_path):
    repo, sdists, digest = synthetic
    # this checkout has no 9.9.9: fa-shim refuses it unless told to build it unverified
    unknown = _prepare(REPO, tmp_path / "u", sdists, check=False)
    assert unknown.returncode == 1
    assert f"flash-attn {SYNTHETIC} is not a version fa-shim knows" in unknown.stderr

    # the copy with vendored_patches/9.9.9/ prepares it pinned, without allow-unknown-version;
    # tu-parts=3 is honoured only because the release declares tu-parts support
    proc = _prepare(repo, tmp_path / "b", sdists, "tu-parts=3")
    summary = json.loads(proc.stdout)
    prov = summary["provenance"]
    assert prov["sdist"]["pinned"] is True and prov["sdist"]["sha256"] == digest
    assert f"sha256 {digest[:12]}… verified" in proc.stderr
    assert [(p["name"], p["reason"]) for p in prov["patches"]] == list(PATCHES.items())
    source = Path(summary["source"])
    for name in PATCHES:
        assert (source / f"fa_shim_{name.split('-')[0]}.txt").read_text() == f"{name}\n"
    assert prov["tu_parts"] == 3

    # the declared kernel space and its file naming decide what a tailored build must compile
    # (the sample has no kernel sources, so the check names the four it lacks)
    tailored = ["head-dims=128", "dtypes=bf16", "forward-only=true"]
    failed = _prepare(repo, tmp_path / "t", sdists, *tailored, check=False)
    assert failed.returncode == 1
    assert "kernel set hdim128.bf16.fwd does not compile exactly its 4 kernel" in failed.stderr
    assert "missing: flash_fwd_split_hdim128_bf16_causal_sm80.cu" in failed.stderr


def test_a_new_release_declares_its_arch_mechanism_and_kernel_space(synthetic, tmp_path):
    repo, sdists, _ = synthetic
    if not NVCC13.is_file():
        pytest.skip(f"needs a real nvcc to list architectures ({NVCC13})")
    script = f"""
import json, pathlib
import fa_backend
from fa_backend.core import _errors
from fa_backend.flavours.fa2 import _releases
from fa_backend.flavours import _registry
from fa_backend.toolchain import _archs, _torch
NVCC = pathlib.Path({str(NVCC13)!r})
torch = _torch.probe(None, _registry.load_settings({{}}).resolved_cache_dir / "torch-probes")
mechanism = _releases.release({SYNTHETIC!r}).archs
sm86 = _registry.load_settings({{"cuda-archs": "86"}})
choice = _archs.resolve(sm86, torch, NVCC, mechanism, {{}})
try:
    _archs.resolve(_registry.load_settings({{"cuda-archs": "100"}}), torch, NVCC, mechanism, {{}})
    too_new = None
except _errors.FaShimError as exc:
    too_new = exc.cause
config = {{"flash-attn-version": {SYNTHETIC!r}, "sdist-dir": {str(sdists)!r}, "offline": "true",
          "head-dims": "128", "dtypes": "bf16", "forward-only": "true"}}
print(json.dumps({{
    "known": _releases.known()[-1],
    "space": _releases.tailorable()[-1],
    "env": choice.env, "targets": choice.targets, "too_new": too_new,
    "dist_info": fa_backend.prepare_metadata_for_build_wheel({str(tmp_path)!r}, config),
}}))
"""
    got = json.loads(run([PY, "-c", script], cwd=repo).stdout)
    assert got["known"] == got["space"] == SYNTHETIC
    # cuda-archs-patch: FLASH_ATTN_CUDA_ARCHS with 80 and 90 only (2.8.3's knows 100 too)
    assert got["env"] == {"FLASH_ATTN_CUDA_ARCHS": "80", "TORCH_CUDA_ARCH_LIST": "8.0"}
    assert got["targets"] == ["80"]
    assert "only emits code for 80, 90" in got["too_new"]
    assert got["dist_info"].startswith(f"flash_attn-{SYNTHETIC}+")
    assert got["dist_info"].endswith(".hdim128.bf16.fwd.dist-info")


@pytest.mark.slow
def test_a_new_release_builds_with_its_pin(synthetic, tmp_path):
    repo, sdists, digest = synthetic
    out = tmp_path / "out"
    run(pip_wheel_cmd(PY, out, *_config(sdists), project=repo), cwd=tmp_path)
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith(f"flash_attn-{SYNTHETIC}+cputorch")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("fa_shim_provenance.json"))
        prov = json.loads(zf.read(name))
    assert prov["sdist"]["pinned"] is True and prov["sdist"]["sha256"] == digest
    assert [p["name"] for p in prov["patches"]] == list(PATCHES)


# ----------------------------------------------------------------------- malformed descriptions

GOOD = 'sdist = "flash_attn-{v}.tar.gz"\nsha256 = "' + "ab" * 32 + '"\narchs = "fixed-80-90"\n'
MALFORMED = {
    "typo": (
        GOOD + 'kernel-spaces = "fa2"\n',
        {},
        ["unknown key 'kernel-spaces'", "'kernel-space'"],
    ),
    "syntax": ('sdist = "flash_attn-{v}.tar.gz\n', {}, ["is not valid TOML"]),
    "missing": ('archs = "fixed-80-90"\n', {}, ["sdist is missing", "sha256 is missing"]),
    "values": (
        'sdist = "flash_attn-1.0.tar.gz"\nsha256 = "ABC"\narchs = "fa28"\ntu-parts = "yes"\n',
        {},
        [
            "sdist = 'flash_attn-1.0.tar.gz' is not flash_attn-{v}.tar.gz",
            "sha256 = 'ABC' is not 64 lowercase hex digits",
            "archs = 'fa28' is none of flash-attn-cuda-archs, cuda-archs-patch, fixed-80-90",
            "tu-parts = 'yes' is not true or false",
        ],
    ),
    "patch missing": (
        GOOD + 'kernel-space = "fa2"\n',
        {},
        ["kernel-space = 'fa2' needs 20-kernel-set-dispatch.patch, which patches does not list"],
    ),
    "patch undeclared": (
        GOOD + 'patches = ["30-tu-parts.patch"]\n',
        {},
        ["patches lists 30-tu-parts.patch, and nothing declares what it provides"],
    ),
    "tu-parts alone": (
        GOOD + 'tu-parts = true\npatches = ["30-tu-parts.patch"]\n',
        {},
        ["tu-parts = true needs a kernel-space"],
    ),
    "patch absent": (
        GOOD + 'patches = ["01-no-such.patch", "../2.8.3/release.toml"]\n',
        {},
        [
            "patches lists '01-no-such.patch', which is not a file in",
            "patches lists '../2.8.3/release.toml', which is not a file in",
        ],
    ),
    "stable line": (
        GOOD + '[stable]\ntorch-target = "two"\npatches = []\nfloor = 1\n',
        {},
        [
            "[stable] has unknown key 'floor'",
            "[stable] torch-target = 'two' is not a torch version",
            "[stable] patches is empty",
        ],
    ),
    "stable line repeats a patch": (
        GOOD
        + 'patches = ["01-compress-mode.patch"]\n[stable]\ntorch-target = "2.10.0"\n'
        + 'patches = ["01-compress-mode.patch", "61-no-such.patch"]\n',
        {},
        [
            "[stable] patches repeats 01-compress-mode.patch",
            "[stable] patches lists '61-no-such.patch', which is not a file in",
        ],
    ),
    "stable not a table": (GOOD + 'stable = "yes"\n', {}, ["stable = 'yes' is not a table"]),
    "patch beside the toml": (
        GOOD,
        {"30-tu-parts.patch": "Reason: x\n"},
        ["30-tu-parts.patch lies beside", "vendored_patches/patches/"],
    ),
}


@pytest.fixture(scope="module")
def malformed(tmp_path_factory) -> dict[str, str]:
    """{case: the error release(version) raises}, from a copy holding one release per case."""
    repo = copy_repo(tmp_path_factory.mktemp("malformed") / "fa-shim")
    versions = {case: f"9.9.{i}" for i, case in enumerate(MALFORMED, start=10)}
    for case, (toml, files, _) in MALFORMED.items():
        directory = repo / "vendored_patches" / versions[case]
        directory.mkdir()
        (directory / "release.toml").write_text(toml.format(v=versions[case]))
        for name, text in files.items():
            (directory / name).write_text(text)
    (repo / "vendored_patches" / "9.9.1").mkdir()  # patches, and no release.toml
    versions["no toml"] = "9.9.1"
    script = f"""
import json
from fa_backend.core import _errors
from fa_backend.flavours.fa2 import _releases
errors = {{}}
for case, version in {versions!r}.items():
    try:
        _releases.release(version)
    except _errors.FaShimError as exc:
        errors[case] = [exc.render(), version]
print(json.dumps(errors))
"""
    errors = json.loads(run([PY, "-c", script], cwd=repo).stdout)
    cli = [PY, "-m", "fa_backend", "prepare", "--build-dir", repo / "b"]
    cli += ["-C", f"flash-attn-version={versions['typo']}"]
    errors["cli"] = run(cli, cwd=repo, check=False).stderr
    return errors


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_release_is_one_readable_error(malformed, case):
    assert case in malformed, f"{case}: no error"
    message, version = malformed[case]
    lines = message.splitlines()
    assert [line.startswith("fa-shim: error: ") for line in lines] == [True, False]
    assert lines[1].startswith("fa-shim: fix: ")
    assert f"vendored_patches/{version}/release.toml" in lines[0]
    for phrase in MALFORMED[case][2]:
        assert phrase.format(v=version) in lines[0], lines[0]


def test_a_release_directory_without_its_toml_is_an_error(malformed):
    message, version = malformed["no toml"]
    assert f"vendored_patches/{version} has no release.toml" in message
    assert "fa-shim: fix: describe the release" in message


def test_the_cli_shows_a_malformed_release_as_one_error(malformed):
    stderr = malformed["cli"]
    assert "Traceback" not in stderr
    assert stderr.count("fa-shim: error: ") == 1 and stderr.count("fa-shim: fix: ") == 1
    assert "unknown key 'kernel-spaces' (did you mean 'kernel-space'?)" in stderr
