"""verify's `record` check: a wheel's members against its RECORD (wheel/_record)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from ..wheel import _record
from ._report import Check


def check_record(wheel: Path) -> Check:
    try:
        found = _record.problems(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        return Check("record", "fail", f"the wheel does not read as a zip ({exc})")
    if found:
        return Check(
            "record",
            "fail",
            f"{len(found)} member(s) differ from the wheel's RECORD: it was changed after it "
            "was built (or damaged), so nothing in it can be trusted",
            details=found,
            fix="build the wheel again (a wheel-cache entry is rebuilt by itself).",
        )
    return Check("record", "pass", "every member matches its sha256 and size in RECORD")
