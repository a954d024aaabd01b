"""The CUDA kernels an object file defines, by `nm`: nvcc gives every __global__ instance a host
stub `__device_stub__<the kernel's mangled name>` (internal linkage since CUDA 13, so read from
the length-prefixed local symbol and its statics); each kernel's machine code in a cubin (its
`.text.<kernel>` section, by pyelftools; `nvcc -keep` keeps the cubin it embeds in an object);
and compiling one build command with another source file, as the e2e symbol tests compare
builds."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_STUB = re.compile(r"(\d+)(__device_stub__\w+)")
_DROP = {"--generate-dependencies-with-compile": 1, "--dependency-output": 2, "-MD": 1, "-MF": 2}


def kernels(obj: Path) -> set[str]:
    """The mangled names of the kernels `obj` defines (as the device code names them)."""
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        symbol = line.split()[-1] if line.split() else ""
        match = _STUB.search(symbol)
        if match:  # _ZL<n>__device_stub__Z...: the identifier is the next n characters
            found.add("_" + match.group(2)[: int(match.group(1))][len("__device_stub__") :])
        elif symbol.startswith("__device_stub__"):
            found.add("_" + symbol[len("__device_stub__") :])
    return found


def kernel_code(cubin: Path) -> dict[str, bytes]:
    """Each kernel's machine code in a cubin: its `.text.<mangled name>` section's bytes."""
    from elftools.elf.elffile import ELFFile

    with cubin.open("rb") as f:
        return {
            s.name[len(".text.") :]: s.data()
            for s in ELFFile(f).iter_sections()
            if s.name.startswith(".text.")
        }


def command_for(args: list[str], source: Path, obj: Path) -> list[str]:
    """The build's compile command for another source file and object (no dependency file)."""
    out, i = [], 0
    while i < len(args):
        if args[i] in _DROP:
            i += _DROP[args[i]]
            continue
        if args[i] == "-o":
            out += ["-o", str(obj)]
            i += 2
            continue
        out.append(str(source) if args[i].endswith((".cu", ".cpp")) else args[i])
        i += 1
    return out


def cubin_command(args: list[str], source: Path, cubin: Path) -> list[str]:
    """The build's compile command (one real architecture) writing `source`'s cubin instead of
    an object file: the device code alone, as the GPU loads it."""
    command = command_for(args, source, cubin)
    return [a for a in command if a != "-c"] + ["-cubin"]


def keeping_cubin(args: list[str], source: Path, obj: Path) -> list[str]:
    """The build's compile command for `source` into `obj` that also keeps the device code nvcc
    embeds in it (one real architecture): the cubin the GPU loads, `cubin_of(obj)`."""
    keep = obj.with_suffix(".keep")
    keep.mkdir()
    return [*command_for(args, source, obj), "-keep", "-keep-dir", str(keep)]


def cubin_of(obj: Path) -> Path:
    """The cubin a `keeping_cubin` compile kept."""
    (cubin,) = obj.with_suffix(".keep").glob("*.cubin")
    return cubin


def compile_all(commands: list[list[str]], jobs: int = 2) -> None:
    """Run the compiles, `jobs` at once; any failure fails with the compiler's output."""

    def one(command):
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 0, f"{command[-12:]}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, commands))
