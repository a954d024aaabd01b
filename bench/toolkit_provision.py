"""Time to provision a CUDA compiler from the package index, cold and warm.

    python bench/toolkit_provision.py [--cuda 13.0] [--cache-dir DIR] [--json OUT]

Cold: an empty cache directory (index pages read, five wheels downloaded and checked, extracted,
nvcc run). Warm: the same call again, which finds the toolkit and asks the index nothing. Uses
fa-shim's own code (fa_backend._toolkit.provision) with pip's configured index. Recorded in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa_backend.toolchain import _toolkit


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", default="13.0")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    own = args.cache_dir is None
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="fa-shim-toolkit-bench-"))
    try:
        shutil.rmtree(_toolkit.home(cache, args.cuda), ignore_errors=True)
        start = time.monotonic()
        root = _toolkit.provision(cache, args.cuda)
        cold = time.monotonic() - start
        start = time.monotonic()
        _toolkit.provision(cache, args.cuda)
        warm = time.monotonic() - start
        manifest = _toolkit.installed(cache, args.cuda)
        size = subprocess.run(["du", "-sb", root], capture_output=True, text=True).stdout
        result = {
            "cuda": args.cuda,
            "nvcc": manifest["nvcc"],
            "wheels": {w["project"]: w["version"] for w in manifest["wheels"]},
            "download_bytes": sum(w["bytes"] for w in manifest["wheels"]),
            "installed_bytes": int(size.split()[0]),
            "cold_s": round(cold, 1),
            "warm_s": round(warm, 3),
        }
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        if own:
            shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
