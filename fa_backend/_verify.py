"""Does a built flash-attn fit a torch? Answered by reading the ELF files, never by importing them.

Works on any flash-attn: a wheel (fa-shim's, upstream's release wheel, a colleague's), an installed
distribution, or a bare flash_attn_2_cuda*.so. The checks:

- tags: the wheel's tags against this interpreter (a py3-none-any flash-attn has no kernels);
- module: flash_attn_2_cuda*.so is there, with an extension suffix this interpreter imports;
- symbols: every undefined dynamic symbol the module takes from torch is exported by torch's
  libraries, the way the dynamic linker will look for it (their GNU hash tables);
- abi: the std::string ABI the module's references to torch use, against torch's
  _GLIBCXX_USE_CXX11_ABI (the usual reason for the symbols check failing);
- cuda runtime: the libcudart.so.N the module needs, against torch's CUDA major;
- provenance: fa-shim's fa_shim_provenance.json (if any) against torch's version, CUDA, ABI;
- cuda archs: the SASS/PTX in the module's .nv_fatbin against the archs the build meant to
  compile and the capability of each visible GPU.

A torch symbol is one whose outermost scope is c10, at, torch or caffe2 (read from the mangled
name: `_ZN3c10...`, `_ZNK2at...`, `_ZTVN5torch...`, thunks and guard variables included), or
torch's Python glue named THP* (`THPVariableClass`, `_Z16THPVariable_Wrap...`). Everything else
(libstdc++, libc, CUDA, Python) is not torch's to export and is not checked here.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ._errors import FaShimError
from ._torch import TorchInfo

MODULE = "flash_attn_2_cuda"
PROVENANCE = "fa_shim_provenance.json"  # the name _build writes into <dist-info>/
TORCH_LIBS = (
    "libc10.so",
    "libc10_cuda.so",
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
)
TORCH_SCOPES = ("c10", "at", "torch", "caffe2")


def _fa_shim_source() -> str:
    """This fa-shim checkout when fa_backend runs from one, else a placeholder."""
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'build-backend = "fa_backend"' in pyproject.read_text("utf-8"):
        return str(root)
    return "/path/to/fa-shim"


REBUILD = (
    f"{sys.executable} -m pip install --no-build-isolation --no-deps --force-reinstall "
    + _fa_shim_source()
)
_LIST_LIMIT = 15

PASS, FAIL, SKIP = "pass", "fail", "skip"


# ----------------------------------------------------------------------------------- the report


@dataclasses.dataclass
class Check:
    name: str
    status: str  # PASS, FAIL or SKIP (not applicable, with the reason in summary)
    summary: str
    details: list[str] = dataclasses.field(default_factory=list)
    fix: str | None = None


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]

    @property
    def sm(self) -> int:
        return self.capability[0] * 10 + self.capability[1]


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(
        text,
        100,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _verb(count: int, singular: str, plural: str) -> str:
    return singular if count == 1 else plural


@dataclasses.dataclass
class VerifyReport:
    target: str
    kind: str  # "wheel", "installed" or "module"
    torch: TorchInfo
    checks: list[Check]
    modules: list[str] = dataclasses.field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def ok(self) -> bool:
        return not self.failures

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def torch_line(self) -> str:
        return (
            f"torch {self.torch.version} (CUDA {self.torch.cuda or 'none'}, "
            f"_GLIBCXX_USE_CXX11_ABI={self.torch.abi}) at {self.torch.package_dir}"
        )

    def render(self) -> str:
        indent = " " * 21
        lines = [f"verify {self.kind} {self.target}", f"  against {self.torch_line()}"]
        for c in self.checks:
            head = f"  {c.status.upper():4}  {c.name:13}"
            lines += _wrap(c.summary, head + " ", indent)
            lines += [indent + "  " + d for d in c.details]
            if c.fix and c.status == FAIL:
                lines += _wrap("fix: " + c.fix, indent, indent + "  ")
        lines.append(f"result: {self.summary()}")
        return "\n".join(lines)

    def summary(self) -> str:
        failed = self.failures
        if failed:
            return (
                f"FAILED ({len(failed)} of {len(self.checks)} checks: "
                f"{', '.join(c.name for c in failed)})"
            )
        skipped = sum(c.status == SKIP for c in self.checks)
        return f"OK ({len(self.checks) - skipped} passed, {skipped} skipped)"

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "kind": self.kind,
            "ok": self.ok,
            "modules": self.modules,
            "torch": {
                "version": self.torch.version,
                "cuda": self.torch.cuda,
                "cxx11_abi": self.torch.abi,
                "path": self.torch.package_dir,
            },
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }

    def raise_for_failures(self) -> None:
        """One FaShimError naming every failed check and its fix (nothing if all passed)."""
        failed = self.failures
        if not failed:
            return
        names = ", ".join(c.name for c in failed)
        fixes = list(dict.fromkeys(c.fix for c in failed if c.fix))
        raise FaShimError(
            f"{self.target} does not fit {self.torch_line()} (failed: {names}).",
            details="\n".join(
                line
                for c in failed
                for line in (f"{c.name}: {c.summary}", *(f"  {d}" for d in c.details))
            ),
            fix=" ".join(fixes) or None,
        )


# --------------------------------------------------------------------------- the running torch


def torch_here() -> TorchInfo:
    """The torch of the running interpreter, imported in this process (for the CLI).

    cuda_home and cxx_std are not needed to verify and are left unknown.
    """
    try:
        import torch
    except Exception as exc:
        raise FaShimError(
            f"torch is not importable by {sys.executable} ({type(exc).__name__}: {exc}).",
            fix="run verify with the interpreter flash-attn will run under "
            "(`--python /path/to/venv/bin/python`), or install torch there first.",
        ) from None
    return TorchInfo(
        version=torch.__version__,
        cuda=torch.version.cuda,
        abi=int(torch._C._GLIBCXX_USE_CXX11_ABI),
        cuda_home=None,
        package_dir=os.path.dirname(torch.__file__),
        cxx_std="unknown",
        python=sys.executable,
        isolated=False,
    )


def gpus_here() -> list[Gpu]:
    """The GPUs the running torch sees (empty without one, or with a CPU-only torch)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        Gpu(i, torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i)))
        for i in range(torch.cuda.device_count())
    ]


# ------------------------------------------------------------------------------ mangled names

_SPECIAL = re.compile(r"_Z(?:T[VIST]|G[VR]|Th(?:n?\d+_)|Tv(?:n?\d+_){2}|Z)*")
_STD_ABBREV = set("tabsiod")


def _source_name(mangled: str, i: int) -> tuple[str, int] | None:
    m = re.compile(r"\d+").match(mangled, i)
    if not m:
        return None
    end = m.end() + int(m.group())
    return mangled[m.end() : end], end


def scope(mangled: str) -> str | None:
    """The outermost name of a mangled symbol: 'c10' for _ZN3c106detail..., None if std/C."""
    if not mangled.startswith("_Z"):
        return None
    i = _SPECIAL.match(mangled).end()
    if mangled.startswith("N", i):
        i += 1
        while i < len(mangled) and mangled[i] in "rVKRO":
            i += 1
    found = _source_name(mangled, i)
    return found[0] if found else None


def is_torch_symbol(name: str) -> bool:
    if name.startswith("THP"):
        return True
    outer = scope(name)
    return outer is not None and (outer in TORCH_SCOPES or outer.startswith("THP"))


def _tokens(mangled: str) -> Iterator[str]:
    """A rough tokenizer of the Itanium mangling: enough to tell std::string's `Ss` apart from
    the same letters inside an identifier (which is skipped by its length prefix)."""
    i, n = 2, len(mangled)
    while i < n:
        c = mangled[i]
        if c.isdigit():
            found = _source_name(mangled, i)
            assert found is not None
            yield found[0]
            i = found[1]
        elif c == "S" and i + 1 < n and mangled[i + 1] in _STD_ABBREV:
            yield mangled[i : i + 2]
            i += 2
        elif c in "ST" and i + 1 < n and (mangled[i + 1] == "_" or mangled[i + 1].isalnum()):
            end = mangled.find("_", i + 1)  # S<seq-id>_ / T<n>_
            if end < 0 or not mangled[i + 1 : end].isalnum():
                yield c
                i += 1
            else:
                yield mangled[i : end + 1]
                i = end + 1
        elif c == "A" and i + 1 < n and mangled[i + 1].isdigit():  # array bound A<n>_
            end = mangled.find("_", i)
            yield mangled[i : end + 1]
            i = end + 1
        elif c == "L" and i + 1 < n and mangled[i + 1] in "abcdefghijlmnostxy":
            end = mangled.find("E", i)  # literal L<builtin type><value>E
            yield mangled[i : end + 1]
            i = end + 1 if end > 0 else n
        else:
            yield c
            i += 1


def string_abi(mangled: str) -> int | None:
    """1 if the symbol mentions std::string in the new (C++11) ABI, 0 in the old, else None."""
    if "NSt7__cxx11" in mangled or "B5cxx11" in mangled:
        return 1
    if mangled.startswith("_Z") and ("Ss" in mangled or "NSs" in mangled):
        try:
            if any(t == "Ss" for t in _tokens(mangled)):
                return 0
        except (AssertionError, ValueError):
            return None
    return None


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Readable names through c++filt when it is installed; otherwise the mangled ones."""
    names = list(names)
    result = {n: n for n in names}
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return result
    try:
        out = subprocess.run(
            [cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return result
    if len(out) == len(names):
        result.update(zip(names, out))
    return result


# ---------------------------------------------------------------------------------- ELF reading


@dataclasses.dataclass
class ElfModule:
    path: Path
    undefined: list[str]
    needed: list[str]
    cuda: list[CudaCode] | None  # None: no .nv_fatbin section


def read_module(path: Path) -> ElfModule:
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            undefined, needed = [], []
            for section in elf.iter_sections():
                if isinstance(section, SymbolTableSection) and section["sh_type"] == "SHT_DYNSYM":
                    undefined += [
                        s.name
                        for s in section.iter_symbols()
                        if s.name and s["st_shndx"] == "SHN_UNDEF"
                    ]
                elif isinstance(section, DynamicSection):
                    needed += [
                        t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"
                    ]
            fatbin = elf.get_section_by_name(".nv_fatbin")
            cuda = None
            if fatbin is not None and fatbin["sh_type"] != "SHT_NOBITS":
                cuda = parse_fatbin(f, fatbin["sh_offset"], fatbin["sh_size"])
    except (ELFError, struct.error) as exc:
        raise FaShimError(
            f"{path} is not a readable ELF shared object ({exc}).",
            fix="the file is damaged or not a Linux extension module: rebuild flash-attn.",
        ) from None
    return ElfModule(path, undefined, needed, cuda)


class TorchExports:
    """The symbols torch's libraries export, looked up through their hash tables as ld.so does."""

    def __init__(self, lib_dir: Path) -> None:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.hash import ELFHashSection, GNUHashSection
        from elftools.elf.sections import SymbolTableSection

        self.lib_dir = lib_dir
        self.libs: list[str] = []
        self._files = []
        self._tables = []
        for name in TORCH_LIBS:
            path = lib_dir / name
            if not path.is_file():
                continue
            f = path.open("rb")
            self._files.append(f)
            elf = ELFFile(f)
            table = next(
                (s for s in elf.iter_sections() if isinstance(s, GNUHashSection)), None
            ) or next((s for s in elf.iter_sections() if isinstance(s, ELFHashSection)), None)
            if table is None:  # no hash table: a plain scan of .dynsym
                dynsym = next(
                    s
                    for s in elf.iter_sections()
                    if isinstance(s, SymbolTableSection) and s["sh_type"] == "SHT_DYNSYM"
                )
                table = {s.name: s for s in dynsym.iter_symbols()}
            self.libs.append(name)
            self._tables.append(table)

    def close(self) -> None:
        for f in self._files:
            f.close()

    def __enter__(self) -> TorchExports:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def provider(self, name: str) -> str | None:
        for lib, table in zip(self.libs, self._tables):
            symbol = table.get(name) if isinstance(table, dict) else table.get_symbol(name)
            if (
                symbol is not None
                and symbol["st_shndx"] != "SHN_UNDEF"
                and symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE")
                and symbol["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")
            ):
                return lib
        return None


# -------------------------------------------------------------------------------------- fatbin

FATBIN_MAGIC = 0xBA55ED50
_ARCH_SPECIFIC, _FAMILY_SPECIFIC, _COMPRESSED = 0x100000, 0x200000, 0x8000


@dataclasses.dataclass(frozen=True, order=True)
class CudaCode:
    arch: int  # 80 for sm_80
    variant: str  # "", "a" (arch-specific) or "f" (family-specific)
    ptx: bool  # PTX (JIT-compiled by the driver) rather than SASS

    def __str__(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.arch}{self.variant}"

    def runs_on(self, sm: int) -> bool:
        """Whether a GPU of compute capability sm (e.g. 86) can run this code."""
        if self.variant == "a":
            return sm == self.arch
        if self.ptx and not self.variant:
            return sm >= self.arch
        return sm // 10 == self.arch // 10 and sm >= self.arch


def parse_fatbin(stream: BinaryIO, start: int = 0, size: int | None = None) -> list[CudaCode]:
    """The code entries of every fatbin container in a .nv_fatbin section, read header by
    header (payloads are skipped, so a 500 MB section costs a few hundred small reads).

    Container: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries.
    Entry: u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, ..., u32 sm at
    offset 28, u64 flags at offset 40 (0x100000: sm_XXa, 0x200000: sm_XXf, 0x8000: compressed).
    """
    if size is None:
        size = stream.seek(0, os.SEEK_END) - start
    end_of_section = start + size

    def read(at: int, n: int) -> bytes:
        stream.seek(at)
        return stream.read(min(n, end_of_section - at))

    magic_bytes = struct.pack("<I", FATBIN_MAGIC)
    codes: set[CudaCode] = set()
    pos = start
    while pos + 16 <= end_of_section:
        head = read(pos, 16)
        magic, _version, header_size, length = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:  # padding between containers: find the next one
            chunk = read(pos + 1, 1 << 16)
            found = chunk.find(magic_bytes)
            pos = pos + 1 + (found if found >= 0 else max(1, len(chunk) - 3))
            continue
        entry, end = pos + header_size, min(pos + header_size + length, end_of_section)
        while entry + 48 <= end:
            header = read(entry, 48)
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", header)
            (sm,) = struct.unpack_from("<I", header, 28)
            (flags,) = struct.unpack_from("<Q", header, 40)
            if entry_header < 48:
                break
            if kind in (1, 2, 0x10):
                variant = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
                codes.add(CudaCode(sm, variant, kind == 1))
            entry += entry_header + payload
        pos = max(end, pos + 16)
    return sorted(codes)


# ------------------------------------------------------------------------------------- targets


@dataclasses.dataclass
class _Target:
    description: str
    kind: str
    tags: frozenset[tags.Tag] | None  # None: nothing says (a bare module)
    tag_source: str
    modules: list[tuple[str, Path]]  # (name as shipped, readable path)
    provenance: dict | None
    provenance_error: str | None = None


def _parse_provenance(text: str | None, where: str) -> tuple[dict | None, str | None]:
    if text is None:
        return None, None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data, None
    except ValueError as exc:
        return None, f"{where} is not valid JSON ({exc})"


def _is_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith(MODULE + ".") and base.endswith(".so")


def _wheel_target(wheel: Path, scratch: Path) -> _Target:
    try:
        _, _, _, wheel_tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise FaShimError(
            f"{wheel.name} is not a valid wheel file name ({exc}).",
            fix="pass the wheel under the name it was built with.",
        ) from None
    modules, provenance_text, where = [], None, PROVENANCE
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                if len(parts) == 1 and _is_module(info.filename):
                    target = scratch / info.filename
                    with zf.open(info) as src, target.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    modules.append((info.filename, target))
                elif len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == PROVENANCE:
                    provenance_text, where = zf.read(info).decode("utf-8", "replace"), info.filename
    except (zipfile.BadZipFile, OSError) as exc:
        raise FaShimError(
            f"{wheel} is not a readable wheel ({exc}).", fix="download or build the wheel again."
        ) from None
    provenance, error = _parse_provenance(provenance_text, where)
    return _Target(str(wheel), "wheel", wheel_tags, "file name", modules, provenance, error)


def _dist_target(dist, where: str) -> _Target:
    wheel_text = dist.read_text("WHEEL") or ""
    dist_tags = frozenset(
        t
        for line in wheel_text.splitlines()
        if line.startswith("Tag:")
        for t in tags.parse_tag(line.split(":", 1)[1].strip())
    )
    files = [str(f) for f in dist.files or []]
    modules = [(f, Path(dist.locate_file(f))) for f in files if "/" not in f and _is_module(f)]
    if not files:  # no RECORD: look next to the package
        site = Path(dist.locate_file(""))
        modules = [(p.name, p) for p in sorted(site.glob(f"{MODULE}.*.so"))]
    provenance, error = _parse_provenance(dist.read_text(PROVENANCE), PROVENANCE)
    name = f"{dist.metadata['Name']} {dist.version}"
    return _Target(
        f"{name} in {where}",
        "installed",
        dist_tags or None,
        "WHEEL",
        modules,
        provenance,
        error,
    )


def _installed_target(spec: str) -> _Target:
    from importlib import metadata

    path = Path(spec)
    if spec in ("flash_attn", "flash-attn") and not path.exists():
        for name in ("flash-attn", "flash_attn"):
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            return _dist_target(dist, str(Path(dist.locate_file("")).resolve()))
        raise FaShimError(
            f"no flash-attn distribution is installed for {sys.executable}.",
            fix="install it first, name the environment's interpreter with --python, or pass "
            "the wheel, site-packages directory or flash_attn_2_cuda*.so to verify.",
        )
    site = path.resolve()
    for dist in metadata.distributions(path=[str(site)]):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == "flash-attn":
            return _dist_target(dist, str(site))
    modules = [(p.name, p) for p in sorted(site.glob(f"{MODULE}.*.so"))]
    if not modules:
        raise FaShimError(
            f"{site} holds neither a flash-attn distribution nor a {MODULE}*.so.",
            fix="pass the site-packages directory flash-attn is installed in.",
        )
    return _Target(str(site), "module", None, "", modules, None)


# ---------------------------------------------------------------------------------- the checks


def _python_tag() -> str:
    return f"{tags.interpreter_name()}{tags.interpreter_version()}"


def check_tags(target: _Target) -> Check:
    if target.tags is None:
        return Check("tags", SKIP, "a bare module carries no wheel tags")
    shown = ", ".join(sorted(str(t) for t in target.tags))
    pure = all(t.abi == "none" and t.platform == "any" for t in target.tags)
    if pure:
        return Check(
            "tags",
            FAIL,
            f"{shown} is a pure-Python wheel tag: this flash-attn carries no compiled "
            f"{MODULE} module for this interpreter (upstream builds one like this when "
            "FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE is set), so `import flash_attn` fails with "
            f"\"No module named '{MODULE}'\".",
            fix=f"build it against your torch: `{REBUILD}`.",
        )
    supported = set(tags.sys_tags())
    if target.tags & supported:
        best = next(t for t in tags.sys_tags() if t in target.tags)
        return Check("tags", PASS, f"{best} is supported by this interpreter ({_python_tag()})")
    ours = next(iter(tags.sys_tags()))
    interpreters = sorted({t.interpreter for t in target.tags})
    platforms = sorted({t.platform for t in target.tags})
    reasons = []
    if ours.interpreter not in interpreters and not any(
        t.interpreter.startswith("py") for t in target.tags
    ):
        reasons.append(
            f"it was built for {', '.join(interpreters)}, this interpreter is {ours.interpreter}"
        )
    if not any(
        t.platform == "any" or t.platform in {s.platform for s in supported} for t in target.tags
    ):
        reasons.append(f"it was built for {', '.join(platforms)}, this machine is {ours.platform}")
    reason = "; ".join(reasons) or "no tag matches this interpreter"
    return Check(
        "tags",
        FAIL,
        f"{shown} cannot be installed here: {reason}.",
        fix=f"build flash-attn with the interpreter you run ({sys.executable}): `{REBUILD}`.",
    )


def check_module(target: _Target) -> Check:
    if not target.modules:
        return Check(
            "module",
            FAIL,
            f"no {MODULE}*.so: `import flash_attn` fails with \"No module named '{MODULE}'\".",
            fix=f"build the extension against your torch: `{REBUILD}`.",
        )
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    names = ", ".join(n for n, _ in target.modules)
    if target.kind == "module" and not all(n.startswith(MODULE + ".") for n, _ in target.modules):
        return Check("module", PASS, f"{names} (a bare file: its import name is not checked)")
    wrong = [n for n, _ in target.modules if not any(n == MODULE + s for s in suffixes)]
    if wrong:
        return Check(
            "module",
            FAIL,
            f"{', '.join(wrong)} cannot be imported by this interpreter (it imports "
            f"{', '.join(MODULE + s for s in suffixes[:2])}).",
            fix=f"build with the interpreter you run ({sys.executable}): `{REBUILD}`.",
        )
    return Check("module", PASS, names)


def _abi_name(abi: int) -> str:
    return "the new C++ ABI" if abi else "the old C++ ABI"


def check_symbols(
    modules: list[ElfModule], torch: TorchInfo, exports: TorchExports
) -> tuple[Check, Check]:
    refs = sorted({s for m in modules for s in m.undefined if is_torch_symbol(s)})
    abis = {s: string_abi(s) for s in refs}
    new = [s for s in refs if abis[s] == 1]
    old = [s for s in refs if abis[s] == 0]
    built_abi = 1 if new and not old else 0 if old and not new else None
    rebuild = (
        f"rebuild flash-attn against this torch: `{REBUILD}` (fa-shim compiles with torch's ABI)"
    )

    # The ABI of the references, compared with torch's.
    if built_abi is None and not (new or old):
        abi_check = Check(
            "abi", SKIP, "no reference to torch passes std::string: the ABI is not visible"
        )
    elif built_abi is None:
        abi_check = Check(
            "abi",
            FAIL,
            f"the module mixes both std::string ABIs in its references to torch ({len(new)} new, "
            f"{len(old)} old): parts were compiled with different _GLIBCXX_USE_CXX11_ABI values.",
            fix=rebuild + ".",
        )
    elif built_abi != torch.abi:
        sample = demangle((old or new)[:3])
        abi_check = Check(
            "abi",
            FAIL,
            f"built for {_abi_name(built_abi)} (_GLIBCXX_USE_CXX11_ABI={built_abi}), torch uses "
            f"{'the new one' if torch.abi else 'the old one'} "
            f"(_GLIBCXX_USE_CXX11_ABI={torch.abi}): {_n(len(old or new), 'reference')} to torch "
            f"{_verb(len(old or new), 'passes', 'pass')} std::string in {_abi_name(built_abi)}, "
            "e.g.",
            details=[sample[s] for s in (old or new)[:3]],
            fix=rebuild
            + f"; building by hand, compile with -D_GLIBCXX_USE_CXX11_ABI={torch.abi} (a host "
            "compiler that defaults to the old ABI, e.g. RHEL devtoolset g++, needs it spelled "
            "out).",
        )
    else:
        abi_check = Check(
            "abi",
            PASS,
            f"{_n(len(new or old), 'reference')} to torch "
            f"{_verb(len(new or old), 'passes', 'pass')} std::string in {_abi_name(built_abi)}, "
            f"as torch does (_GLIBCXX_USE_CXX11_ABI={torch.abi})",
        )

    # Every torch reference resolves.
    if not exports.libs:
        return (
            Check(
                "symbols",
                FAIL,
                f"{torch.lib_dir} holds none of {', '.join(TORCH_LIBS)}: not a torch install.",
                fix="point verify at the environment torch is installed in (--python).",
            ),
            abi_check,
        )
    unresolved = [s for s in refs if exports.provider(s) is None]
    if not unresolved:
        return (
            Check(
                "symbols",
                PASS,
                f"{'the' if len(refs) == 1 else 'all'} {_n(len(refs), 'symbol')} the module "
                f"takes from torch {_verb(len(refs), 'is', 'are')} exported by "
                f"{', '.join(exports.libs)}",
            ),
            abi_check,
        )
    readable = demangle(unresolved)
    shown = [readable[s] for s in unresolved[:_LIST_LIMIT]]
    if len(unresolved) > _LIST_LIMIT:
        shown.append(f"... and {len(unresolved) - _LIST_LIMIT} more")
    cause = "the module was compiled against a different torch"
    if abi_check.status == FAIL:
        cause = abi_check.summary.split(":")[0]
    return (
        Check(
            "symbols",
            FAIL,
            f"{len(unresolved)} of the {_n(len(refs), 'symbol')} the module takes from torch "
            f"{_verb(len(unresolved), 'is', 'are')} not exported by torch {torch.version} "
            f"({cause}); importing it fails with 'undefined symbol':",
            details=shown,
            fix=rebuild + ".",
        ),
        abi_check,
    )


def check_cuda_runtime(modules: list[ElfModule], torch: TorchInfo) -> Check:
    needed = sorted({n for m in modules for n in m.needed if n.startswith("libcudart.so")})
    if not needed:
        return Check("cuda runtime", SKIP, "the module does not link the CUDA runtime")
    majors = {int(m.group(1)) for n in needed for m in [re.match(r"libcudart\.so\.(\d+)", n)] if m}
    if torch.cuda is None:
        return Check(
            "cuda runtime",
            FAIL,
            f"the module needs {', '.join(needed)}, but torch {torch.version} is a CPU-only build.",
            fix="install the CUDA build of torch this flash-attn was built for, or rebuild "
            f"flash-attn against the torch you have: `{REBUILD}`.",
        )
    if majors and majors != {torch.cuda_major}:
        return Check(
            "cuda runtime",
            FAIL,
            f"the module needs {', '.join(needed)} (CUDA {'/'.join(map(str, sorted(majors)))}), "
            f"torch {torch.version} uses CUDA {torch.cuda}.",
            fix=f"rebuild flash-attn against this torch: `{REBUILD}`.",
        )
    return Check("cuda runtime", PASS, f"{', '.join(needed)} matches torch's CUDA {torch.cuda}")


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def check_provenance(target: _Target, torch: TorchInfo) -> Check:
    if target.provenance_error:
        return Check(
            "provenance",
            FAIL,
            target.provenance_error,
            fix=f"the wheel is damaged: rebuild it (`{REBUILD}`).",
        )
    if target.provenance is None:
        return Check(
            "provenance",
            SKIP,
            f"no {PROVENANCE} (not built by fa-shim): checked by its symbols only",
        )
    built = target.provenance.get("torch") or {}
    differences = []
    if _public(str(built.get("version"))) != _public(torch.version):
        differences.append(f"torch {built.get('version')} (installed: {torch.version})")
    built_cuda = built.get("cuda")
    built_major = Version(built_cuda).major if built_cuda else None
    if built_major != torch.cuda_major:
        differences.append(f"CUDA {built_cuda or 'none'} (installed torch: {torch.cuda or 'none'})")
    if built.get("cxx11_abi") is not None and int(built["cxx11_abi"]) != torch.abi:
        differences.append(
            f"_GLIBCXX_USE_CXX11_ABI={int(built['cxx11_abi'])} (installed torch: {torch.abi})"
        )
    described = (
        f"torch {built.get('version')}, CUDA {built_cuda or 'none'}, "
        f"_GLIBCXX_USE_CXX11_ABI={built.get('cxx11_abi')}"
    )
    if differences:
        return Check(
            "provenance",
            FAIL,
            f"fa-shim built this for {described}; it differs in: " + "; ".join(differences),
            fix=f"rebuild flash-attn against the installed torch: `{REBUILD}`.",
        )
    return Check("provenance", PASS, f"built by fa-shim for {described}")


def _arch_hint(gpus: list[Gpu]) -> str:
    archs = ";".join(sorted({str(g.sm) for g in gpus}))
    return f"rebuild with the GPU's architecture: `{REBUILD} -C cuda-archs={archs}`."


def check_archs(
    modules: list[ElfModule], target: _Target, torch: TorchInfo, gpus: list[Gpu] | None
) -> Check:
    codes = sorted({c for m in modules for c in m.cuda or []})
    meant = [str(a) for a in (target.provenance or {}).get("cuda_archs") or []]
    if not codes:
        if meant:
            return Check(
                "cuda archs",
                FAIL,
                f"the build meant to compile sm_{', sm_'.join(meant)}, but the module embeds no "
                "CUDA device code.",
                fix=f"rebuild: `{REBUILD}`.",
            )
        return Check("cuda archs", SKIP, "the module embeds no CUDA device code (.nv_fatbin)")
    shown = ", ".join(str(c) for c in codes)
    sass = {f"{c.arch}{c.variant}" for c in codes if not c.ptx}
    missing = [a for a in meant if a not in sass]
    if missing:
        return Check(
            "cuda archs",
            FAIL,
            f"the build meant to compile sm_{', sm_'.join(meant)}, the module embeds {shown}: "
            f"sm_{', sm_'.join(missing)} missing.",
            fix=f"rebuild: `{REBUILD}`.",
        )
    if gpus is None:
        return Check("cuda archs", PASS, f"{shown} (no GPU compared)")
    if not gpus:
        return Check("cuda archs", PASS, f"{shown} (no GPU visible to compare)")
    unable = [g for g in gpus if not any(c.runs_on(g.sm) for c in codes)]
    if unable:
        lines = [f"GPU {g.index} {g.name}: sm_{g.sm}" for g in unable]
        old = [g for g in unable if g.sm < 80]
        fix = (
            "flash-attn 2 needs compute capability 8.0 (Ampere) or newer; use a newer GPU."
            if old and len(old) == len(unable)
            else _arch_hint(unable)
        )
        return Check(
            "cuda archs",
            FAIL,
            f"the module embeds {shown}, which cannot run on:",
            details=lines,
            fix=fix,
        )
    visible = ", ".join(f"sm_{g.sm}" for g in gpus)
    return Check("cuda archs", PASS, f"{shown} runs on every visible GPU ({visible})")


# ----------------------------------------------------------------------------------- entry points


def _verify(target: _Target, torch: TorchInfo, gpus: list[Gpu] | None) -> VerifyReport:
    checks = [check_tags(target), check_module(target)]
    modules: list[ElfModule] = []
    if target.modules:
        modules = [read_module(path) for _, path in target.modules]
        with TorchExports(torch.lib_dir) as exports:
            symbols, abi = check_symbols(modules, torch, exports)
        checks += [symbols, abi, check_cuda_runtime(modules, torch)]
    checks.append(check_provenance(target, torch))
    if modules:
        checks.append(check_archs(modules, target, torch, gpus))
    return VerifyReport(
        target.description, target.kind, torch, checks, [n for n, _ in target.modules]
    )


def _resolve(torch: TorchInfo | None, gpus: list[Gpu] | None) -> tuple[TorchInfo, list | None]:
    if torch is None:
        torch = torch_here()
        if gpus is None:
            gpus = gpus_here()
    return torch, gpus


def verify_wheel(
    wheel: Path, torch: TorchInfo | None = None, gpus: list[Gpu] | None = None
) -> VerifyReport:
    """Verify a wheel file against torch (default: the running interpreter's, and its GPUs).

    With an explicit torch (the build's probe) GPUs are compared only if passed.
    """
    torch, gpus = _resolve(torch, gpus)
    with tempfile.TemporaryDirectory(prefix="fa-shim-verify-") as scratch:
        return _verify(_wheel_target(Path(wheel), Path(scratch)), torch, gpus)


def verify_path(
    spec: str | Path, torch: TorchInfo | None = None, gpus: list[Gpu] | None = None
) -> VerifyReport:
    """A wheel, an installed flash-attn ("flash_attn" or a site-packages dir), or a bare .so."""
    text = str(spec)
    path = Path(text)
    if text.endswith(".whl"):
        if not path.is_file():
            raise FaShimError(f"{path} does not exist.", fix="pass the path of a wheel file.")
        return verify_wheel(path, torch, gpus)
    if text.endswith(".so") and not path.is_dir():
        if not path.is_file():
            raise FaShimError(f"{path} does not exist.", fix="pass the path of the module.")
        torch, gpus = _resolve(torch, gpus)
        target = _Target(str(path.resolve()), "module", None, "", [(path.name, path)], None)
        return _verify(target, torch, gpus)
    if text not in ("flash_attn", "flash-attn") and not path.is_dir():
        raise FaShimError(
            f"{text} is neither a wheel, a .so, a directory nor 'flash_attn'.",
            fix="pass a .whl, a flash_attn_2_cuda*.so, a site-packages directory, or flash_attn "
            "(the installed distribution).",
        )
    torch, gpus = _resolve(torch, gpus)
    return _verify(_installed_target(text), torch, gpus)


def delegate(python: str, argv: list[str]) -> int:
    """Run `python -m fa_backend ARGV` in another interpreter (its torch, its tags), this
    checkout's fa_backend first on its path; its report and exit status are ours."""
    exe = shutil.which(python) or python
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise FaShimError(
            f"--python {python} is not an executable interpreter.",
            fix="pass the python of the environment to check, e.g. --python /path/venv/bin/python.",
        )
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    probe = subprocess.run(
        [exe, "-c", "import elftools, packaging"], env=env, capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise FaShimError(
            f"{exe} cannot run fa-shim's checks: {probe.stderr.strip().splitlines()[-1:]}.",
            fix=f"install what they read ELF and tags with: `{exe} -m pip install pyelftools "
            "packaging`.",
        )
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run([exe, "-m", "fa_backend", *argv], env=env).returncode
