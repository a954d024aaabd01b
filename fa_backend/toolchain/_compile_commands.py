"""Read the compile commands torch recorded in build.ninja, and check the flags fa-shim injected.
`ninja -t compdb` expands them as ninja will: what the compiler receives, not what setup.py meant.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from pathlib import Path

from ..core import _subprocess
from ..core._errors import FaShimError
from ..wheel._metadata import limited_api_tag

# torch's two rules, and the per-arch ones FA3's hopper/setup.py adds in its own ninja writer
NVCC_RULES = ("cuda_compile", "cuda_compile_sm80", "cuda_compile_sm80_sm90", "cuda_compile_sm100")
RULES = {"compile": "cxx", **dict.fromkeys(NVCC_RULES, "nvcc")}
ABI_DEFINE = "-D_GLIBCXX_USE_CXX11_ABI="


@dataclasses.dataclass(frozen=True)
class Command:
    kind: str  # "cxx" or "nvcc"
    file: str
    args: tuple[str, ...]

    def last_define(self, prefix: str) -> str | None:
        values = [a[len(prefix) :] for a in self.args if a.startswith(prefix)]
        return values[-1] if values else None

    def values(self, flag: str) -> list[str]:
        """Values of a flag given as `flag VALUE` pairs (e.g. -gencode)."""
        return [self.args[i + 1] for i, a in enumerate(self.args[:-1]) if a == flag]


def read(ninja_file: Path) -> list[Command]:
    ninja = shutil.which("ninja")
    if not ninja:
        raise FaShimError("ninja is not installed.", fix="pip install ninja")
    commands = []
    for rule, kind in RULES.items():
        proc = _subprocess.run(
            [ninja, "-f", ninja_file.name, "-t", "compdb", rule],
            cwd=ninja_file.parent,
            fix=f"ninja could not read {ninja_file}, which torch wrote: report this with the "
            "build log, or run with -C keep-build-dir=true to inspect it.",
        )
        for entry in json.loads(proc.stdout or "[]"):
            commands.append(Command(kind, entry["file"], tuple(shlex.split(entry["command"]))))
    return commands


def verify_abi(commands: list[Command], abi: int, ninja_file: Path) -> None:
    """Every cxx and nvcc command must end up defining _GLIBCXX_USE_CXX11_ABI to torch's value."""
    if not commands:
        raise FaShimError(
            f"{ninja_file} records no compile commands.",
            fix="report this: the upstream build did not go through torch's ninja.",
        )
    wrong = [
        f"{c.kind} {c.file}: {c.last_define(ABI_DEFINE) or 'no define'}"
        for c in commands
        if c.last_define(ABI_DEFINE) != str(abi)
    ]
    if wrong:
        raise FaShimError(
            f"{len(wrong)} of {len(commands)} compile commands in {ninja_file} do not define "
            f"_GLIBCXX_USE_CXX11_ABI={abi} (torch's value) last.",
            details="\n".join(wrong[:20]),
            fix="report this with the log; an environment variable such as "
            "FLASH_ATTENTION_FORCE_CXX11_ABI or a CFLAGS entry may be overriding it.",
        )


# torch's stable ABI (torch/csrc/stable/version.h): the oldest torch a module targets, as
# [MAJ][MIN][PATCH][ABI TAG x5] bytes, e.g. 0x0209000000000000 for 2.9.0
TARGET_DEFINE = "-DTORCH_TARGET_VERSION="
LIMITED_API_DEFINE = "-DPy_LIMITED_API="


def target_version(value: str) -> str | None:
    """2.9.0 for 0x0209000000000000; None for what is no such number."""
    try:
        number = int(value.rstrip("ULul"), 0)
    except ValueError:
        return None
    return f"{number >> 56 & 0xFF}.{number >> 48 & 0xFF}.{number >> 40 & 0xFF}"


def verify_stable_target(commands: list[Command], floor: str, ninja_file: Path) -> None:
    """Every C++ command defines TORCH_TARGET_VERSION last, to the plan's floor (stable ABI)."""
    cxx = [c for c in commands if c.kind == "cxx"]
    wrong = []
    for c in cxx:
        value = c.last_define(TARGET_DEFINE)
        if value is None or target_version(value) != floor:
            shown = f"{value} (torch {target_version(value)})" if value else "no define"
            wrong.append(f"{c.file}: {shown}")
    if wrong or not cxx:
        raise FaShimError(
            f"{ninja_file} does not build the module against torch's stable ABI for torch >= "
            f"{floor}: {len(wrong)} of {len(cxx)} C++ commands do not define "
            f"{TARGET_DEFINE}{floor} last.",
            details="\n".join(wrong[:20]),
            fix="report this with the log: upstream's setup.py chose its torch-bound API, so the "
            "wheel would not be what its label and requirement say.",
        )


def verify_limited_api(commands: list[Command], interpreter_tag: str, ninja_file: Path) -> None:
    """Each command's last Py_LIMITED_API define is its abi3 tag's (cp310: 0x030A0000)."""
    found = {c.last_define(LIMITED_API_DEFINE) for c in commands} - {None}
    tags = set()
    for value in found:
        try:
            tags.add(limited_api_tag(value))
        except ValueError:
            tags.add(value)
    if tags != {interpreter_tag}:
        raise FaShimError(
            f"{ninja_file} compiles the module with Py_LIMITED_API "
            f"{', '.join(sorted(found)) or 'undefined'}, but its wheel tag is "
            f"{interpreter_tag}-abi3.",
            fix="report this with the log (torch's cpp_extension or upstream's setup.py changed "
            "the limited API it asks for).",
        )
