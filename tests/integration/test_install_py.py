"""The team cache's install.py as teammates type it (hostile-inputs.md TC02, TC04, TC09, TC10;
issue 55's I3 and F1), on the sample built once into a cache with this machine's CPU torch 2.13:
each gets the team's wheel or one error naming the cause and a fix that works as written; what it
installs is the cache's own file, so `pip freeze` / `uv pip freeze` replay it from the cache and
the import guard names install.py from what the installer recorded (direct_url.json), with
nothing of fa-shim's written into the installed distribution. With a CUDA torch and a torch that
moves: tests/e2e/test_team_install.py."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shlex
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import PY, REPO, UV_CACHE, pip_wheel_cmd, run, run_sample, sample_settings, uv_venv

GUARD = "from flash_attn import _fa_shim_guard as g; print(g.team_command())"


def _env(python: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "PYTHON"))}
    if python:  # the teammate's activated venv
        python = Path(python)
        env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
        env["VIRTUAL_ENV"] = str(python.parent.parent)
    return {**env, "UV_CACHE_DIR": str(UV_CACHE)}


@pytest.fixture(scope="module")
def cache(tmp_path_factory, sample_sdist_dir) -> Path:
    tmp = tmp_path_factory.mktemp("install-py")
    root = tmp / "fa"
    settings = [*sample_settings(sample_sdist_dir), "-C", f"wheel-cache-dir={root}"]
    run(pip_wheel_cmd(PY, tmp / "out", *settings), env={**_env(), "XDG_CACHE_HOME": str(tmp)})
    return root


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A teammate's venv: torch 2.13.0+cpu and pip 23.2 (laid out by uv from its cache)."""
    torch = run([PY, "-c", "import importlib.metadata as m; print(m.version('torch'))"])
    return uv_venv(tmp_path_factory.mktemp("t213") / "v", [f"torch=={torch.stdout.strip()}"])


def install_py(python: Path, script: Path, *args: str, check: bool = True):
    return run([python, script, *args], env=_env(python), check=check)


def _one_error(proc) -> str:
    """The one install.py: line of a refusal (torch may warn first)."""
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("install.py:")]
    return line


@pytest.mark.parametrize("archs", ["sm_90", "90a,8.6"])
def test_archs_takes_every_form_cuda_archs_takes(cache, archs):
    """TC04: `--archs sm_90` (and 90a) ended in a ValueError from runs_on (every form, against
    the settings' parsing: tests/unit/resources/test_team_install_archs.py; which entry each
    takes with a CUDA torch: tests/e2e/test_team_install.py)."""
    proc = install_py(PY, cache / "install.py", "--archs", archs, "--dry-run", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_bad_archs_is_one_error_naming_the_forms(cache):
    proc = install_py(PY, cache / "install.py", "--archs", "hopper", "--dry-run", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'hopper' is not a list of architectures as -C cuda-archs takes them" in proc.stderr


def test_a_copy_out_of_its_cache_refuses_to_run(cache, tmp_path):
    """TC10: a copy elsewhere suggested a build that made its directory a wheel cache."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(cache / "install.py", elsewhere)
    line = _one_error(install_py(PY, elsewhere / "install.py", "--dry-run", check=False))
    assert line.startswith(f"install.py: {elsewhere} is not a wheel cache"), line
    assert "wheel-cache-dir" not in line and "python /shared/fa/install.py" in line
    assert sorted(p.name for p in elsewhere.iterdir()) == ["install.py"]


def test_stable_on_a_cpu_torch_suggests_no_build_that_is_refused(cache):
    """TC02: `--binding stable` on torch 2.13.0+cpu suggested `-C torch-abi=stable`, which a CPU
    torch refuses (hostile-inputs.md SA02); the fix it names works as written."""
    miss = install_py(PY, cache / "install.py", "--binding", "stable", "--dry-run", check=False)
    line = _one_error(miss)
    assert "torch-abi" not in miss.stderr and "build it" not in line, line
    assert "has no CUDA" in line and "run this without --binding stable" in line
    install_py(PY, cache / "install.py", "--dry-run")  # that fix, as written


def test_flash_attn_3_is_named_with_its_own_project(cache):
    """I3: `install.py flash-attn-3` named the checkout root, which builds flash-attn."""
    line = _one_error(install_py(PY, cache / "install.py", "flash-attn-3", check=False))
    built = f"-m pip install --no-build-isolation --no-deps {REPO / 'flash-attn-3'} -C "
    assert built in line, line
    line = _one_error(install_py(PY, cache / "install.py", "--kernel-set", "x", check=False))
    assert f"--no-deps {REPO} -C wheel-cache-dir={cache}" in line, line


def test_a_python_without_pip_is_told_ensurepip_and_uv(cache, tmp_path):
    """TC09: under a Python without pip (uv's venv, torch importable) it named no fix; the
    ensurepip fix then installs the wheel as written (--uv: the freeze test)."""
    python = tmp_path / "nopip" / "bin" / "python"
    env = _env()
    run(["uv", "venv", "-q", "--python", PY, python.parent.parent], env=env)
    links = [a for d in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", d)]
    torch = run([PY, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    run(["uv", "pip", "install", "-q", "--python", python, *links, f"torch=={torch}"], env=env)
    line = _one_error(install_py(python, cache / "install.py", check=False))
    ensurepip = f"`{python} -m ensurepip`"
    assert f"pip is not installed for {python}" in line and ensurepip in line, line
    assert f"`{python} {cache / 'install.py'} --uv`" in line, line  # as the freeze test runs it
    run(["bash", "-c", ensurepip.strip("`")], env=env)
    install_py(python, cache / "install.py")
    assert run_sample(python)["torch"] == torch


def _dist_info(python: Path) -> Path:
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"])
    (info,) = Path(site.stdout.strip()).glob("flash_attn-*.dist-info")
    return info


@pytest.mark.parametrize("frontend", ["pip", "uv"])
def test_the_freeze_replays_from_the_cache_and_nothing_is_written(cache, venv, frontend):
    """F1 and "nothing edited after install": after install.py, the freeze line names the cache
    entry's own file (not a deleted copy), and installing it again gives the same wheel; the
    .dist-info holds the wheel's files and what the installer writes, RECORD lists exactly
    those; the guard names install.py from direct_url.json (and --uv from INSTALLER)."""
    (entry,) = [p for p in cache.glob("*/entry.json")]
    wheel = entry.parent / json.loads(entry.read_text())["wheel"]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    uv = ["--uv"] if frontend == "uv" else []
    install_py(venv, cache / "install.py", *uv)
    info = _dist_info(venv)
    with zipfile.ZipFile(wheel) as zf:
        shipped = {Path(n).name for n in zf.namelist() if n.startswith(info.name + "/")}
    installer = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json"}
    assert {p.name for p in info.iterdir()} <= shipped | installer | {"licenses"}
    listed = {row[0] for row in csv.reader((info / "RECORD").read_text().splitlines())}
    assert not [n for n in listed if "fa_shim_installed_by" in n]
    url = json.loads((info / "direct_url.json").read_text())["url"]
    assert url.startswith(wheel.parent.as_uri() + "/"), url
    freeze = {
        "pip": [venv, "-m", "pip", "freeze"],
        "uv": ["uv", "pip", "freeze", "--python", venv],
    }[frontend]
    (line,) = [ln for ln in run(freeze, env=_env(venv)).stdout.splitlines() if "flash" in ln]
    assert f"@ {wheel.parent.as_uri()}/" in line and digest in line, line
    guard = run([venv, "-c", GUARD], env=_env(venv)).stdout.strip().splitlines()[-1]
    assert guard == shlex.join([str(venv), str(cache / "install.py"), *uv]), guard
    pip = [venv, "-m", "pip"] if frontend == "pip" else ["uv", "pip"]
    where = [] if frontend == "pip" else ["--python", venv]
    uninstall = [
        *pip,
        "uninstall",
        *where,
        "-q",
        *(["-y"] if frontend == "pip" else []),
        "flash-attn",
    ]
    run(uninstall, env=_env(venv))
    run([*pip, "install", *where, "-q", "--no-deps", line], env=_env(venv))
    assert json.loads((_dist_info(venv) / "direct_url.json").read_text())["url"] == url
    run_sample(venv)
    run(uninstall, env=_env(venv))
    assert not list(info.parent.glob("flash_attn*"))


FLEET = REPO / "docs" / "guides" / "fleet.md"


def guide_line(start: str) -> str:
    """The fleet guide's line that starts so, verbatim, the cache at /shared/fa."""
    (line,) = [ln for ln in FLEET.read_text().splitlines() if ln.startswith(start)]
    return line


def _stable_only(cache: Path, dest: Path) -> Path:
    """A cache holding only a wheel on torch's stable ABI: the sample's wheel with its provenance
    saying so (floor 2.10, no CUDA: the sample compiles no CUDA, and this torch has none), stored
    and laid out by the wheel cache's own code (its view stable-cpu-torch2.10plus/, its index)."""
    from fa_backend.fleet import _entries, _wheel_cache

    (entry,) = cache.glob("*/entry.json")
    wheel = entry.parent / json.loads(entry.read_text())["wheel"]
    stable = dest / "build" / wheel.name
    stable.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(stable, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/fa_shim_provenance.json"):
                recorded = json.loads(data)
                recorded["torch"] = {**recorded["torch"], "stable_abi": "2.10.0"}
                data = json.dumps(recorded).encode()
            zout.writestr(info, data)
    root = dest / "fa"
    root.mkdir()
    (root / ".locks").mkdir()
    stored = _entries.store(root, "0" * 32, stable, {"stable": 1}, {})
    _wheel_cache._torch_view(root, stored, "2.13.0+cpu")
    assert (root / "index" / "stable-cpu-torch2.10plus").is_dir()
    assert not list(root.glob("torch-*")) and not list((root / "index").glob("torch-*"))
    return root


@pytest.mark.parametrize("stable", [False, True], ids=["per-torch", "stable-only"])
@pytest.mark.parametrize("frontend", ["pip", "uv"])
def test_the_guides_index_line_finds_the_wheel_install_py_takes(
    cache, venv, tmp_path, frontend, stable
):
    """S7: with only a stable-ABI wheel in the cache, the guide's index line found nothing (it
    named torch-<version>); the line asks install.py for the index of the wheel it takes, and
    pip and uv install that wheel, torch unchanged."""
    root = _stable_only(cache, tmp_path) if stable else cache
    pip = "pip" if frontend == "pip" else "uv pip"
    line = guide_line(f'{pip} install --index-url "$(python')
    env = _env(venv)
    run(["bash", "-c", line.replace("/shared/fa", str(root))], env=env)
    (entry,) = root.glob("*/entry.json")
    wheel = entry.parent / json.loads(entry.read_text())["wheel"]
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/fa_shim_provenance.json"))
        shipped = json.loads(zf.read(name))
    installed = json.loads((_dist_info(venv) / "fa_shim_provenance.json").read_text())
    assert installed == shipped and bool(installed["torch"].get("stable_abi")) is stable
    assert run_sample(venv)["torch"].startswith("2.13.0")
    run([venv, "-m", "pip", "uninstall", "-y", "-q", "flash-attn"], env=env)


def test_a_cpu_users_download_line_fetches_the_teams_wheel_only(cache, venv, tmp_path):
    """D1: `pip download` with the guide's options fetched PyPI's CUDA torch stack (2.6 GB) for
    a CPU user: the guide's line fetches the one wheel; without --no-deps the wheel's requirement
    is the CPU torch (torch==2.13.0+cpu): where this machine's pip finds it (its find-links),
    that torch and nothing of CUDA's, else pip's one error naming it."""
    line = guide_line("pip download").replace("/shared/fa", str(cache))
    env = _env(venv)
    run(["bash", "-c", f"cd {tmp_path} && {line}"], env=env)
    (got,) = (tmp_path / "wheels").iterdir()
    assert got.name == next(cache.glob("*/*.whl")).name, got
    shutil.rmtree(tmp_path / "wheels")
    deps = run(["bash", "-c", f"cd {tmp_path} && {line.replace(' --no-deps', '')}"], env=env,
               check=False)  # fmt: skip
    out = " ".join((deps.stdout + deps.stderr).split())
    fetched = [p.name for p in (tmp_path / "wheels").glob("*")] if deps.returncode == 0 else []
    assert deps.returncode == 0 or "torch==2.13.0+cpu" in out, out
    assert not [n for n in fetched if n.startswith(("nvidia", "triton", "cuda"))], fetched
    assert all("+cpu-" in n for n in fetched if n.startswith("torch-")), fetched
