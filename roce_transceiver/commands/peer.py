"""``roce-transceiver peer qpu``: a software quantum controller talking to a transceiver;
``peer sensor``: HSB-style frames at it; ``peer bridge``: a software sensor bridge that a host
programs over HSB's control plane (roce_transceiver/peers/bridge.py, docs/hsb.md).

The peer reads the transceiver's own YAML and mirrors it (its addresses are the config's
``peer`` section), sends requests over the network and checks the answers
(:mod:`roce_transceiver.peers.qpu`). Exit status 0 when every request was answered right,
1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from roce_transceiver.argtypes import (
    COUNT,
    FRACTION,
    RATE,
    SECONDS,
    SECONDS_OR_ZERO,
    integer,
)
from roce_transceiver.commands import CommandError

__all__ = ["register", "run"]

# qpu: echo payload bytes, as the qpu peer takes them (RoCE's largest path MTU, 4096).
_ECHO_SIZE = integer(4, 4096)
# sensor: bytes per RDMA WRITE, a multiple of 4 as an HSB sends them, at most what a
# 9000-byte jumbo frame carries in round numbers (the apps' peer.payload range). Whether the
# transceiver's slots hold such a packet depends on its config: checked once it is read.
_SENSOR_PAYLOAD = integer(4, 8192, multiple_of=4)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "peer",
        help="run a software peer against a transceiver (qpu)",
        description="Run a software peer against a transceiver over the network, "
        "mirroring the transceiver's configuration file.",
    )
    kinds = p.add_subparsers(dest="peer", metavar="PEER", required=True)
    q = kinds.add_parser(
        "qpu",
        help="send syndromes (qec) or payloads (echo), check and time the answers",
        description="Send requests to the transceiver configured by --config and check and "
        "time every answer: corrections against the Python decoder (qec), echoes "
        "against what was sent (echo).",
    )
    q.add_argument("--config", required=True, metavar="FILE", help="the transceiver's YAML")
    q.add_argument("--mode", choices=("udp", "packet"), help="default: the config's socket.mode")
    q.add_argument("--interface", help="packet mode: the peer's own interface")
    q.add_argument("--handler", choices=("echo", "qec"), help="default: the config's handler")
    q.add_argument("--count", type=COUNT, default=1000, help="requests (default 1000)")
    q.add_argument("--rate", type=RATE, help="requests per second (default: one at a time)")
    q.add_argument(
        "--size", type=_ECHO_SIZE, default=32, help="echo payload bytes, 4 to 4096 (default 32)"
    )
    q.add_argument(
        "--timeout", type=SECONDS, default=1.0, help="seconds to wait per answer (default 1)"
    )
    q.add_argument(
        "--syndromes",
        choices=("random", "stim"),
        default="random",
        help="qec: i.i.d. flips, or a stim circuit's detectors (needs stim)",
    )
    q.add_argument(
        "--opcode",
        choices=("send", "write-imm"),
        default="send",
        help="SEND Only, or WRITE Only with Immediate into the config's regions[0]",
    )
    # With qp.retransmit the peer is the RC responder of the answers (docs/reliable_replies.md).
    for fault, what in (
        ("loss", "answers lost on the way in"),
        ("answer-loss", "the peer's ACKs and NAKs lost on the way back"),
        ("reorder", "answers held back behind the next"),
    ):
        q.add_argument(
            f"--{fault}",
            type=FRACTION,
            default=0.0,
            dest=fault.replace("-", "_"),
            help=f"with qp.retransmit: rate of {what}, 0 to 1",
        )
    q.add_argument(
        "--rnr-every",
        type=integer(0, 1_000_000),
        default=0,
        dest="rnr_every",
        help="with qp.retransmit: after this many answers taken, refuse --rnr-burst with RNR NAKs",
    )
    q.add_argument(
        "--rnr-burst", type=integer(0, 1000), default=0, dest="rnr_burst", help="see --rnr-every"
    )
    q.add_argument(
        "--no-nak",
        action="store_false",
        dest="nak_on_gap",
        help="with qp.retransmit: drop an answer past a gap silently (the transceiver's timer "
        "resends) instead of answering NAK PSN sequence error",
    )
    q.add_argument("--json", action="store_true", help="print the report as one JSON object")
    q.set_defaults(run=run)
    sn = kinds.add_parser(
        "sensor",
        help="send HSB-style frames (UC WRITE Only + WRITE with Immediate)",
        description="Send frames as an HSB sensor bridge does to the transceiver configured by "
        "--config (its frames section says where the pages are), with optional faults.",
    )
    sn.add_argument("--config", required=True, metavar="FILE", help="the transceiver's YAML")
    sn.add_argument("--mode", choices=("udp", "packet"), help="default: the config's socket.mode")
    sn.add_argument("--interface", help="packet mode: the peer's own interface")
    sn.add_argument("--frames", type=COUNT, default=10, help="frames to send (default 10)")
    sn.add_argument(
        "--frame-bytes", type=COUNT, dest="frame_bytes", help="default: as much as a page holds"
    )
    sn.add_argument(
        "--payload",
        type=_SENSOR_PAYLOAD,
        default=1024,
        help="data bytes per packet, a multiple of 4 up to 8192 that the transceiver's "
        "queues.slot_bytes holds with the headers (default 1024)",
    )
    sn.add_argument("--rate", type=RATE, help="frames per second (default: as fast as it can)")
    for fault in ("loss", "reorder", "duplicate", "corrupt"):
        sn.add_argument(
            f"--{fault}", type=FRACTION, default=0.0, help=f"{fault} rate per packet, 0 to 1"
        )
    sn.add_argument(
        "--end-loss",
        type=FRACTION,
        default=0.0,
        dest="end_loss",
        help="rate per frame at which its end-of-frame packet is lost, 0 to 1",
    )
    sn.add_argument("--content", metavar="FILE", help="frame bytes from FILE (default: a pattern)")
    sn.add_argument(
        "--record-crc",
        choices=("jamcrc", "zero"),
        default="jamcrc",
        dest="record_crc",
        help="the metadata record's CRC: the frame's JAMCRC (default), or 0 as HSB's emulator "
        "leaves it",
    )
    sn.add_argument(
        "--linger",
        type=SECONDS_OR_ZERO,
        default=0.0,
        help="seconds to keep receiving SENDs from the transceiver after the last frame",
    )
    sn.add_argument("--json", action="store_true", help="one JSON object per frame sent")
    sn.set_defaults(run=run_sensor)
    register_bridge(kinds)


def _status_at(text: str) -> tuple[int, int]:
    address, _, status = text.partition("=")
    try:
        return int(address, 0), int(status, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: ADDR=STATUS (e.g. 0x1000=0x03)") from None


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.partition(":")
    return host, integer(1, 65535)(port) if port else 12267


def register_bridge(kinds: argparse._SubParsersAction) -> None:
    b = kinds.add_parser(
        "bridge",
        help="a software Holoscan Sensor Bridge: enumeration, control plane, programmed streams",
        description="Run a software sensor bridge at --ip: it announces itself, answers the "
        "Ethernet Control Bus, and streams frames where its registers say once a host "
        "programs it (roce-transceiver listen --hsb). Runs until --seconds or a signal, then "
        "prints a summary.",
    )
    b.add_argument("--ip", required=True, help="its address (one of this host's)")
    b.add_argument(
        "--mac", default="02:48:53:42:00:01", help="its MAC (packet link: the interface's)"
    )
    b.add_argument(
        "--control-port",
        type=integer(0, 65535),
        default=8192,
        help="ECB port (default 8192; 0: any, the banner says which)",
    )
    b.add_argument("--sensors", type=integer(1, 16), default=2, help="sensors (default 2)")
    b.add_argument("--data-planes", type=integer(1, 8), default=1, help="data planes")
    b.add_argument(
        "--announce",
        type=_host_port,
        metavar="ADDR[:PORT]",
        default=("255.255.255.255", 12267),
        help="where announcements go (default 255.255.255.255:12267)",
    )
    b.add_argument("--no-announce", action="store_true", help="send no announcements")
    b.add_argument("--announce-interval", type=SECONDS, default=1.0, help="seconds (default 1)")
    b.add_argument(
        "--link",
        choices=("udp", "packet"),
        default="udp",
        help="udp: from a UDP socket; packet: whole frames on --interface",
    )
    b.add_argument("--interface", help="packet link: the interface")
    b.add_argument("--frames", type=COUNT, help="frames per sensor at most")
    b.add_argument("--rate", type=RATE, help="frames per second per sensor")
    b.add_argument("--seconds", type=SECONDS, help="stop after this long (default: a signal)")
    b.add_argument("--drop-requests", type=FRACTION, default=0.0, help="ECB requests lost")
    b.add_argument("--drop-replies", type=FRACTION, default=0.0, help="ECB replies lost")
    b.add_argument("--mute-after", type=integer(0), help="answer this many requests, then none")
    b.add_argument(
        "--error-at",
        type=_status_at,
        action="append",
        default=[],
        metavar="ADDR=STATUS",
        help="answer STATUS to requests touching ADDR",
    )
    b.add_argument("--json", action="store_true", help="JSON lines")
    b.set_defaults(run=run_bridge)


def run_bridge(args: argparse.Namespace) -> int:
    import threading
    import time

    from roce_transceiver.commands.running import Stopped
    from roce_transceiver.peers.bridge import BridgeFaults, SoftwareBridge

    out = threading.Lock()

    def report(f: Any) -> None:
        line = {"sensor": f.sensor, "frame_number": f.frame_number, "page": f.page}
        line |= {"bytes": f.bytes, "crc32": f.crc32, "qpn": f.qpn, "host_ip": f.host_ip}
        with out:
            print(json.dumps(line) if args.json else str(line), flush=True)

    faults = BridgeFaults(
        drop_requests=args.drop_requests,
        drop_replies=args.drop_replies,
        status=dict(args.error_at),
        mute_after=args.mute_after,
    )
    try:
        bridge = SoftwareBridge(
            args.ip,
            mac=args.mac,
            control_port=args.control_port,
            data_planes=args.data_planes,
            sensors=args.sensors,
            announce_to=None if args.no_announce else args.announce,
            announce_interval=args.announce_interval,
            link=args.link,
            interface=args.interface,
            frames=args.frames,
            rate=args.rate,
            faults=faults,
            on_frame=report,
        ).start()
    except (ValueError, OSError) as e:
        raise CommandError(f"peer bridge: {e}") from None
    print(
        f"bridge {args.ip}: control port {bridge.control_port}, {args.sensors} sensors, "
        f"{args.link} link; running",
        file=sys.stderr,
        flush=True,
    )
    ticks = threading.Event()  # never set: a wait the signals interrupt
    try:
        end = None if args.seconds is None else time.monotonic() + args.seconds
        while end is None or time.monotonic() < end:
            ticks.wait(0.2 if end is None else min(0.2, max(end - time.monotonic(), 0)))
    except Stopped:
        pass
    finally:
        bridge.stop()
    summary = {
        "answered": bridge.answered,
        "requests": len(bridge.requests),
        "sent": {str(vp): len(f) for vp, f in bridge.sent.items()},
        "refused": {str(vp): r for vp, r in bridge.refused.items() if r},
        "streaming_at_exit": [vp for vp in range(bridge.vps) if bridge.streaming(vp)],
        "errors": bridge.errors,
    }
    with out:
        print(json.dumps(summary) if args.json else str(summary), flush=True)
    return 1 if bridge.errors else 0


_SENSOR_OP = "RDMA_WRITE_ONLY_WITH_IMMEDIATE"


def _check_fits(
    cfg: dict[str, Any], path: str, command: str, option: str, size: int, op: str, step: int
) -> None:
    """A CommandError naming ``option`` when a packet of ``op`` with ``size`` payload bytes
    from this peer is longer than the transceiver's ``queues.slot_bytes``: the socket NIC
    would count each one filtered and deliver none. The packet is built as the peer builds
    it, so the headers (IPv4 or IPv6, RETH, immediate) are the real ones."""
    from roce_transceiver.peers.link import packet_bytes

    slot = cfg["queues"]["slot_bytes"]
    packet = packet_bytes(cfg, op, size)
    if packet > slot:
        most = (slot - (packet - size)) // step * step
        raise CommandError(
            f"{command}: {option} {size}: its packets are {packet} bytes, more than "
            f"queues.slot_bytes {slot} of {path} (the transceiver would drop every one); "
            f"at most {most} fit"
        )


def run(args: argparse.Namespace) -> int:
    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.peers import LinkError, QpuPeer, open_link
    from roce_transceiver.peers.rc_responder import RcFaults, RcResponder

    try:
        cfg = load_config(args.config)
    except (ConfigError, OSError) as e:
        raise CommandError(f"peer qpu: {e}") from None
    handler = args.handler or cfg["handler"]
    if handler not in ("echo", "qec"):
        raise CommandError(f"peer qpu: the transceiver runs handler {handler!r}; use --handler")
    mode = args.mode or cfg["socket"]["mode"]
    write_to = None
    if args.opcode == "write-imm":
        if not cfg["regions"]:
            raise CommandError("peer qpu: --opcode write-imm needs a region in the config")
        write_to = (cfg["regions"][0]["va"], cfg["regions"][0]["rkey"])
    if handler == "echo":
        op = "RDMA_WRITE_ONLY_WITH_IMMEDIATE" if write_to else "SEND_ONLY"
        _check_fits(cfg, args.config, "peer qpu", "--size", args.size, op, 1)
    reliable = cfg["qp"]["retransmit"] and cfg["qp"]["transport"] == "RC"
    faults = {
        "loss": args.loss,
        "answer_loss": args.answer_loss,
        "reorder": args.reorder,
        "rnr_every": args.rnr_every,
        "rnr_burst": args.rnr_burst,
    }
    if not reliable and (any(faults.values()) or not args.nak_on_gap):
        raise CommandError(
            "peer qpu: --loss, --answer-loss, --reorder, --rnr-* and --no-nak are the answers' "
            f"faults, for a transceiver with qp.transport RC and qp.retransmit true ({args.config})"
        )
    try:
        with open_link(cfg, mode, args.interface) as link:
            rc = (
                RcResponder(
                    link.addresses,
                    expected_psn=cfg["qp"]["tx_psn"],
                    faults=RcFaults(**faults),
                    nak_on_gap=args.nak_on_gap,
                )
                if reliable
                else None
            )
            peer = QpuPeer(
                link,
                handler=handler,
                size=args.size,
                distance=cfg["qec"]["distance"],
                first_psn=cfg["qp"]["rx_psn"],
                write_to=write_to,
                syndromes=args.syndromes,
                rc=rc,
            )
            report = peer.run(args.count, rate=args.rate, timeout_s=args.timeout)
    except (LinkError, ValueError) as e:
        raise CommandError(f"peer qpu: {e}") from None
    if args.json:
        print(json.dumps({**report.as_dict(), "rc": rc.report() if rc else None}))
    else:
        print(f"qpu peer, {handler} over {mode}: {report.summary()}", file=sys.stdout)
        if rc is not None:
            print(f"  as the answers' RC responder: {rc.report()}", file=sys.stdout)
    return 0 if report.lost == 0 and report.wrong == 0 else 1


def run_sensor(args: argparse.Namespace) -> int:
    import time

    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.hsb import METADATA_BYTES
    from roce_transceiver.peers import LinkError, open_link
    from roce_transceiver.peers.sensor import Faults, Sensor

    try:
        cfg = load_config(args.config)
    except (ConfigError, OSError) as e:
        raise CommandError(f"peer sensor: {e}") from None
    fr = cfg["frames"]
    # The largest data packet: the last one of a frame without metadata carries the immediate.
    _check_fits(cfg, args.config, "peer sensor", "--payload", args.payload, _SENSOR_OP, 4)
    most = fr["page_bytes"] - (METADATA_BYTES if fr["metadata"] else 0)
    if args.frame_bytes is not None and args.frame_bytes > most:
        meta = f", less the {METADATA_BYTES}-byte metadata record" if fr["metadata"] else ""
        raise CommandError(
            f"peer sensor: --frame-bytes {args.frame_bytes}: a page holds at most {most} "
            f"(frames.page_bytes {fr['page_bytes']} of {args.config}{meta})"
        )
    faults = Faults(args.loss, args.reorder, args.duplicate, args.corrupt, args.end_loss)
    mode = args.mode or cfg["socket"]["mode"]
    try:
        with open_link(cfg, mode, args.interface, own_port=12288) as link:
            sensor = Sensor.for_config(
                cfg, link.addresses, payload=args.payload, faults=faults, record_crc=args.record_crc
            )
            interval = 1.0 / args.rate if args.rate else 0.0
            next_at = time.perf_counter()
            frame_bytes = args.frame_bytes or sensor.max_frame_bytes
            if args.content:
                with open(args.content, "rb") as fh:
                    data = fh.read(sensor.max_frame_bytes)
                if not data:
                    raise CommandError(f"peer sensor: {args.content} is empty")
                frames_out = (sensor.frame(n, data) for n in range(args.frames))
            else:
                frames_out = sensor.frames(args.frames, frame_bytes)
            for sent in frames_out:
                for p in sent.packets:
                    link.send(p)
                line = {"frame_number": sent.frame_number, "page": sent.page}
                line |= {"bytes": len(sent.content), "crc32": sent.crc32, "lost": sent.lost}
                line["end_lost"] = sent.end_lost
                print(json.dumps(line) if args.json else str(line), flush=True)
                if interval:
                    next_at += interval
                    time.sleep(max(0.0, next_at - time.perf_counter()))
            sends = []  # host -> sensor SENDs (HSB control), reported as they came
            end = time.monotonic() + args.linger
            while args.linger and (left := end - time.monotonic()) > 0:
                p = link.receive(left)
                if p is not None and p.opcode & 0x1F in (0x04, 0x05):
                    sends.append(
                        {
                            "psn": p.psn,
                            "bytes": len(p.payload),
                            "icrc_ok": p.icrc_ok,
                            "payload": p.payload[:64].hex(),
                        }
                    )
            if args.linger:
                report = {"sends_received": len(sends), "sends": sends}
                print(json.dumps(report) if args.json else str(report), flush=True)
    except (LinkError, ValueError, OSError) as e:
        raise CommandError(f"peer sensor: {e}") from None
    return 0
