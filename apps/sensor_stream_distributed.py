"""The sensor stream across Holoscan's distributed runtime: two fragments connected over UCX.

    fragment ingest (the node with the NIC):
        sensor peer --sent--> pack
        roce (RoceTransceiverOp, frames handler) --frames--> pack --frames--> (UCX)
    fragment process (wherever it fits):
        (UCX) --frames--> unpack --frames, sent--> frame checker (CRC vs record, packets
                                                   lost, bytes, gaps)
                                 --frames--------> frame statistic

Frames cross the boundary as tensors: the frame's bytes and its record (frame number, CRC,
packets lost, PSNs, timestamps) as an int64 tensor, and the sensor's records of the frames it
announced since (frame number, page, loss, content) as an int64 and a uint8 tensor, in the
same message (FramePackOp: one link keeps the sensor's record ahead of its frame). The process
side puts the record back in the metadata (FrameUnpackOp), so the checker and the statistic are
the sensor_stream app's. Run with no Holoscan option, both fragments run in this process (still
connected through UCX); ``--driver --worker --fragments ingest`` on one node and ``--worker
--fragments process --address DRIVER:PORT`` on another place them (docs/deployment.md). Each
process writes ``sensor_stream_distributed_<fragment>.json`` for the fragments it ran.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from holoscan.core import Application, Fragment

from roce_transceiver.operators import (
    FrameCheckerOp,
    FramePackOp,
    FrameStatisticOp,
    FrameUnpackOp,
    SensorPeerOp,
    StatsSinkOp,
)
from roce_transceiver.operators.app_config import ConfigError, load_app_config
from roce_transceiver.operators.app_runner import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    Report,
    _overrides,
    _parser,
    _quiet_holoscan,
    app_section,
    check_writable,
    counter_rows,
    effective_config,
    make_scheduler,
    transceiver_op,
    write_summary,
)
from roce_transceiver.transceiver import TransceiverError

NAME = "sensor_stream_distributed"
#: The fragments this process may run, each with its summary (``NAME_<fragment>.json``).
FRAGMENTS = ("ingest", "process")

DEFAULTS: dict[str, Any] = {
    "app": {"name": NAME, "count": 100, "scheduler": "event_based"},
    "transceiver": {
        "handler": "frames",
        "executor": "cpu",
        "qp": {"transport": "UC"},
        "frames": {"pages": 16, "page_bytes": 131072, "metadata": True},
    },
    "peer": {"link": "loopback", "frame_bytes": 65536, "payload": 1024, "chunk": 1},
}

#: The options Holoscan's distributed runtime reads (the rest are the app's); the flags take
#: no value.
HOLOSCAN_FLAGS = ("--driver", "--worker")
HOLOSCAN_OPTIONS = ("--fragments", "--address", "--worker-address", "--config-holoscan")


class Ingest(Fragment):
    """The transceiver and the sensor: this fragment runs where the NIC (and the GPU) is."""

    def compose(self) -> None:
        app = app_section(self)
        self.scheduler(make_scheduler(self, {"app": app}))
        roce = transceiver_op(self)
        sensor = SensorPeerOp(
            self,
            name="sensor",
            transceiver_op=roce,
            count=app["count"],
            progress_s=app["progress_s"],
            **self.kwargs("peer"),
        )
        pack = FramePackOp(self, name="pack")
        self.add_flow(sensor, pack, {("sent", "sent")})
        self.add_flow(roce, pack, {("frames", "frames")})
        self.add_flow(roce, StatsSinkOp(self, name="stats"), {("stats", "stats")})


class Process(Fragment):
    """The processing: frames back from tensors, checked and reduced."""

    def compose(self) -> None:
        self.scheduler(make_scheduler(self, {"app": app_section(self)}))
        unpack = FrameUnpackOp(self, name="unpack")
        checker = FrameCheckerOp(self, name="frame_check", **self.kwargs("frame_check"))
        self.add_flow(unpack, checker, {("frames", "frames"), ("sent", "sent")})
        self.add_flow(
            unpack, FrameStatisticOp(self, name="frame_statistic"), {("frames", "frames")}
        )


class SensorStreamDistributedApp(Application):
    def compose(self) -> None:
        ingest = Ingest(self, name="ingest")
        process = Process(self, name="process")
        self.add_flow(
            ingest,
            process,
            {("pack.frames", "unpack.frames")},
        )


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(the app's options, Holoscan's)``."""
    ours: list[str] = []
    theirs: list[str] = []
    args = list(argv)
    while args:
        a = args.pop(0)
        key = a.split("=", 1)[0]
        if key in HOLOSCAN_FLAGS:
            theirs.append(a)
        elif key in HOLOSCAN_OPTIONS:
            theirs.append(a)
            if "=" not in a and args:
                theirs.append(args.pop(0))
        else:
            ours.append(a)
    return ours, theirs


def fragment_report(name: str, ops: dict[str, Any], count: int) -> Report:
    """What one fragment measured and checked."""
    report = Report(f"sensor stream, distributed: fragment {name}")
    if name == "ingest":
        roce, sensor = ops["roce"], ops["sensor"]
        s = roce.final_stats
        report.rows["executor / nic"] = f"{roce.executor} / {roce.config['nic']}"
        report.rows["counters"] = counter_rows(s, ["frames", "frames_dropped", "ring_drops"])
        report.data["counters"] = s
        report.check("frames sent", sensor.sent == count, f"{sensor.sent}/{count}")
        report.check(
            "no drops",
            s.get("frames_dropped", 0) == 0 and s.get("ring_drops", 0) == 0,
            counter_rows(s, ["frames_dropped", "ring_drops"]),
        )
        return report
    c, st = ops["frame_check"], ops["frame_statistic"]
    report.rows["frames"] = f"{c.frames} of {c.sent_total} sent, {c.bytes:,} bytes"
    report.data.update(
        frames=c.frames,
        exact=c.exact,
        damaged_as_sent=c.damaged_as_sent,
        sent=c.sent_total,
        bad=c.bad[:20],
        gaps=c.gaps[:20],
    )
    report.data["statistic_frames"] = st.frames
    report.check(
        "frames arrived",
        c.frames == c.sent_total == count and not c.gaps,
        f"{c.frames}/{count}, gaps {c.gaps[:5]}, {c.unmatched} unmatched",
    )
    report.check(
        "frames verified",
        not c.bad and c.exact + c.damaged_as_sent == c.frames,
        f"{c.exact} byte-exact with the record's CRC ok" + (f"; {c.bad[0]}" if c.bad else ""),
    )
    report.check("statistic", st.frames == c.frames, f"{st.frames} frames processed")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ours, holoscan_args = split_argv(sys.argv[1:] if argv is None else argv)
    args = _parser(NAME, __doc__.splitlines()[0]).parse_args(ours)
    _quiet_holoscan()
    try:
        overrides, flags = _overrides(args)
        cfg = load_app_config(args.config or dict(DEFAULTS), overrides, app=NAME, flags=flags)
        paths = check_writable(cfg, [f"{NAME}_{f}.json" for f in FRAGMENTS])  # before the run
        summaries = dict(zip(FRAGMENTS, paths, strict=True))
        started = time.monotonic()
        app = SensorStreamDistributedApp([f"apps/{NAME}.py", *holoscan_args])
        with effective_config(cfg) as path:
            app.config(str(path))
            app.run()
    except (ConfigError, TransceiverError, OSError, ValueError) as e:
        print(f"{NAME}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    ok = True
    for fragment in app.fragment_graph.get_nodes():
        ops = {op.name: op for op in fragment.graph.get_nodes()} if fragment.graph else {}
        if fragment.name not in FRAGMENTS or not ops:
            continue  # a fragment another process ran
        report = fragment_report(fragment.name, ops, cfg["app"]["count"])
        report.data["elapsed_s"] = round(time.monotonic() - started, 3)
        print(report.table(), flush=True)
        written = write_summary(NAME, summaries[fragment.name], report)
        ok = ok and report.ok and written
    return EXIT_OK if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
