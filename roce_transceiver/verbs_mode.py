"""Verbs mode on one machine: the one-sided exchange end to end, with a peer in the loop.

Verbs mode (docs/verbs_mode.md) answers requests that arrive as an RDMA WRITE into a slot of our
ring plus a FETCH_ADD on our signal word, with a put_signal into the same slot of the peer's
ring and its signal word. :class:`VerbsLoopback` assembles every part of it in one process:

- our NIC, the port (``_core.VerbsPort``): the software ConnectX behind the queue pair, both
  halves of it as a ConnectX is: its responder places the peer's WRITEs in our ring and executes
  its FETCH_ADDs on our signal word (pinned host memory the GPU maps) and acknowledges them; its
  requester carries our put_signals out. ``nic_handler`` picks how the queue pair's doorbell is
  rung (GPUNetIO's CPU proxy, GPU_SM_DB or BlueFlame: ``doca.nic_handler``'s values);
- the serve loop (``_core.VerbsServer``): a persistent kernel calling GPUNetIO's device API on the
  cuda executor, a CPU thread writing the same WQEs and doorbells on the cpu executor; it polls
  the memory our NIC wrote and runs the handler (echo or qec, the Ethernet mode's) between the two;
- the peer: a cpu-executor :class:`Transceiver` whose engine places our replies in its ring and
  counts its signal word, and a requester (``_core.run_verbs_requests``) that sends each request
  and times it until the peer's signal counts the reply.

No engine of ours is on the path: the Ethernet mode's engine is the peer's NIC here.

By default the two sides meet in memory (a split loopback: our port's requests go into the
peer's engine, its answers to the peer's requester). Given a veth pair into a network namespace
(``roce_transceiver.netns``), they meet on a real interface instead: the port on our end (a
packet socket, capturing its end to a pcap), the peer's engine and requester inside the
namespace on the other.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from roce_transceiver import _core
from roce_transceiver.config import SCHEMA
from roce_transceiver.netns import VethNamespace, inside
from roce_transceiver.protocol import ProtocolError, parse
from roce_transceiver.schema import ConfigError
from roce_transceiver.transceiver import (
    RoundTrip,
    RoundTripPlan,
    Transceiver,
    TransceiverError,
)

__all__ = [
    "NIC_HANDLERS",
    "PUT_SIGNALS_NEED_CUDA",
    "SLOT_HEADER_BYTES",
    "VerbsLoopback",
    "VerbsModeError",
    "resolve_nic_handler",
]

log = logging.getLogger(__name__)

SLOT_HEADER_BYTES = 8  # u32 payload length, u32 status (0, or why the handler refused)
MAX_SLOTS = 64
MAX_SLOT_BYTES = 1024  # one packet per request at the loopback's 1024-byte MTU (+ headers)
SLOT_ALIGN = 16  # the serve loop copies slots 16 bytes at a time

#: ``doca.nic_handler``'s values (the schema's list); ``auto`` resolves to gpu_sm_db.
NIC_HANDLERS: tuple[str, ...] = SCHEMA.keys["doca"].keys["nic_handler"].choices  # type: ignore[union-attr]
#: The handlers the software ConnectX serves, in the order the benchmark reports them.
SERVED_HANDLERS = ("cpu_proxy", "gpu_sm_db", "gpu_sm_bf")

# Our QP and memory, and the peer's, as a set-up exchange would name them (docs/verbs_mode.md).
OURS_QPN, PEER_QPN = 0x31, 0x32
OURS_MAC, PEER_MAC = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
OURS_IP, PEER_IP = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
VETH_OURS_IP, VETH_PEER_IP = "10.79.0.1", "10.79.0.2"  # only inside the veth pair
RING_VA, RING_RKEY, SIGNAL_VA, SIGNAL_RKEY = 0x1000_0000, 0x1001, 0x2000_0000, 0x1002
PEER_RING_VA, PEER_RING_RKEY = 0x3000_0000, 0x2001
PEER_SIGNAL_VA, PEER_SIGNAL_RKEY = 0x4000_0000, 0x2002
LKEY = 0x1C0C

#: The serve kernel's epochs: the ``cuda`` section's keys Verbs mode takes.
EPOCH_KEYS = ("epoch_us", "epochs_in_flight")

#: Why ``put_signals()`` (the doorbell's floor) does not run on the cpu executor.
PUT_SIGNALS_NEED_CUDA = (
    "the cpu executor has no device-API kernel to post them (its serve loop's thread writes "
    "its own WQEs); the cuda executor only"
)


class VerbsModeError(TransceiverError):
    """Verbs mode cannot be set up or ran into an error (the message says which)."""


def resolve_nic_handler(name: str) -> str:
    """``name`` resolved: ``auto`` is gpu_sm_db, what DOCA picks when the GPU can reach the
    doorbell (the software ConnectX's doorbell page is pinned memory the GPU maps)."""
    if name not in NIC_HANDLERS:
        raise VerbsModeError(f"nic_handler {name!r}: one of {', '.join(NIC_HANDLERS)}")
    return "gpu_sm_db" if name == "auto" else name


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _packet_socket(interface: str) -> int:
    """A raw AF_PACKET socket bound to ``interface``: its fd, for a wire that owns it."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    try:
        s.bind((interface, 0))
    except OSError:
        s.close()
        raise
    return s.detach()


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def _custom_serve_keys(config: Mapping[str, Any], executor: str) -> dict[str, Any]:
    """The serve loop's keys for a user handler (the configuration's custom section, checked
    by its schema): its state and parameters, and on the cpu executor its shared object, on the
    cuda executor the serve kernels it is linked into (custom_handler.compile_engine: the serve
    kernels are built with the package, with GPUNetIO's device API; docs/verbs_mode.md)."""
    from roce_transceiver import custom_handler as ch
    from roce_transceiver.custom_params import custom_params_bytes
    from roce_transceiver.transceiver import custom_source, link_custom_handler

    section = config["custom"]
    src = custom_source(section)
    try:
        if executor == "cpu":
            built = ch.build_host_handler(
                src.text, name=src.name, entry=src.entry, include_dirs=src.include_dirs
            )
            handler: dict[str, Any] = {"custom_library": str(built.library)}
        else:
            image = link_custom_handler(src, config["cuda"]["device"], ch.VERBS_SERVE_KERNELS)
            handler = {"custom_kernel_image": image}
    except (ch.HandlerBuildFailure, ValueError) as e:
        raise VerbsModeError(f"custom: {e}") from None
    return {
        **handler,
        "custom_state_bytes": section["state_bytes"],
        "custom_params": custom_params_bytes(section["params"]),
    }


class VerbsLoopback(Transceiver):
    """Verbs mode with a peer in the same process: a Transceiver whose NIC is the software
    ConnectX and whose loop is the serve loop; ``start()`` / ``stop()`` or ``with``.

    ``handler`` is ``echo``, ``qec`` (``distance`` picks the code) or ``custom`` (``custom``:
    the transceiver's custom section: a shared object on the cpu executor, linked into the serve
    kernels on the cuda executor); ``slots`` requests of up to
    ``slot_bytes - 8`` bytes may be outstanding (the requester here keeps one); a reply whose
    completion does not come within ``completion_timeout`` seconds ends the loop with an error.
    ``nic_handler``: who rings our queue pair's doorbell (``doca.nic_handler``'s values).
    ``veth``: meet the peer across this veth pair (root); ``capture``: a pcap of our end then.
    ``serve=False``: no serve loop; the queue pair is left to ``put_signals()`` (the doorbell's
    floor: the same put_signal with no request and no handler).
    ``cuda``: the serve kernel's epochs, as the configuration's ``cuda`` section names them
    (``epoch_us``, ``epochs_in_flight``; its defaults where left out).

    The executor, handler, qec, custom and cuda settings are the transceiver's configuration,
    checked by its schema; ``roundtrip()`` is the Transceiver's, with its argument checks. What
    only the Ethernet mode has (the host's SENDs, completions and frames, the loopback wire's
    calls, regions, the engine's counters) is refused, naming Verbs mode.
    """

    def __init__(
        self,
        handler: str = "echo",
        *,
        executor: str = "auto",
        distance: int = 3,
        slots: int = 16,
        slot_bytes: int = 256,
        completion_timeout: float = 1.0,
        nic_handler: str = "auto",
        veth: VethNamespace | None = None,
        capture: str = "",
        custom: Mapping[str, Any] | None = None,
        serve: bool = True,
        cuda: Mapping[str, int] | None = None,
    ) -> None:
        if handler not in ("echo", "qec", "custom"):
            raise VerbsModeError(
                f"handler {handler!r}: Verbs mode answers with echo, qec or custom"
            )
        if (handler == "custom") != (custom is not None):
            raise VerbsModeError("custom: the user handler's section, with handler 'custom' only")
        if not 1 <= slots <= MAX_SLOTS:
            raise VerbsModeError(f"slots {slots}: must be 1..{MAX_SLOTS}")
        if not SLOT_HEADER_BYTES < slot_bytes <= MAX_SLOT_BYTES or slot_bytes % SLOT_ALIGN:
            raise VerbsModeError(
                f"slot_bytes {slot_bytes}: a multiple of {SLOT_ALIGN} in {SLOT_ALIGN}.."
                f"{MAX_SLOT_BYTES} (8 bytes of each slot are its header)"
            )
        unknown = sorted(set(cuda or {}) - set(EPOCH_KEYS))
        if unknown:
            raise VerbsModeError(
                f"cuda: {', '.join(unknown)}: Verbs mode takes {' and '.join(EPOCH_KEYS)} only"
            )
        self.nic_handler = resolve_nic_handler(nic_handler)
        self.slots, self.slot_bytes = slots, slot_bytes
        self._serve = serve
        self._veth, self._capture = veth, capture
        self._completion_timeout = completion_timeout
        config: dict[str, Any] = {"executor": executor, "handler": handler}
        if handler == "qec":
            config["qec"] = {"distance": distance}
        if custom is not None:
            config["custom"] = dict(custom)
        if cuda:
            config["cuda"] = dict(cuda)
        try:
            super().__init__(config)
        except ConfigError as e:
            raise VerbsModeError(str(e)) from None
        self.handler = handler
        self._port: Any = None
        self._server: Any = None
        self._wire: Any = None  # where the peer's requests go
        self._next_psn = 0
        self._requests = 0
        self._final: dict[str, Any] | None = None
        # The last roundtrip()'s first part of each round trip: from sending the request to our
        # NIC's ATOMIC ACKNOWLEDGE of its signal back at the peer (the request has landed).
        self.landed_ns: np.ndarray = np.zeros(0, dtype=np.uint64)

    def _make_core(self) -> Any:
        """Verbs mode's parts, not yet started: the peer (a cpu-executor Transceiver whose
        engine is the peer's NIC), and the configurations of our port (the software ConnectX)
        and of the serve loop."""
        gpu = self.executor == "cuda"
        if gpu and not _core.gpunetio_info()["built"]:
            raise VerbsModeError(
                "Verbs mode on the cuda executor needs GPUNetIO's device API, which this build "
                f"lacks ({_core.gpunetio_info()['source']}); the cpu executor runs without it"
            )
        if gpu and self.nic_handler == "gpu_sm_bf" and not _core.gpunetio_info()["blueflame"]:
            raise VerbsModeError(
                "nic_handler 'gpu_sm_bf' on the cuda executor: this build's GPUNetIO headers "
                f"({_core.gpunetio_info()['source']}) cannot ring BlueFlame (their ring_bf copies "
                "from the WQE's bytes, not its address); build with nvshmem 3.7+'s headers "
                "(RT_GPUNETIO_INCLUDE), or use cpu_proxy or gpu_sm_db"
            )
        slots, slot_bytes, veth = self.slots, self.slot_bytes, self._veth
        ring = slots * slot_bytes
        wqes = max(64, _pow2_at_least(2 * slots))
        peer_cfg: dict[str, Any] = {
            "executor": "cpu",
            "handler": "sink",
            "completions": False,
            "qp": {"transport": "RC", "qpn": PEER_QPN, "peer_qpn": OURS_QPN},
            "regions": [
                {"va": PEER_RING_VA, "rkey": PEER_RING_RKEY, "length": ring},
                {"va": PEER_SIGNAL_VA, "rkey": PEER_SIGNAL_RKEY, "length": 8},
            ],
        }
        ours_mac, peer_mac, ours_ip, peer_ip = OURS_MAC, PEER_MAC, OURS_IP, PEER_IP
        if veth is not None:
            ours_mac, peer_mac = _mac_bytes(veth.mac("ours")), _mac_bytes(veth.mac("theirs"))
            ours_ip, peer_ip = socket.inet_aton(VETH_OURS_IP), socket.inet_aton(VETH_PEER_IP)
            peer_cfg["nic"] = "socket"
            peer_cfg["socket"] = {"mode": "packet", "interface": veth.theirs}
            peer_cfg["local"] = {"mac": peer_mac.hex(":"), "ip": VETH_PEER_IP}
            peer_cfg["peer"] = {"mac": ours_mac.hex(":"), "ip": VETH_OURS_IP}
        self._peer = Transceiver(peer_cfg)
        self._addresses = (ours_mac, peer_mac, ours_ip, peer_ip)
        self._port_config = {
            "qpn": OURS_QPN,
            "peer_qpn": PEER_QPN,
            "sq_wqe_num": wqes,
            "cqe_num": wqes,
            "mtu": 1024,
            "local_mac": ours_mac,
            "peer_mac": peer_mac,
            "local_ip": ours_ip,
            "peer_ip": peer_ip,
            "lkey": LKEY,
            "nic_handler": self.nic_handler,
            # Our ring and signal word: the responder's regions, where the peer's requests land.
            "regions": [
                {"va": RING_VA, "rkey": RING_RKEY, "length": ring},
                {"va": SIGNAL_VA, "rkey": SIGNAL_RKEY, "length": 8},
            ],
            # A ConnectX's default transport timeout is tens of ms; a short one only resends
            # what a busy (few-core) machine is still carrying. Across a veth pair the socket
            # NIC's first answers take milliseconds (docs/verbs_mode.md): patient there.
            "retransmit_ns": 50_000_000 if veth is None else 1_000_000_000,
            "local_bytes": -(-(ring + 8 * slots) // 4096) * 4096,
            "gpu": gpu,
        }
        custom_keys: dict[str, Any] = {}
        if self.config["handler"] == "custom":
            custom_keys = _custom_serve_keys(self.config, self.executor)
        self._serve_config = {
            "handler": self.config["handler"],
            "qec_blob": self._qec_blob,
            **custom_keys,
            "request_region": 0,
            "signal_region": 1,
            "slots": slots,
            "slot_bytes": slot_bytes,
            "peer_ring": PEER_RING_VA,
            "peer_ring_rkey": PEER_RING_RKEY,
            "peer_signal": PEER_SIGNAL_VA,
            "peer_signal_rkey": PEER_SIGNAL_RKEY,
            "completion_timeout_s": self._completion_timeout,
            **{key: self.config["cuda"][key] for key in EPOCH_KEYS},
        }
        return None  # the parts are made at start(), in the order the GPU needs

    # -- life cycle -------------------------------------------------------
    def start(self) -> VerbsLoopback:
        """Peer, port, serve loop, in the order the GPU needs (docs/verbs_mode.md): every
        allocation and kernel load before the persistent kernel runs."""
        if self._port is not None or self._stopped:
            raise VerbsModeError(
                "start(): already started or stopped (a VerbsLoopback starts once)"
            )
        try:
            if self._veth is None:
                self._peer.start()
                port_end, self._wire = _core.Wire.split_loopback(self._peer._core)
                self._port = _core.VerbsPort.over_wire(port_end, self._port_config)
            else:  # the peer's sockets are opened inside the namespace, ours here
                v = self._veth
                inside(v.namespace, self._peer.start)
                fd = _packet_socket(v.ours)
                self._port = _core.VerbsPort.over_socket(fd, self._capture, self._port_config)
                self._wire = _core.Wire.over_socket(
                    inside(v.namespace, lambda: _packet_socket(v.theirs)), ""
                )
            self._port.start()
            if self._serve:
                self._server = _core.VerbsServer(self._port, self._serve_config)
                self._server.start()
        except (ValueError, RuntimeError, OSError) as e:
            self.stop()
            raise VerbsModeError(f"start(): {e}") from None
        except BaseException:
            self.stop()
            raise
        log.info(
            "verbs mode: %s, %s handler, %d slots, NIC handler %s%s",
            self.executor_reason,
            self.handler,
            self.slots,
            self.nic_handler,
            "" if self._serve else ", no serve loop",
        )
        return self

    def stop(self) -> None:
        """Idempotent: the serve loop, the port, the peer; every one is stopped even when one of
        them fails (the first failure is raised after)."""
        self._stopped = True
        errors: list[str] = []
        for name, part in (
            ("serve loop", self._server),
            ("port", self._port),
            ("peer", self._peer),
        ):
            if part is None:
                continue
            try:
                part.stop()
            except (RuntimeError, TransceiverError) as e:
                errors.append(f"{name}: {e}")
        if self._final is None and self._built():
            self._final = self._read_stats()  # every part stopped: final counters
        self._wire = None  # closes the requester's socket
        if self._final is not None and not errors:
            # The server keeps the port alive; both go: the port's socket closes and its
            # capture is flushed.
            self._server = self._port = None
        if errors:
            raise VerbsModeError("stop(): " + "; ".join(errors))

    def __enter__(self) -> VerbsLoopback:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _built(self) -> bool:
        """Whether start() got as far as the last part this loopback has."""
        return (self._server if self._serve else self._port) is not None

    # -- the exchange -----------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The serve loop's counters and state (None without one), the port's (software
        ConnectX: both halves) counters, the atomics our NIC and the peer's engine executed,
        and the NIC handler. After stop(): as they were when it stopped."""
        if self._final is not None:
            return self._final
        if not self._built():
            raise VerbsModeError("stats(): not started")
        return self._read_stats()

    def _read_stats(self) -> dict[str, Any]:
        port = dict(self._port.stats())
        server = self._server
        return {
            "server": dict(server.stats()) if server is not None else None,
            "port": port,
            "ours_atomics": port["atomics"],
            "peer_atomics": self._peer.stats()["atomics"],
            "on_gpu": bool(server.on_gpu) if server is not None else self._port_config["gpu"],
            "nic_handler": self.nic_handler,
        }

    def exchange(self, frames: list[bytes], want: int, timeout: float = 5.0) -> list[bytes]:
        """Send ``frames`` as the peer's requester would and return the first ``want`` answers
        our NIC sends back to it (ACKs, NAKs, ATOMIC ACKNOWLEDGEs): what the responder says to
        requests the serve loop may never see (a bad rkey, a PSN gap, a duplicate atomic)."""
        if self._wire is None or self._final is not None:
            raise VerbsModeError("exchange(): not running (start() first)")
        deadline = time.monotonic() + timeout
        for frame in frames:
            while not self._wire.send(frame):
                if time.monotonic() > deadline:
                    raise VerbsModeError(f"exchange(): no room to send within {timeout} s")
        got: list[bytes] = []
        while len(got) < want:
            for f in self._wire.receive(64):
                try:
                    p = parse(f)
                except ProtocolError:
                    continue  # a packet socket sees other traffic too
                if p.dest_qp == PEER_QPN and p.aeth is not None:
                    got.append(f)
            if len(got) < want and time.monotonic() > deadline:
                raise VerbsModeError(f"exchange(): {len(got)} of {want} answers within {timeout} s")
        return got

    def _request_bytes_max(self) -> int:
        # A request that does not fit a slot is refused by the requester before it is sent.
        return MAX_SLOT_BYTES

    def _require_running(self, what: str) -> None:
        if not self._serve:
            raise VerbsModeError(f"{what}: no serve loop (serve=False: put_signals() only)")
        if self._server is None or self._final is not None:
            raise VerbsModeError(f"{what}: not running (start() first)")
        state = self._server.stats()["state"]
        if state != "running":
            raise VerbsModeError(f"{what}: the serve loop has ended ({state})")

    def _run_round_trips(self, plan: RoundTripPlan) -> RoundTrip:
        """The plan, run by the peer's requester: one request at a time, each timed until the
        peer's signal word counts its reply; what it cannot keep is refused, naming it."""
        for name, value, needs in (
            ("window", plan.window, plan.window > 1),
            ("rate", plan.interval_ns, plan.interval_ns > 0),
            ("queues", plan.queues, plan.queues > 1),
        ):
            if needs:
                raise VerbsModeError(
                    f"roundtrip(): {name}={value}: Verbs mode's requester keeps one request in "
                    "flight on one queue pair, as fast as its replies come (the Ethernet mode's "
                    "far end keeps windows, rates and queues)"
                )
        params: dict[str, Any] = {
            "payloads": b"".join(plan.payloads),
            "payload_len": len(plan.payloads[0]),
            "count": plan.count,
            "timeout_s": plan.timeout,
            "dest_qp": OURS_QPN,
            "peer_qpn": PEER_QPN,
            "src_mac": self._addresses[1],
            "dst_mac": self._addresses[0],
            "src_ip": self._addresses[3],
            "dst_ip": self._addresses[2],
            "ring_va": RING_VA,
            "ring_rkey": RING_RKEY,
            "signal_va": SIGNAL_VA,
            "signal_rkey": SIGNAL_RKEY,
            "slots": self.slots,
            "slot_bytes": self.slot_bytes,
            "first_psn": self._next_psn,
            "first_request": self._requests,
        }
        if plan.expected is not None:
            params["expected"] = b"".join(plan.expected)
            params["expected_len"] = len(plan.expected[0])
        try:
            r = _core.run_verbs_requests(self._wire, self._peer._core, params)
        except (ValueError, RuntimeError) as e:
            raise VerbsModeError(f"roundtrip(): {e}") from None
        self._next_psn = int(r.pop("next_psn"))
        self._requests += int(r["sent"])
        reply_errors = int(r.pop("reply_errors"))
        if reply_errors:
            log.warning("verbs mode: the handler refused %d requests", reply_errors)
        rtt = np.frombuffer(r.pop("rtt_ns"), dtype=np.uint64).copy()
        self.landed_ns = np.frombuffer(r.pop("landed_ns"), dtype=np.uint64).copy()
        if r["status"] != "done":
            server = self._server.stats()
            log.warning("verbs mode: the run ended %s; serve loop %s", r["status"], server)
        return RoundTrip(rtt_ns=rtt, **r)

    def put_signals(self, count: int, size: int = 32, *, timeout: float = 10.0) -> dict[str, Any]:
        """``count`` put_signals from a GPU kernel through GPUNetIO's device API for our NIC
        handler, one at a time, each waited for by its CQ poll: ``size`` bytes into slot
        i % slots of the peer's ring, then +1 on the peer's signal word, as the serve loop
        answers, with no request and no handler. The doorbell's floor under the round trip.
        Returns ``completed``, ``errors``, ``elapsed_ns`` (%globaltimer, the first post to the
        last completion: one total, no time of each) and ``timed_out`` (``timeout``: the
        kernel's deadline). Without a serve loop only (``serve=False``: the two would share the
        queue pair's send ring and CQ), on the cuda executor."""
        if self._serve:
            raise VerbsModeError(
                "put_signals(): the serve loop owns the queue pair (VerbsLoopback(serve=False))"
            )
        if self._port is None or self._final is not None:
            raise VerbsModeError("put_signals(): not running (start() first)")
        if self.executor != "cuda":
            raise VerbsModeError(f"put_signals(): {PUT_SIGNALS_NEED_CUDA}")
        if not 1 <= size <= self.slot_bytes:
            raise VerbsModeError(f"put_signals(): size {size}: must be 1..{self.slot_bytes}")
        if not 1 <= count < 1 << 32:
            raise VerbsModeError(f"put_signals(): count {count}: must be 1..{(1 << 32) - 1}")
        base = int(self._port.local_address())
        params = {
            "raddr": PEER_RING_VA,
            "rkey": PEER_RING_RKEY,
            "slot_bytes": self.slot_bytes,
            "slots": self.slots,
            "laddr": base,  # the staging region, where the serve loop builds its replies
            "lkey": LKEY,
            "size": size,
            "sig_raddr": PEER_SIGNAL_VA,
            "sig_rkey": PEER_SIGNAL_RKEY,
            "sink_laddr": base + self.slots * self.slot_bytes,  # the old values, after them
            "count": count,
            "timeout_s": timeout,
        }
        try:
            return dict(self._port.put_signal_loop(params))
        except (ValueError, RuntimeError) as e:
            raise VerbsModeError(f"put_signals(): {e}") from None

    @property
    def running(self) -> bool:
        return self._server is not None and self._final is None

    def _ethernet_only(self, what: str) -> VerbsModeError:
        return VerbsModeError(
            f"{what}: the Ethernet mode's (its engine's rings, the host's SENDs, completions "
            "and frames, the loopback wire); Verbs mode answers the peer's WRITEs in its serve "
            "loop and has none (stats() says what it counts)"
        )

    def queue_stats(self, queue: int) -> dict[str, int]:
        raise self._ethernet_only("queue_stats()")

    def epoch_stats(self) -> dict[str, Any]:
        raise self._ethernet_only("epoch_stats()")

    def nic_info(self) -> dict[str, Any]:
        raise self._ethernet_only("nic_info()")

    def send(self, data: bytes | bytearray | memoryview, timeout: float = 1.0) -> None:
        raise self._ethernet_only("send()")

    def receive(
        self, timeout: float | None = 0.0, max_messages: int = 1024, spin: float = 0.0
    ) -> list[Any]:
        raise self._ethernet_only("receive()")

    def frames(
        self, timeout: float | None = 0.0, max_frames: int = 1024, spin: float = 0.0
    ) -> list[Any]:
        raise self._ethernet_only("frames()")

    def __iter__(self) -> Iterator[Any]:
        raise self._ethernet_only("iteration")

    def preload(self, frames: Iterable[bytes | bytearray | memoryview]) -> int:
        raise self._ethernet_only("preload()")

    def inject(self, frame: bytes, wait: float = 0.0) -> bool:
        raise self._ethernet_only("inject()")

    def collect(self, max_frames: int = 1024, timeout: float = 0.0, want: int = 1) -> list[bytes]:
        raise self._ethernet_only("collect()")

    def read_region(self, index: int, offset: int = 0, length: int | None = None) -> bytes:
        raise self._ethernet_only("read_region()")
