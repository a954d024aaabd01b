"""CI proof: the real flash-attn 2.8.3.post2 built against torch 2.14.1 with no CUDA toolkit.

In a private mount namespace (`unshare -m`, root) every /usr/local/cuda* directory is covered by
an empty one and every nvcc on PATH by an empty, non-executable file, so no nvcc can be found.
fa-shim's default `cuda-toolkit=auto` then provisions NVIDIA's CUDA 13.0 compiler wheels from the
index and compiles the smallest tailored set (bf16, forward only, the five DISABLE switches,
sm_80: 4 kernels and flash_api.cpp; head dim 32, whose kernels compile about a quarter sooner
than 128's) with torch 2.14.1's C++20 headers. The wheel verifies and imports, its provenance
names the provisioned nvcc, and a second build, with the index made unreachable, reuses the
toolkit.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SHARED_SDISTS, SMALLEST_REAL_SET, clean_env, overlay_venv, run
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow]

SETTINGS = {
    "sdist-dir": str(SHARED_SDISTS),
    **SMALLEST_REAL_SET,
    "compiler-cache": "none",
}
LABEL = "cu130torch2.14cxx11abiTRUE.hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"


def _no_cuda_script(tmp: Path, command: list) -> str:
    """Shell text that hides every CUDA toolkit and nvcc, checks it did, then runs command."""
    empty_dir, empty_file = tmp / "empty-dir", tmp / "empty-file"
    empty_dir.mkdir(exist_ok=True)
    empty_file.write_text("")
    empty_file.chmod(0o644)
    lines = ["set -e"]
    for directory in sorted({os.path.realpath(p) for p in glob.glob("/usr/local/cuda*")}):
        lines.append(f"mount --bind {empty_dir} {shlex.quote(directory)}")
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        nvcc = os.path.join(directory, "nvcc")
        if directory and os.path.isfile(nvcc):
            lines.append(f"mount --bind {empty_file} {shlex.quote(nvcc)}")
    lines += [
        'if command -v nvcc; then echo "an nvcc is still visible" >&2; exit 97; fi',
        'if ls /usr/local/cuda*/bin/nvcc 2>/dev/null; then echo "CUDA visible" >&2; exit 97; fi',
        "exec " + " ".join(shlex.quote(str(c)) for c in command),
    ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def no_cuda(tmp_path_factory):
    if not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to hide the CUDA toolkit in a mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.strip()}")
    tmp = tmp_path_factory.mktemp("no-cuda")

    def run_hidden(command: list, **kwargs):
        return run(["unshare", "-m", "sh", "-c", _no_cuda_script(tmp, command)], **kwargs)

    return run_hidden


def _pip_wheel(python: Path, out: Path, cache: Path) -> list:
    options = [a for k, v in SETTINGS.items() for a in ("-C", f"{k}={v}")]
    return [
        python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
        "-w", out, REPO, *options, "-C", f"cache-dir={cache}",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def built(no_cuda, torch2141_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("toolkit-build")
    cache = tmp / "fa-shim-cache"
    scratch = tmp / "tmp"
    scratch.mkdir()
    env = clean_env(XDG_CACHE_HOME=str(tmp / "xdg"), PIP_NO_CACHE_DIR="1", TMPDIR=str(scratch))
    for name in ("CUDA_HOME", "CUDA_PATH"):
        env.pop(name, None)
    # without a toolkit, the `system` choice is an error that says what is missing
    refused = no_cuda(
        [*_pip_wheel(torch2141_python, tmp / "refused", cache), "-C", "cuda-toolkit=system"],
        env=env,
        check=False,
    )
    first = no_cuda(_pip_wheel(torch2141_python, tmp / "dist", cache), env=env, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("*.whl")
    # again, with every index unreachable: the toolkit is reused, nothing is downloaded
    offline = {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/"}
    offline.pop("PIP_EXTRA_INDEX_URL", None)
    second = no_cuda(_pip_wheel(torch2141_python, tmp / "again", cache), env=offline, cwd=tmp)
    return {
        "tmp": tmp,
        "cache": cache,
        "wheel": wheel,
        "refused": refused,
        "first": first.stdout + first.stderr,
        "second": second.stdout + second.stderr,
        "python": torch2141_python,
    }


def test_system_toolkit_without_any_nvcc_is_an_error(built):
    refused = built["refused"]
    assert refused.returncode != 0
    text = " ".join((refused.stdout + refused.stderr).split())
    assert "nvcc not found (looked at CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*)" in text
    assert not (built["tmp"] / "refused").exists() or not list((built["tmp"] / "refused").iterdir())


def test_auto_provisions_cuda_13_0_from_the_index(built):
    log = built["first"]
    assert "no nvcc on this machine fits torch 2.14.1+cu130 (CUDA 13.0)" in log
    assert "provisioning a CUDA 13.0 compiler from the package index" in log
    home = built["cache"] / "toolkits" / "13.0"
    origin = "from cuda-toolkit from the package index"
    assert f"using nvcc {home}/bin/nvcc (CUDA 13.0, {origin})" in log
    assert built["wheel"].name.startswith(f"flash_attn-2.8.3.post2+{LABEL}-")


def test_provenance_names_the_provisioned_nvcc(built):
    with zipfile.ZipFile(built["wheel"]) as zf:
        name = next(n for n in zf.namelist() if n.endswith("fa_shim_provenance.json"))
        prov = json.loads(zf.read(name))
        metadata = zf.read(name.replace("fa_shim_provenance.json", "METADATA")).decode()
    home = built["cache"] / "toolkits" / "13.0"
    # where nvcc was found is a fact of this machine: the wheel-cache entry records it, the
    # wheel only the compiler's version (pipeline/_reproducible)
    assert set(prov["nvcc"]) == {"version", "build"}
    (entry,) = (built["cache"] / "wheels").glob("*/entry.json")
    nvcc = {**json.loads(entry.read_text())["built"]["nvcc"], **prov["nvcc"]}
    assert nvcc["path"] == str(home / "bin" / "nvcc")
    assert nvcc["cuda_home"] == str(home.resolve())
    assert nvcc["origin"] == "cuda-toolkit from the package index"
    assert nvcc["version"] == "13.0" and nvcc["build"].startswith("13.0.")
    projects = {w["project"]: w["version"] for w in nvcc["toolkit"]["wheels"]}
    assert projects["nvidia-cuda-nvcc"] == nvcc["build"]
    assert set(projects) == {
        "nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
    }  # fmt: skip
    assert prov["torch"]["version"] == "2.14.1+cu130" and prov["torch"]["cxx_std"] == "c++20"
    assert prov["cuda_archs"] == ["80"]
    assert "Requires-Dist: torch==2.14.1\n" in metadata


def test_the_second_build_reuses_the_toolkit_without_downloading(built):
    log = built["second"]
    home = built["cache"] / "toolkits" / "13.0"
    assert f"using the CUDA 13.0 toolkit provisioned before at {home}" in log
    assert "provisioning a CUDA 13.0" not in log
    assert "wheel cache hit" in log  # the same nvcc build, so the same fingerprint


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2",
    torch="2.14.1+cu130",
    nvcc="13.0 (from the index)",
    abi="TRUE",
    stage="compiled",
)
def test_the_wheel_verifies_and_imports(built):
    python, site = overlay_venv(built["python"], built["tmp"] / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", built["wheel"]])
    verify = run(
        [python, "-m", "fa_backend", "verify", "flash_attn"], cwd=REPO, env=clean_env()
    ).stdout
    assert "result: OK" in verify, verify
    code = (
        "import importlib.metadata as m, flash_attn, flash_attn_2_cuda, torch; "
        "print(m.version('flash-attn'), torch.__version__)"
    )
    out = run([python, "-c", code], cwd=built["tmp"], env=clean_env()).stdout
    flash_attn_version, torch_version = out.split()[-2:]
    assert Version(flash_attn_version) == Version(f"2.8.3.post2+{LABEL}"), out
    assert torch_version == "2.14.1+cu130", out
    assert glob.glob(str(site / "flash_attn_2_cuda*.so"))
