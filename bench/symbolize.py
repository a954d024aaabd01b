"""Names for the frames bench/segv_backtrace.c writes: each `#N object +offset` line of the
given files is run through `addr2line -f -C -i` (binutils), the rest is copied.

    python3 bench/symbolize.py crash.txt [more.txt ...]
"""

from __future__ import annotations

import re
import subprocess
import sys

FRAME = re.compile(r"^(?P<label>#\w+) (?P<object>/\S+) \+(?P<offset>0x[0-9a-f]+)")


def names(path: str, offset: str) -> str:
    try:
        out = subprocess.run(
            ["addr2line", "-f", "-C", "-i", "-e", path, offset],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(addr2line: {exc})"
    lines = out.split("\n")
    pairs = [f"{fn} at {loc}" for fn, loc in zip(lines[0::2], lines[1::2]) if fn]
    return "; inlined in ".join(pairs) or "?"


def main(files: list[str]) -> int:
    for name in files:
        with open(name, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.rstrip("\n")
                m = FRAME.match(line)
                print(f"{line}\n    {names(m['object'], m['offset'])}" if m else line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
