"""verify's checks, each a pure function of what was read (the target, its ELF modules, torch's
exports, the GPUs) returning one Check with its fix."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import re
import sys
from typing import TYPE_CHECKING

from packaging import tags
from packaging.version import Version

from ..resources.runtime_guard import PROVENANCE, at_least, release
from ..toolchain._mangling import demangle, is_torch_symbol, string_abi
from ..toolchain._torch import TorchInfo
from . import _stable_abi
from ._elf import TORCH_LIBS, ElfModule, TorchExports
from ._report import FAIL, PASS, SKIP, Check, first, plural
from ._targets import Target

if TYPE_CHECKING:
    from ..flavours._interface import Flavour


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]

    @property
    def sm(self) -> int:
        return self.capability[0] * 10 + self.capability[1]


def _verb(count: int, singular: str, many: str) -> str:
    return singular if count == 1 else many


def check_tags(target: Target) -> Check:
    f, rebuild = target.flavour.names, target.flavour.rebuild_command()
    if target.tags is None:
        return Check("tags", SKIP, "a bare module carries no wheel tags")
    shown = ", ".join(sorted(str(t) for t in target.tags))
    if all(t.abi == "none" and t.platform == "any" for t in target.tags):  # pure Python
        return Check(
            "tags",
            FAIL,
            f"{shown} is a pure-Python wheel tag: this {f.dist} carries no compiled "
            f"{f.module} module for this interpreter (upstream builds one like this when "
            f"FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE is set), so `import {f.package}` fails "
            f"with \"No module named '{f.module}'\".",
            fix=f"build it against your torch: `{rebuild}`.",
        )
    supported = set(tags.sys_tags())
    if target.tags & supported:
        best = next(t for t in tags.sys_tags() if t in target.tags)
        python = f"{tags.interpreter_name()}{tags.interpreter_version()}"
        return Check("tags", PASS, f"{best} is supported by this interpreter ({python})")
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
        fix=f"build {f.dist} with the interpreter you run ({sys.executable}): `{rebuild}`.",
    )


def check_module(target: Target) -> Check:
    f, rebuild = target.flavour.names, target.flavour.rebuild_command()
    module = f.module_path
    if not target.modules:
        return Check(
            "module",
            FAIL,
            f"no {module}*.so: `import {f.package}` fails with \"No module named '{f.module}'\".",
            fix=f"build the extension against your torch: `{rebuild}`.",
        )
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    names = ", ".join(n for n, _ in target.modules)
    if target.kind == "module" and not all(n.startswith(module + ".") for n, _ in target.modules):
        return Check("module", PASS, f"{names} (a bare file: its import name is not checked)")
    wrong = [n for n, _ in target.modules if not any(n == module + s for s in suffixes)]
    if wrong:
        return Check(
            "module",
            FAIL,
            f"{', '.join(wrong)} cannot be imported by this interpreter (it imports "
            f"{', '.join(module + s for s in suffixes[:2])}).",
            fix=f"build with the interpreter you run ({sys.executable}): `{rebuild}`.",
        )
    return Check("module", PASS, names)


def _abi_name(abi: int) -> str:
    return "the new C++ ABI" if abi else "the old C++ ABI"


def check_symbols(
    target: Target, modules: list[ElfModule], torch: TorchInfo, exports: TorchExports
) -> tuple[Check, Check]:
    flavour = target.flavour
    # built against torch's stable ABI: its floor from fa-shim's provenance, else by its symbols
    # (the floor then unknown)
    recorded = ((target.provenance or {}).get("torch") or {}).get("stable_abi")
    floor = str(recorded) if recorded else None
    stable = floor or (target.provenance is None and _stable_abi.looks_stable(modules))
    if stable and exports.libs:
        abi_check = Check(
            "abi", SKIP, "torch's stable ABI: no C++ type crosses into torch, whatever its ABI"
        )
        rebuild = flavour.rebuild_command()
        return _stable_abi.check(modules, torch, exports, floor, rebuild), abi_check
    refs = sorted({s for m in modules for s in m.undefined if is_torch_symbol(s)})
    abis = {s: string_abi(s) for s in refs}
    new = [s for s in refs if abis[s] == 1]
    old = [s for s in refs if abis[s] == 0]
    used = new or old  # the references of the one ABI, where they have one
    built_abi = 1 if new and not old else 0 if old and not new else None
    passes = (
        f"{plural(len(used), 'reference')} to torch {_verb(len(used), 'passes', 'pass')} "
        f"std::string in {_abi_name(built_abi)}"
    )
    rebuild = (
        f"rebuild {flavour.names.dist} against this torch: `{flavour.rebuild_command()}` "
        "(fa-shim compiles with torch's ABI)"
    )

    # The ABI of the references, compared with torch's.
    if not used:
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
        sample = demangle(used[:3])
        abi_check = Check(
            "abi",
            FAIL,
            f"built for {_abi_name(built_abi)} (_GLIBCXX_USE_CXX11_ABI={built_abi}), torch uses "
            f"{'the new one' if torch.abi else 'the old one'} "
            f"(_GLIBCXX_USE_CXX11_ABI={torch.abi}): {passes}, e.g.",
            details=[sample[s] for s in used[:3]],
            fix=rebuild
            + f"; building by hand, compile with -D_GLIBCXX_USE_CXX11_ABI={torch.abi} (a host "
            "compiler that defaults to the old ABI, e.g. RHEL devtoolset g++, needs it spelled "
            "out).",
        )
    else:
        abi_check = Check(
            "abi", PASS, f"{passes}, as torch does (_GLIBCXX_USE_CXX11_ABI={torch.abi})"
        )

    # Every torch reference resolves.
    if not exports.libs:
        return Check(
            "symbols",
            FAIL,
            f"{torch.lib_dir} holds none of {', '.join(TORCH_LIBS)}: not a torch install.",
            fix="point verify at the environment torch is installed in (--python).",
        ), abi_check
    unresolved = [s for s in refs if exports.provider(s) is None]
    if not unresolved:
        return Check(
            "symbols",
            PASS,
            f"{'the' if len(refs) == 1 else 'all'} {plural(len(refs), 'symbol')} the module "
            f"takes from torch {_verb(len(refs), 'is', 'are')} exported by "
            f"{', '.join(exports.libs)}",
        ), abi_check
    readable = demangle(unresolved)
    cause = "the module was compiled against a different torch"
    if abi_check.status == FAIL:
        cause = abi_check.summary.split(":")[0]
    return Check(
        "symbols",
        FAIL,
        f"{len(unresolved)} of the {plural(len(refs), 'symbol')} the module takes from torch "
        f"{_verb(len(unresolved), 'is', 'are')} not exported by torch {torch.version} "
        f"({cause}); importing it fails with 'undefined symbol':",
        details=first([readable[s] for s in unresolved]),
        fix=rebuild + ".",
    ), abi_check


def check_cuda_runtime(modules: list[ElfModule], torch: TorchInfo, flavour: Flavour) -> Check:
    dist, rebuild = flavour.names.dist, flavour.rebuild_command()
    needed = sorted({n for m in modules for n in m.needed if n.startswith("libcudart.so")})
    if not needed:
        return Check("cuda runtime", SKIP, "the module does not link the CUDA runtime")
    majors = {int(m.group(1)) for n in needed for m in [re.match(r"libcudart\.so\.(\d+)", n)] if m}
    if torch.cuda is None:
        return Check(
            "cuda runtime",
            FAIL,
            f"the module needs {', '.join(needed)}, but torch {torch.version} is a CPU-only build.",
            fix=f"install the CUDA build of torch this {dist} was built for, or rebuild "
            f"{dist} against the torch you have: `{rebuild}`.",
        )
    if majors and majors != {torch.cuda_major}:
        return Check(
            "cuda runtime",
            FAIL,
            f"the module needs {', '.join(needed)} (CUDA {'/'.join(map(str, sorted(majors)))}), "
            f"torch {torch.version} uses CUDA {torch.cuda}.",
            fix=f"rebuild {dist} against this torch: `{rebuild}`.",
        )
    return Check("cuda runtime", PASS, f"{', '.join(needed)} matches torch's CUDA {torch.cuda}")


def check_cxx_runtime(modules: list[ElfModule], flavour: Flavour) -> Check:
    copies = sorted({s for m in modules for s in m.runtime_copy})
    if not copies:
        return Check("c++ runtime", PASS, "the module uses the process's libstdc++")
    return Check(
        "c++ runtime",
        FAIL,
        f"the module carries its own copy of the C++ runtime (it defines {', '.join(copies)}): "
        "its compiler linked libstdc++ statically. Next to torch's libstdc++ that copy crashes "
        "the process (SIGSEGV) as soon as the module raises an error.",
        fix="build with a C++ compiler whose libstdc++ is shared (`$CXX "
        "-print-file-name=libstdc++.so` prints a full path), e.g. unset CXX and CC or point "
        f"them at the system g++ and gcc, then rebuild: `{flavour.rebuild_command()}`.",
    )


def check_provenance(target: Target, torch: TorchInfo) -> Check:
    dist, rebuild = target.flavour.names.dist, target.flavour.rebuild_command()
    if target.provenance_error:
        return Check(
            "provenance",
            FAIL,
            target.provenance_error,
            fix=f"the wheel is damaged: rebuild it (`{rebuild}`).",
        )
    if target.provenance is None:
        return Check(
            "provenance",
            SKIP,
            f"no {PROVENANCE} (not built by fa-shim): checked by its symbols only",
        )
    built = target.provenance.get("torch") or {}
    floor = built.get("stable_abi")
    differences = []
    if floor and not at_least(torch.version, floor):
        differences.append(
            f"torch >= {floor}, torch's stable ABI (installed: {torch.version}: older)"
        )
    elif not floor and release(built.get("version")) != release(torch.version):
        differences.append(f"torch {built.get('version')} (installed: {torch.version})")
    built_cuda = built.get("cuda")
    built_major = Version(built_cuda).major if built_cuda else None
    if built_major != torch.cuda_major:
        differences.append(f"CUDA {built_cuda or 'none'} (installed torch: {torch.cuda or 'none'})")
    if not floor and built.get("cxx11_abi") is not None and int(built["cxx11_abi"]) != torch.abi:
        differences.append(
            f"_GLIBCXX_USE_CXX11_ABI={int(built['cxx11_abi'])} (installed torch: {torch.abi})"
        )
    described = (
        f"torch >= {floor} of CUDA {built_major} (torch's stable ABI; built with torch "
        f"{built.get('version')})"
        if floor
        else f"torch {built.get('version')}, CUDA {built_cuda or 'none'}, "
        f"_GLIBCXX_USE_CXX11_ABI={built.get('cxx11_abi')}"
    )
    if differences:
        return Check(
            "provenance",
            FAIL,
            f"fa-shim built this for {described}; it differs in: " + "; ".join(differences),
            fix=f"rebuild {dist} against the installed torch: `{rebuild}`.",
        )
    return Check("provenance", PASS, f"built by fa-shim for {described}")


def check_archs(modules: list[ElfModule], target: Target, gpus: list[Gpu] | None) -> Check:
    rebuild = target.flavour.rebuild_command()
    codes = sorted({c for m in modules for c in m.cuda or []})
    meant = [str(a) for a in (target.provenance or {}).get("cuda_archs") or []]
    if not codes:
        if meant:
            return Check(
                "cuda archs",
                FAIL,
                f"the build meant to compile sm_{', sm_'.join(meant)}, but the module embeds no "
                "CUDA device code.",
                fix=f"rebuild: `{rebuild}`.",
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
            fix=f"rebuild: `{rebuild}`.",
        )
    if not gpus:
        compared = "compared" if gpus is None else "visible to compare"
        return Check("cuda archs", PASS, f"{shown} (no GPU {compared})")
    unable = [g for g in gpus if not any(c.runs_on(g.sm) for c in codes)]
    if unable:
        return Check(
            "cuda archs",
            FAIL,
            f"the module embeds {shown}, which cannot run on:",
            details=[f"GPU {g.index} {g.name}: sm_{g.sm}" for g in unable],
            fix=target.flavour.arch_advice([g.sm for g in unable]),
        )
    visible = ", ".join(f"sm_{g.sm}" for g in gpus)
    return Check("cuda archs", PASS, f"{shown} runs on every visible GPU ({visible})")
