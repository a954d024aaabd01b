"""The hostile-input rows whose answer needs a CUDA torch (the architectures and the nvcc a
build would use): `prepare` of the pinned 2.8.3.post2 sdist under the session's torch 2.11
(CUDA 13.0), as the probe ran them. ROWS in tests/integration/test_hostile_inputs.py lists
them for the reliability page; each must end in one fa-shim error naming what the user gave,
with its fix, nothing left in the build directory or under TMPDIR. K24 is accepted: read as
the user meant it, it is the same build (the same fingerprint) as `head-dims=128`. The stable
line's rows run under torch 2.9.1 (CUDA 12.8) where they are about a torch below its floor."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from conftest import (
    CAN_MOUNT,
    PY,
    REPO,
    SHARED_SDISTS,
    assert_one_error_nothing_left,
    clean_env,
    on_small_disk,
    pip_wheel_cmd,
    run,
    sample_settings,
)

pytestmark = [pytest.mark.slow, pytest.mark.cuda_torch]

TAILORED = ["cuda-archs=90", "head-dims=128", "dtypes=bf16", "forward-only=true"]
FAKE_NVCC = '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n'

# row: (the torch venv, the command, its settings (after the sdist's for prepare), environment,
# what the error names, what its fix names)
SA = "torch-abi=stable"
CUDA_ROWS = {
    "K08-archs-75": ("torch211", "prepare", ["cuda-archs=75"], {}, ["75", "8.0+"], ["80, 86"]),
    "K28-archs-99": ("torch211", "prepare", ["cuda-archs=99"], {}, ["99"], ["80, 86"]),
    "T03-cuda-home-empty": ("torch211", "prepare", TAILORED, {"CUDA_HOME": "{tmp}/emptycuda"},
                            ["{tmp}/emptycuda/bin/nvcc"], ["CUDA_HOME"]),
    "T04-nvcc-missing": ("torch211", "prepare", [*TAILORED, "nvcc=/nonexistent/nvcc"], {},
                         ["/nonexistent/nvcc"], ["bin/nvcc"]),
    "T08-nvcc-true": ("torch211", "prepare", [*TAILORED, "nvcc=/usr/bin/true"], {},
                      ["/usr/bin/true", "not nvcc"], ["bin/nvcc"]),
    "T09-nvcc-a-directory": ("torch211", "prepare", [*TAILORED, "nvcc={toolkit}/bin"], {},
                             ["{toolkit}/bin", "a directory"], ["-C nvcc={toolkit}/bin/nvcc"]),
    "T10-nvcc-a-script-printing-a-version": ("torch211", "prepare", [*TAILORED, "nvcc={tmp}/nvcc"],
                                             {}, ["{tmp}/nvcc", "not nvcc"], ["-C nvcc"]),
    "D05-doctor-cuda-home-empty": ("torch211", "doctor", [], {"CUDA_HOME": "{tmp}/emptycuda"},
                                   ["{tmp}/emptycuda/bin/nvcc"], ["CUDA_HOME"]),
    "SA03-stable-on-torch-2.9": ("torch291", "prepare", [*TAILORED, SA], {},
                                 ["2.9.1+cu128", ">= 2.10.0"], ["-C torch-abi=torch"]),
    "SA04-stable-2.6.3-on-torch-2.9": ("torch291", "prepare",
                                       [*TAILORED, SA, "flash-attn-version=2.6.3"], {},
                                       ["2.6.3", "2.8.3.post2"],
                                       ["-C flash-attn-version=2.8.3.post2"]),
    "SA05-doctor-stable-on-torch-2.9": ("torch291", "doctor", [], {"FA_SHIM_TORCH_ABI": "stable"},
                                        ["CUDA 12.8", "this torch is 2.9.1+cu128"],
                                        ["-C torch-abi=torch"]),
    "SA08-stable-the-2.8.3-file": ("torch211", "prepare", ["sdist={sdists}/flash_attn-2.8.3.tar.gz",
                                   *TAILORED, SA], {}, ["flash-attn 2.8.3,", "2.8.3.post2"],
                                   ["-C sdist={sdists}/flash_attn-2.8.3.post2.tar.gz"]),
}  # fmt: skip


def _rows_listed() -> set[str]:
    """The ids ROWS (the reliability page's list) gives to this module."""
    path = REPO / "tests" / "integration" / "test_hostile_inputs.py"
    spec = importlib.util.spec_from_file_location("_hostile_rows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {r[0] for r in module.ROWS if r[0].split("-")[0] in module.CUDA_TORCH}


def test_every_cuda_torch_row_of_the_list_runs_here():
    accepted = {"K24-head-dims-twice", "SA09-stable-tu-parts-2", "E01-tmpdir-50-mb-real-sdist"}
    accepted.add("TC13-another-torchs-index-url")
    assert _rows_listed() == {*CUDA_ROWS, *accepted}


def _run(python: Path, tmp: Path, command: str, settings: list[str], env: dict):
    out, scratch = tmp / "b", tmp / "tmp"
    scratch.mkdir(exist_ok=True)
    if command == "prepare":
        argv = [python, "-m", "fa_backend", "prepare", "--build-dir", out]
        if not any(s.startswith("sdist=") for s in settings):
            settings = [f"sdist-dir={SHARED_SDISTS}", *settings]
    else:  # doctor, as JSON: its problems
        argv = [python, "-m", "fa_backend", "doctor", "--json"]
    argv += [a for s in settings for a in ("-C", s)]
    env = clean_env(TMPDIR=str(scratch), XDG_CACHE_HOME=str(tmp / "xdg"), **env)
    return run(argv, cwd=REPO, env=env, check=False), out, scratch


@pytest.mark.parametrize("row", list(CUDA_ROWS))
def test_a_cuda_torch_row_gets_one_true_error(row, request, tmp_path):
    venv, command, settings, env, named, fixed = CUDA_ROWS[row]
    python = request.getfixturevalue(f"{venv}_python")
    toolkit = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda-13.0")
    (tmp_path / "emptycuda").mkdir()
    (tmp_path / "nvcc").write_text(FAKE_NVCC)
    (tmp_path / "nvcc").chmod(0o755)

    def fill(text: str) -> str:
        return text.format(tmp=tmp_path, toolkit=toolkit, sdists=SHARED_SDISTS)

    settings, env = [fill(s) for s in settings], {k: fill(v) for k, v in env.items()}
    named, fixed = [fill(n) for n in named], [fill(f) for f in fixed]
    proc, out, scratch = _run(python, tmp_path, command, settings, env)
    if command == "doctor":  # each finding an error, each with its fix
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        errors = [p for p in json.loads(proc.stdout)["problems"] if p["severity"] == "error"]
        assert all(any(n in p["cause"] for p in errors) for n in named), (named, errors)
        assert all(any(f in p["fix"] for p in errors) for f in fixed), (fixed, errors)
    else:
        text = assert_one_error_nothing_left(proc, out)
        error = next(line for line in text.splitlines() if line.startswith("fa-shim: error:"))
        fix = next(line for line in text.splitlines() if line.startswith("fa-shim: fix:"))
        assert all(n in error for n in named), (named, error)
        assert all(f in fix for f in fixed), (fixed, fix)
    assert list(scratch.iterdir()) == []


def test_k24_a_head_dim_given_twice_is_the_build_of_it_once(torch211_python, tmp_path):
    """K24: `head-dims=128,128` accepted, and read as `head-dims=128`: the same fingerprint."""
    keys = []
    for dims in ("128,128", "128", "64"):
        settings = [f"sdist-dir={SHARED_SDISTS}", *TAILORED[:1], f"head-dims={dims}"]
        argv = [torch211_python, "-m", "fa_backend", "fingerprint"]
        argv += [a for s in settings for a in ("-C", s)]
        found = run(argv, cwd=REPO, env=clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg")))
        keys.append(json.loads(found.stdout)["key"])
    assert keys[0] == keys[1] != keys[2]  # and the setting is read: another head dim differs


def test_sa09_the_stable_line_with_tu_parts_prepares_its_abi3_wheel(torch211_python, tmp_path):
    """SA09: `-C torch-abi=stable -C tu-parts=2` accepted: the line's one cp310-abi3 wheel."""
    settings = [*TAILORED, SA, "tu-parts=2"]
    proc, _, scratch = _run(torch211_python, tmp_path, "prepare", settings, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = json.loads(proc.stdout)["wheel"]
    assert "+cu13.torch2.10plus." in wheel and wheel.endswith("-cp310-abi3-linux_x86_64.whl")
    assert list(scratch.iterdir()) == []


def test_e01_a_50_mb_tmpdir_is_refused_before_the_build_naming_the_space(torch211_python, tmp_path):
    """E01: TMPDIR on a 50 MB disk for the real sdist: refused before extracting, naming how much
    the build needs there and the disk, nothing left."""
    if not CAN_MOUNT:
        pytest.skip("needs root and a mount namespace (unshare -m) for a real small disk")
    out = tmp_path / "out"
    out.mkdir()
    config = {"sdist-dir": str(SHARED_SDISTS), "wheel-cache": "false"}
    config.update(s.split("=", 1) for s in TAILORED)
    code = f"import fa_backend; fa_backend.build_wheel({str(out)!r}, {config!r})"
    proc = on_small_disk(tmp_path, [torch211_python, "-c", code], "size=50m", **clean_env())
    text = assert_one_error_nothing_left(proc, out)
    assert "not enough disk space: the build needs" in text and str(tmp_path / "disk") in text, text


def test_tc13_another_torchs_index_installs_and_the_guard_stops_the_import(
    torch211_python, sample_sdist_dir, tmp_path
):
    """TC13: the guide's pip line given another torch's index URL (a CPU torch's, under torch
    2.11) installs that wheel, as pip is asked to (the URL names the torch: fleet.md); the
    import guard then stops the import, naming both torches."""
    wc, target = tmp_path / "wc", tmp_path / "target"
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"), PIP_NO_CACHE_DIR="1")
    run(pip_wheel_cmd(PY, tmp_path / "out", *sample_settings(sample_sdist_dir),
                      "-C", f"wheel-cache-dir={wc}"), env=env)  # fmt: skip
    (index,) = (wc / "index").glob("torch-*+cpu")
    env["PIP_CONFIG_FILE"] = os.devnull  # this box's extra indexes and find-links: not the line's
    run([torch211_python, "-m", "pip", "install", "-q", "--no-deps", "--target", target,
         "--index-url", index.as_uri(), "flash-attn"], env=env)  # fmt: skip
    imported = run(
        [torch211_python, "-c", "import flash_attn"],
        cwd=tmp_path, env=clean_env(PYTHONPATH=str(target)), check=False,
    )  # fmt: skip
    assert imported.returncode == 1 and "built for a different torch" in imported.stderr
    assert "2.13.0+cpu vs 2.11.0+cu130" in imported.stderr, imported.stderr
