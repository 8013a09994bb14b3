"""Several GPUs on one node (``cuda.device``): a transceiver per GPU, its loop and memory there.

Goal: ``cuda.device: N`` runs the persistent loop on GPU N with the transceiver's memory there
(rings, state, regions, the frames' pages), transceivers on different GPUs run at once in one
process and in one Holoscan graph, and a device that is not there is an error naming it.
Oracles: the far end's replies (echo: each request's payload back, checked by the far end),
the frames' CRCs against zlib, and where CUDA says a page lies (cupy's pointer attributes).
Tests that need two GPUs skip, saying how many are visible, where there are fewer.
"""

from __future__ import annotations

import zlib

import pytest
from frames_helpers import frames_config, sensor_for

pytest.importorskip("holoscan", reason="the one-graph test needs Holoscan")

from holoscan.core import Application
from holoscan.schedulers import GreedyScheduler

from roce_transceiver import _core
from roce_transceiver.config import ConfigError, load_config
from roce_transceiver.operators import LatencyStatsOp, RoceTransceiverOp, RoundTripPeerOp
from roce_transceiver.transceiver import Transceiver


def gpus() -> int:
    return len(_core.cuda_runtime_info()["gpus"])


def need_two() -> None:
    if gpus() < 2:
        pytest.skip(f"needs two GPUs; {gpus()} visible to this process")


def test_a_device_is_the_cuda_executors_only() -> None:
    with pytest.raises(ConfigError, match=r"cuda\.device.*executor 'cpu' runs on none"):
        load_config({"executor": "cpu", "cuda": {"device": 1}})


@pytest.mark.gpu
def test_a_device_that_is_not_there_is_named() -> None:
    n = gpus()
    with pytest.raises(Exception, match=rf"cuda.device={n}: {n} GPU\(s\) visible"):
        Transceiver({"executor": "cuda", "cuda": {"device": n}})


@pytest.mark.gpu
@pytest.mark.parametrize("far_end", ["cpu", "gpu"])
def test_a_transceiver_per_gpu_each_answers_from_its_own(far_end: str) -> None:
    need_two()
    ts = [
        Transceiver({"executor": "cuda", "far_end": far_end, "cuda": {"device": d}})
        for d in range(2)
    ]
    try:
        for t in ts:
            t.start()
        runs = [t.roundtrip(count=2000, timeout=20.0) for t in ts]  # each, the other running
    finally:
        for t in ts:
            t.stop()
    for d, r in enumerate(runs):
        assert (r.status, r.received, r.wrong) == ("done", 2000, 0), (d, r.status, r.wrong)


@pytest.mark.gpu
def test_the_pages_are_on_the_transceivers_gpu() -> None:
    need_two()
    import cupy

    t = Transceiver({**frames_config("cuda", pages=4), "far_end": "gpu", "cuda": {"device": 1}})
    sensor = sensor_for(t, payload=1024)
    sent = [sensor.frame(n, bytes((n + i) & 0xFF for i in range(5000))) for n in range(4)]
    assert t.preload([p for f in sent for p in f.packets]) == sum(len(f.packets) for f in sent)
    with t:
        got = []
        for _ in range(100):
            got += t.frames(timeout=0.1)
            if len(got) == 4:
                break
        assert [f.crc32 for f in got] == [zlib.crc32(f.content) for f in sent]
        where = cupy.cuda.runtime.pointerGetAttributes(got[0].array().data.ptr).device
        for f in got:
            f.release()
    assert where == 1


class TwoGpus(Application):
    """One transceiver per GPU in one graph, each with its own far end and latency."""

    def compose(self):
        for d in range(2):
            roce = RoceTransceiverOp(
                self, name=f"roce{d}", transceiver={"executor": "cuda", "cuda": {"device": d}}
            )
            qpu = RoundTripPeerOp(self, name=f"qpu{d}", transceiver_op=roce, count=200)
            self.add_flow(qpu, LatencyStatsOp(self, name=f"latency{d}", png=None, json=None))


@pytest.mark.gpu
def test_one_graph_drives_a_transceiver_on_each_gpu() -> None:
    need_two()
    app = TwoGpus()
    app.scheduler(GreedyScheduler(app, name="g", stop_on_deadlock=True, max_duration_ms=60000))
    app.run()
    ops = {op.name: op for op in app.graph.get_nodes()}
    assert [ops[f"qpu{d}"].received for d in range(2)] == [200, 200]
    assert [ops[f"roce{d}"].config["cuda"]["device"] for d in range(2)] == [0, 1]
