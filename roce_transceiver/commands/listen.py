"""``roce-transceiver listen``: receive a sensor's frames and print one line per frame.

Runs the transceiver configured by ``--config`` with the frames handler and prints each
completed frame (``--json``: one JSON object per line with the keys ``frame_number, page,
bytes, crc32, metadata_crc32, psn_first, psn_last, packets_lost, ok``), releasing its page at
once, until ``--frames`` frames or ``--seconds`` seconds; then a summary with the counters.
Exit status 0 when every frame was ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from roce_transceiver.commands import CommandError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "listen",
        help="receive frames with the frames handler and print one line per frame",
        description="Receive HSB-style frames with the transceiver configured by --config "
        "(handler: frames is implied) and print one line per frame.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="the transceiver's YAML")
    p.add_argument("--frames", type=int, help="stop after this many frames")
    p.add_argument("--seconds", type=float, help="stop after this long")
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.transceiver import Transceiver, TransceiverError

    for name in ("frames", "seconds"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise CommandError(f"listen: --{name} {value}: must be positive")
    try:
        cfg = load_config(args.config, {"handler": "frames"})
        t = Transceiver(cfg)
        t.start()
    except (ConfigError, TransceiverError, OSError) as e:
        raise CommandError(f"listen: {e}") from None
    print(f"{t.executor_reason}; nic {cfg['nic']}; listening", file=sys.stderr, flush=True)
    start = time.monotonic()
    seen = bad = 0
    try:
        while (args.frames is None or seen < args.frames) and (
            args.seconds is None or time.monotonic() - start < args.seconds
        ):
            for f in t.frames(timeout=0.1):
                seen += 1
                bad += not f.ok
                d = f.as_dict()
                f.release()
                if args.json:
                    print(json.dumps(d), flush=True)
                else:
                    meta = "-" if d["metadata_crc32"] is None else f"{d['metadata_crc32']:08x}"
                    print(
                        f"frame {d['frame_number']} page {d['page']} {d['bytes']} B "
                        f"crc {d['crc32']:08x} meta {meta} psn {d['psn_first']}..{d['psn_last']}"
                        f" lost {d['packets_lost']} {'ok' if d['ok'] else 'BAD'}",
                        flush=True,
                    )
    except KeyboardInterrupt:
        pass
    finally:
        try:
            t.stop()
        except TransceiverError as e:
            raise CommandError(f"listen: {e}") from None
    moved = {k: v for k, v in t.stats().items() if v}
    summary = {"frames": seen, "bad": bad, "counters": moved}
    print(json.dumps(summary) if args.json else f"{seen} frames, {bad} bad; {moved}")
    return 0 if bad == 0 else 1
