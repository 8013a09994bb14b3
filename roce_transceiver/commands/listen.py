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
"""

from __future__ import annotations

import argparse
import json
import time

from roce_transceiver.commands.argtypes import COUNT, SECONDS
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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_positive("listen", frames=args.frames, seconds=args.seconds)
    seen = bad = 0
    with running_transceiver("listen", args.config, {"handler": "frames"}, "listening") as t:
        start = time.monotonic()
        while (args.frames is None or seen < args.frames) and (
            args.seconds is None or time.monotonic() - start < args.seconds
        ):
            for f in t.frames(timeout=0.1):
                seen += 1
                bad += not f.ok
                d = f.as_dict()
                f.release()
                print(json.dumps(d) if args.json else _line(d), flush=True)
    stats = t.stats()
    dropped = stats["frames_dropped"]  # frames the engine knows of and could not deliver
    summary = {"frames": seen, "bad": bad, "dropped": dropped, "counters": moved(stats)}
    text = f"{seen} frames, {bad} bad, {dropped} dropped; {summary['counters']}"
    print(json.dumps(summary) if args.json else text)
    return 1 if capture_failed("listen", t) or bad or dropped else 0


def _line(d: dict) -> str:
    meta = "-" if d["metadata_crc"] is None else f"{d['metadata_crc']:08x}"
    return (
        f"frame {d['frame_number']} page {d['page']} {d['bytes']} B crc {d['crc32']:08x} "
        f"meta {meta} psn {d['psn_first']}..{d['psn_last']} lost {d['packets_lost']} "
        f"{'ok' if d['ok'] else 'BAD'}"
    )
