"""RoceTransceiverOp with an ``hsb:`` section: the bridge is programmed at start() and
un-programmed at stop(), a bridge that refuses fails start() naming the status, and a sensor
that streams to another host fails start() naming that host unless ``take_over: true``.

Oracles: the software bridge's record of what it sent (CRC-32 per frame) and its registers.
"""

from __future__ import annotations

import socket

import pytest

holoscan = pytest.importorskip("holoscan", reason="the operators need Holoscan")

from holoscan.core import Application, Operator  # noqa: E402
from holoscan.schedulers import GreedyScheduler  # noqa: E402
from hsb_helpers import bridge_host_config  # noqa: E402

from roce_transceiver.hsb_control import Ecb  # noqa: E402
from roce_transceiver.operators import RoceTransceiverOp  # noqa: E402
from roce_transceiver.peers.bridge import BridgeFaults, SoftwareBridge  # noqa: E402

BRIDGE_IP, HOST_IP = "127.0.17.9", "127.0.17.1"


def transceiver(b: SoftwareBridge, **hsb: object) -> dict:
    return bridge_host_config(
        HOST_IP,
        BRIDGE_IP,
        bridge=BRIDGE_IP,
        control_port=b.control_port,
        enumerate=False,
        frame_bytes=20000,
        timeout_s=0.1,
        **hsb,
    )


class _Frames(Operator):
    def __init__(self, fragment, *args, op, want, **kwargs):
        self.op, self.want, self.seen = op, want, {}
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec):
        spec.input("frames")

    def compute(self, op_input, op_output, context):
        op_input.receive("frames")
        self.seen[self.op.metadata["frame_number"]] = self.op.metadata["crc32"]
        if len(self.seen) == self.want:
            self.op.finish()


def run(cfg: dict, want: int = 5) -> Application:
    class App(Application):
        def compose(self):
            self.roce = RoceTransceiverOp(self, name="roce", transceiver=cfg)
            self.sink = _Frames(self, name="sink", op=self.roce, want=want)
            self.add_flow(self.roce, self.sink, {("frames", "frames")})

    app = App()
    app.scheduler(GreedyScheduler(app, name="g", stop_on_deadlock=True, max_duration_ms=60_000))
    app.run()
    return app


def test_the_operator_programs_the_bridge_at_start_and_unprograms_it_at_stop() -> None:
    with SoftwareBridge(BRIDGE_IP, control_port=0, rate=200) as b:
        app = run(transceiver(b))
        assert len(app.sink.seen) >= 5
        sent = {f.frame_number: f.crc32 for f in b.sent[0]}
        assert app.sink.seen.items() <= sent.items()
        assert not b.streaming(0)
        assert all(b.register(0x1000 + 4 * i) == 0 for i in range(12))
        assert app.roce.transceiver is None and app.roce.hsb is None
    assert not b.errors


def test_the_operator_programs_a_bridge_that_reset_again_and_its_frames_go_on() -> None:
    # No announcements here (enumerate false): the session waits for the bridge to answer
    # again and takes its cleared registers for the restart (hsb_session.py).
    faults = BridgeFaults(reset_after_frames=5, reset_down_s=0.3)
    with SoftwareBridge(BRIDGE_IP, control_port=0, rate=200, faults=faults) as b:
        app = run(transceiver(b, watchdog_s=0.2, reconnect_timeout_s=10.0), want=12)
        assert b.resets == 1 and app.roce.bridge_report["reconnects"] == 1
        sent_after = {f.frame_number: f.crc32 for f in b.sent[0] if f.resets == 1}
        # Frame numbers 5 and up came only after the restart (it reset after frame 4).
        assert all(app.sink.seen[n] == sent_after[n] for n in range(5, 12))
        assert not b.streaming(0)
    assert not b.errors


def test_a_bridge_that_refuses_fails_start_naming_the_status() -> None:
    faults = BridgeFaults(write_status={0x1000 + 0x28: 0x03})  # HOST_IP
    with SoftwareBridge(BRIDGE_IP, control_port=0, faults=faults) as b:
        with pytest.raises(Exception, match="0x03 INVALID_ADDR"):
            run(transceiver(b))
        assert not b.streaming(0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST_IP, 4791))  # the transceiver stopped: its port is free again


def test_a_sensor_streaming_to_another_host_fails_start_unless_take_over() -> None:
    with SoftwareBridge(BRIDGE_IP, control_port=0, rate=200) as b:
        with Ecb(BRIDGE_IP, b.control_port, timeout=0.1) as other:  # another host's session
            other.write_block([(0x1000, 0x33), (0x1028, 0x7F001105), (0x102C, 4791)])
            other.write(0x0200030C, 1)  # VP_MASK: sensor 0 on
        with pytest.raises(Exception, match=r"its registers send to 127\.0\.17\.5 .*QP 0x33"):
            run(transceiver(b))
        assert b.register(0x1028) == 0x7F001105 and b.streaming(0)  # left as it was
        app = run(transceiver(b, take_over=True))
        assert len(app.sink.seen) >= 5
        assert app.sink.seen.items() <= {f.frame_number: f.crc32 for f in b.sent[0]}.items()
        assert not b.streaming(0) and all(b.register(0x1000 + 4 * i) == 0 for i in range(12))
    assert not b.errors
