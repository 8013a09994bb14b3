"""Network fixtures for the socket NIC tests: a namespace and a veth pair, made and removed.

The namespace comes from roce_transceiver.netns (the benchmark uses the same): one namespace
and one veth pair named after the test process, deleted on the way out whatever happened.
Skips without root or iproute2.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from roce_transceiver import netns

__all__ = ["bth_opcodes", "run_cmd", "veth_namespace"]


def run_cmd(*cmd: str) -> str:
    try:
        return netns.run_cmd(*cmd)
    except netns.NetnsError as e:
        raise AssertionError(str(e)) from None


@pytest.fixture
def veth_namespace() -> Iterator[tuple[str, str, str]]:
    """(namespace, our interface, the peer's interface inside the namespace)."""
    from conftest import skip_missing  # here: conftest imports this module

    reason = netns.why_not()
    if reason:
        skip_missing("netns", reason)
    with netns.veth_namespace() as v:
        yield v.namespace, v.ours, v.theirs


def bth_opcodes(tshark: str, pcap: str) -> list[str]:
    """The BTH opcode of every frame of ``pcap`` as tshark dissects it (decimal strings)."""
    import subprocess

    done = subprocess.run(
        [
            tshark,
            "-r",
            pcap,
            "-d",
            "udp.port==4791,infiniband",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()
