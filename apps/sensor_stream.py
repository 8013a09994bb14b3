"""HSB-style sensor frames through the frames handler into a Holoscan graph: every frame
checked against what the sensor sent, a statistic computed where the frame lies.

    sensor peer --sent-->   frame checker (CRC vs metadata, packets lost, bytes, gaps)
    roce (RoceTransceiverOp, frames handler) --frames--> frame checker
                                             --frames--> frame statistic (GPU or host)
                                             --stats-->  counters

The sensor writes into the loopback wire (lossless: it waits for room in the ring) or, with
``peer.link: udp``, over UDP through the socket NIC. Faults (``peer.loss`` ...) are recorded
by the sensor, and the checker holds each damaged frame to exactly the damage that was done.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from holoscan.core import Application

from roce_transceiver.operators import FrameCheckerOp, FrameStatisticOp, SensorPeerOp, StatsSinkOp
from roce_transceiver.operators.app_runner import (
    HOLOSCAN_ARGV,
    Report,
    app_section,
    counter_rows,
    main_for,
    peer_network,
    run_graph,
    transceiver_op,
)

NAME = "sensor_stream"

DEFAULTS: dict[str, Any] = {
    "app": {"name": NAME, "count": 200},
    "transceiver": {
        "handler": "frames",
        "qp": {"transport": "UC"},
        "frames": {"pages": 16, "page_bytes": 131072, "metadata": True},
    },
    # chunk 1: under the greedy scheduler the graph takes a frame per sensor step.
    "peer": {"link": "loopback", "frame_bytes": 65536, "payload": 1024, "chunk": 1},
}


class SensorStreamApp(Application):
    """Composed from the file ``app.config()`` loaded: each operator takes its section with
    ``self.kwargs`` (operators/params.py validates it)."""

    def __init__(self, namespace: Any = None, argv: list[str] | None = None) -> None:
        self.namespace = namespace
        super().__init__(argv)

    def compose(self) -> None:
        app = app_section(self)
        roce = transceiver_op(self)
        sensor = SensorPeerOp(
            self,
            name="sensor",
            transceiver_op=roce,
            count=app["count"],
            progress_s=app["progress_s"],
            namespace=self.namespace,
            **self.kwargs("peer"),
        )
        checker = FrameCheckerOp(self, name="frame_check", **self.kwargs("frame_check"))
        statistic = FrameStatisticOp(self, name="frame_statistic")
        self.add_flow(sensor, checker, {("sent", "sent")})
        self.add_flow(roce, checker, {("frames", "frames")})
        self.add_flow(roce, statistic, {("frames", "frames")})
        self.add_flow(roce, StatsSinkOp(self, name="stats"), {("stats", "stats")})


def run(cfg: dict[str, Any]) -> Report:
    with peer_network(cfg) as (cfg, namespace):
        ops = run_graph(SensorStreamApp(namespace, HOLOSCAN_ARGV), cfg)
    c, st, roce = ops["frame_check"], ops["frame_statistic"], ops["roce"]
    report = Report("sensor stream (frames handler)")
    report.rows["executor / nic"] = (
        f"{roce.executor} / {roce.config['nic']} ({cfg['peer']['link']})"
    )
    report.rows["scheduler"] = cfg["app"]["scheduler"]
    span = c.last_s - c.first_s
    fps = (c.frames - 1) / span if c.frames > 1 and span > 0 else 0.0
    gbps = fps * (c.bytes / max(c.frames, 1)) * 8 / 1e9
    report.rows["frames"] = f"{c.frames} of {c.sent_total} sent, {c.bytes:,} bytes"
    report.rows["rate"] = f"{fps:,.1f} frames/s, {gbps:.3f} Gb/s (into the graph)"
    report.rows["statistic"] = (
        f"{st.frames} frames, {st.on_gpu} on the GPU, mean byte "
        f"{sum(st.means) / max(len(st.means), 1):.2f}"
    )
    s = roce.final_stats
    report.rows["counters"] = counter_rows(
        s,
        [
            "frames",
            "frames_dropped",
            "frame_crc_errors",
            "frame_page_busy",
            "ring_drops",
            "icrc_errors",
        ],
    )
    report.data.update(
        frames=c.frames,
        frames_per_s=fps,
        gbps=gbps,
        exact=c.exact,
        counters=s,
        damaged_as_sent=c.damaged_as_sent,
        bad=c.bad[:20],
        gaps=c.gaps[:20],
    )
    report.check(
        "frames arrived",
        c.frames == c.sent_total == cfg["app"]["count"] and not c.gaps,
        f"{c.frames}/{cfg['app']['count']}, gaps {c.gaps[:5]}, {c.unmatched} unmatched",
    )
    report.check(
        "frames verified",
        not c.bad and c.exact + c.damaged_as_sent == c.frames,
        f"{c.exact} byte-exact with CRC ok, {c.damaged_as_sent} lost exactly what the sensor "
        f"lost" + (f"; {c.bad[0]}" if c.bad else ""),
    )
    report.check(
        "no drops",
        s.get("frames_dropped", 0) == 0 and s.get("ring_drops", 0) == 0,
        counter_rows(s, ["frames_dropped", "ring_drops"]),
    )
    report.check("statistic", st.frames == c.frames, f"{st.frames} frames processed")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(NAME, __doc__.splitlines()[0], DEFAULTS, run, argv)


if __name__ == "__main__":
    sys.exit(main())
