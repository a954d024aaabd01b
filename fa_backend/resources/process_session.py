"""Ending the upstream build as a whole: every process of its session (standard library only).
Not a process group: ninja gives each compile its own, while the session id survives
reparenting. Run by path (`python process_session.py COMMAND...`), it runs COMMAND as the
leader of a session that ends whole when the backend goes (compile probes)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_ENV = "_FA_SHIM_PARENT"  # the backend's pid: a session started for it ends with it


def members(sid: int) -> list[int]:
    """Live processes (not zombies) of session `sid`, read from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # after the command: state, ppid, pgrp, session
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def end(sid: int, grace: float = 3.0, spare: int | None = None) -> None:
    """SIGTERM every process of session `sid` but `spare` (the caller, when one of them), then
    SIGKILL what is left after `grace` seconds; each scan catches processes started meanwhile."""
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        left = [p for p in members(sid) if p != spare]
        if spare is None:  # the leader's group too, where /proc shows nothing (hidepid)
            with contextlib.suppress(OSError):
                os.killpg(sid, sig)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):  # gone, or not ours to signal
                os.kill(pid, sig)
        if sig == signal.SIGKILL and time.monotonic() > deadline + grace:
            return  # unkillable (uninterruptible sleep): nothing more to do here
        time.sleep(0.05)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL


def end_with_parent() -> None:
    """If the backend goes (SIGKILL, OOM), or sends SIGTERM/SIGHUP, end this whole session, not
    only this process (the caller leads it)."""

    def end_all(signum, _frame):
        end(os.getsid(0), spare=os.getpid())
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, end_all)
    # SIGTERM when the thread that started this process ends, where prctl is available
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    parent = int(os.environ.get(PARENT_ENV) or 0)
    if parent and os.getppid() != parent:  # gone before the death signal was armed
        end_all(signal.SIGTERM, None)


def main(argv: list[str]) -> int:
    end_with_parent()
    try:
        code = subprocess.call(argv)
    except OSError as exc:
        print(f"{argv[0]}: {exc}", file=sys.stderr)
        return 127
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
