"""Shared helpers for the engine tests (test_engine_*.py).

Goal: one way to set up a transceiver per executor, to play the far end of the
loopback wire with hand-built frames, and to wait on the engine without sleeps.

Oracles live in the tests; what this module contributes is independent of the
engine: frames are built with ``roce_transceiver.protocol.build`` (checked
byte-exact against scapy and tshark in test_protocol_*.py), addressed as the
peer of the configured queue pair, and the engine's frames are decoded with
``roce_transceiver.protocol.parse``.

Waiting: every wait polls a condition (a counter, a frame) against a deadline
and fails with what is still outstanding. ``fence()`` is the in-band barrier:
the engine handles its rx ring in order and transmits in order, so once the
echo of a SEND injected after some frames comes back, everything those frames
caused is already on the tx ring, ahead of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from roce_transceiver.protocol import Packet, build, parse, psn_add
from roce_transceiver.transceiver import Completion, Transceiver

# The executors every engine test runs on; the cuda ones skip (with the reason)
# where no GPU is visible (tests/conftest.py).
EXECUTORS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

# Where the loop and the far end of the loopback run, for round-trip tests:
# (executor, far_end).
SETUPS = [
    pytest.param(("cpu", "cpu"), id="cpu"),
    pytest.param(("cuda", "cpu"), id="cuda", marks=pytest.mark.gpu),
    pytest.param(("cuda", "gpu"), id="cuda-gpu_far_end", marks=pytest.mark.gpu),
]

TRANSPORTS = ["RC", "UC"]

# AETH syndromes (IBA 9.7.5.1; DESIGN section 3).
ACK = 0x1F
NAK_PSN_SEQUENCE = 0x60
NAK_INVALID_REQUEST = 0x61
NAK_REMOTE_ACCESS = 0x62
ACKNOWLEDGE = 0x11  # the RC ACKNOWLEDGE opcode

ROCEV2_PORT = 4791
WAIT_S = 5.0  # bound on every wait for the engine; generous for a loaded 2-core CI box


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, section by section."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def make(
    executor: str = "cpu",
    transport: str = "RC",
    far_end: str = "cpu",
    **config: Any,
) -> Transceiver:
    """A Transceiver (not started) for ``executor``, ``transport`` and extra config."""
    base = {"executor": executor, "far_end": far_end, "qp": {"transport": transport}}
    return Transceiver(merge(base, config))


@contextmanager
def running(
    executor: str = "cpu", transport: str = "RC", far_end: str = "cpu", **config: Any
) -> Iterator[Transceiver]:
    """A started transceiver, stopped on the way out whatever happens."""
    with make(executor, transport, far_end, **config) as t:
        yield t


def wait_counter(t: Transceiver, name: str, value: int, timeout: float = WAIT_S) -> dict[str, int]:
    """Poll stats() until counter ``name`` reaches ``value``; returns the stats then."""
    deadline = time.monotonic() + timeout
    while True:
        stats = t.stats()
        if stats[name] >= value:
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(
                f"counter {name!r} stayed at {stats[name]} for {timeout} s, waiting for {value} "
                f"(outstanding: {value - stats[name]}); counters: {nonzero(stats)}"
            )
        time.sleep(50e-6)  # a poll interval, not a synchronisation


def wait_counters(t: Transceiver, timeout: float = WAIT_S, **expected: int) -> dict[str, int]:
    """Poll stats() until every named counter equals its expected value; returns the stats.

    The engine publishes its counters after the frames and completion records of a
    pass, one word at a time, so a test waits for the values it expects rather than
    reading them once. Counters only grow: one that overshoots never matches, and the
    failure names it with its value.
    """
    unknown = set(expected) - set(t.stats())
    assert not unknown, f"no such counters: {sorted(unknown)}"
    deadline = time.monotonic() + timeout
    while True:
        stats = t.stats()
        off = {k: (stats[k], v) for k, v in expected.items() if stats[k] != v}
        if not off:
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(
                f"counters (got, expected) after {timeout} s: {off}; all counters: {nonzero(stats)}"
            )
        time.sleep(50e-6)  # a poll interval, not a synchronisation


def nonzero(stats: Mapping[str, int]) -> dict[str, int]:
    """The counters that moved: short failure messages."""
    return {k: v for k, v in stats.items() if v}


def collect_n(t: Transceiver, n: int, timeout: float = WAIT_S) -> list[bytes]:
    """Exactly ``n`` frames the engine transmitted (at least n arrive, all are returned)."""
    frames = t.collect(max_frames=4096, timeout=timeout, want=n)
    assert len(frames) >= n, (
        f"the engine transmitted {len(frames)} of the {n} frames expected within {timeout} s; "
        f"got {[describe(f) for f in frames]}; counters: {nonzero(t.stats())}"
    )
    return frames


def receive_n(t: Transceiver, n: int, timeout: float = WAIT_S) -> list[Completion]:
    """At least ``n`` completion records, waiting up to ``timeout``."""
    out: list[Completion] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"{len(out)} of {n} completion records within {timeout} s; "
                f"counters: {nonzero(t.stats())}"
            )
        out += t.receive(timeout=min(left, 0.1), max_messages=4096)
    return out


def describe(frame: bytes) -> str:
    """One line per frame for failure messages."""
    try:
        p = parse(frame)
    except ValueError as e:
        return f"<undecodable {len(frame)} B: {e}>"
    extra = f" aeth={p.aeth.syndrome:#x}/msn={p.aeth.msn}" if p.aeth else ""
    return f"{p.opcode_name} psn={p.psn:#x} qp={p.dest_qp:#x} {len(p.payload)} B{extra}"


class Peer:
    """The far end of the wire, by hand: frames addressed to the engine's QP.

    ``psn`` is the next PSN the peer sends; ``take()`` returns it and moves on.
    Addresses are the config's, seen from the peer (peer -> local).
    """

    def __init__(self, t: Transceiver) -> None:
        cfg = t.config
        self.cfg = cfg
        self.transport: str = cfg["qp"]["transport"]
        self.qpn: int = cfg["qp"]["qpn"]
        self.peer_qpn: int = cfg["qp"]["peer_qpn"]
        self.pkey: int = cfg["qp"]["pkey"] | 0x8000  # a full member of the QP's partition
        self.psn: int = cfg["qp"]["rx_psn"]
        self.tx_psn: int = cfg["qp"]["tx_psn"]  # the PSN of the engine's next SEND
        self._fences = 0

    def take(self, n: int = 1) -> int:
        """The next PSN; advances by ``n``."""
        psn = self.psn
        self.psn = psn_add(psn, n)
        return psn

    def frame(self, op: str, payload: bytes = b"", *, psn: int, **fields: Any) -> bytes:
        """A frame of opcode ``<transport>_<op>`` (or ``op`` itself when it names a
        transport), from the peer to the engine's QP."""
        name = op if op.startswith(("RC_", "UC_", "UD_")) else f"{self.transport}_{op}"
        fields.setdefault("dest_qp", self.qpn)
        fields.setdefault("pkey", self.pkey)
        return build(
            name,
            payload,
            eth_src=self.cfg["peer"]["mac"],
            eth_dst=self.cfg["local"]["mac"],
            ip_src=self.cfg["peer"]["ip"],
            ip_dst=self.cfg["local"]["ip"],
            psn=psn,
            **fields,
        )

    def next(self, op: str, payload: bytes = b"", **fields: Any) -> bytes:
        """A frame at the next PSN (which it takes)."""
        return self.frame(op, payload, psn=self.take(), **fields)

    def fence(self, t: Transceiver, timeout: float = WAIT_S) -> list[Packet]:
        """Inject a SEND Only at the expected PSN and collect until its echo; return the
        engine's frames before it, decoded. Takes one peer PSN and one engine PSN."""
        self._fences += 1
        marker = b"fence:%08d" % self._fences
        assert t.inject(self.next("SEND_ONLY", marker)), "fence: the engine's rx ring is full"
        frames: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            got = t.collect(max_frames=4096, timeout=max(0.0, deadline - time.monotonic()))
            for i, f in enumerate(got):
                p = parse(f)
                if p.opcode & 0x1F == 0x04 and p.payload == marker:
                    assert i == len(got) - 1, (
                        f"frames after the fence's echo: {[describe(x) for x in got[i + 1 :]]}"
                    )
                    self.tx_psn = psn_add(p.psn, 1)
                    return [parse(x) for x in frames]
                frames.append(f)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no echo of the fence {marker!r} within {timeout} s; the engine sent "
                    f"{[describe(f) for f in frames]}; counters: {nonzero(t.stats())}"
                )

    def check_addressed_to_peer(self, p: Packet) -> None:
        """A frame from the engine goes local -> peer, to the peer's QP, over RoCEv2."""
        assert p.icrc_ok, f"{p.opcode_name}: ICRC {p.icrc:#x} is wrong"
        assert p.dest_qp == self.peer_qpn
        assert p.eth_src == self.cfg["local"]["mac"] and p.eth_dst == self.cfg["peer"]["mac"]
        assert p.ip_src == self.cfg["local"]["ip"] and p.ip_dst == self.cfg["peer"]["ip"]
        assert p.udp_dport == ROCEV2_PORT


def largest_payload(slot_bytes: int, op: str, **addresses: Any) -> int:
    """The largest payload whose ``op`` frame fits ``slot_bytes`` (by protocol.build)."""
    lo, hi = 0, slot_bytes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(build(op, bytes(mid), **addresses)) <= slot_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo
