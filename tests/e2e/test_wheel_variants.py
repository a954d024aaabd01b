"""Wheel variants in a team's wheel cache (-C wheel-variants=true, fa_backend/fleet/_variants.py),
with the real uv 0.13.9: the suite's sample with its CUDA file (tests/packages/sample-cuda)
built against the session's CUDA 13.0 torch 2.11 twice, by nvcc, for sm_80 and for sm_90, into one
cache. With `--preview-features wheel-variants` and the NVIDIA provider's two override variables
(this box has no GPU), uv takes the sm_90 variant on a 9.0 GPU, the sm_80 one on 8.9 and 8.6, from
the torch's directory and from its index, and so does `uv pip sync` of a file `uv pip compile`
wrote; pip 23.2, the current pip, and uv without the flag or with one variable take the plain
wheel. Each arch set's build stays reachable, from its own directory and index (sm80/, sm90/:
issue 55's K3), and uv takes the sm_90 variant of a tailored set from that set's index too.
`cache check` reads the variants.json against the wheels. The installs go into a venv
without torch (`--no-deps`): which file uv or pip chose is what is looked at, in the installed
distribution (a variant's .dist-info holds its variant.json). Then the case matrix (issue 55):
the same two builds under torch 2.11 of the second Python and under torch 2.14.1 join that
cache, and each frontend (uv with and without the flag, pip 23.2, the current pip) in a venv of
each Python, from each torch's directory, on an H100 and on an L4, takes its wheel: a test
each."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SECOND_MINOR, pack_sample, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow

UV_VERSION = "0.13.9"  # the uv these formats were taken by (docs/guides/fleet.md says which)
VIEW = "torch-2.11.0+cu130"
SM = "NV_VARIANT_PROVIDER_FORCE_SM_ARCH"
DRIVER = "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION"
PREVIEW = ("--preview-features", "wheel-variants")
TAILORED = "hdim32.bf16.fwd"  # a kernel set's name, as FA2 names one (the sample has none)
# what the venv holds: a variant's labels, or "plain:<its archs>", or "none"; "+<set>" if tailored
WHICH = """
import importlib.metadata as m, json
try:
    d = m.distribution('flash-attn')
except m.PackageNotFoundError:
    raise SystemExit(print('none'))
text, prov = d.read_text('variant.json'), json.loads(d.read_text('fa_shim_provenance.json'))
got = ','.join(json.loads(text)['variants']) if text else 'plain:' + ','.join(prov['cuda_archs'])
print(got + ('' if prov['kernel_set_name'] == 'full' else '+' + prov['kernel_set_name']))
"""


@pytest.fixture(scope="module")
def variant_cache(tmp_path_factory, torch211_python) -> Path:
    """The sample built for sm_80, then for sm_90, under torch 2.11 into one cache."""
    tmp = tmp_path_factory.mktemp("variants")
    return _built_for_two_archs(tmp, tmp / "fa", torch211_python)


def _built_for_two_archs(tmp: Path, root: Path, *pythons: Path) -> Path:
    """The sample with its CUDA file built by each interpreter for sm_80, then for sm_90, into
    the cache `root` with variants on (one fa-shim cache: flash_api.cpp's second compile of a
    torch is a compiler-cache hit)."""
    pack_sample(tmp / "sdists", cuda=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    for python in pythons:
        for archs in ("80", "90"):
            run(
                pip_wheel_cmd(
                    python, tmp / "out", *sample_settings(tmp / "sdists"),
                    "-C", f"cuda-archs={archs}", "-C", f"wheel-cache-dir={root}",
                    "-C", "wheel-variants=true",
                ),
                env=env,
            )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def tailored_cache(tmp_path_factory, variant_cache) -> Path:
    """The =80 and =90 builds again as a tailored kernel set's, kept by the wheel cache with
    variants on as a build keeps them (`obtain`, as pipeline/_build calls it): the sample has no
    kernel sets, so each wheel is written anew with TAILORED as its provenance's set (its RECORD
    anew too). A real tailored FA2 set on an H200: bench/results (docs/guides/fleet.md)."""
    from fa_backend.fleet import _wheel_cache
    from fa_backend.wheel._wheelfile import WheelWriter

    tmp = tmp_path_factory.mktemp("tailored")
    entries = sorted(variant_cache.glob("*/entry.json"), key=lambda e: e.stat().st_mtime)
    for n, entry in enumerate(entries):  # as they were built: =80, then =90
        wheel = entry.parent / json.loads(entry.read_text())["wheel"]
        with zipfile.ZipFile(wheel) as zf:
            (record,) = [m for m in zf.namelist() if m.endswith(".dist-info/RECORD")]
            writer = WheelWriter(tmp / str(n) / wheel.name, record.split("/")[0])
            for info in zf.infolist():
                data = zf.read(info)
                if info.filename.endswith("/fa_shim_provenance.json"):
                    data = json.dumps({**json.loads(data), "kernel_set_name": TAILORED}).encode()
                if info.filename != record:
                    writer.add(info.filename, data, info.external_attr >> 16)
        (tmp / str(n)).mkdir()
        tailored = writer.write()
        # the build's own fingerprint, its kernel set the tailored one's (cache check reads it)
        facts = json.loads((entry.parent / "fingerprint.json").read_text())
        _wheel_cache.obtain(
            tmp / "fa", {**facts, "kernel_set": TAILORED}, wheel.name, tmp / "out", lambda w: None,
            lambda w=tailored: w, 600, 15, torch_version="2.11.0+cu130", variants=True,
        )  # fmt: skip
    return tmp / "fa"


@pytest.fixture(scope="module")
def uv0139(tmp_path_factory) -> str:
    """uv 0.13.9: the suite's when it is that one, else from the index into a directory here."""
    if run(["uv", "--version"]).stdout.split()[1] == UV_VERSION:
        return "uv"
    target = tmp_path_factory.mktemp("uv")
    run([sys.executable, "-m", "pip", "install", "-q", "--target", target, f"uv=={UV_VERSION}"])
    return str(target / "bin" / "uv")


@pytest.fixture
def teammate(tmp_path, uv_cache, uv0139):
    """Run a line in a venv of this Python (or `base`), made on its name's first use (no
    torch: the lines take --no-deps), with a GPU's overrides; what the venv then holds: a
    variant's labels, "plain" or "none"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "UV_", "NV_"))}
    env |= {"UV_CACHE_DIR": str(uv_cache), "PIP_CONSTRAINT": "/dev/null"}
    made = iter(range(100))

    def install(
        *cmd: str, gpu: dict[str, str] | None = None, venv: str | None = None, base=sys.executable
    ) -> str:
        path = tmp_path / (venv or f"v{next(made)}")
        if not path.is_dir():
            run([uv0139, "venv", "-q", "--python", base, path], env=env)
        python = path / "bin" / "python"
        run(
            [uv0139 if a == "uv" else a.replace("{python}", str(python)) for a in cmd],
            env={**env, **(gpu or {})},
            cwd=tmp_path,
        )
        return run([python, "-c", WHICH], env=env).stdout.strip()

    return install


def test_uv_takes_the_variant_for_the_gpu_and_pip_the_plain_wheel(
    variant_cache, teammate, tmp_path
):
    view = variant_cache / VIEW
    (plain,) = [p.name for p in view.glob("*.whl") if p.name.endswith("linux_x86_64.whl")]
    stem = plain.removesuffix(".whl")
    name, version = stem.split("-")[:2]
    index_json = f"{name}-{version.lower()}-variants.json"
    assert sorted(p.name for p in view.iterdir()) == sorted(
        [plain, f"{stem}-sm80.whl", f"{stem}-sm90.whl", index_json, "sm80", "sm90"]
    )
    index = f"file://{variant_cache / 'index' / VIEW}"
    links = ("--find-links", str(view), "--no-index")
    uv = ("uv", "pip", "install", "-q", "--python", "{python}", "--no-deps", *PREVIEW)
    h100, l4, a10 = ({SM: sm, DRIVER: "13.0"} for sm in ("9.0", "8.9", "8.6"))
    assert teammate(*uv, *links, "flash-attn", gpu=h100) == "sm90"
    assert teammate(*uv, *links, "flash-attn", gpu=l4) == "sm80"  # 80_real: 8.0 to 8.9
    assert teammate(*uv, "--index-url", index, "flash-attn", gpu=h100) == "sm90"
    assert teammate(*uv, "--index-url", index, "flash-attn", gpu=a10) == "sm80"
    # a driver older than the wheel's CUDA 13.0, and one override alone: no variant
    assert teammate(*uv, *links, "flash-attn", gpu={SM: "9.0", DRIVER: "12.8"}) == "plain:80"
    assert teammate(*uv, *links, "flash-attn", gpu={SM: "9.0"}) == "plain:80"
    without = [a for a in uv if a not in PREVIEW]
    assert teammate(*without, *links, "flash-attn", gpu=h100) == "plain:80"

    # a non-universal `uv pip compile` (hashed), then `uv pip sync` into fresh venvs
    teammate("bash", "-c", "echo flash-attn > req.in", venv="compile")
    compiled = ("uv", "pip", "compile", "-q", "--python", "{python}", *PREVIEW, "--no-deps")
    teammate(*compiled, "--index-url", index, "--generate-hashes", "req.in", "-o", "req.txt",
             gpu=h100, venv="compile")  # fmt: skip
    assert "--hash=sha256:" in (tmp_path / "req.txt").read_text()
    sync = ("uv", "pip", "sync", "-q", "--python", "{python}", *PREVIEW, "--index-url", index)
    assert teammate(*sync, "req.txt", gpu=h100) == "sm90"
    assert teammate(*sync, "req.txt", gpu=l4) == "sm80"

    # pip 23.2 (this Python's ensurepip's), then the newest pip the index has
    pip = ("{python}", "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall")
    for spec in ("pip==23.2.1", "pip"):
        add = ("uv", "pip", "install", "-q", "--python", "{python}", "-U", spec)
        assert teammate(*add, venv=spec) == "none"
        assert teammate(*pip, *links, "flash-attn", gpu=h100, venv=spec) == "plain:80"
        assert teammate(*pip, "--index-url", index, "flash-attn", gpu=h100, venv=spec) == "plain:80"


def test_cache_check_reads_the_variants_json_against_the_wheels(variant_cache):
    """`cache check` of the cache: its variants.json matches its variant wheels (what it finds
    in one that does not: tests/unit/fleet/test_variants.py)."""
    proc = run([sys.executable, "-m", "fa_backend", "cache", "check", variant_cache], cwd=REPO)
    found = rf"ok +{re.escape(VIEW)}/\S+-variants\.json  2 variant wheel\(s\): sm80, sm90\n"
    found += r" +matches its variant wheels: their labels, GPU code, RECORDs and entries"
    assert re.search(found, proc.stdout), proc.stdout


def test_each_arch_build_keeps_a_directory_and_an_index_of_its_own(
    variant_cache, teammate, torch211_python
):
    """Issue 55's K3: the =80 and =90 builds have one file name. The torch's directory keeps the
    first; each arch set's directory below it (sm80/, sm90/) and its index hold that build, so
    pip takes either one; install.py --index-url names the index of the build it takes, and pip
    installs that build from it."""
    view = variant_cache / VIEW
    pip = ("{python}", "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall")
    teammate("uv", "pip", "install", "-q", "--python", "{python}", "pip", venv="pip")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    for arch, index in (("80", VIEW), ("90", f"{VIEW}/sm90")):
        links = ("--no-index", "--find-links", str(view / f"sm{arch}"))
        assert teammate(*pip, *links, "flash-attn", venv="pip") == f"plain:{arch}"
        asked = [torch211_python, variant_cache / "install.py", "--archs", arch, "--index-url"]
        url = run(asked, env=env).stdout.strip()
        assert url == (variant_cache / "index" / index).as_uri()
        assert teammate(*pip, "--index-url", url, "flash-attn", venv="pip") == f"plain:{arch}"


def test_uv_takes_the_variant_from_a_tailored_sets_index(tailored_cache, teammate, torch211_python):
    """The index of a tailored set (index/torch-<v>/<set>/, the one install.py --index-url
    names) links its plain wheel, its variants and its variants.json: uv with the flag takes the
    GPU's variant of that set from its URL, uv without it the plain wheel; `cache check` reads
    the set's variants.json and index links."""
    index = (tailored_cache / "index" / VIEW / TAILORED).as_uri()
    asked = ["--kernel-set", TAILORED, "--archs", "80", "--index-url"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    assert (
        run([torch211_python, tailored_cache / "install.py", *asked], env=env).stdout
        == index + "\n"
    )
    uv = ("uv", "pip", "install", "-q", "--python", "{python}", "--no-deps", "--index-url", index)
    h100, l4 = ({SM: sm, DRIVER: "13.0"} for sm in ("9.0", "8.9"))
    assert teammate(*uv, *PREVIEW, "flash-attn", gpu=h100) == f"sm90+{TAILORED}"
    assert teammate(*uv, *PREVIEW, "flash-attn", gpu=l4) == f"sm80+{TAILORED}"
    assert teammate(*uv, "flash-attn", gpu=h100) == f"plain:80+{TAILORED}"
    proc = run([sys.executable, "-m", "fa_backend", "cache", "check", tailored_cache], cwd=REPO)
    found = rf"ok +{re.escape(VIEW)}/{re.escape(TAILORED)}/\S+-variants\.json  2 variant wheel"
    assert re.search(found, proc.stdout), proc.stdout


# The case matrix: each frontend, each of two Pythons and two torches, a GPU of each arch set.
CELLS = {
    f"py{sys.version_info[0]}{sys.version_info[1]}-torch2.11": ("torch211_python", VIEW),
    f"py{SECOND_MINOR.replace('.', '')}-torch2.11": ("torch211_second_python", VIEW),
    f"py{sys.version_info[0]}{sys.version_info[1]}-torch2.14.1": (
        "torch2141_python",
        "torch-2.14.1+cu130",
    ),
}
FRONTENDS = {  # what each takes on an H100 (9.0) and on an L4 (8.9)
    "uv-variants": ("sm90", "sm80"),
    "uv": ("plain:80", "plain:80"),
    "pip-23.2": ("plain:80", "plain:80"),
    "pip": ("plain:80", "plain:80"),
}


@pytest.fixture(scope="module")
def matrix_cache(tmp_path_factory, variant_cache, torch211_second_python, torch2141_python):
    """variant_cache's torch 2.11 builds of this Python, and the sample built for sm_80, then
    sm_90, under torch 2.11 of the second Python and torch 2.14.1 of this one, into one cache:
    torch 2.11's directory holds both Pythons' plain wheels and variants."""
    tmp = tmp_path_factory.mktemp("matrix")
    root = shutil.copytree(variant_cache, tmp / "fa", symlinks=True)
    _built_for_two_archs(tmp, root, torch211_second_python, torch2141_python)
    proc = run([sys.executable, "-m", "fa_backend", "cache", "check", root], cwd=REPO, check=False)
    assert proc.returncode == 0 and "FAILED" not in proc.stdout, proc.stdout + proc.stderr
    return root


@pytest.mark.parametrize("gpu", ["h100", "l4"])
@pytest.mark.parametrize("frontend", list(FRONTENDS))
@pytest.mark.parametrize("cell", list(CELLS))
def test_each_case_takes_the_wheel_of_its_python_torch_and_gpu(
    request, matrix_cache, teammate, tmp_path, cell, frontend, gpu
):
    """From the torch's directory of the team cache, into a venv of the cell's Python: uv with
    the preview flag takes the variant for the GPU (sm_90 on an H100, sm_80 on an L4), uv
    without it, pip 23.2 and the current pip the plain wheel; each the wheel of that Python and
    torch (its tags, its provenance's torch)."""
    python_fixture, view = CELLS[cell]
    torch_python = request.getfixturevalue(python_fixture)
    base = run([torch_python, "-c", "import sys; print(sys._base_executable)"]).stdout.strip()
    links = ("--no-index", "--find-links", str(matrix_cache / view), "flash-attn")
    gpus = {"h100": {SM: "9.0", DRIVER: "13.0"}, "l4": {SM: "8.9", DRIVER: "13.0"}}
    venv = f"{cell}-{frontend}-{gpu}"
    if frontend.startswith("uv"):
        flag = PREVIEW if frontend == "uv-variants" else ()
        cmd = ("uv", "pip", "install", "-q", "--python", "{python}", "--no-deps", *flag, *links)
    else:
        pip = "pip==23.2.1" if frontend == "pip-23.2" else "pip"
        teammate("uv", "pip", "install", "-q", "--python", "{python}", pip, venv=venv, base=base)
        cmd = ("{python}", "-m", "pip", "install", "-q", "--no-deps", *links)
    got = teammate(*cmd, gpu=gpus[gpu], venv=venv, base=base)
    assert got == FRONTENDS[frontend][gpu == "l4"], (cell, frontend, gpu)
    tag = run([base, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"])
    code = (
        "import importlib.metadata as m, json; d = m.distribution('flash-attn'); "
        "print(json.loads(d.read_text('fa_shim_provenance.json'))['torch']['version'], "
        "d.read_text('WHEEL'))"
    )
    shown = run([tmp_path / venv / "bin" / "python", "-c", code]).stdout
    assert shown.split()[0] == view.removeprefix("torch-"), shown
    assert f"Tag: {tag.stdout.strip()}-{tag.stdout.strip()}-linux_x86_64" in shown, shown
