"""``roce-transceiver listen``: receive a sensor's frames and print one line per frame.

Runs the transceiver configured by ``--config`` with the frames handler and prints each
completed frame (``--json``: one JSON object per line, the frame's record as
``Frame.as_dict()`` has it: number, page, bytes, CRCs and their flags, PSNs, packets, PTP time,
receive times, and ``ok``), releasing its page at
once, until ``--frames`` frames or ``--seconds`` seconds (or Ctrl-C, SIGTERM, SIGHUP); then a
summary with the counters. Exit status 0 when every frame was ok and none was dropped
(``frames_dropped``: its page was still held, its end never came, nothing of it came: see
docs/frames.md), 1 otherwise, and 1 when the capture (``socket.capture``) lost frames to a
write error, which stderr names.

``--slices BYTES`` hands each frame over in slices of BYTES too (``frames.slice_bytes``,
docs/frames.md) and prints a line per slice, a frame's slices before the frame (``--json``:
the slice's record as ``Slice.as_dict()`` has it, the lines with a ``slice`` key); with
``frames.slice_bytes`` in the file and no ``--slices``, the slices are taken and not printed
(``frame_slices`` in the summary's counters counts them).

``--hsb IP[:SENSOR]`` points a Holoscan Sensor Bridge at it first (docs/hsb.md): waits for the
bridge's announcement (``hsb.enumerate``), checks the stream against this configuration,
programs the sensor's data channel with the transceiver's own addresses, QP and pages, and
starts it (a second stderr line, ``hsb: ... streaming``, says so); on the way out, however the
command ends (frames counted, time up, Ctrl-C, SIGTERM, SIGHUP, an error), stops and
un-configures it. A bridge that cannot be programmed is an error (exit 2) naming what to fix;
one that cannot be un-configured is reported on stderr, exit status 1. A sensor whose
registers send to another host is refused (exit 2, naming that host) unless ``--take-over``.
When the frames stop for ``hsb.watchdog_s``, the sensor's registers are read
(hsb_session.py): if another host took it over, listen says so on stderr, ends, leaves the
sensor to that host, and exits 1; if the bridge went silent or forgot its registers (a reset),
listen waits for it to announce itself again, checks it is the same board, programs it again
and goes on (``hsb.reconnect``), each step on stderr and in the summary's ``hsb.session``;
a bridge not back in time, or back as another board, ends listen, exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

from roce_transceiver.argtypes import COUNT, SECONDS
from roce_transceiver.commands import CommandError
from roce_transceiver.commands.running import (
    capture_failed,
    check_positive,
    moved,
    running_transceiver,
)

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "listen",
        help="receive frames with the frames handler and print one line per frame",
        description="Receive HSB-style frames with the transceiver configured by --config "
        "(handler: frames is implied) and print one line per frame.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="the transceiver's YAML")
    p.add_argument("--frames", type=COUNT, help="stop after this many frames")
    p.add_argument("--seconds", type=SECONDS, help="stop after this long")
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    p.add_argument(
        "--slices",
        type=int,
        metavar="BYTES",
        help="hand each frame over in slices of BYTES too (frames.slice_bytes: a multiple of "
        "64, 256 to frames.page_bytes) and print a line per slice before its frame's",
    )
    p.add_argument(
        "--hsb",
        type=_bridge,
        metavar="IP[:SENSOR]",
        help="program the sensor bridge at IP (its sensor SENSOR, default the config's "
        "hsb.sensor) to stream here, and un-program it on exit",
    )
    p.add_argument(
        "--take-over",
        action="store_true",
        help="with --hsb: program the sensor even when it streams to another host (that "
        "host's stream ends; hsb.take_over)",
    )
    p.set_defaults(run=run)


def _bridge(text: str) -> tuple[str, int | None]:
    import ipaddress

    ip, _, sensor = text.partition(":")
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: IP[:SENSOR], an IPv4 address") from None
    if not sensor:
        return ip, None
    if not sensor.isdigit() or int(sensor) > 31:
        raise argparse.ArgumentTypeError(f"{text!r}: the sensor is 0 to 31")
    return ip, int(sensor)


def run(args: argparse.Namespace) -> int:
    check_positive("listen", frames=args.frames, seconds=args.seconds)
    if args.take_over and not args.hsb:
        raise CommandError("listen: --take-over takes a sensor over for --hsb: give --hsb IP")
    seen = bad = 0
    crc_said = False
    overrides: dict[str, Any] = {"handler": "frames"}
    if args.slices is not None:
        overrides["frames.slice_bytes"] = args.slices
    stream = None
    if args.hsb:
        stream, more = _find_bridge(args)
        overrides |= more
    hsb_error, late = None, 0
    with running_transceiver("listen", args.config, overrides, "listening") as t:
        session = None
        try:
            if stream is not None:
                session = _session(stream, t.config)
            start = time.monotonic()
            while (args.frames is None or seen < args.frames) and (
                args.seconds is None or time.monotonic() - start < args.seconds
            ):
                if session is not None:
                    _check(session)
                    if session.ended:
                        break  # taken over, or lost for good: its frames go elsewhere, if any
                came = t.frames(timeout=0.1)
                # After the frames: a frame's slices came before it, so all are taken by now.
                for part in t.slices(timeout=0.0):
                    if args.slices is not None:
                        x = part.as_dict()
                        print(json.dumps(x) if args.json else _slice_line(x), flush=True)
                for f in came:
                    seen += 1
                    bad += not f.ok
                    if session is not None:
                        session.came(f.queue)
                    d = f.as_dict()
                    f.release()
                    if not crc_said and d["crc_checked"] and not d["crc_ok"]:
                        crc_said = True
                        print(_crc_why(d), file=sys.stderr, flush=True)
                    print(json.dumps(d) if args.json else _line(d), flush=True)
        finally:
            if session is not None:
                late, hsb_error = _stop_and_close(stream, t, session)
                _check(session)  # a failed programming not reported yet
    stats = t.stats()
    dropped = stats["frames_dropped"]  # frames the engine knows of and could not deliver
    summary = {"frames": seen, "bad": bad, "dropped": dropped, "counters": moved(stats)}
    lost: list[str] = stream.lost if stream is not None else []
    if stream is not None and stream.plan is not None:
        summary["hsb"] = {
            **stream.plan.as_dict(),
            "late_frames": late,
            "unconfigured": hsb_error is None and not lost,
            "lost": lost,  # sensors another host took over (left to it, not un-configured)
            "taken_from": [h.as_dict() for h in stream.taken_from],  # by --take-over
            # the bridge over time: reconnections, frames missed meanwhile, each step
            "session": session.as_dict() if session is not None else None,
        }
        if len(stream.plans) > 1:  # a sensor a queue: queue 0's above, every one's here
            summary["hsb"]["streams"] = [p.as_dict() for p in stream.plans]
    text = f"{seen} frames, {bad} bad, {dropped} dropped; {summary['counters']}"
    print(json.dumps(summary) if args.json else text)
    for line in lost:
        print(
            f"listen --hsb: {line}; listen ended and left the sensor as it is "
            "(listen --take-over takes it back)",
            file=sys.stderr,
            flush=True,
        )
    gone = session is not None and session.error is not None  # lost, not back (said on stderr)
    failed = capture_failed("listen", t) or hsb_error is not None or bool(lost) or gone
    return 1 if failed or bad or dropped else 0


def _find_bridge(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The session for ``--hsb``, its bridge's announcement heard (``hsb.enumerate``), and
    the overrides that point the transceiver's peer at the bridge."""
    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.hsb_control import EnumerationError
    from roce_transceiver.hsb_stream import HsbStream, bridge_overrides

    ip, sensor = args.hsb
    more: dict[str, Any] = {"hsb.bridge": ip, "peer.ip": ip}
    if sensor is not None:
        more["hsb.sensor"] = sensor
    if args.take_over:
        more["hsb.take_over"] = True
    try:
        cfg = load_config(args.config, {"handler": "frames", **more})
        announcement = HsbStream.find(cfg)
    except (ConfigError, OSError) as e:
        raise CommandError(f"listen: {e}") from None
    except EnumerationError as e:
        raise CommandError(f"listen --hsb: {e}") from None
    more |= bridge_overrides(cfg, announcement)
    stream = HsbStream(cfg, source=args.config)
    stream.announcement = announcement
    return stream, more


def _session(stream: Any, cfg: dict[str, Any]) -> Any:
    """The bridge's session, started: programmed in a thread while frames are already taken
    (the start request's retry would otherwise leave the pages full), then supervised there
    (hsb_session.py), its steps said on stderr."""
    from roce_transceiver.hsb_session import BridgeSession

    stream.cfg = cfg  # the transceiver's own, as it resolved it
    session = BridgeSession(
        stream,
        queues=cfg["queues"]["count"],
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    return session.start(stream.announcement)


def _check(session: Any) -> None:
    """The first programming's failure, as listen's error."""
    from roce_transceiver.hsb_stream import HsbError

    try:
        session.check()
    except HsbError as e:
        raise CommandError(f"listen --hsb: {e}") from None


def _stop_and_close(stream: Any, t: Any, session: Any) -> tuple[int, str | None]:
    """Stop the sensor, take (and release) the frames still in flight, so that they neither
    hold pages nor count as dropped, then un-configure. The frames taken, and the error (said
    on stderr) if the bridge could not be reached."""
    import threading

    from roce_transceiver.hsb_stream import HsbError

    late = 0

    def stop() -> None:
        session.stop()  # what it wrote is un-written only once it is done writing
        with contextlib.suppress(HsbError):  # close() tries again, and says what to do
            stream.stop()

    # The stop may take retries; meanwhile frames still come: take them, or their pages stay
    # held and the frames behind them are dropped.
    stopper = threading.Thread(target=stop, name="hsb-stop")
    stopper.start()
    until = None  # once stopped: until a quiet spell, bounded (a bridge may ignore the stop)
    while until is None or time.monotonic() < until:
        stopping = stopper.is_alive()
        batch = t.frames(timeout=_DRAIN_QUIET_S)
        for f in batch:
            f.release()
        late += len(batch)
        if not stopping:
            if not batch:
                break
            until = until or time.monotonic() + _DRAIN_MOST_S
    stopper.join()
    try:
        stream.close()
    except HsbError as e:
        print(f"listen --hsb: {e}", file=sys.stderr, flush=True)
        return late, str(e)
    return late, None


_DRAIN_QUIET_S = 0.05  # no frame for this long after the stop: nothing is in flight
_DRAIN_MOST_S = 1.0  # bounded: a bridge that ignores the stop would stream on


def _line(d: dict) -> str:
    # The record's CRC is JAMCRC (zlib's without its final XOR): beside it, ours the same way.
    meta = "-" if d["metadata_crc"] is None else f"{d['metadata_crc']:08x}"
    return (
        f"frame {d['frame_number']} page {d['page']} {d['bytes']} B crc32 {d['crc32']:08x} "
        f"jamcrc {d['crc32'] ^ 0xFFFFFFFF:08x} record {meta} psn {d['psn_first']}.."
        f"{d['psn_last']} lost {d['packets_lost']} {'ok' if d['ok'] else 'BAD'}"
    )


def _slice_line(x: dict) -> str:
    return (
        f"  slice {x['slice']} of frame {x['frame_number']} page {x['page']} "
        f"[{x['offset']}, {x['offset'] + x['bytes']}) {'whole' if x['whole'] else 'PARTIAL'}"
        f"{' last' if x['last'] else ''}"
    )


def _crc_why(d: dict) -> str:
    """Why a frame failed frames.check_crc, said once a run: the two CRCs in the record's
    convention, and the key that takes such frames."""
    record, ours = d["metadata_crc"], d["crc32"] ^ 0xFFFFFFFF
    sender = (
        " (0: the sender does not compute it, as HSB's emulator does not)" if record == 0 else ""
    )
    return (
        f"listen: frame {d['frame_number']} is bad: its metadata record's CRC is {record:08x}"
        f"{sender}, the page's is {ours:08x} (both JAMCRC, the record's convention); with "
        "frames.check_crc: true every such frame is bad, frames.check_crc: false takes a frame "
        "on its byte count (said once)"
    )
