"""A lock that holds across hosts on shared storage: the wheel cache's and the CUDA toolkit's.
Not flock/fcntl (`nolock` NFS mounts make those host-local silently): an exclusive create, its
mtime refreshed every `heartbeat`; a waiter that sees it unchanged for STALE_BEATS heartbeats
(or its holder gone here) renames it aside and creates its own (docs/guides/fleet.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from . import _log
from ._errors import FaShimError

STALE_BEATS = 8  # heartbeats without a change before a lock is a dead builder's


def this_kernel() -> dict:
    """The boot and pid namespace: a pid is only comparable where both are ours (containers
    share a host name)."""
    facts = {}
    with contextlib.suppress(OSError):
        facts["boot"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        facts["pidns"] = os.readlink("/proc/self/ns/pid")
    return facts


def started(pid: int) -> int | None:
    """The process's start time (clock ticks since boot; None: no such process): tells a reused
    pid from the one recorded."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def gone_here(holder: dict) -> bool:
    """The holder ran in this boot and pid namespace, and its process is no more."""
    mine = this_kernel()
    if not mine or any(holder.get(k) != v for k, v in mine.items()):
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return False
    started_at = started(pid)
    return started_at is None or started_at != holder.get("pid_started", started_at)


def _read(path: Path) -> tuple[tuple[int, int, int], dict] | None:
    """(identity, holder) of the lock file, or None when there is none. Opening the file (not a
    bare stat) makes an NFS client fetch fresh attributes."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(raw)
    except ValueError:  # being written right now
        holder = {}
    return (st.st_ino, st.st_mtime_ns, st.st_size), holder if isinstance(holder, dict) else {}


def describe(holder: dict) -> str:
    since = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since {when}"


@dataclasses.dataclass
class HostLock:
    path: Path
    timeout: float
    heartbeat: float
    on_wait: Callable[[dict], None]
    what: str  # "wheel-cache": the lock in messages is "the wheel-cache lock"
    held_by: str  # "another build of the same wheel": its holder in the timeout error
    fix: str  # the timeout error's fix
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event, init=False)
    _ino: int | None = dataclasses.field(default=None, init=False)

    def _try_create(self) -> bool:
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "pid_started": started(os.getpid()),
            **this_kernel(),
        }
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
                f.flush()
                os.fsync(f.fileno())
                self._ino = os.fstat(f.fileno()).st_ino
        except OSError as exc:  # a full disk: no half-written lock, and the error names it
            self.path.unlink(missing_ok=True)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        return True

    def _take_over(self, identity: tuple[int, int, int], holder: dict, why: str) -> None:
        """Move a stale lock aside; whoever's rename succeeds removes it."""
        aside = self.path.with_name(f"{self.path.name}.stale-{uuid.uuid4().hex}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # another waiter took it over first
        moved = _read(aside)
        if moved and moved[0] != identity:
            _log.warn(
                f"the lock {self.path} was refreshed while being taken over ({describe(holder)})"
            )
        _log.warn(f"took over the {self.what} lock {self.path} of a builder that {why}")
        with contextlib.suppress(OSError):
            aside.unlink()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Wait for the lock (taking over a stale one), then hold it, refreshed, for the block."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout
        seen: tuple[tuple[int, int, int], float] | None = None  # identity, when it last changed
        told = False
        while not self._try_create():
            now = time.monotonic()
            current = _read(self.path)
            if current is None:
                continue  # released between our create and our read
            identity, holder = current
            why = None
            if gone_here(holder):
                why = f"is gone ({describe(holder)}, no such process)"
            elif seen is None or seen[0] != identity:
                seen = (identity, now)
            elif now - seen[1] > STALE_BEATS * self.heartbeat:
                beats = f"no heartbeat for {STALE_BEATS * self.heartbeat:.0f} s"
                why = f"stopped refreshing it ({describe(holder)}; {beats})"
            if why:
                self._take_over(identity, holder, why)
                seen = None
                continue
            if not told:
                self.on_wait(holder)
                told = True
            if now > deadline:
                raise FaShimError(
                    f"waited {self.timeout:.0f} s for the {self.what} lock {self.path}, held by "
                    f"{self.held_by} ({describe(holder)}).",
                    fix=self.fix,
                )
            time.sleep(min(self.heartbeat / 2, 1.0, max(deadline - now, 0.01)))
        beat = threading.Thread(target=self._beat, name="fa-shim-lock-heartbeat", daemon=True)
        beat.start()
        try:
            yield
        finally:
            self._stop.set()
            beat.join()
            current = _read(self.path)
            if current and current[0][0] == self._ino:  # still ours, not a taker's
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if os.fstat(fd).st_ino != self._ino:
                        raise FileNotFoundError
                    os.utime(fd)  # the server's clock on NFS
                finally:
                    os.close(fd)
            except OSError:
                _log.warn(
                    f"lost the {self.what} lock {self.path} (taken over after a stall?): another "
                    "builder may do the same work now"
                )
                return
