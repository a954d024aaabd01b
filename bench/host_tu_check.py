"""flash-attn's host translation unit against a torch whose CUDA compiler this machine lacks.

    python bench/host_tu_check.py --python /venv/bin/python --cuda 12.8 --version 2.8.3 WORK

For torch 2.9.1+cu128 (CUDA 12.8: the index has no nvcc for CUDA 12, see README) this shows
what can be shown without that compiler:

1. prepare: fa-shim's real pipeline (pinned sdist, patches, upstream setup.py, build.ninja,
   the preflight probe) with a CUDA <major.minor> stand-in: a script that answers `--version`,
   `--list-gpu-arch` and the dry run's toolkit root as that nvcc does and hands compiles (the
   preflight probe: no CUDA header) to the machine's real nvcc. Its include/ and lib64/ are the
   CUDA <major.minor> headers and runtime of torch's own nvidia-* wheels in that venv plus the
   compiler and CCCL wheels' headers (nvidia-cuda-nvcc-cu12, no nvcc in it), so the host translation
   unit sees the real CUDA 12.8 headers.
2. the host translation unit (csrc/flash_attn/flash_api.cpp) compiled with the build's exact c++
   command line from build.ninja, then linked alone into flash_attn_2_cuda.<ext suffix>, the way
   torch links the extension (-shared, torch's and the CUDA runtime's libraries);
3. verify: `python -m fa_backend verify` of that module against the venv's torch: the module
   name, every torch symbol it references exported by that torch, the std::string ABI, the CUDA
   runtime. (The kernels are not in it: no CUDA 12.8 nvcc compiled them; verify's CUDA-arch
   check says so.)
Prints one line per step; exits non-zero when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STAND_IN = """#!/bin/sh
case " $* " in
  *" --list-gpu-arch "*) printf '%s\\n' {archs} ;;
  *" -V "*|*" --version "*) printf '%s\\n' 'nvcc: NVIDIA (R) Cuda compiler driver' \\
      'Cuda compilation tools, release {cuda}, V{cuda}.0' ;;
  *" --dryrun "*) echo '#$ TOP={home}' >&2 ;;
  *) exec {real} "$@" ;;
esac
"""


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {shlex.join(map(str, argv))}\n{proc.stderr[-4000:]}")
    return proc


def stand_in_toolkit(python: Path, cuda: str, home: Path) -> Path:
    """A CUDA home whose nvcc claims `cuda`, with the venv's nvidia-* wheel headers and libs."""
    site = Path(
        _run(
            [python, "-c", "import torch, os; print(os.path.dirname(torch.__path__[0]))"]
        ).stdout.strip()
    )
    shutil.rmtree(home, ignore_errors=True)
    for sub in ("bin", "include", "lib64"):
        (home / sub).mkdir(parents=True)
    # crt/host_defines.h (compiler headers) and nv/target (CCCL) come with the compiler and
    # CCCL wheels, not with the runtime's; the compiler wheel carries no nvcc for CUDA 12
    extra = home.parent / f"nvidia-headers-{cuda}"
    major = cuda.split(".")[0]
    if not extra.is_dir():
        wheels = [f"nvidia-cuda-{w}-cu{major}~={cuda}.0" for w in ("nvcc", "cccl")]
        _run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", extra, *wheels])
    parts = [*sorted((site / "nvidia").glob("*")), *sorted((extra / "nvidia").glob("*"))]
    for part in parts:
        for sub, dest in (("include", "include"), ("lib", "lib64")):
            for entry in sorted((part / sub).glob("*")) if (part / sub).is_dir() else ():
                link = home / dest / entry.name
                if not link.exists():
                    link.symlink_to(entry)
    real = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    archs = " ".join(f"compute_{a}" for a in (75, 80, 86, 87, 89, 90, 100, 120))
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(STAND_IN.format(archs=archs, cuda=cuda, home=home, real=shlex.quote(real)))
    nvcc.chmod(0o755)
    return nvcc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--python", type=Path, required=True)
    parser.add_argument("--cuda", required=True, help="torch's CUDA major.minor, e.g. 12.8")
    parser.add_argument("--version", default="2.8.3", help="flash-attn version")
    parser.add_argument("--sdist-dir", default=str(REPO.parent / "shared" / "sdists"))
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    nvcc = stand_in_toolkit(args.python, args.cuda, work / f"cuda-{args.cuda}")
    started = time.monotonic()
    proc = _run(
        [args.python, "-m", "fa_backend", "prepare", "--build-dir", work / "build",
         "-C", f"flash-attn-version={args.version}", "-C", f"sdist-dir={args.sdist_dir}",
         "-C", "offline=true", "-C", "cuda-archs=90", "-C", f"nvcc={nvcc}"],
        cwd=REPO, env=env,
    )  # fmt: skip
    summary = json.loads(proc.stdout)
    (work / "prepare.json").write_text(json.dumps(summary, indent=1))
    (work / "prepare.log").write_text(proc.stderr)
    print(f"1. prepared in {time.monotonic() - started:.0f} s: {summary['wheel']}")
    for line in proc.stderr.splitlines():
        if line.startswith("fa-shim: building against") or "preflight" in line:
            print("   " + line)

    (host,) = [c for c in summary["compile_commands"] if c["kind"] == "cxx"]
    argv = host["args"]
    defines = [a for a in argv if a.startswith(("-D_GLIBCXX_USE_CXX11_ABI", "-std="))]
    obj = Path(argv[argv.index("-o") + 1])
    cwd = Path(summary.get("ninja_file", obj)).parent
    started = time.monotonic()
    _run(argv, cwd=cwd)
    print(f"2. compiled {Path(host['file']).name} in {time.monotonic() - started:.0f} s "
          f"({' '.join(defines)}): {obj.stat().st_size / 1e6:.1f} MB")  # fmt: skip

    info = json.loads(_run([args.python, "-c", (
        "import json, os, sysconfig, torch; print(json.dumps({'lib': os.path.join("
        "torch.__path__[0], 'lib'), 'suffix': sysconfig.get_config_var('EXT_SUFFIX')}))"
    )]).stdout)  # fmt: skip
    module = work / f"flash_attn_2_cuda{info['suffix']}"
    lib64 = work / f"cuda-{args.cuda}" / "lib64"
    _run(["g++", "-shared", obj, "-o", module, f"-L{info['lib']}", "-lc10", "-ltorch",
          "-ltorch_cpu", "-ltorch_python", "-lc10_cuda", "-ltorch_cuda", f"-L{lib64}",
          f"-l:libcudart.so.{args.cuda.split('.')[0]}"])  # fmt: skip
    print(f"   linked {module.name} (host code only)")

    verify = subprocess.run(
        [args.python, "-m", "fa_backend", "verify", module], cwd=REPO, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    (work / "verify.txt").write_text(verify.stdout + verify.stderr)
    print(f"3. verify (exit {verify.returncode}):")
    for line in (verify.stdout + verify.stderr).splitlines():
        print("   " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
