"""Which GPU architectures to compile: the fewest that cover the GPUs the wheel is for, asked of
the CUDA driver (libcuda) directly, in milliseconds where importing torch costs seconds per hook.

Each architecture multiplies the compile time of every kernel. An upstream setup.py knows only
some (2.8.x: 80, 90, 100, 120) and silently drops others, so other GPUs are mapped onto the
architecture whose code they run (sm_80 code runs on 8.6). `check_gencodes` verifies
build.ninja against the choice; a release's Mechanism says how its setup.py takes them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import _log, _subprocess
from ..core._errors import FaShimError
from ._compile_commands import Command

if TYPE_CHECKING:
    from ..settings._settings import Settings
    from ._torch import TorchInfo

MIN_ARCH = 80  # flash-attn 2 needs Ampere or newer
FROM_GPUS = "the visible GPUs"  # a Selection's source when no setting named the architectures


# CUdevice_attribute values from cuda.h (stable since CUDA 2.x)
_COMPUTE_CAPABILITY_MAJOR = 75
_COMPUTE_CAPABILITY_MINOR = 76


@functools.cache
def capabilities() -> tuple[tuple[int, int], ...]:
    """(major, minor) of every visible GPU, in device order; () without a driver or a GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ()  # no NVIDIA driver: no GPU to build for
    status = cuda.cuInit(0)
    if status not in (0, 100):  # 100 = CUDA_ERROR_NO_DEVICE; any other is worth a line in the log
        _log.info(f"the CUDA driver did not initialise (CUresult {status}); assuming no GPU")
    count = ctypes.c_int()
    if status != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    caps = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if not (  # each call returns a CUresult, 0 for success
            cuda.cuDeviceGet(ctypes.byref(device), ordinal)
            or cuda.cuDeviceGetAttribute(ctypes.byref(major), _COMPUTE_CAPABILITY_MAJOR, device)
            or cuda.cuDeviceGetAttribute(ctypes.byref(minor), _COMPUTE_CAPABILITY_MINOR, device)
        ):
            caps.append((major.value, minor.value))
    return tuple(caps)


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """How an upstream setup.py is told its architectures."""

    env: str | None  # the variable setup.py reads; None: its list is fixed
    known: tuple[str, ...]  # the architectures it can emit -gencode for
    default: tuple[str, ...]  # what it compiles when not told
    patch: str | None = None  # the vendored patch that gives setup.py this mechanism


def _arch_number(arch: str) -> int:
    return int(re.match(r"\d+", arch).group())  # type: ignore[union-attr]


def base_arch(arch: str) -> str:
    return str(_arch_number(arch))


def _compatible(arch: str, codes: set[str]) -> bool:
    """Whether a GPU of arch runs the code of one of `codes`: its own, or that of a lower arch of
    the same major (binary compatible; a 10.3 GPU runs sm_100 code)."""
    number = _arch_number(arch)
    return any(_arch_number(c) // 10 == number // 10 and _arch_number(c) <= number for c in codes)


def _sorted(archs: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(archs), key=lambda a: (_arch_number(a), a))


# torch's named architectures (torch.utils.cpp_extension._get_cuda_arch_flags)
_NAMED = {
    "ampere": ["80", "86"],
    "ampere+tegra": ["87"],
    "ada": ["89"],
    "hopper": ["90"],
    "blackwell": ["100", "103", "120", "121"],
    "blackwell+tegra": ["110"],
}


def parse_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST / torch's list ("8.0;8.6+PTX 9.0a", "sm_90", "Hopper") as "80"-style
    names; +PTX is dropped (flash-attn compiles no PTX) and unparseable entries are ignored."""
    result = []
    for item in re.split(r"[;,\s]+", text.strip()):
        item = item.strip().lower().removesuffix("+ptx")  # "" matches neither below
        if item in _NAMED:
            result += _NAMED[item]
            continue
        match = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d))?([af]?)", item)
        if match:
            major, minor, suffix = match.groups()
            result.append(f"{major}{minor if minor is not None else ''}{suffix}")
    return _sorted(result)


@dataclasses.dataclass(frozen=True)
class Selection:
    archs: tuple[str, ...]  # what the wheel is for, e.g. ("86", "90")
    source: str  # where they came from, for the log and provenance
    dropped: tuple[str, ...] = ()  # candidates left out (too old, or unknown to this nvcc)


def select_archs(
    setting: Sequence[str],
    gpu_caps: Sequence[tuple[int, int]],
    env: str | None,
    torch_arch_list: Sequence[str],
    nvcc_supported: Iterable[str],
    upstream_default: Sequence[str],
    setting_source: str = "setting cuda-archs",
) -> Selection:
    """Pick the architectures: setting > visible GPUs > TORCH_CUDA_ARCH_LIST > torch > upstream.
    A setting is literal (what cannot be built is an error); derived lists are filtered."""
    supported, strict = {base_arch(a) for a in nvcc_supported}, bool(setting)
    if setting:
        candidates, source = setting, setting_source
    elif gpu_caps:
        candidates, source = [f"{major}{minor}" for major, minor in gpu_caps], FROM_GPUS
    elif env and parse_arch_list(env):  # "native" and blanks parse to nothing
        candidates, source = parse_arch_list(env), "TORCH_CUDA_ARCH_LIST"
    elif torch_arch_list:
        candidates, source = torch_arch_list, "torch's CUDA arch list"
    else:
        candidates, source = upstream_default, "upstream's default"
    candidates = _sorted(candidates)

    too_old = [a for a in candidates if _arch_number(a) < MIN_ARCH]
    # an explicit arch must be one this nvcc names (98 typed for 89 is no GPU at all); derived
    # ones may run lower code of their major (a 10.3 GPU on an nvcc that predates sm_103)
    builds = (
        (lambda a: base_arch(a) in supported) if strict else (lambda a: _compatible(a, supported))
    )
    no_nvcc = [a for a in candidates if a not in too_old and not builds(a)]
    if strict and (too_old or no_nvcc):
        problems = []
        if too_old:
            problems.append(f"{', '.join(too_old)}: flash-attn 2 needs compute capability 8.0+")
        if no_nvcc:
            problems.append(
                f"{', '.join(no_nvcc)}: not a compute capability the chosen nvcc compiles"
            )
        valid = ", ".join(a for a in _sorted(supported) if _arch_number(a) >= MIN_ARCH)
        raise FaShimError(
            f"{source} asks for architectures this build cannot compile ({'; '.join(problems)}).",
            fix=f"use some of {valid} (the valid values; or pick a newer CUDA toolkit with "
            "-C nvcc=...).",
        )
    archs = [a for a in candidates if a not in too_old and a not in no_nvcc]
    if not archs:
        why = []
        if too_old:
            why.append(f"{', '.join(too_old)} predate Ampere (flash-attn 2 needs 8.0+)")
        if no_nvcc:
            why.append(f"{', '.join(no_nvcc)} are unknown to the chosen nvcc")
        raise FaShimError(
            f"no architecture to compile: {source} give {', '.join(candidates)}, and "
            f"{'; '.join(why)}.",
            fix="name the GPUs the wheel is for with -C cuda-archs=80,90 (or use a newer CUDA "
            "toolkit for newer GPUs).",
        )
    return Selection(tuple(archs), source, tuple(too_old + no_nvcc))


def upstream_targets(archs: Sequence[str], mech: Mechanism) -> tuple[list[str], list[str]]:
    """(targets, notes): each arch as upstream knows it, else the highest known one below it."""
    targets, notes, impossible = [], [], []
    for arch in archs:
        base = base_arch(arch)
        below = [k for k in mech.known if _compatible(arch, {k})]
        if base in mech.known:
            targets.append(base)
            if base != arch:
                notes.append(f"{arch} is compiled as sm_{base} (upstream has no '{arch}' variant)")
        elif below:
            host = max(below, key=_arch_number)
            targets.append(host)
            notes.append(f"{arch} runs the sm_{host} code (same major, binary compatible)")
        else:
            impossible.append(arch)
    if impossible:
        raise FaShimError(
            f"this flash-attn's setup.py cannot compile for {', '.join(impossible)}: it only "
            f"emits code for {', '.join(mech.known)}, and none of those runs on "
            f"{'it' if len(impossible) == 1 else 'them'}.",
            fix="build for other GPUs with -C cuda-archs=..., or use a flash-attn version that "
            "supports these.",
        )
    return _sorted(targets), notes


def arch_env(targets: Sequence[str], mech: Mechanism) -> dict[str, str]:
    """Environment for the upstream build. TORCH_CUDA_ARCH_LIST too: torch uses it whenever a
    setup.py passes no -gencode of its own, and it silences torch's "not set" warning."""
    env = {"TORCH_CUDA_ARCH_LIST": ";".join(f"{int(t) // 10}.{int(t) % 10}" for t in targets)}
    if mech.env:
        env[mech.env] = ";".join(targets)
    return env


_GENCODE = re.compile(r"arch=(compute_\w+),code=\[?([\w,]+)\]?")


def gencodes(command: Command) -> set[str]:
    """The (virtual arch, code) pairs an nvcc command compiles, as "compute_90:sm_90"."""
    pairs, args = set(), command.args
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")  # `flag VALUE` or `flag=VALUE`
        if flag not in ("-gencode", "--generate-code", "-arch", "--gpu-architecture"):
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if flag in ("-arch", "--gpu-architecture"):  # -arch=sm_90: SASS and PTX of compute_90
            virtual = value.replace("sm_", "compute_")
            value = f"arch={virtual},code=[{value},{virtual}]"
        match = _GENCODE.search(value.replace(" ", ""))
        for code in match.group(2).split(",") if match else ():
            pairs.add(f"{match.group(1)}:{code}")
    return pairs


def compiled(commands: Sequence[Command]) -> list[str]:
    """The GPU architectures the commands compile machine code for, sorted ("80", "90a"): what
    a wheel records (cuda_archs), read by gencodes from every form of the flag, torch's
    `-gencode=arch=...` one token as upstream's `-gencode arch=...` pair."""
    codes = {pair.split(":")[1] for c in commands for pair in gencodes(c)}
    return sorted(code.removeprefix("sm_") for code in codes if code.startswith("sm_"))


def check_gencodes(commands: Sequence[Command], targets: Sequence[str]) -> None:
    """Every nvcc command must compile exactly sm_<t> (from compute_<t>) for each target."""
    expected = {f"compute_{t}:sm_{t}" for t in targets}
    wrong = [
        f"{c.file.rsplit('/', 1)[-1]}: {', '.join(sorted(found)) or 'none'}"
        for c in commands
        if c.kind == "nvcc" and (found := gencodes(c)) != expected
    ]
    if wrong:
        raise FaShimError(
            f"{len(wrong)} nvcc commands do not compile exactly the selected architectures "
            f"({', '.join('sm_' + t for t in targets)}); upstream's setup.py did not follow "
            "the architecture selection.",
            details="\n".join(wrong[:20]),
            fix="report this with the log; meanwhile -C cuda-archs=... with architectures this "
            "flash-attn version knows may work.",
        )


@functools.cache
def nvcc_arch_list(nvcc: Path) -> tuple[str, ...]:
    """`nvcc --list-gpu-arch`: the virtual architectures this nvcc can compile for (its
    compute_NN lines: any other output is not nvcc's)."""
    fix = "check that this nvcc runs, or point -C nvcc at a CUDA toolkit's bin/nvcc."
    cause = f"could not list the architectures of {nvcc}"
    out = _subprocess.run([nvcc, "--list-gpu-arch"], timeout=60, cause=cause + ".", fix=fix)
    found = parse_arch_list(" ".join(re.findall(r"\bcompute_\d+[af]?\b", out.stdout)))
    if not found:
        raise FaShimError(f"{nvcc} is not nvcc: its --list-gpu-arch names no compute_NN.", fix=fix)
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class ArchChoice:
    selection: Selection
    targets: tuple[str, ...]  # what nvcc compiles (sm_<t>)
    notes: tuple[str, ...]
    env: dict[str, str]

    def describe(self) -> dict:
        return {
            "selected": list(self.selection.archs),
            "source": self.selection.source,
            "compiled": list(self.targets),
            "dropped": list(self.selection.dropped),
            "notes": list(self.notes),
        }


_logged: set[tuple] = set()


def resolve(
    settings: Settings,
    torch: TorchInfo,
    nvcc_path: Path,
    mech: Mechanism,
    environ: Mapping[str, str],
) -> ArchChoice:
    """Select, map and describe one build's architectures, for a setup.py taking them by mech."""
    setting, setting_source = tuple(settings.cuda_archs), "setting cuda-archs"
    if not setting and mech.env and environ.get(mech.env, "").strip():
        # upstream's own knob, set by someone who knows it: as explicit as the setting
        setting, setting_source = tuple(parse_arch_list(environ[mech.env])), mech.env
    selection = select_archs(
        setting,
        () if setting else capabilities(),
        environ.get("TORCH_CUDA_ARCH_LIST"),
        parse_arch_list(" ".join(torch.arch_list)),
        nvcc_arch_list(nvcc_path),
        mech.default,
        setting_source,
    )
    targets, notes = upstream_targets(selection.archs, mech)
    key = (selection, tuple(targets))
    if key not in _logged:  # child_env runs once per upstream invocation; say it once
        _logged.add(key)
        _log.info(
            f"CUDA architectures {', '.join(selection.archs)} (from {selection.source}); "
            f"compiling sm_{', sm_'.join(targets)}"
        )
        for note in notes:
            _log.info(f"  {note}")
        if selection.dropped:
            # a visible GPU the wheel will not run on deserves a warning; torch's own list
            # always names pre-Ampere archs, which is no news
            say = _log.warn if selection.source == FROM_GPUS else _log.info
            say(f"left out {', '.join(selection.dropped)} (older than 8.0 or unknown to nvcc)")
    return ArchChoice(selection, tuple(targets), tuple(notes), arch_env(targets, mech))
