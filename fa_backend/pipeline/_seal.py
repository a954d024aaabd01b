"""The network seal around the upstream build child: a fresh network namespace where the kernel
allows one (the child and all it starts see only their own loopback), else proxy variables that
point at a closed loopback port; in-process Python is stopped by the driver's audit hook. Its own
module, standard library and core._log only: test_network_seal imports it with a bare Python."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

from ..core import _log

NAMESPACE, PROXY = "network namespace", "proxy to a closed port"
# A test knob, not a setting (hence no FA_SHIM_ prefix): "proxy" forces the fallback seal.
FORCE_ENV = "_FA_SHIM_TEST_SEAL"
NETNS_ENV = "_FA_SHIM_NETNS"  # tells the driver to bring its loopback up (sccache serves on it)
PROXY_VARS = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy")


@dataclasses.dataclass(frozen=True)
class Seal:
    kind: str  # NAMESPACE or PROXY
    prefix: tuple[str, ...]  # what the child's command is run under (unshare ...)
    why: str  # how it was chosen, or why no namespace could be made

    def describe(self) -> str:
        if self.kind == NAMESPACE:
            return f"{NAMESPACE} (`{' '.join(self.prefix)}`): the build child has no network"
        return (
            f"{PROXY} ({self.why}): in-process Python is stopped, children that honour "
            "http(s)_proxy are turned away, other sockets of child processes are not stopped"
        )


@functools.cache
def choose() -> Seal:
    """Probe once per process whether a network namespace can be made here."""
    if os.environ.get(FORCE_ENV) == "proxy":
        return Seal(PROXY, (), f"{FORCE_ENV}=proxy")
    unshare = shutil.which("unshare")
    if not unshare:
        return Seal(PROXY, (), "no `unshare` on PATH")
    # root may make a network namespace directly; anyone else needs a user namespace first,
    # in which the child is mapped root: files it writes still belong to the invoking user
    prefix = (
        (unshare, "--net") if os.geteuid() == 0 else (unshare, "--user", "--map-root-user", "--net")
    )
    try:
        proc = subprocess.run(
            [*prefix, "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Seal(PROXY, (), f"`unshare` failed: {exc}")
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return Seal(PROXY, (), f"the kernel refused a network namespace: {err}")
    return Seal(NAMESPACE, prefix, "")


@contextlib.contextmanager
def sealed(command: list[str], env: dict[str, str]) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(command, env) to start the child with; the fallback's closed port is held meanwhile."""
    seal = choose()
    _log.info(f"network seal: {seal.describe()}")
    if seal.kind == NAMESPACE:
        yield [*seal.prefix, *command], {**env, NETNS_ENV: "1"}
        return
    # bound but never listening: connections are refused, and no one else can take the port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = {k: v for k, v in env.items() if k.lower() not in (*PROXY_VARS, "no_proxy")}
        for name in PROXY_VARS:
            env[name] = env[name.upper()] = proxy
        yield command, env
