"""The far end of an app's graph, as source operators: they drive the peer in steps (a chunk
of requests or frames per compute()), emit what each step did, and tell the transceiver's
operator when they are done.

- :class:`RoundTripPeerOp`: a QPU controller. Over the loopback NIC it is the transceiver's
  in-memory far end (``Transceiver.roundtrip``, timed in C++ or on the GPU clock); over UDP it
  is :class:`~roce_transceiver.peers.QpuPeer`. Echo requests, QEC syndromes from sampled
  errors whose logical outcome it knows, or a :class:`MessagePool` of requests and the answers
  they must get (a user's handler). Port ``results``: a :class:`RoundTripStep` per step.
- :class:`SensorPeerOp`: an HSB-style camera (:class:`~roce_transceiver.peers.sensor.Sensor`),
  its packets injected into the loopback wire (lossless: it waits for room) or sent over UDP.
  Port ``sent``: the :class:`~roce_transceiver.peers.sensor.SentFrame` list of each step.

The peer runs inside compute(): under the greedy scheduler the graph waits for a step, the
persistent loop does not (what the transceiver completes meanwhile waits in its queues).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from holoscan.core import Fragment, Operator, OperatorSpec

from roce_transceiver.netns import VethNamespace, inside
from roce_transceiver.operators.app_config import PEER
from roce_transceiver.operators.params import operator_parameters
from roce_transceiver.operators.progress import Progress
from roce_transceiver.operators.transceiver_op import RoceTransceiverOp
from roce_transceiver.peers import QpuPeer, open_link
from roce_transceiver.peers.link import Link
from roce_transceiver.peers.sensor import Faults, Sensor, SentFrame
from roce_transceiver.qec import ErrorSample, logical_failures, pymatching_replies

__all__ = ["MessagePool", "RoundTripPeerOp", "RoundTripStep", "SensorPeerOp"]


@dataclass(frozen=True)
class RoundTripStep:
    """One step of the peer: requests sent, answers, and each answer's round trip."""

    first: int  # index of the first request of the step
    sent: int
    received: int
    wrong: int
    lost: int
    rtt_us: np.ndarray = field(repr=False)
    elapsed_s: float
    logical_failures: int = 0  # qec: answers whose correction left a logical error


@dataclass(frozen=True)
class MessagePool:
    """Requests for a user's handler, sent in turn (all of one length), the answer each must
    get, and, when the peer knows it, whether that answer leaves a logical error (1) or not
    (0), counted in :attr:`RoundTripStep.logical_failures`."""

    requests: list[bytes]
    expected: list[bytes]
    logical_failures: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.requests or len(self.requests) != len(self.expected):
            raise ValueError("MessagePool: one expected answer per request, at least one")
        if self.logical_failures is not None and len(self.logical_failures) != len(self.requests):
            raise ValueError("MessagePool: one logical_failures entry per request")


class RoundTripPeerOp(Operator):
    """``count`` requests in steps of ``chunk``; see the module docstring.

    ``qec``: the errors to send syndromes of (sent in turn); ``messages``: a pool of requests
    for a user's handler (sent in turn); neither: echo requests of ``size`` bytes. The other
    keyword arguments are the ``peer`` keys (docs/configuration.md: ``**self.kwargs("peer")``
    or Python), validated as RoceTransceiverOp's are."""

    def __init__(
        self,
        fragment: Fragment,
        *args: Any,
        transceiver_op: RoceTransceiverOp,
        count: int,
        qec: ErrorSample | None = None,
        messages: MessagePool | None = None,
        progress_s: float = 0.0,
        namespace: VethNamespace | None = None,
        **params: Any,
    ) -> None:
        p, holoscan = operator_parameters(fragment, PEER, params, "RoundTripPeerOp")
        if qec is not None and messages is not None:
            raise ValueError("RoundTripPeerOp: qec or messages, not both")
        self.messages = messages
        self.transceiver_op = transceiver_op
        self.namespace = namespace
        self.count, self.size, self.window, self.rate = count, p["size"], p["window"], p["rate"]
        self.chunk, self.link_kind = p["chunk"], p["link"]
        self.timeout_s, self.seed = p["timeout_s"], p["seed"]
        self.qec = qec
        self.progress = Progress("round trips", count, progress_s)
        self.sent = self.received = self.wrong = 0
        self.reference_failures = 0  # qec: pymatching's logical failures on the same errors
        self._link: Link | None = None
        self._peer: QpuPeer | None = None
        self._fail: np.ndarray | None = None
        self._fail_reference: np.ndarray | None = None
        super().__init__(fragment, *args, **holoscan)

    def setup(self, spec: OperatorSpec) -> None:
        spec.output("results")

    def start(self) -> None:
        if self.qec is not None:
            q = self.qec
            self._fail = logical_failures(q.code, q.ex, q.ez, q.expected)
            reference = pymatching_replies(q.code, q.requests)
            self._fail_reference = logical_failures(q.code, q.ex, q.ez, reference)
        if self.messages is not None:
            self._fail = self.messages.logical_failures
        if self.link_kind != "loopback":
            cfg = self.transceiver_op.config
            self._link = _open(cfg, self.link_kind, self.namespace, own_port=4791)
            pool = self._pool()
            self._peer = QpuPeer(
                self._link,
                handler="qec" if self.qec else "custom" if self.messages else "echo",
                size=self.size,
                distance=cfg["qec"]["distance"],
                first_psn=cfg["qp"]["rx_psn"],
                seed=self.seed,
                pool=pool,
            )

    def stop(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        if self.transceiver_op.transceiver is None:
            return  # its start() has not run yet (the scheduler's timeout bounds this)
        n = min(self.chunk, self.count - self.sent)
        first = self.sent
        step = self._step(first, n)
        self.sent += step.sent
        self.received += step.received
        self.wrong += step.wrong
        if self._fail_reference is not None:
            idx = np.arange(first, first + n) % len(self._fail_reference)
            self.reference_failures += int(self._fail_reference[idx].sum())
        op_output.emit(step, "results")
        self.progress.update(self.sent, f"{self.wrong} wrong")
        if self.sent >= self.count:
            self.transceiver_op.finish(expect=self.received)
            self.stop_execution()

    def _step(self, first: int, n: int) -> RoundTripStep:
        fails = 0
        if self._fail is not None:  # answers equal the table's (else counted wrong)
            fails = int(self._fail[np.arange(first, first + n) % len(self._fail)].sum())
        if self._peer is not None:
            report = self._peer.run(n, rate=self.rate, timeout_s=self.timeout_s, first=first)
            return RoundTripStep(
                first,
                report.sent,
                report.received,
                report.wrong,
                report.lost,
                report.samples_us,
                report.elapsed_s,
                fails,
            )
        t = self.transceiver_op.transceiver
        assert t is not None, "the transceiver's operator starts first"
        payloads = expected = None
        if (pool := self._pool()) is not None:
            requests, answers = pool
            payloads = [requests[(first + i) % len(requests)] for i in range(n)]
            expected = [answers[(first + i) % len(requests)] for i in range(n)]
        start = time.perf_counter()
        rt = t.roundtrip(
            count=n,
            size=self.size,
            payloads=payloads,
            expected=expected,
            window=self.window,
            rate=self.rate,
            timeout=max(10.0, self.timeout_s * n),
        )
        return RoundTripStep(
            first,
            rt.sent,
            rt.received,
            rt.wrong,
            rt.sent - rt.received,
            rt.rtt_ns.astype(np.float64) / 1e3,
            time.perf_counter() - start,
            fails,
        )

    def _pool(self) -> tuple[list[bytes], list[bytes]] | None:
        """The requests sent in turn and their answers (qec or messages); None: echo."""
        if self.qec is not None:
            return self.qec.requests, self.qec.expected
        if self.messages is not None:
            return self.messages.requests, self.messages.expected
        return None


class SensorPeerOp(Operator):
    """``count`` frames of ``frame_bytes`` (a counting pattern, different per frame) in steps
    of ``chunk``, at ``rate`` frames/s (None: as fast as the link takes them), with the faults
    ``loss``, ``reorder``, ``duplicate``, ``corrupt``: the ``peer`` keys, validated as
    RoceTransceiverOp's are (``**self.kwargs("peer")`` or Python)."""

    def __init__(
        self,
        fragment: Fragment,
        *args: Any,
        transceiver_op: RoceTransceiverOp,
        count: int,
        progress_s: float = 0.0,
        namespace: VethNamespace | None = None,
        **params: Any,
    ) -> None:
        p, holoscan = operator_parameters(fragment, PEER, params, "SensorPeerOp")
        self.transceiver_op = transceiver_op
        self.namespace = namespace
        self.count, self.frame_bytes, self.payload = count, p["frame_bytes"], p["payload"]
        self.rate, self.chunk, self.link_kind = p["rate"], p["chunk"], p["link"]
        self.faults = Faults(p["loss"], p["reorder"], p["duplicate"], p["corrupt"])
        self.seed = p["seed"]
        self.progress = Progress("frames", count, progress_s)
        self.sent = 0  # frames whose packets went out
        self.made = 0  # frames built and announced on ``sent``
        self.packets = 0
        self._pending: list[SentFrame] = []
        self._link: Link | None = None
        self._sensor: Sensor | None = None
        self._next_at = 0.0
        super().__init__(fragment, *args, **holoscan)

    def setup(self, spec: OperatorSpec) -> None:
        spec.output("sent")

    def start(self) -> None:
        cfg = self.transceiver_op.config
        if self.link_kind != "loopback":
            self._link = _open(cfg, self.link_kind, self.namespace, own_port=12288)
            addresses = self._link.addresses
        else:
            addresses = None  # the transceiver's peer on the loopback wire
        self._sensor = Sensor.for_config(
            cfg, addresses, payload=self.payload, faults=self.faults, seed=self.seed
        )
        self._next_at = time.perf_counter()

    def stop(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        if self.transceiver_op.transceiver is None or self._sensor is None:
            return  # the transceiver's start() has not run yet (the scheduler's limit bounds this)
        # A step's records are emitted one compute before its packets go: a message is
        # published when compute() returns, so a checker has the record before the frame.
        for sent in self._pending:
            self._pace()
            for packet in sent.packets:
                self._send(packet)
            sent.packets = []  # what a checker needs is the content and the faults
        self.sent += len(self._pending)
        self.progress.update(self.sent)
        n = min(self.chunk, self.count - self.made)
        if n:
            self._pending = [
                self._sensor.frame(k, pattern(k, self.frame_bytes))
                for k in range(self.made, self.made + n)
            ]
            self.made += n
            op_output.emit(list(self._pending), "sent")
        else:
            self._pending = []
        if self.sent >= self.count:
            self.transceiver_op.finish(expect=self.count)
            self.stop_execution()

    def _pace(self) -> None:
        if self.rate:
            self._next_at += 1.0 / self.rate
            while time.perf_counter() < self._next_at:
                pass  # pacing: a busy wait keeps the frame times exact

    def _send(self, packet: bytes) -> None:
        self.packets += 1
        if self._link is not None:
            self._link.send(packet)
            return
        t = self.transceiver_op.transceiver
        assert t is not None, "the transceiver's operator starts first"
        t.inject(packet, wait=1.0)  # lossless: waits for room, counts a drop after 1 s


def _open(cfg: dict[str, Any], kind: str, ns: VethNamespace | None, own_port: int) -> Link:
    """The peer's side of the wire: UDP here, or a packet socket on the veth end inside the
    namespace (opened there, used from here)."""
    if kind == "udp":
        return open_link(cfg, "udp", own_port=own_port)
    if ns is None:
        raise ValueError(f"peer.link {kind!r} needs the namespace the app made")
    return inside(ns.namespace, lambda: open_link(cfg, "packet", ns.theirs, own_port=own_port))


def pattern(frame_number: int, size: int) -> bytes:
    """Frame ``frame_number``'s content: a counting pattern that starts differently per frame."""
    period = bytes((frame_number * 7 + i) & 0xFF for i in range(256))
    return (period * (size // 256 + 1))[:size]
