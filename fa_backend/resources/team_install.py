"""Install the team's wheel from this wheel cache into the environment of the Python that runs
this file: `python /shared/fa/install.py` (standard library only: neither fa-shim nor
`packaging` need be installed; fa-shim writes it into the cache root on every build and hit).

It takes the entry whose wheel (by its <dist-info>/fa_shim_provenance.json) fits here: a torch
the wheel's own import guard accepts, the Python its tag names (cpXY or cpXY-abi3), code for
every GPU torch sees (--archs where it sees none), and the kernel set asked for (--kernel-set,
default full); of a wheel for this torch release and one on torch's stable ABI (any torch from a
floor), the first unless --binding stable. It checks the wheel's sha256, then installs it from
the cache's own file with this environment's pip (or uv with --uv), --no-deps and --no-index,
the hash in the URL (`name @ file://...#sha256=`): the installer checks the bytes again and
records that URL in direct_url.json (PEP 610), which `pip freeze` replays and the wheel's
import guard reads to name this file after torch moves. Nothing else moves, torch least of all,
and nothing is written into the installed distribution. Without a fitting wheel it names what is
missing and the line that builds it."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import types
import zipfile

# each distribution's project in the checkout whose build wrote this file (fa-shim sets it:
# fleet/_wheel_cache.keep_installer), by normal() name; any other is built from this placeholder
PROJECTS: dict = {}
FA_SHIM = "/path/to/fa-shim"
ROOT = os.path.dirname(os.path.abspath(__file__))
PROVENANCE = "fa_shim_provenance.json"
GUARD = "/_fa_shim_guard.py"
LOCKS = ".locks"  # made in every wheel cache before its first entry (fleet/_wheel_cache.locked)
# an architecture as -C cuda-archs takes it (settings/_settings.convert reads it: arch_name)
ARCH = r"(?:sm_)?(\d+)(?:\.(\d))?([af]?)"


def normal(name: str | None) -> str:
    """A distribution's name as wheel files spell it (PEP 503's normal form, "_" for "-")."""
    return re.sub(r"[-_.]+", "_", name or "").lower()


def _say(text: str) -> None:
    print(f"install.py: {text}", file=sys.stderr)


class Miss(Exception):
    """Nothing to install: the message says why and what to run."""


def running_torch() -> dict:
    try:
        import torch
    except Exception as exc:
        raise Miss(
            f"torch cannot be imported in {sys.executable} ({type(exc).__name__}: {exc}): the "
            "team's wheels are built for a torch; install yours first, then run this again"
        ) from exc
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        "gpus": _gpus(torch),
    }


def _gpus(torch) -> list[str] | None:
    """The archs of the GPUs torch sees ("80", "90"), None when it sees none."""
    try:
        if not torch.version.cuda or not torch.cuda.is_available():
            return None
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    except Exception:
        return None
    return sorted(f"{major}{minor}" for major, minor in caps) or None


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def tag_fits(wheel_name: str) -> bool:
    """The wheel's tags take this interpreter. fa-shim's wheels carry one CPython tag and the
    platform (never manylinux, never compressed tag sets): this much of the tag rules suffices."""
    py, abi, platform = wheel_name[: -len(".whl")].split("-")[-3:]
    here = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    match = re.fullmatch(r"cp(\d)(\d+)", py)
    if sys.implementation.name != "cpython" or platform != here or not match:
        return False
    built = (int(match.group(1)), int(match.group(2)))
    if abi == "abi3":
        return built <= sys.version_info[:2]
    return abi == py and built == sys.version_info[:2]


def arch_name(item: str) -> str | None:
    """One architecture as -C cuda-archs takes it ("sm_90" -> 90, "9.0a" -> 90a), None if bad."""
    match = re.fullmatch(ARCH, item)
    return f"{match[1]}{match[2] or ''}{match[3]}" if match else None


def arch_names(text: str) -> list[str] | None:
    """--archs as -C cuda-archs takes it ("80,sm_90;9.0a" -> 80, 90, 90a), None for a bad one."""
    found = [arch_name(item) for item in filter(None, re.split(r"[;,\s]+", text.strip()))]
    if None in found:
        return None
    return list(dict.fromkeys(found)) or None


def runs_on(gpu: str, archs: list[str]) -> bool:
    """An sm_XY cubin runs on X.Y and later GPUs of major X; an arch-specific one (90a) on X.Y.
    A GPU named with a suffix (90a) is that GPU (9.0)."""
    gpu = int(re.match(r"\d+", gpu).group())
    for arch in archs:
        number = int(re.match(r"\d+", arch).group())
        if number == gpu or (arch.isdigit() and number // 10 == gpu // 10 and number < gpu):
            return True
    return False


class Entry:
    def __init__(self, directory: str, record: dict):
        self.directory, self.record = directory, record
        self.wheel = os.path.join(directory, record["wheel"])
        self.name = record["wheel"]
        self.dist = self.name.split("-", 1)[0].lower()
        with zipfile.ZipFile(self.wheel) as zf:
            names = zf.namelist()
            prov = [n for n in names if n.endswith(".dist-info/" + PROVENANCE)]
            guard = [n for n in names if n.endswith(GUARD)]
            self.provenance = json.loads(zf.read(prov[0])) if prov else {}
            self.guard = zf.read(guard[0]).decode() if guard else None
        self.version = self.provenance.get("wheel_version") or self.name.split("-")[1]
        self.archs = list(self.provenance.get("cuda_archs") or [])
        named = self.provenance.get("kernel_set") or {}  # before kernel_set_name (fa-shim 0.5)
        self.kernel_set = self.provenance.get("kernel_set_name") or (
            named.get("kernel_set") or named.get("label") if isinstance(named, dict) else None
        )
        self.mtime = os.stat(os.path.join(directory, "entry.json")).st_mtime
        self.binding = (
            "stable" if (self.provenance.get("torch") or {}).get("stable_abi") else "torch"
        )

    def describe(self) -> str:
        torch = self.provenance.get("torch") or {}
        if torch.get("stable_abi"):
            built = f"torch >= {torch['stable_abi']} of CUDA {str(torch.get('cuda')).split('.')[0]}"
        else:
            built = f"torch {torch.get('version')}"
        tag = "-".join(self.name[: -len(".whl")].split("-")[-3:-1])
        code = ",".join(f"sm_{a}" for a in self.archs) or "no GPU code"
        return f"{built}, {tag}, {code}, kernel set {self.kernel_set or '?'}"

    def why_not(self, running: dict, kernel_set: str, gpus: list[str] | None, binding=None):
        if self.guard is None or not self.provenance:
            return "not a wheel of fa-shim (no import guard or provenance)"
        if binding and self.binding != binding:
            built = "torch's stable ABI" if self.binding == "stable" else "one torch release"
            return f"built for {built}, not --binding {binding}"
        guard = types.ModuleType("_fa_shim_guard")
        exec(compile(self.guard, self.wheel + GUARD, "exec"), guard.__dict__)
        differ = guard.mismatches(self.provenance.get("torch") or {}, running)
        if differ:
            return "; ".join(differ)
        if not tag_fits(self.name):
            return f"its tags do not take {python_tag()} on {sysconfig.get_platform()}"
        if self.kernel_set != kernel_set:
            return f"kernel set {self.kernel_set or 'unknown (an older fa-shim)'}, not {kernel_set}"
        missing = [g for g in gpus or () if not runs_on(g, self.archs)]
        if missing and running.get("cuda"):
            return f"no code for sm_{', sm_'.join(missing)}"
        return None


def entries(root: str, dist: str | None = None) -> list[Entry]:
    """The cache's whole entries (of `dist`, else all)."""
    found = []
    for name in sorted(os.listdir(root)):
        directory = os.path.join(root, name)
        try:
            with open(os.path.join(directory, "entry.json"), encoding="utf-8") as f:
                record = json.load(f)
            entry = Entry(directory, record)
        except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile):
            continue  # not an entry, or not a whole one (`cache check` reports those)
        if dist is None or entry.dist == normal(dist):
            found.append(entry)
    return found


def build_line(root: str, dist: str, running: dict, kernel_set: str, gpus, binding=None) -> str:
    project = PROJECTS.get(normal(dist), FA_SHIM)
    line = f"{sys.executable} -m pip install --no-build-isolation --no-deps {project}"
    line += f" -C wheel-cache-dir={root}" + (" -C torch-abi=stable" if binding == "stable" else "")
    if gpus and running.get("cuda"):
        line += f" -C cuda-archs={','.join(gpus)}"
    if kernel_set != "full":
        line += f" (and the -C settings of kernel set {kernel_set})"
    return line


def choose(
    root: str, dist: str, kernel_set: str, archs: list[str] | None, binding: str | None = None
) -> tuple[Entry, dict]:
    running = running_torch()
    gpus = archs or running["gpus"]
    fit, near = [], []
    for entry in entries(root, dist):
        why = entry.why_not(running, kernel_set, gpus, binding)
        (near if why else fit).append((entry, why))
    if not fit:
        code = f", sm_{', sm_'.join(gpus)}" if gpus and running["cuda"] else ""
        if binding == "stable" and not running["cuda"]:  # its build is refused: no build line
            how = (
                f"torch {running['version']} has no CUDA, and a wheel on torch's stable ABI is "
                "CUDA code for one CUDA major: run this without --binding stable for a wheel "
                "built for this torch, or install a CUDA torch"
            )
        else:
            how = "build it: " + build_line(root, dist, running, kernel_set, gpus, binding)
        lines = [
            f"no {dist} wheel for torch {running['version']}, {python_tag()}{code}, kernel set "
            f"{kernel_set} in {root}; {how}"
        ]
        lines += [f"  the cache has {e.describe()} ({why})" for e, why in near[:12]]
        raise Miss("\n".join(lines))
    # several fit (builds for different GPU sets, a per-torch and a stable-ABI build): the one with
    # the most code, then the one for this torch release (dropout under CUDA graph capture: the
    # stable ABI has no graph-safe random state), then the newest
    fit.sort(key=lambda p: (len(p[0].archs), p[0].binding == "torch", p[0].mtime), reverse=True)
    entry = fit[0][0]
    if running["cuda"] and not gpus:
        _say(
            "torch sees no GPU here, so the GPU code was not compared (name the GPUs with "
            f"--archs 80,90): taking {entry.describe()}"
        )
    return entry, running


def checked(entry: Entry) -> str:
    """The entry's wheel as its direct reference, `name @ file://...#sha256=` (the installer
    checks that hash on the bytes it installs), once proven to be the bytes its entry recorded."""
    root = os.path.dirname(entry.directory)
    digest = hashlib.sha256()
    with open(entry.wheel, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != entry.record.get("sha256"):
        raise Miss(
            f"{entry.wheel} is not the wheel its entry recorded (sha256 {digest.hexdigest()}, "
            f"recorded {entry.record.get('sha256')}); `python -m fa_backend cache check {root}` "
            f"audits the cache, and this builds the wheel again: "
            + build_line(root, entry.dist, {}, "full", None)
        )
    return f"{entry.dist} @ {pathlib.Path(entry.wheel).as_uri()}#sha256={digest.hexdigest()}"


def index_url(root: str, entry: Entry) -> str:
    """The file:// URL of the cache's PEP 503 index whose view holds this entry's own file (a
    torch's, a stable-ABI one's, a kernel set's or an arch set's below them, the shallowest
    first; fleet/_wheel_cache.write_index), for a frontend's --index-url: the wheel this program
    would install, found by pip or uv themselves."""
    indexes = os.path.join(root, "index")
    found = [d for d, _, files in os.walk(indexes) if "index.html" in files]
    for index in sorted(found, key=lambda d: (d.count(os.sep), d)):
        linked = os.path.join(root, os.path.relpath(index, indexes), entry.name)
        if os.path.isfile(linked) and os.path.samefile(linked, entry.wheel):
            return pathlib.Path(index).as_uri()
    raise Miss(
        f"no index of {root} serves {entry.wheel} yet (the next build or hit of it writes its "
        f"view and index): install it with {sys.executable} {os.path.join(root, 'install.py')}"
    )


def install_command(wheel: str, dist: str, uv: str | None) -> list[str]:
    if uv:
        return [uv, "pip", "install", "--python", sys.executable, "--no-deps", "--no-index",
                "--reinstall-package", dist, wheel]  # fmt: skip
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
            "--force-reinstall", wheel]  # fmt: skip


def no_pip() -> str | None:
    """Why this Python's pip cannot install (None: it can), with what to run instead."""
    if importlib.util.find_spec("pip") is not None:
        return None
    fixes = [f"`{sys.executable} -m ensurepip`, then this again"]
    if importlib.util.find_spec("ensurepip") is None:  # Debian's python3 without python3-venv
        fixes = ["pip (your system's python3-pip or python3-venv package)"]
    if shutil.which("uv"):
        fixes.append(f"`{sys.executable} {os.path.join(ROOT, 'install.py')} --uv`, with uv")
    return f"pip is not installed for {sys.executable}: install it with " + ", or ".join(fixes)


def not_a_cache(root: str) -> str | None:
    """Why root is not the wheel cache fa-shim keeps this file in (None: it is one)."""
    with_entries = any(
        os.path.isfile(os.path.join(root, name, "entry.json")) for name in os.listdir(root)
    )
    if with_entries or os.path.isdir(os.path.join(root, LOCKS)):
        return None
    return (
        f"{root} is not a wheel cache (fa-shim made no {LOCKS}/ and no entry in it): this "
        "install.py is a copy; run the one fa-shim keeps in the team's wheel cache, "
        "python /shared/fa/install.py as docs/guides/fleet.md calls it"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="install.py", description="Install the team's wheel for this environment."
    )
    parser.add_argument("dist", nargs="?", default="flash-attn", help="default: flash-attn")
    parser.add_argument("--kernel-set", default="full", help="e.g. hdim128.bf16 (default: full)")
    parser.add_argument("--archs", help="the GPUs to serve, e.g. 80,90 (default: those torch sees)")
    parser.add_argument(
        "--binding",
        choices=("torch", "stable"),
        help="only a wheel for this torch release, or only one on torch's stable ABI (default: "
        "the first where both fit)",
    )
    parser.add_argument("--uv", nargs="?", const="uv", help="install with uv (or this uv)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be installed")
    parser.add_argument("--requirement", action="store_true", help="print its name==ver --hash")
    parser.add_argument("--index-url", action="store_true", help="print the URL of its index")
    args = parser.parse_args(argv)
    archs = arch_names(args.archs) if args.archs is not None else None
    if args.archs is not None and not archs:
        parser.error(
            f"argument --archs: {args.archs!r} is not a list of architectures as -C cuda-archs "
            "takes them (80, 8.6, sm_90, 90a; comma-separated)"
        )
    uv = shutil.which(args.uv) if args.uv else None
    if args.uv and not uv:
        _say(f"{args.uv} not found on PATH; run without --uv to install with pip")
        return 1
    try:
        if why := not_a_cache(ROOT):
            raise Miss(why)
        entry, running = choose(ROOT, args.dist, args.kernel_set, archs, args.binding)
        if args.requirement:
            print(f"{args.dist}=={entry.version} --hash=sha256:{entry.record['sha256']}")
            return 0
        if args.index_url:
            print(index_url(ROOT, entry))
            return 0
        if why := (None if uv else no_pip()):
            raise Miss(why)
        command = install_command(checked(entry), args.dist, uv)
        _say(f"{entry.name} for torch {running['version']} from {entry.directory}")
        if args.dry_run:
            print(shlex.join(command))
            return 0
        if subprocess.run(command, check=False).returncode != 0:
            raise Miss(f"`{shlex.join(command)}` failed (its output is above)")
    except Miss as exc:
        _say(str(exc))
        return 1
    _say(f"installed {args.dist} {entry.version}; torch {running['version']} untouched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
