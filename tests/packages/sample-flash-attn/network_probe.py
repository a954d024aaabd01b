"""Every way a setup.py can reach the network, tried against the test's loopback listeners.

SAMPLE_NETWORK_PROBE=TCP_PORT:UDP_PORT:REPORT[:inprocess] (set by
tests/integration/test_network_seal.py). Each attempt appends one JSON line to REPORT saying
whether it failed; the listeners record what arrived. The child-process and ctypes attempts come
first; with `inprocess`, upstream's own Python then tries too, which fa-shim's audit hook turns
into a failed build.
"""

import ctypes
import json
import os
import socket
import struct
import subprocess
import sys


def _record(report, path, ok, detail=""):
    with open(report, "a") as f:
        f.write(json.dumps({"path": path, "reached": ok, "detail": str(detail)[-200:]}) + "\n")


def _child(report, path, argv, shell=False):
    try:
        proc = subprocess.run(argv, shell=shell, capture_output=True, text=True, timeout=20)
        _record(report, path, proc.returncode == 0, proc.stderr.strip())
    except (OSError, subprocess.TimeoutExpired) as exc:
        _record(report, path, False, exc)


def _ctypes_connect(report, port):
    """connect(2) straight from libc: no Python audit event sees it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    addr = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1"))
    buf = ctypes.create_string_buffer(addr)
    rc = libc.connect(fd, buf, len(addr))
    err = ctypes.get_errno()
    if rc == 0:
        libc.send(fd, b"ctypes-connect\n", 15, 0)
    libc.close(fd)
    _record(report, "ctypes connect", rc == 0, os.strerror(err) if rc else "")


def run(spec):
    tcp, udp, report, *rest = spec.split(":")
    url = f"http://127.0.0.1:{tcp}"
    py = sys.executable
    _child(report, "subprocess curl", ["curl", "-sS", "--max-time", "10", f"{url}/curl"])
    _child(report, "os.system wget", f"wget -q -T 10 -t 1 -O /dev/null {url}/wget", shell=True)
    code = f"import urllib.request; urllib.request.urlopen('{url}/urllib', timeout=10)"
    _child(report, "child python urlopen", [py, "-c", code])
    code = f"import socket; socket.socket(2, 2).sendto(b'udp-child', ('127.0.0.1', {udp}))"
    _child(report, "child python udp sendto", [py, "-c", code])
    code = "import socket; socket.getaddrinfo('pypi.org', 443)"
    _child(report, "child python getaddrinfo", [py, "-c", code])
    _ctypes_connect(report, int(tcp))
    if "inprocess" in rest:
        _record(report, "in-process udp sendto", None, "attempted")
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
            b"udp-inproc", ("127.0.0.1", int(udp))
        )
        _record(report, "in-process udp sendto", True, "not stopped")
