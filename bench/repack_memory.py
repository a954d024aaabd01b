"""Peak RSS and time of repacking a wheel the size of a full flash-attn build.

    python bench/repack_memory.py [--size-mb 500] [--repo DIR] [--workdir DIR]

Synthesises an upstream-shaped wheel (flash_attn/*.py, a flash_attn_2_cuda*.so of --size-mb
random bytes stored undeflated as upstream's driver leaves it, a .dist-info with LICENSE and
top_level.txt), then repacks it in a fresh child interpreter with the fa_backend of --repo
(default: this checkout) and prints that child's peak RSS (getrusage) and wall time as JSON.
Random bytes do not compress: the worst case for the deflate step and for the memory a repack
that holds members in memory needs. Used by docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_CHILD = r"""
import json, resource, sys, time, types
from pathlib import Path
from packaging import tags
wheel, target = Path(sys.argv[1]), Path(sys.argv[2])
try:
    from fa_backend.pipeline._repack import repack
except ImportError:  # the layout before issue 12 (commit 5c15939 and earlier)
    from fa_backend.pipeline._build import repack
plan = types.SimpleNamespace(  # the three facts repack reads from a build plan
    dist_info="flash_attn-2.8.3+bench.dist-info",
    metadata="Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3+bench\n",
    tag=tags.Tag("cp311", "cp311", "linux_x86_64"),
)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
repack(plan, wheel, target, {"bench": True})
print(json.dumps({
    "seconds": round(time.monotonic() - started, 2),
    "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    "rss_before_repack_mib": round(before / 1024, 1),
    "output_mb": round(target.stat().st_size / 1e6, 1),
}))
"""


def synthesise(path: Path, size_mb: int) -> None:
    """An upstream-shaped wheel; the module is written in 1 MiB chunks (no big buffer here)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("__init__.py", "flash_attn_interface.py", "bert_padding.py"):
            zf.writestr(f"flash_attn/{name}", "# a source file\n" * 200, zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so")
        info.external_attr = 0o100755 << 16
        info.file_size = size_mb * 1024 * 1024
        with zf.open(info, "w") as out:  # stored: upstream's driver does not deflate
            for _ in range(size_mb):
                out.write(os.urandom(1024 * 1024))
        for name in ("METADATA", "WHEEL", "RECORD", "LICENSE", "top_level.txt"):
            zf.writestr(f"flash_attn-2.8.3.dist-info/{name}", f"{name}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        upstream = Path(tmp) / "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"
        synthesise(upstream, args.size_mb)
        env = {**os.environ, "PYTHONPATH": str(args.repo.resolve()), "SOURCE_DATE_EPOCH": "0"}
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(upstream), str(Path(tmp) / "out.whl")],
            env=env,
            cwd=tmp,  # not this checkout: `-c` puts the working directory first on sys.path
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        result = json.loads(proc.stdout)
        result.update(size_mb=args.size_mb, repo=str(args.repo))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
