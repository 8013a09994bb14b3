"""RoceTransceiverOp and its helpers inside small graphs of their own.

Goal: what the apps do not show on their own: tensors on ``tx`` go out as SENDs (the loopback
far end collects them: the oracle is the bytes sent); a graph slower than the sensor costs
counted drops, every frame accounted for and the loop never stalled; a failing graph still
stops the transceiver; frames are handed over without a copy and released downstream.
"""

from __future__ import annotations

import numpy as np
import pytest

holoscan = pytest.importorskip("holoscan", reason="the operators need Holoscan")

from holoscan.core import Application, Operator  # noqa: E402
from holoscan.schedulers import GreedyScheduler  # noqa: E402

from roce_transceiver.operators import (  # noqa: E402
    FrameStatisticOp,
    RoceTransceiverOp,
    SensorPeerOp,
    StatsSinkOp,
)
from roce_transceiver.protocol import parse  # noqa: E402

CPU = {"executor": "cpu", "qp": {"transport": "UC"}}


class _TxSource(Operator):
    def __init__(self, fragment, *args, payloads, **kwargs):
        self.payloads = list(payloads)
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        spec.output("out")

    def compute(self, op_input, op_output, context):
        p = self.payloads.pop(0)
        op_output.emit({"data": holoscan.as_tensor(np.frombuffer(p, np.uint8).copy())}, "out")
        if not self.payloads:
            self.stop_execution()


class _Sink(Operator):
    def setup(self, spec):
        spec.input("messages")

    def compute(self, op_input, op_output, context):
        op_input.receive("messages")


def _greedy(app, seconds=60):
    app.scheduler(
        GreedyScheduler(app, name="g", stop_on_deadlock=True, max_duration_ms=seconds * 1000)
    )
    app.run()


def test_tx_port_sends_tensors_as_sends():
    payloads = [bytes([i]) * (8 + i) for i in range(5)]
    collected: list[bytes] = []

    class App(Application):
        def compose(self):
            self.roce = RoceTransceiverOp(self, name="roce", transceiver={**CPU, "handler": "sink"})
            src = _TxSource(self, name="src", payloads=payloads)
            self.add_flow(src, self.roce, {("out", "tx")})
            self.add_flow(self.roce, _Sink(self, name="sink"), {("messages", "messages")})
            far_end = _FinishAfter(
                self, name="far_end", op=self.roce, payloads=len(payloads), collected=collected
            )
            self.add_operator(far_end)

    app = App()
    _greedy(app)
    sends = [parse(f) for f in collected]
    assert [p.payload for p in sends] == payloads
    assert app.roce.emitted["tx"] == len(payloads)
    assert app.roce.transceiver is None and app.roce.final_stats["host_sends"] == len(payloads)


class _FinishAfter(Operator):
    """Collects what the transceiver put on the loopback wire; finishes it when all is there."""

    def __init__(self, fragment, *args, op, payloads, collected, **kwargs):
        self.op, self.want, self.collected = op, payloads, collected
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        pass

    def compute(self, op_input, op_output, context):
        t = self.op.transceiver
        if t is None:
            return
        self.collected += t.collect(timeout=0.01)
        if len(self.collected) >= self.want:
            self.op.finish()
            self.stop_execution()


class _SlowStatistic(FrameStatisticOp):
    """The graph's processing step made slow: it holds each frame until the sensor moved on."""

    def compute(self, op_input, op_output, context):
        import time

        time.sleep(0.01)  # a slow consumer, not a synchronisation: nothing waits on it
        super().compute(op_input, op_output, context)


def test_slow_graph_costs_counted_drops_never_a_stall():
    count = 60

    class App(Application):
        def compose(self):
            cfg = {**CPU, "handler": "frames", "frames": {"pages": 4, "page_bytes": 16384}}
            self.roce = RoceTransceiverOp(self, name="roce", transceiver=cfg)
            self.sensor = SensorPeerOp(
                self,
                name="sensor",
                transceiver_op=self.roce,
                count=count,
                frame_bytes=8192,
                chunk=8,
            )
            self.stat = _SlowStatistic(self, name="stat")
            self.stats = StatsSinkOp(self, name="stats")
            self.add_flow(self.roce, self.stat, {("frames", "frames")})
            self.add_flow(self.roce, self.stats, {("stats", "stats")})
            self.add_flow(self.sensor, _Drain(self, name="drain"), {("sent", "sent")})

    app = App()
    _greedy(app)
    s = app.roce.final_stats
    assert s["frames_dropped"] > 0, "the graph kept up: the test proves nothing"
    assert app.roce.emitted["frames"] == app.stat.frames
    assert app.stat.frames + s["frames_dropped"] == count  # every frame accounted for
    assert s["frames"] == app.stat.frames
    assert app.stats.final and app.stats.latest["frames_dropped"] == s["frames_dropped"]


class _Drain(Operator):
    def setup(self, spec):
        spec.input("sent")

    def compute(self, op_input, op_output, context):
        op_input.receive("sent")


class _Boom(Operator):
    def setup(self, spec):
        spec.input("messages")

    def compute(self, op_input, op_output, context):
        raise RuntimeError("boom: a downstream operator failed")


def test_failing_graph_still_stops_the_transceiver():
    class App(Application):
        def compose(self):
            self.roce = RoceTransceiverOp(self, name="roce", transceiver={**CPU})
            self.add_flow(self.roce, _Boom(self, name="boom"), {("messages", "messages")})
            self.add_operator(_Kick(self, name="kick", op=self.roce))

    app = App()
    with pytest.raises(RuntimeError, match="boom"):
        _greedy(app)
    assert app.roce.transceiver is None  # stop() ran: the loop is stopped, memory freed
    assert app.roce.final_stats["rx_packets"] >= 1


class _Kick(Operator):
    """Puts one request on the loopback wire so that a message reaches the failing operator."""

    def __init__(self, fragment, *args, op, **kwargs):
        self.op, self.done = op, False
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        pass

    def compute(self, op_input, op_output, context):
        t = self.op.transceiver
        if t is not None and not self.done:
            from roce_transceiver.peers.link import Addresses

            a = Addresses.mirror(t.config)
            t.inject(a.frame("SEND_ONLY", b"kick" * 8, psn=0))
            self.done = True
            self.stop_execution()


def test_bad_transceiver_config_fails_at_compose_naming_the_key():
    from roce_transceiver.config import ConfigError

    class App(Application):
        def compose(self):
            RoceTransceiverOp(self, name="roce", transceiver={"queues": {"rx_depth": 3}})

    with pytest.raises(ConfigError, match=r"queues\.rx_depth: 3"):
        App().run()


class _FinishExpecting(Operator):
    def __init__(self, fragment, *args, op, expect, **kwargs):
        self.op, self.expect = op, expect
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        pass

    def compute(self, op_input, op_output, context):
        if self.op.transceiver is not None:
            self.op.finish(expect=self.expect)
            self.stop_execution()


def test_drain_gives_up_after_its_timeout_and_says_so(caplog):
    class App(Application):
        def compose(self):
            self.roce = RoceTransceiverOp(
                self, name="roce", transceiver={**CPU, "handler": "sink"}, drain_timeout_s=0.2
            )
            self.add_flow(self.roce, _Sink(self, name="sink"), {("messages", "messages")})
            self.add_operator(_FinishExpecting(self, name="finish", op=self.roce, expect=5))

    app = App()
    with caplog.at_level("WARNING", logger="roce_transceiver.operators.transceiver_op"):
        _greedy(app, seconds=20)
    assert app.roce.transceiver is None  # stopped, not waiting for what never came
    assert "the peer expected 5, 0 came within drain_timeout_s=0.2" in caplog.text


class _SliceCheck(Operator):
    """Each slice from RoceTransceiverOp's ``slices`` port, against what the sensor sent at
    its place in its frame (peer_ops.pattern), read as it arrives."""

    def __init__(self, fragment, *args, frame_bytes, **kwargs):
        self.frame_bytes = frame_bytes
        self.seen: list[tuple[int, int, int, int, bool, bool]] = []
        self.bad: list[str] = []
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        spec.input("slices")

    def compute(self, op_input, op_output, context):
        from roce_transceiver.operators.peer_ops import pattern

        data = np.asarray(op_input.receive("slices")["slice"]).tobytes()
        md = self.metadata
        n, k, at, size = (int(md[key]) for key in ("frame_number", "slice", "offset", "bytes"))
        self.seen.append((n, k, at, size, bool(md["whole"]), bool(md["last"])))
        if data != pattern(n, self.frame_bytes)[at : at + size]:
            self.bad.append(f"frame {n} slice {k}: not the bytes sent")


def test_slices_port_hands_over_each_slice_as_sent():
    count, frame_bytes, slice_bytes = 6, 8192, 2048

    class App(Application):
        def compose(self):
            frames = {"pages": 8, "page_bytes": 16384, "slice_bytes": slice_bytes}
            cfg = {**CPU, "handler": "frames", "frames": frames}
            self.roce = RoceTransceiverOp(self, name="roce", transceiver=cfg)
            # Pages enough for every frame: a slice's bytes are never written over here.
            self.sensor = SensorPeerOp(
                self,
                name="sensor",
                transceiver_op=self.roce,
                count=count,
                frame_bytes=frame_bytes,
                chunk=1,
            )
            self.slices = _SliceCheck(self, name="slices", frame_bytes=frame_bytes)
            self.stat = FrameStatisticOp(self, name="stat")
            self.add_flow(self.roce, self.slices, {("slices", "slices")})
            self.add_flow(self.roce, self.stat, {("frames", "frames")})
            self.add_flow(self.sensor, _Drain(self, name="drain"), {("sent", "sent")})

    app = App()
    _greedy(app)
    per_frame = frame_bytes // slice_bytes
    want = [
        (n, k, k * slice_bytes, slice_bytes, True, k == per_frame - 1)
        for n in range(count)
        for k in range(per_frame)
    ]
    assert app.slices.bad == []
    assert app.slices.seen == want
    assert app.roce.emitted["slices"] == count * per_frame and app.stat.frames == count
    s = app.roce.final_stats
    assert (s["frame_slices"], s["frame_slices_partial"], s["frames"]) == (len(want), 0, count)


def test_the_frame_metadata_and_the_record_tensor_are_the_cores_frame_record() -> None:
    from roce_transceiver.frames import RECORD_NAMES
    from roce_transceiver.operators.frame_ops import FRAME_RECORD
    from roce_transceiver.operators.transceiver_op import FRAME_METADATA

    assert FRAME_METADATA == RECORD_NAMES
    assert FRAME_RECORD == RECORD_NAMES
