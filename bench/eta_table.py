"""The ETA lines of a timestamped build log (bench/stamp.py) against the build's real end:
    python bench/eta_table.py build.log
One markdown row per progress line: its elapsed compile time, units done, the ETA it claimed,
the compile time actually left, and claim / real (`<1 min` counts as 0.5). The end is the
`compiled N/N` line."""

import re
import sys
from pathlib import Path

LINE = re.compile(
    r"^(\S+)\s+(\S+)\s+fa-shim: (?:compiled (\d+)/(\d+) \(\d+%\) in |)(\d+):(\d+)"
    r"(?: compiling .*\((\d+)/(\d+) done, |, )(~(\d+) min left|<1 min left)?"
)
END = re.compile(r"^(\S+)\s+(\S+)\s+fa-shim: compiled (\d+)/\3 \(100%\) in (\d+):(\d+)$")


def main(path: str) -> None:
    rows, end = [], None
    for text in Path(path).read_text().splitlines():
        if m := END.match(text):
            end = int(m[4]) * 60 + int(m[5])
        elif (m := LINE.match(text)) and m[9]:
            done, total = (m[3], m[4]) if m[3] else (m[7], m[8])
            claim = 0.5 if m[9].startswith("<") else int(m[10])
            rows.append((m[1], int(m[5]) * 60 + int(m[6]), f"{done}/{total}", m[9], claim))
    if end is None:
        sys.exit(f"{path}: no `compiled N/N (100%)` line: the compile did not end")
    print(f"compile phase ended at {end // 60}:{end % 60:02d} ({end} s)\n")
    print("| UTC | at | done | ETA said | really left | said / real |")
    print("|---|---|---|---|---|---|")
    for utc, at, done, said, claim in rows:
        left = (end - at) / 60
        ratio = f"{claim / left:.2f}" if left >= 0.1 else "-"
        print(f"| {utc} | {at // 60}:{at % 60:02d} | {done} | {said} | {left:.1f} min | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1])
