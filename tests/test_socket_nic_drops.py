"""The socket NIC's udp mode counts what the kernel drops, so its counters add up to what was sent.

Goal: a flood that overflows the socket's receive buffer while the NIC cannot read (its process
stopped with SIGSTOP) loses datagrams in the kernel; each one is counted ``nic_kernel_drops``
(SO_RXQ_OVFL on every datagram, SO_MEMINFO when the NIC goes quiet), so that once the NIC has
caught up, ``nic_rx_frames + nic_rx_ring_full + nic_filtered + nic_kernel_drops`` is exactly
the number of datagrams sent. The receive buffer the kernel granted is reported
(``nic_info()``), large: 64 MiB asked (SO_RCVBUFFORCE as root, else SO_RCVBUF up to
net.core.rmem_max).

The transceiver runs in a child process (this file run as a script) on addresses of its own on
``lo``; the test talks to it over a pipe. Oracle: the test's own count of datagrams the kernel
took from it (sendto returned).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from child_helpers import accounted, final_once_accounted

from roce_transceiver.protocol import build

OURS, PEER = "127.13.20.1", "127.13.20.2"
PAYLOAD = 1024
WAIT_S = 60.0


def child() -> None:
    """A transceiver (udp mode, sink handler): its nic_info() once up, then the counters
    (``stats``) or the final counters (``stop``) for each line on stdin."""
    from roce_transceiver.transceiver import Transceiver

    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": OURS},
        "peer": {"ip": PEER},
        "qp": {"transport": "UC"},
        "handler": "sink",
        "queues": {"rx_depth": 1024},
    }
    with Transceiver(cfg) as t:
        print(json.dumps({"qpn": t.config["qp"]["qpn"], **t.nic_info()}), flush=True)
        for line in sys.stdin:
            if line.strip() == "stop":
                break
            print(json.dumps(t.stats()), flush=True)
    print(json.dumps(t.stats()), flush=True)


def test_udp_mode_counts_the_kernels_drops_exactly() -> None:
    with subprocess.Popen(
        [sys.executable, __file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            final, sent = flood(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        errors = proc.stderr.read()
    assert proc.returncode == 0, errors
    assert final["nic_kernel_drops"] > 0, f"the flood of {sent} did not overflow: {final}"
    assert final["nic_rx_frames"] > 0 and final["nic_filtered"] == 0, final
    assert accounted(final) == sent, (
        f"sent {sent}: rx {final['nic_rx_frames']} + ring full {final['nic_rx_ring_full']} + "
        f"kernel drops {final['nic_kernel_drops']} = {accounted(final)}"
    )
    # What reached the engine is what the NIC handed it.
    assert final["rx_packets"] == final["nic_rx_frames"]


def flood(proc: subprocess.Popen) -> tuple[dict, int]:
    """Floods the child while it is stopped; its final counters once it has caught up, and
    the datagrams sent."""
    info = json.loads(proc.stdout.readline() or "null") or {}
    assert info, proc.stderr.read()
    assert info["rx_buffer_asked"] == 64 << 20 and info["rx_buffer_bytes"] > 0
    # Enough datagrams to overflow the buffer: each takes at least its own bytes of it.
    sent_max = info["rx_buffer_bytes"] // PAYLOAD + 20_000
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((PEER, 4791))
        frames = [
            build(
                "UC_SEND_ONLY",
                bytes(PAYLOAD),
                ip_src=PEER,
                ip_dst=OURS,
                udp_sport=4791,
                psn=i,
                dest_qp=info["qpn"],
            )[42:]
            for i in range(64)
        ]
        os.kill(proc.pid, signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # stopped: the NIC reads nothing
        assert os.WIFSTOPPED(status)
        sent = 0
        try:
            for i in range(sent_max):
                s.sendto(frames[i % 64], (OURS, 4791))
                sent += 1
        finally:
            os.kill(proc.pid, signal.SIGCONT)
    # The NIC catches up; every datagram ends up read or counted as the kernel's drop.
    return final_once_accounted(proc, sent, WAIT_S), sent


if __name__ == "__main__":
    child()
