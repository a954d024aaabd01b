"""The network seal's fallback (fa_backend/pipeline/_seal.py) in-process: where no network
namespace can be made, children get a proxy that refuses every connection (a bound, never
listening loopback port), and the user's proxy settings cannot reopen the way. The seal around a
real build, and the namespace: tests/integration/test_network_seal.py."""

from __future__ import annotations

import socket

import pytest
from conftest import PY

from fa_backend.pipeline import _seal


def test_the_fallback_gives_children_a_refusing_proxy(monkeypatch):
    monkeypatch.setenv(_seal.FORCE_ENV, "proxy")
    _seal.choose.cache_clear()
    monkeypatch.setattr(_seal, "choose", _seal.choose)  # cleared again after the test
    with _seal.sealed([PY], {"NO_PROXY": "*", "HTTPS_PROXY": "http://corp:3128"}) as (_, env):
        proxy = env["https_proxy"]
        assert env["HTTPS_PROXY"] == env["ALL_PROXY"] == env["http_proxy"] == proxy
        assert "NO_PROXY" not in env and "no_proxy" not in env
        port = int(proxy.rsplit(":", 1)[1])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    _seal.choose.cache_clear()
