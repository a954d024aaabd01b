"""Toolchain preflight: a tiny probe compiled with the build's exact cxx and nvcc command lines
must come out in torch's string ABI and C++ standard, and link against a shared libstdc++, so a
wrapper that appends its own flags is refused in seconds, not after an hour of kernels."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from .. import resources
from ..core import _failures, _scratch, _subprocess
from ..core._errors import FaShimError
from ..resources.launcher import PROBE_ENV, started_file
from ..resources.process_session import PARENT_ENV
from ..toolchain._compile_commands import ABI_DEFINE, Command
from . import _mangling
from ._compilers import ccbin_in

PROBE = """\
#include <stdexcept>
#include <string>
#define FA_SHIM_STR2(x) #x
#define FA_SHIM_STR(x) FA_SHIM_STR2(x)
extern "C" const char fa_shim_probe_cplusplus[] =
    "fa-shim-probe __cplusplus=" FA_SHIM_STR(__cplusplus);
std::string fa_shim_probe_abi(const std::string &s) { return s + "x"; }
void fa_shim_probe_throw(const std::string &s) { throw std::runtime_error(s); }
"""
NAME = "fa_shim_probe"
CPLUSPLUS = {11: 201103, 14: 201402, 17: 201703, 20: 202002}
# where a forced flag usually comes from, named in the fix when it carries one
FLAG_VARIABLES = ("CXXFLAGS", "CFLAGS", "CPPFLAGS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")


def read_object(obj: Path) -> tuple[int | None, int | None]:
    """(std::string ABI of the probe function, __cplusplus) as compiled into obj."""
    from elftools.elf.elffile import ELFFile  # a build requirement, checked after import

    match = re.search(rb"fa-shim-probe __cplusplus=(\d+)", obj.read_bytes())
    abi = None
    with obj.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab else ():
            if "fa_shim_probe_abi" in sym.name:
                abi = _mangling.string_abi(sym.name)
    return abi, int(match.group(1)) if match else None


def _swap(command: Command, source: Path, obj: Path) -> list[str]:
    """The command with its source, object and dependency file replaced by the probe's."""
    out = []
    for i, arg in enumerate(command.args):
        previous = command.args[i - 1] if i else ""
        if previous == "-o":
            out.append(str(obj))
        elif previous in ("-MF", "--dependency-output"):
            out.append(f"{obj}.d")
        elif i and Path(arg).name == Path(command.file).name:
            out.append(str(source))
        else:
            out.append(arg)
    return out


def _run(argv: list[str], cwd: Path, env: dict | None) -> subprocess.CompletedProcess:
    # under a session that ends with this process: a frontend killed with SIGKILL takes the
    # probe's compiler (and a wrapper script's children) with it
    wrapped = [sys.executable, "-S", str(resources.SESSION), *argv]
    env = {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}
    try:
        return _subprocess.completed(wrapped, cwd=cwd, env=env, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def probe(command: Command, cwd: Path, work: Path, env: dict | None = None) -> dict:
    """Compile the probe with this command line; what came out."""
    suffix = ".cu" if command.kind == "nvcc" else ".cpp"
    source, obj = work / f"{NAME}_{command.kind}{suffix}", work / f"{NAME}_{command.kind}.o"
    source.write_text(PROBE)
    argv = _swap(command, source, obj)
    proc = _run(argv, cwd, env)
    stds = [m[1] for a in command.args if (m := re.fullmatch(r"--?std=(?:c|gnu)\+\+(\d+)", a))]
    # the compiler it really runs: CXX for cxx; nvcc's -ccbin, else NVCC_CCBIN, else c++
    if command.kind == "cxx":
        compiler = os.environ.get("CXX", "c++")
    else:
        compiler = ccbin_in(command.args) or os.environ.get("NVCC_CCBIN", "c++")
    result = {
        "kind": command.kind,
        "compiler": compiler,
        "argv": argv,
        "wanted_abi": command.last_define(ABI_DEFINE),
        "wanted_std": int(stds[-1]) if stds else None,
        "abi": None,
        "cplusplus": None,
        "error": None,
    }
    if proc.returncode != 0 or not obj.is_file():
        err = (proc.stderr or proc.stdout).strip().splitlines()
        result["error"] = "\n".join(err[-15:]) or f"exit status {proc.returncode}"
        return result
    result["abi"], result["cplusplus"] = read_object(obj)
    if command.kind == "cxx":
        result["runtime_copy"] = runtime_copy(argv[0], obj, cwd, env)
    return result


def runtime_copy(compiler: str, obj: Path, cwd: Path, env: dict | None) -> list[str]:
    """The C++ runtime symbols a shared object linked from obj by `compiler` defines itself
    (empty: it uses the shared libstdc++; a failed link too, the build's own reports it)."""
    linked = obj.with_suffix(".so")
    flags = shlex.split((env if env is not None else os.environ).get("LDFLAGS", ""))
    proc = _run([compiler, "-shared", str(obj), "-o", str(linked), *flags], cwd, env)
    if proc.returncode != 0 or not linked.is_file():
        return []
    from elftools.elf.elffile import ELFFile

    with linked.open("rb") as f:
        return _mangling.runtime_copy(ELFFile(f))


def problems(result: dict) -> list[str]:
    """What the compiler forced over fa-shim's flags (empty when it obeyed them)."""
    found = []
    wanted_abi, wanted_std = result["wanted_abi"], result["wanted_std"]
    if wanted_abi is not None and result["abi"] is not None and str(result["abi"]) != wanted_abi:
        found.append(
            f"_GLIBCXX_USE_CXX11_ABI={result['abi']} over fa-shim's {ABI_DEFINE}{wanted_abi} "
            f"(std::string came out in the {'new' if result['abi'] else 'old'} ABI)"
        )
    value, expected = result["cplusplus"], CPLUSPLUS.get(wanted_std or 0)
    if wanted_std and value is not None:
        wrong = value != expected if expected else value <= CPLUSPLUS[20]
        if wrong:
            found.append(f"__cplusplus={value} over fa-shim's -std=c++{wanted_std}")
    return found


def _other_compilers(forcing: str) -> Iterator[str]:
    """The C++ compilers on PATH other than `forcing` (by real path), each once."""
    seen = {os.path.realpath(shutil.which(forcing) or forcing)}
    for name in ("g++", "c++", "clang++"):
        path = shutil.which(name)
        if path and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            yield path


def _alternative(result: dict, cwd: Path, forcing: str) -> str | None:
    """Another C++ compiler on PATH that passes the same probe here, to propose by name."""
    rest = result["argv"][1:]
    if result["kind"] != "cxx" or "-o" not in rest:
        return None
    obj = Path(rest[rest.index("-o") + 1])
    for path in _other_compilers(forcing):
        if _run([path, *rest], cwd, None).returncode == 0:
            abi, cplusplus = read_object(obj)
            if not problems({**result, "abi": abi, "cplusplus": cplusplus}):
                return path
    return None


def refusal(result: dict, found: list[str], cwd: Path) -> FaShimError:
    compiler = result["compiler"]
    who = (
        f"the host compiler `{compiler}` (CXX)"
        if result["kind"] == "cxx"
        else f"nvcc's host compiler `{compiler}` (-ccbin / NVCC_CCBIN / c++ on PATH)"
    )
    variables = [
        f"{v}={os.environ[v]!r}"
        for v in FLAG_VARIABLES
        if re.search(r"_GLIBCXX_USE_CXX11_ABI|-std=", os.environ.get(v, ""))
    ]
    other = _alternative(result, cwd, compiler.split()[0])
    if variables:
        way_out = f"remove the flag from {', '.join(variables)}"
    elif other:
        way_out = f"build with CXX={other}, which passes this probe here"
    else:
        way_out = (
            f"use a compiler that does not append its own flags (`{compiler}` is likely a "
            "wrapper script, e.g. devtoolset's: call the real compiler it runs instead)"
        )
    return FaShimError(
        f"{who} overrides fa-shim's flags: a probe compiled with the build's own "
        f"{result['kind']} command line got {'; '.join(found)}. A module built like this "
        "fails to import against this torch; nothing was compiled yet.",
        details=shlex.join(result["argv"]),
        fix=f"{way_out}.",
    )


def check(commands: list[Command], cwd: Path, stats: Path | None = None) -> list[dict]:
    """Probe one cxx and one nvcc command of the build; raise on a compiler that overrides.
    `stats`: the launcher's record of compiled TUs, from which the probes are taken out again."""
    results = []
    env = {**os.environ, PROBE_ENV: "1"}  # past any compiler cache
    try:
        with _scratch.directory("preflight") as work:
            for kind in ("cxx", "nvcc"):
                command = next((c for c in commands if c.kind == kind), None)
                if command is None:
                    continue
                result = probe(command, cwd, work, env)
                results.append(result)
                if result["error"]:
                    full = _failures.no_space_in(result["error"])  # the disk, not the compiler
                    if full:
                        raise full
                    raise FaShimError(
                        f"the build's {kind} command line cannot compile a probe of five lines "
                        f"with `{result['compiler']}`; no kernel would compile either.",
                        details=result["error"],
                        fix="make that compiler work (its message is above); nothing was compiled.",
                    )
                if result.get("runtime_copy"):
                    raise static_runtime(result, cwd, env)
                found = problems(result)
                if found:
                    raise refusal(result, found, cwd)
    finally:
        for record in (stats, started_file(stats)) if stats is not None else ():
            if record.is_file():  # the probes are no translation units of the build
                kept = [line for line in record.read_text().splitlines(True) if NAME not in line]
                record.write_text("".join(kept))
    return results


def static_runtime(result: dict, cwd: Path, env: dict | None) -> FaShimError:
    compiler = result["compiler"]
    obj = Path(result["argv"][result["argv"].index("-o") + 1])
    other = next(
        (p for p in _other_compilers(compiler.split()[0]) if not runtime_copy(p, obj, cwd, env)),
        None,
    )
    way_out = (
        f"build with CXX={other} (and its gcc as CC), whose libstdc++ is shared"
        if other
        else "use a C++ compiler whose libstdc++ is shared (`$CXX -print-file-name=libstdc++.so` "
        "prints a full path for one)"
    )
    return FaShimError(
        f"the host compiler `{compiler}` (CXX) links libstdc++ statically: a probe linked the way "
        f"the module will be defines {', '.join(result['runtime_copy'])} itself. A module with "
        "its own copy of the C++ runtime next to torch's crashes the process (SIGSEGV) on its "
        "first error message; nothing was compiled yet.",
        details=shlex.join(result["argv"]),
        fix=f"{way_out}.",
    )
