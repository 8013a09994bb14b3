"""A NIC plugs into a Transceiver without touching it (issue 29).

Goal: a Transceiver is its memory, one Nic and one executor; a NIC written in a few lines of
Python (roce_transceiver.nic) carries the frames of the echo loop in place of the
configuration's, on the rings the Transceiver gives it.

Oracles: protocol.parse of what the engine sent (a SEND Only to the peer's QP carrying the
request's payload, the engine's next PSN); the NIC's own calls, recorded in order; the
Transceiver's refusal of the loopback's calls, naming the NIC.
"""

from __future__ import annotations

import time

import pytest
from engine_helpers import Peer

from roce_transceiver import _core
from roce_transceiver.config import core_config, load_config
from roce_transceiver.nic import Nic
from roce_transceiver.protocol import OPCODES, parse
from roce_transceiver.transceiver import Transceiver, TransceiverError

CONFIG = {"executor": "cpu", "handler": "echo", "completions": False, "qp": {"transport": "UC"}}


class ListWire(Nic):
    """The whole NIC: the rings it is given, and a record of what it was asked to do."""

    def __init__(self) -> None:
        super().__init__()
        self.ports: list = []
        self.calls: list[str] = []

    def name(self) -> str:
        return "listwire"

    def attach(self, ports) -> None:
        self.ports = list(ports)
        self.calls.append("attach")

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def stats(self) -> dict:
        return {"nic_ports": len(self.ports)}


def sent(port, timeout: float = 5.0) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frames = port.take()
        if frames:
            return frames
        time.sleep(0.001)
    return []


def test_an_echo_runs_through_a_nic_of_a_few_lines() -> None:
    nic = ListWire()
    with Transceiver(CONFIG, nic=nic) as t:
        assert nic.calls == ["attach", "start"] and len(nic.ports) == 1
        peer = Peer(t)
        for i in range(20):
            payload = bytes((i + k) & 0xFF for k in range(32))
            assert nic.ports[0].produce(peer.frame("SEND_ONLY", payload, psn=peer.take()))
            frames = sent(nic.ports[0])
            assert len(frames) == 1, frames
            reply = parse(frames[0])
            assert reply.icrc_ok and reply.opcode == OPCODES["UC_SEND_ONLY"]
            assert reply.dest_qp == peer.peer_qpn and reply.psn == peer.tx_psn + i
            assert reply.payload == payload
        assert t.stats()["nic_ports"] == 1
        assert t.stats()["rx_packets"] == 20
        with pytest.raises(TransceiverError, match="the wire is the listwire NIC"):
            t.roundtrip(count=1)
    assert nic.calls == ["attach", "start", "stop"]


def test_a_nic_error_stops_the_loop_saying_what_it_was() -> None:
    class Failing(ListWire):
        def error(self) -> str:
            return "the listwire NIC lost its link" if self.calls[-1:] == ["start"] else ""

    nic = Failing()
    t = Transceiver(CONFIG, nic=nic)
    t.start()
    with pytest.raises(TransceiverError, match="lost its link"):
        t.stats()
    t.stop()


def test_a_nic_of_ours_cannot_take_a_gpu_far_end() -> None:
    """A NIC that is not the loopback reads and writes the rings from the host: the core
    refuses rings in device memory for it, naming it (checked before anything is allocated,
    so on any build)."""
    core = {**core_config(load_config(CONFIG), "cpu", None), "executor": "cuda", "far_end": "gpu"}
    with pytest.raises(ValueError, match="nic='listwire' with far_end='gpu'"):
        _core.Transceiver(core, ListWire())
