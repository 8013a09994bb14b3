"""The namespace helper itself: made with iproute2 or, where ``ip`` is missing (the GPU
machine), with pyroute2; both leave nothing behind.

Oracles: the kernel's view (the interfaces, the namespace file, the IPv6 sysctl, a frame sent
on one end arriving at the other) during and after.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from conftest import skip_missing

from roce_transceiver import netns


def _exercise(v: netns.VethNamespace) -> None:
    assert os.path.exists(f"/run/netns/{v.namespace}")
    assert os.path.exists(f"/sys/class/net/{v.ours}")
    assert not os.path.exists(f"/sys/class/net/{v.theirs}")  # it lives in the namespace
    assert Path(f"/proc/sys/net/ipv6/conf/{v.ours}/disable_ipv6").read_text().strip() == "1"
    theirs_mac = v.mac("theirs")
    assert len(theirs_mac.split(":")) == 6 and theirs_mac != v.mac("ours")

    def listen() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
        s.bind((v.theirs, 0))
        s.settimeout(5)
        return s

    rx = netns.inside(v.namespace, listen)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx, rx:
        tx.bind((v.ours, 0))
        frame = bytes.fromhex(theirs_mac.replace(":", "")) + bytes(6) + b"\x88\xb5" + b"rt" * 30
        tx.send(frame)
        assert rx.recv(2048)[14:] == frame[14:]


def _gone(v: netns.VethNamespace) -> None:
    assert not os.path.exists(f"/run/netns/{v.namespace}")
    assert not os.path.exists(f"/sys/class/net/{v.ours}")


@pytest.mark.netns
def test_veth_namespace_with_iproute2():
    if netns.why_not():
        skip_missing("netns", netns.why_not())
    with netns.veth_namespace(tag=f"ip{os.getpid() % 100000}") as v:
        _exercise(v)
    _gone(v)


@pytest.mark.netns
def test_veth_namespace_with_pyroute2_where_ip_is_missing(monkeypatch):
    try:
        import pyroute2  # noqa: F401
    except ImportError as e:
        skip_missing("netns", f"pyroute2 does not import ({e}): pip install '.[test]'")
    if os.geteuid() != 0:
        skip_missing("netns", "needs root: creates a network namespace and a veth pair")
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n == "ip" else which(n))
    assert netns.why_not() == "needs iproute2 (ip) to create a namespace"  # exec needs ip
    assert netns.why_not(exec_needed=False) is None
    with netns.veth_namespace(tag=f"pr{os.getpid() % 100000}", mtu=9000) as v:
        _exercise(v)
        assert Path(f"/sys/class/net/{v.ours}/mtu").read_text().strip() == "9000"
    _gone(v)
