"""Network fixtures for the socket NIC tests: a namespace and a veth pair, made and removed.

Only what a test creates is touched: one namespace and one veth pair whose names carry the
test process's id, deleted on the way out whatever happened. Skips without root or iproute2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

__all__ = ["run_cmd", "veth_namespace"]


def run_cmd(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr.strip()}"
    return done.stdout


@pytest.fixture
def veth_namespace() -> Iterator[tuple[str, str, str]]:
    """(namespace, our interface, the peer's interface inside the namespace)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a network namespace and a veth pair")
    if not shutil.which("ip"):
        pytest.skip("needs iproute2 (ip) to create a namespace")
    tag = f"rt{os.getpid() % 100000}"
    ns, ours, theirs = f"{tag}ns", f"{tag}a", f"{tag}b"
    run_cmd("ip", "netns", "add", ns)
    try:
        run_cmd("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs)
        run_cmd("ip", "link", "set", theirs, "netns", ns)
        # No IPv6 autoconfiguration chatter on the pair: only our frames cross it.
        run_cmd("sysctl", "-q", "-w", f"net.ipv6.conf.{ours}.disable_ipv6=1")
        run_cmd(
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-q",
            "-w",
            f"net.ipv6.conf.{theirs}.disable_ipv6=1",
        )
        run_cmd("ip", "link", "set", ours, "up")
        run_cmd("ip", "netns", "exec", ns, "ip", "link", "set", theirs, "up")
        yield ns, ours, theirs
    finally:
        subprocess.run(["ip", "link", "del", ours], capture_output=True, timeout=20, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20, check=False)
