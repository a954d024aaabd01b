"""Load flash_attn_2_cuda, or say why not and how to fix it. Standard library only: fa-shim
copies this file into every wheel as flash_attn/_fa_shim_guard.py. A running torch that differs
from the wheel's provenance raises ImportError naming both sides and the rebuild command (--no-deps:
it must not reinstall torch). docs/explanations/import-guard.md."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import sys
from urllib.parse import unquote, urlparse

PROVENANCE = "fa_shim_provenance.json"
IGNORE_ENV = "FLASH_ATTN_IGNORE_TORCH_MISMATCH"
_FALLBACK_SOURCE = "/path/to/fa-shim"


def _distribution(name: str = "flash-attn"):
    """The distribution installed next to this package (else the first on sys.path)."""
    from importlib import metadata

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        for dist in metadata.distributions(path=[here]):
            if (dist.metadata["Name"] or "").lower().replace("_", "-") == name:
                return dist
        return metadata.distribution(name)
    except Exception:  # no metadata at all (a source checkout on sys.path)
        return None


def _read_json(dist, name: str):
    """A file of the distribution's metadata, as JSON (None: missing or not JSON)."""
    try:
        return json.loads((dist and dist.read_text(name)) or "null")
    except (OSError, ValueError):
        return None


def provenance(dist=None) -> dict | None:
    data = _read_json(dist if dist is not None else _distribution(), PROVENANCE)
    return data if isinstance(data, dict) else None


def _direct_url(dist) -> dict | None:
    """What the installer recorded of a direct install (PEP 610's direct_url.json), if any."""
    info = _read_json(dist, "direct_url.json")
    return info if isinstance(info, dict) and isinstance(info.get("url"), str) else None


def _source(dist) -> str:
    """Where to rebuild from: the directory or archive pip installed from, if it says so."""
    info = _direct_url(dist)
    if info is None:
        return _FALLBACK_SOURCE
    url = info["url"]
    vcs = info.get("vcs_info")
    if vcs:
        commit = vcs.get("commit_id")
        return f"{vcs.get('vcs', 'git')}+{url}" + (f"@{commit}" if commit else "")
    location = unquote(urlparse(url).path) if url.startswith("file:") else url
    if location.endswith(".whl"):  # reinstalling the same wheel would not help
        return _FALLBACK_SOURCE
    return location


def rebuild_command(dist=None) -> str:
    source = _source(dist if dist is not None else _distribution())
    return (
        f"{sys.executable} -m pip install --no-build-isolation --no-deps --force-reinstall {source}"
    )


def team_command(dist=None) -> str | None:
    """The team cache's install command, for a wheel installed from a cache entry's own file
    (what its install.py does: the installer records that file in direct_url.json) while that
    cache keeps install.py; the kernel set (its provenance), the distribution and the installer
    (INSTALLER, PEP 376) as they were. Nothing of fa-shim's is written into the installed wheel."""
    dist = dist if dist is not None else _distribution()
    info = _direct_url(dist)
    if info is None or not info["url"].startswith("file:"):
        return None
    entry = os.path.dirname(unquote(urlparse(info["url"]).path))
    script = os.path.join(os.path.dirname(entry), "install.py")
    if not (os.path.isfile(os.path.join(entry, "entry.json")) and os.path.isfile(script)):
        return None
    command = [sys.executable, script]
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if name != "flash-attn":
        command.append(name)
    kernel_set = (provenance(dist) or {}).get("kernel_set_name") or "full"
    if kernel_set != "full":
        command += ["--kernel-set", kernel_set]
    try:
        installer = (dist.read_text("INSTALLER") or "").strip()
    except OSError:
        installer = ""
    return shlex.join(command + (["--uv"] if installer == "uv" else []))


def release(version: str) -> str:
    """The torch release a module is bound to: its version without the local label."""
    return str(version).split("+", 1)[0]


def _release_and_pre(version) -> tuple[tuple[int, ...], bool]:
    """(2, 9, 0) and whether it is a pre-release, for 2.9.0.dev20250901+cu128 (packaging may be
    missing where this file runs)."""
    match = re.match(r"v?(\d+(?:\.\d+)*)(.*)", release(version).strip().lower())
    if not match:
        return (), True
    rest = match.group(2)
    pre = bool(re.match(r"[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)", rest))
    return tuple(int(n) for n in match.group(1).split(".")), pre


def at_least(version, floor) -> bool:
    """version >= floor, a pre-release of the floor counting as older (2.9.0.dev... < 2.9.0)."""
    have, pre = _release_and_pre(version)
    want, _ = _release_and_pre(floor)
    width = max(len(have), len(want))
    have, want = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
    return bool(have) and (have > want or (have == want and not pre))


def binding(version, stable_abi) -> str:
    """How a module is bound to torch, as the provenance records it."""
    if stable_abi:
        return f"stable ABI, torch >= {stable_abi} (built with {release(version)})"
    return f"torch {release(version)} (its C++ ABI)"


def _cuda_major(cuda) -> str | None:
    return str(cuda).split(".", 1)[0] if cuda else None


def _describe(version, cuda, abi) -> str:
    return f"torch {version} (CUDA {cuda or 'none'}, _GLIBCXX_USE_CXX11_ABI={abi})"


def _describe_built(built: dict) -> str:
    if built.get("stable_abi"):
        return (
            f"torch >= {built['stable_abi']} of CUDA {_cuda_major(built.get('cuda')) or 'none'} "
            f"(torch's stable ABI; built with torch {built.get('version')})"
        )
    return _describe(built.get("version"), built.get("cuda"), built.get("cxx11_abi"))


def running_torch() -> dict:
    import torch

    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def mismatches(built: dict, running: dict) -> list[str]:
    """How the torch the module was built for differs from the running one (empty: none)."""
    found = []
    floor = built.get("stable_abi")
    if floor and not at_least(running["version"], floor):
        found.append(
            f"torch version {running['version']} is older than {floor}, the oldest this "
            "stable-ABI module runs on"
        )
    elif (
        not floor
        and built.get("version")
        and release(built["version"]) != release(running["version"])
    ):
        found.append(f"torch version {built['version']} vs {running['version']}")
    if _cuda_major(built.get("cuda")) != _cuda_major(running.get("cuda")):
        found.append(
            f"CUDA {built.get('cuda') or 'none'} vs {running.get('cuda') or 'none'} "
            "(the major version must match)"
        )
    abi = built.get("cxx11_abi")
    if not floor and abi is not None and int(abi) != running["cxx11_abi"]:
        found.append(
            f"C++ ABI _GLIBCXX_USE_CXX11_ABI={int(built['cxx11_abi'])} vs {running['cxx11_abi']}"
        )
    return found


def _message(
    headline: str, built: dict | None, running: dict | None, dist, extra=(), name="flash-attn"
) -> str:
    lines = [headline]
    if built:
        lines.append("  built for:  " + _describe_built(built))
    if running:
        lines.append(
            "  installed:  "
            + _describe(running["version"], running.get("cuda"), running["cxx11_abi"])
        )
    lines += [f"  {line}" for line in extra]
    team, stable = team_command(dist), bool(built and built.get("stable_abi"))
    if team:  # a teammate's wheel: the cache it came from has (or names the build of) this one's
        fix = f"install the team's {name} wheel for the installed torch (or its build line):"
    else:
        why = "builds what fits it" if stable else "compiles it for exactly this torch"
        fix = f"rebuild {name} against the installed torch (fa-shim {why}):"
    if stable:
        floor, cuda = built["stable_abi"], str(built.get("cuda") or "")
        lines += [
            f"Install a torch >= {floor} built for CUDA {_cuda_major(cuda)}, e.g.:",
            f"  pip install 'torch>={floor}' --index-url "
            f"https://download.pytorch.org/whl/cu{cuda.replace('.', '')}",
            f"or {fix}",
        ]
    else:
        lines.append(fix[0].upper() + fix[1:])
    lines.append(f"  {team or rebuild_command(dist)}")
    return "\n".join(lines)


def _install_hint(built: dict | None) -> str:
    if built and built.get("stable_abi"):
        return f": pip install 'torch>={built['stable_abi']}'"
    if built and built.get("version"):
        return f": pip install torch=={release(built['version'])}"
    return ""


def load_extension(name: str = "flash_attn_2_cuda", dist_name: str = "flash-attn"):
    """Import the compiled extension after checking it was built for the running torch."""
    dist = _distribution(dist_name)
    built = (provenance(dist) or {}).get("torch") or None
    try:
        running = running_torch()  # torch's libraries must be loaded before the extension
    except ImportError as exc:
        raise ImportError(
            f"{dist_name} needs torch, which cannot be imported ({exc}).\n"
            f"Install the torch {dist_name} was built for" + _install_hint(built),
            name=name,
        ) from exc
    if built and os.environ.get(IGNORE_ENV) != "1":
        differences = mismatches(built, running)
        if differences:
            raise ImportError(
                _message(
                    f"{dist_name}'s {name} was built for a different torch than the one "
                    f"installed ({'; '.join(differences)}).",
                    built,
                    running,
                    dist,
                    extra=[f"(set {IGNORE_ENV}=1 to try loading it anyway)"],
                    name=dist_name,
                ),
                name=name,
            )
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            _message(
                f"{dist_name}'s compiled extension {name} failed to import: {exc}",
                built,
                running,
                dist,
                name=dist_name,
            ),
            name=name,
        ) from exc
