"""``roce-transceiver bench graph``: what a Holoscan graph receives from RoceTransceiverOp.

``bench ingest`` times the engine alone; this times the graph behind it. Per frame size (64 KiB,
1 MiB, 8 MiB by default: HSB frames in 4 KiB UC WRITEs with the 128-byte metadata record) and,
on the cuda executor, per ``cuda.epoch_us``:

1. ``bench ingest``'s row for the stream (ingest.py's ``_row``): the stream preloaded into the
   rx ring (device memory on the cuda executor), taken by a bare Transceiver, the rate by the
   engine's clock. This is the rate the graph is compared with, measured in the same run.
2. The same packets preloaded the same way into the transceiver of a RoceTransceiverOp (before
   its loop starts), whose start() returns once the engine has recorded the whole stream: the
   producer is never the bottleneck, and on the cpu executor the engine's thread no longer
   competes with the graph's. It feeds a sink that touches each frame where it lies: a byte
   sum of the whole frame on the GPU (cupy RawKernel, loaded when the graph is composed) for
   device tensors, numpy reading one byte every 4 KiB (a byte of each packet) for host
   tensors; the row says which. Into the graph: frames/s and Gb/s, the frames over the time
   from the operator's first compute() to the sink's look at the last frame; the operator's
   cost per frame: the time in its compute() calls that emitted frames over the frames
   emitted, wall and the thread's CPU time (calls that found nothing are counted apart).
   Every frame is checked at the sink: each frame number once, in order, whole, its CRC-32
   that of the bytes sent, its touch that of the bytes sent.
   The graph's floor, in the same run: the same sink fed by a source operator that emits a
   frame already in hand as RoceTransceiverOp does (the record's keys in the metadata, a
   tensor over the same bytes, one message a compute()): the rate Holoscan allows two Python
   operators on this machine, and the source's CPU time a frame, Holoscan's part of emitting.
3. Latency, from a frame's last packet to the graph's first look: frames one at a time on the
   loopback wire (the rx ring in host memory, pinned on the cuda executor: ``far_end: cpu``),
   the frame's packets but its last injected and taken by the engine, then its last one; the
   sink's look time minus the frame record's ``rx_last_ns``. Clocks: ``rx_last_ns`` is the rx
   descriptor's timestamp, written by the loopback NIC's inject on the host with
   CLOCK_MONOTONIC (``rt::now_ns()`` on the host); the sink reads ``time.monotonic_ns()``,
   CLOCK_MONOTONIC on Linux: one clock, no conversion. (The record's ``done_ns`` is the
   engine's clock, %globaltimer on the GPU, and is not used here; a preloaded stream's
   ``rx_last_ns`` is the preload's time, which is why the latency has its own run.)

The graph runs under Holoscan's greedy scheduler (the apps' default), the operator with its
defaults (``operator`` keys). Progress on stderr; the table on stdout; ``--json`` writes it all.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TextIO

import numpy as np
from holoscan.core import Application, Fragment, Operator, OperatorSpec, Tensor
from holoscan.schedulers import GreedyScheduler

from roce_transceiver.bench import ingest
from roce_transceiver.bench.frame_latency import last_packets
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.operators.app_runner import _quiet_holoscan
from roce_transceiver.operators.frame_ops import GpuByteSum, gpu_byte_sum
from roce_transceiver.operators.tensors import on_device
from roce_transceiver.operators.transceiver_op import FRAME_METADATA, RoceTransceiverOp
from roce_transceiver.schema import with_overrides
from roce_transceiver.stats import Percentiles
from roce_transceiver.transceiver import Transceiver

__all__ = ["EPOCHS_US", "FRAME_SIZES", "GraphSinkOp", "run"]

FRAME_SIZES = (65536, 1 << 20, 8 << 20)
EPOCHS_US = (100, 1000, 10000)
#: RoceTransceiverOp's frame_batch: a frame a message (a tensor, its record in the metadata),
#: and up to 64 a message (Python objects: Holoscan's cost of a message shared by them).
FRAME_BATCHES = (1, 64)
PAYLOAD = 4096
RING = 65536  # rx slots preloaded (the rx ring's depth): the stream's packets
HOST_STRIDE = 4096  # the host touch reads a byte every this many: one of each packet
WARPS = 8  # cuda.warps: what auto picks for the frames handler
LATENCY_RING = 4096
RUN_S = 300.0  # a graph still running then is stopped (the scheduler's limit too)
WAIT_S = 10.0  # a frame (latency) or the engine's take of a frame's body not done by then fails


@dataclass
class _Seen:
    """One frame as the sink saw it."""

    frame_number: int
    ok: bool
    crc32: int
    bytes: int
    touch: int
    look_ns: int  # time.monotonic_ns() as the sink's compute() began
    rx_last_ns: int


def _host_touch(data: np.ndarray) -> int:
    return int(data[::HOST_STRIDE].sum(dtype=np.uint64))


def _touch_of(content: bytes, on_gpu: bool) -> int:
    """What the sink's touch reads from a frame whose bytes are ``content``."""
    data = np.frombuffer(content, dtype=np.uint8)
    return int(data.sum(dtype=np.uint64)) if on_gpu else _host_touch(data)


class GraphSinkOp(Operator):
    """A graph's first operator after RoceTransceiverOp: times its first look at each frame,
    touches the frame where it lies (module docstring), drops the tensor (the page goes back),
    and calls ``done()`` once ``expect`` frames came (None: never)."""

    def __init__(
        self,
        fragment: Fragment,
        *args: Any,
        expect: int | None = None,
        done: Callable[[], None] | None = None,
        seen: Callable[[_Seen], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.expect = expect
        self.done = done
        self.on_seen = seen
        self.seen: list[_Seen] = []
        self.on_gpu = 0
        self._pending: deque[tuple[list[Any], Any]] = deque()  # batches the GPU still reads
        self._sums: list[tuple[int, Any]] = []  # (the batch's first frame's index, its sums)
        self._gpu: GpuByteSum | None = gpu_byte_sum()  # loaded now: before the loop runs
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("frames")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        look = time.monotonic_ns()
        message = op_input.receive("frames")
        if isinstance(message, list):  # RoceTransceiverOp's frame_batch: (array, Frame) pairs
            self._batch(message, look)
            return
        tensor = message["frame"]
        if on_device(tensor):
            if self._gpu is None:
                self._gpu = GpuByteSum()
            touch, _ = self._gpu.sum(tensor)
            self.on_gpu += 1
        else:
            touch = _host_touch(np.asarray(tensor))
        del tensor  # the page goes back now, not at the next frame
        md = self.metadata
        s = _Seen(
            int(md["frame_number"]),
            not md["packets_lost"] and bool(md["page_match"]) and bool(md["bytes_ok"]),
            int(md["crc32"]),
            int(md["bytes"]),
            touch,
            look,
            int(md["rx_last_ns"]),
        )
        self._saw(s)

    def _saw(self, s: _Seen) -> None:
        self.seen.append(s)
        if self.on_seen is not None:
            self.on_seen(s)
        if self.expect is not None and len(self.seen) == self.expect and self.done is not None:
            self.done()

    def _batch(self, batch: list[tuple[Any, Any]], look: int) -> None:
        """A batch's frames, each touched where it lies: on the GPU the sums queued for the
        batch and not waited for (the batch's arrays, and so its pages, kept until their event
        has completed; settle() reads the sums), on the host at once."""
        while self._pending and self._pending[0][1].done:
            self._pending.popleft()  # the GPU is done with those pages: they go back now
        first = len(self.seen)
        if batch and on_device(batch[0][0]):
            if self._gpu is None:
                self._gpu = GpuByteSum()
            sums, done = self._gpu.sums_async([a for a, _ in batch])
            self._pending.append((batch, done))
            self._sums.append((first, sums))
            self.on_gpu += len(batch)
            touches = [0] * len(batch)
        else:
            touches = [_host_touch(np.asarray(a)) for a, _ in batch]
        for (_, f), touch in zip(batch, touches, strict=True):
            ok = not f.packets_lost and bool(f.page_match) and bool(f.bytes_ok)
            self._saw(_Seen(f.frame_number, ok, f.crc32, f.bytes, touch, look, f.rx_last_ns))

    def settle(self) -> None:
        """The GPU touches of batches read back (once the graph has run): each frame's sum."""
        self._pending.clear()
        for first, sums in self._sums:
            for i, v in enumerate(sums.get().tolist()):  # the copy waits for the kernels
                self.seen[first + i].touch = int(v)
        self._sums.clear()


class _TimedRoceOp(RoceTransceiverOp):
    """RoceTransceiverOp with ``packets`` preloaded into its transceiver before the loop starts
    (``frames`` frames: start() returns once the engine recorded them all), and its compute()
    timed: the calls that emitted frames apart from those that found none."""

    def __init__(
        self, fragment: Fragment, *args: Any, packets: list[bytes], frames: int, **kw: Any
    ) -> None:
        self._packets = packets
        self._expect_frames = frames
        self.busy_ns = 0  # compute() calls that emitted frames
        self.busy_cpu_ns = 0  # their CPU time (the thread's): what a busy machine inflates less
        self.busy_calls = 0
        self.first_ns = 0  # time.monotonic_ns() as its first compute() began
        self.idle_ns = 0  # the others
        self.idle_calls = 0
        super().__init__(fragment, *args, **kw)

    def _make_transceiver(self, config: Any) -> Transceiver:
        t = super()._make_transceiver(config)
        if self._packets and t.preload(self._packets) != len(self._packets):
            t.stop()
            raise RuntimeError(f"{len(self._packets)} packets do not fit the rx ring")
        return t

    def start(self) -> None:
        """Started, then held until the engine has recorded the whole stream: the graph never
        waits for the producer, and the engine's thread (cpu executor) is done competing."""
        super().start()
        if not self._packets:
            return
        t = self.transceiver
        deadline = time.monotonic() + WAIT_S
        while t.stats()["frames"] + t.stats()["frames_dropped"] < self._expect_frames:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the engine recorded {t.stats()['frames']} of {self._expect_frames} frames "
                    f"in {WAIT_S} s"
                )
            time.sleep(1e-3)

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        before = self.emitted["frames"]
        cpu = time.thread_time_ns()
        if not self.first_ns:
            self.first_ns = time.monotonic_ns()
        began = time.perf_counter_ns()
        super().compute(op_input, op_output, context)
        spent = time.perf_counter_ns() - began
        if self.emitted["frames"] > before:
            self.busy_ns += spent
            self.busy_cpu_ns += time.thread_time_ns() - cpu
            self.busy_calls += 1
        else:
            self.idle_ns += spent
            self.idle_calls += 1


class _FloorSourceOp(Operator):
    """The graph's own cost, no transceiver: emits ``count`` ready frames as RoceTransceiverOp
    does (one message a compute(), ``{"frame": tensor}`` over the same bytes, the record's keys
    in the metadata), the frame already in hand."""

    def __init__(
        self, fragment: Fragment, *args: Any, frame: Any, count: int, batch: int = 1, **kw: Any
    ):
        self._array, self._count, self.emitted = frame, count, 0
        self._batch = batch
        self.cpu_ns = 0  # in compute(): a frame's metadata, tensor and emit alone
        self.first_ns = 0  # time.monotonic_ns() as its first compute() began
        self._record = {name: 0 for name in FRAME_METADATA}
        self._record.update(page_match=True, bytes_ok=True, bytes=frame.size)
        super().__init__(fragment, *args, **kw)

    def setup(self, spec: OperatorSpec) -> None:
        spec.output("frames")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        cpu = time.thread_time_ns()
        if not self.first_ns:
            self.first_ns = time.monotonic_ns()
        if self._batch > 1:  # as RoceTransceiverOp's frame_batch: (array, record) pairs
            n = min(self._batch, self._count - self.emitted)
            batch = []
            for i in range(n):
                record = SimpleNamespace(**self._record)
                record.frame_number = self.emitted + i
                batch.append((self._array, record))
            op_output.emit(batch, "frames")
            self.emitted += n
        else:
            md = self.metadata
            self._record["frame_number"] = self.emitted
            for key, value in self._record.items():
                md[key] = value
            op_output.emit({"frame": Tensor.as_tensor(self._array)}, "frames")
            self.emitted += 1
        self.cpu_ns += time.thread_time_ns() - cpu
        if self.emitted == self._count:
            self.stop_execution()


class _FloorGraph(Application):
    def __init__(self, frame: Any, count: int, batch: int) -> None:
        self._frame, self._count, self._batch = frame, count, batch
        super().__init__()

    def compose(self) -> None:
        self.source = _FloorSourceOp(
            self, name="source", frame=self._frame, count=self._count, batch=self._batch
        )
        self.sink = GraphSinkOp(self, name="sink")
        self.add_flow(self.source, self.sink, {("frames", "frames")})


def _floor(sent: list[Any], on_gpu: bool, batch: int = 1) -> dict[str, Any]:
    """The same sink fed by :class:`_FloorSourceOp` with the stream's first frame, where the
    transceiver's frames lie (GPU memory on the cuda executor, else host memory)."""
    content = np.frombuffer(sent[0].content, dtype=np.uint8)
    if on_gpu:
        import cupy

        frame: Any = cupy.asarray(content)
    else:
        frame = content.copy()
    app = _FloorGraph(frame, len(sent), batch)
    app.scheduler(
        GreedyScheduler(app, name="greedy", stop_on_deadlock=True, max_duration_ms=int(RUN_S * 1e3))
    )
    app.run()
    app.sink.settle()
    seen = app.sink.seen
    span_ns = seen[-1].look_ns - app.source.first_ns if seen else 0  # as _throughput's
    fps = len(seen) / (span_ns * 1e-9) if span_ns > 0 else 0.0
    touch = _touch_of(sent[0].content, on_gpu)
    return {
        "frames": len(sent),
        "frames_seen": len(seen),
        "frames_touched_right": sum(s.touch == touch for s in seen),
        "frames_per_s": fps,
        "gbit_per_s": fps * content.size * 8 / 1e9,
        # What emitting a frame as RoceTransceiverOp does costs in Holoscan alone (CPU time):
        # the operator's cpu_us_per_frame less this is the transceiver's share.
        "source_cpu_us_per_frame": app.source.cpu_ns / app.source.emitted / 1e3
        if app.source.emitted
        else None,
    }


class _Graph(Application):
    def __init__(
        self,
        config: Any,
        packets: list[bytes],
        expect: int | None,
        frame_batch: int = 1,
        **sink: Any,
    ):
        self._config, self._packets, self._expect, self._sink = config, packets, expect, sink
        self._frame_batch = frame_batch
        super().__init__()

    def compose(self) -> None:
        self.roce = _TimedRoceOp(
            self,
            name="roce",
            transceiver=self._config,
            packets=self._packets,
            frames=self._expect or 0,
            frame_batch=self._frame_batch,
        )
        self.sink = GraphSinkOp(
            self, name="sink", expect=self._expect, done=self.roce.finish, **self._sink
        )
        self.add_flow(self.roce, self.sink, {("frames", "frames")})


def _run_graph(app: _Graph, before_run: Callable[[], None] | None = None) -> None:
    app.scheduler(
        GreedyScheduler(app, name="greedy", stop_on_deadlock=True, max_duration_ms=int(RUN_S * 1e3))
    )
    app.compose_graph()
    if before_run is not None:
        before_run()
    # A frame missing would leave the operator waiting: it is told to finish by then.
    watchdog = threading.Timer(RUN_S - 5.0, app.roce.finish)
    watchdog.daemon = True
    watchdog.start()
    try:
        app.run()
    finally:
        watchdog.cancel()


def _check(seen: list[_Seen], sent: list[Any], on_gpu: bool) -> int:
    """Frames whole at the sink: each sent frame once, in order, its CRC and touch right."""
    whole = 0
    for s, want in zip(seen, sent, strict=False):
        whole += (
            s.ok
            and s.frame_number == want.frame_number
            and s.bytes == len(want.content)
            and s.crc32 == zlib.crc32(want.content)
            and s.touch == _touch_of(want.content, on_gpu)
        )
    return whole


def _throughput(
    config: dict[str, Any],
    stream: tuple[int, list[Any], list[bytes]],
    frame_bytes: int,
    frame_batch: int = 1,
) -> dict[str, Any]:
    _, sent, packets = stream
    app = _Graph(config, packets, len(sent), frame_batch)
    _run_graph(app)
    roce, sink = app.roce, app.sink
    sink.settle()
    seen = sink.seen
    on_gpu = sink.on_gpu > 0
    # From the operator's first compute() (the whole stream recorded and waiting) to the sink's
    # look at the last frame: every frame's whole way, the first one's poll included.
    span_ns = seen[-1].look_ns - roce.first_ns if seen else 0
    fps = len(seen) / (span_ns * 1e-9) if span_ns > 0 else 0.0
    emitted = roce.emitted["frames"]
    return {
        "frames": len(sent),
        "frames_seen": len(seen),
        "frames_whole": _check(seen, sent, on_gpu),
        "frames_dropped": roce.final_stats.get("frames_dropped", 0),
        "touch": "gpu byte sum" if on_gpu else f"host numpy, a byte every {HOST_STRIDE}",
        "frames_per_s": fps,
        "gbit_per_s": fps * frame_bytes * 8 / 1e9,
        "span_ns": span_ns,
        "op_us_per_frame": roce.busy_ns / emitted / 1e3 if emitted else None,
        "op_cpu_us_per_frame": roce.busy_cpu_ns / emitted / 1e3 if emitted else None,
        "op_calls_emitting": roce.busy_calls,
        "op_calls_idle": roce.idle_calls,
        "op_idle_ms": roce.idle_ns / 1e6,
    }


def _latency(
    config: dict[str, Any], frame_bytes: int, frames: int, frame_batch: int = 1
) -> dict[str, Any]:
    """Frames one at a time (module docstring, 3.): last packet to the sink's first look."""
    seen_event = threading.Event()
    app = _Graph(config, [], None, frame_batch, seen=lambda s: seen_event.set())
    failure: list[BaseException] = []
    sent: list[Any] = []

    def far_end() -> None:
        try:
            deadline = time.monotonic() + WAIT_S
            while (t := app.roce.transceiver) is None:  # published once its loop runs
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the transceiver did not start within {WAIT_S} s")
                time.sleep(1e-3)
            for frame, last in last_packets(t, frames, frame_bytes, PAYLOAD, WAIT_S):
                seen_event.clear()
                sent.append(frame)
                if not t.inject(last, wait=WAIT_S):
                    raise RuntimeError(f"the rx ring stayed full for {WAIT_S} s")
                if not seen_event.wait(WAIT_S):
                    raise RuntimeError(
                        f"frame {frame.frame_number} did not reach the graph within {WAIT_S} s"
                    )
        except BaseException as e:  # handed to the caller once the graph ended
            failure.append(e)
        finally:
            app.roce.finish()

    feeder = threading.Thread(target=far_end, name="graph-bench-far-end", daemon=True)
    _run_graph(app, before_run=feeder.start)
    feeder.join(WAIT_S)
    if failure:
        raise RuntimeError(f"latency run: {failure[0]}") from failure[0]
    app.sink.settle()
    seen = app.sink.seen
    samples = [s.look_ns - s.rx_last_ns for s in seen]
    if any(x < 0 for x in samples):
        raise RuntimeError("a frame was seen before its last packet came: the clocks differ")
    return {
        "frames": frames,
        "frames_whole": _check(seen, sent, app.sink.on_gpu > 0),
        "latency": Percentiles.from_samples(samples, "ns").to("us").as_dict() if samples else None,
    }


def _host_latency(config: dict[str, Any], frame_bytes: int, frames: int) -> dict[str, Any]:
    """The engine's and the poll's part of the latency alone, no graph: frames one at a time as
    _latency sends them, each taken by ``Transceiver.frames`` spinning in the core (what
    RoceTransceiverOp's idle wait does); its return less the record's ``rx_last_ns``."""
    samples: list[int] = []
    whole = 0
    with Transceiver(config) as t:
        for frame, last in last_packets(t, frames, frame_bytes, PAYLOAD, WAIT_S):
            if not t.inject(last, wait=WAIT_S):
                raise RuntimeError(f"the rx ring stayed full for {WAIT_S} s")
            got = t.frames(timeout=WAIT_S, max_frames=1, spin=WAIT_S)
            seen_ns = time.monotonic_ns()
            if not got:
                raise RuntimeError(f"frame {frame.frame_number} did not come within {WAIT_S} s")
            (f,) = got
            samples.append(seen_ns - f.rx_last_ns)
            whole += f.frame_number == frame.frame_number and not f.packets_lost
            f.release()
    return {
        "frames": frames,
        "frames_whole": whole,
        "latency": Percentiles.from_samples(samples, "ns").to("us").as_dict() if samples else None,
    }


def _settings(executor: str, epochs_us: Sequence[int]) -> list[int | None]:
    return list(epochs_us) if executor == "cuda" else [None]


def run(
    executor: str = "auto",
    frame_sizes: Sequence[int] = FRAME_SIZES,
    epochs_us: Sequence[int] = EPOCHS_US,
    ring: int = RING,
    latency_frames: int = 100,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
    progress: TextIO = sys.stderr,
    frame_batches: Sequence[int] = FRAME_BATCHES,
) -> dict[str, Any]:
    """A row per frame size, ``cuda.epoch_us`` (cuda executor) and operator ``frame_batch``:
    bench ingest's rate, the graph's, the operator's cost per frame and the
    last-packet-to-graph latency of ``latency_frames`` frames (0: none)."""
    if not frame_batches or any(not 1 <= b <= 4096 for b in frame_batches):
        raise ValueError(f"frame batches {list(frame_batches)}: each 1 to 4096")
    if executor == "auto":
        from roce_transceiver import _core

        executor = "cuda" if _core.cuda_runtime_info()["gpus"] else "cpu"
    for size in frame_sizes:
        if size % 64:
            raise ValueError(f"a frame of {size} bytes: frames are a multiple of 64 bytes")
    _quiet_holoscan()
    rows = []
    for frame_bytes in frame_sizes:
        print(f"graph bench: {frame_bytes} B frames, building the stream", file=progress)
        stream = ingest._stream(PAYLOAD, True, 1, frame_bytes, ring)
        per_frame, sent, _ = stream
        floors = {}
        for batch in frame_batches:
            print(f"graph bench: {frame_bytes} B, the graph's floor, batch {batch}", file=progress)
            floors[batch] = _floor(sent, executor == "cuda", batch)
        for epoch_us in _settings(executor, epochs_us):
            extra = {} if epoch_us is None else {"cuda.epoch_us": epoch_us}
            what = f"{executor}" + ("" if epoch_us is None else f" epoch_us {epoch_us}")
            print(f"graph bench: {frame_bytes} B, {what}: bench ingest's row", file=progress)
            eng = ingest._row(
                executor, PAYLOAD, True, WARPS, 1, stream, progress, frame_bytes, ring, extra
            )
            engine_fps = eng["packets_per_s"] / per_frame
            config = with_overrides(
                ingest._config(executor, PAYLOAD, True, len(sent), WARPS, 1, frame_bytes, ring),
                extra,
            )
            # Frames one at a time on the loopback wire (module docstring, 3.).
            lcfg = with_overrides(
                ingest._config(executor, PAYLOAD, True, 4, WARPS, 1, frame_bytes, LATENCY_RING),
                {**extra, "far_end": "cpu"},
            )
            to_host = None
            if latency_frames:
                print(f"graph bench: {frame_bytes} B, {what}: latency to the host", file=progress)
                to_host = _host_latency(lcfg, frame_bytes, latency_frames)
            for batch in frame_batches:
                floor = floors[batch]
                print(
                    f"graph bench: {frame_bytes} B, {what}, batch {batch}: the graph", file=progress
                )
                graph = _throughput(config, stream, frame_bytes, batch)
                latency = None
                if latency_frames:
                    print(
                        f"graph bench: {frame_bytes} B, {what}, batch {batch}: latency",
                        file=progress,
                    )
                    latency = _latency(lcfg, frame_bytes, latency_frames, batch)
                rows.append(
                    {
                        "frame_bytes": frame_bytes,
                        "epoch_us": epoch_us,
                        "frame_batch": batch,
                        "engine": {
                            "frames": eng["frames"],
                            "frames_whole": eng["frames_whole"],
                            "frames_per_s": engine_fps,
                            "gbit_per_s": engine_fps * frame_bytes * 8 / 1e9,
                        },
                        "graph": graph,
                        "graph_floor": floor,
                        "graph_over_engine": graph["frames_per_s"] / engine_fps
                        if engine_fps
                        else None,
                        "graph_over_floor": graph["frames_per_s"] / floor["frames_per_s"]
                        if floor["frames_per_s"]
                        else None,
                        "last_packet_to_graph": latency,
                        "last_packet_to_host": to_host,
                    }
                )
    _table(executor, rows, out)
    result = {
        "benchmark": "graph",
        "executor": executor,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "payload": PAYLOAD,
        "metadata": True,
        "scheduler": "greedy",
        "rows": rows,
        "machine": machine_info(),
    }
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result


def all_whole(result: dict[str, Any]) -> bool:
    """Every frame of every run whole: the engine's, the graph's and the latency's."""
    for r in result["rows"]:
        lat = r["last_packet_to_graph"]
        if r["engine"]["frames_whole"] != r["engine"]["frames"]:
            return False
        if r["graph"]["frames_whole"] != r["graph"]["frames"]:
            return False
        if lat is not None and lat["frames_whole"] != lat["frames"]:
            return False
        host = r.get("last_packet_to_host")
        if host is not None and host["frames_whole"] != host["frames"]:
            return False
    return True


def _table(executor: str, rows: list[dict[str, Any]], out: TextIO) -> None:
    print(
        f"bench graph ({executor} executor; {PAYLOAD} B UC WRITEs, metadata on; greedy scheduler)",
        file=out,
    )
    print(
        f"{'frame':>8} {'epoch_us':>8} {'batch':>5} {'engine f/s':>11} {'graph f/s':>10} "
        f"{'graph Gb/s':>10} "
        f"{'/engine':>7} {'floor f/s':>10} {'op us/f':>8} {'cpu us/f':>8} {'floor cpu':>9} "
        f"{'whole':>11}  "
        "last packet to graph p50/p99/p99.9 us (to the host alone p50/p99)",
        file=out,
    )
    for r in rows:
        g, e, lat = r["graph"], r["engine"], r["last_packet_to_graph"]
        size = r["frame_bytes"]
        name = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        ratio = r["graph_over_engine"]
        op = g["op_us_per_frame"]
        figures = "-"
        if lat is not None and lat["latency"]:
            p = lat["latency"]
            figures = f"{p['p50']:.1f}/{p['p99']:.1f}/{p['p999']:.1f} ({lat['frames_whole']} whole)"
            host = r.get("last_packet_to_host")
            if host is not None and host["latency"]:
                h = host["latency"]
                figures += f" ({h['p50']:.1f}/{h['p99']:.1f})"
        print(
            f"{name:>8} {r['epoch_us'] if r['epoch_us'] is not None else '-':>8} "
            f"{r['frame_batch']:>5} "
            f"{e['frames_per_s']:>11.0f} {g['frames_per_s']:>10.0f} {g['gbit_per_s']:>10.2f} "
            f"{(ratio if ratio is not None else float('nan')):>7.2f} "
            f"{r['graph_floor']['frames_per_s']:>10.0f} "
            f"{(op if op is not None else float('nan')):>8.1f} "
            f"{(g['op_cpu_us_per_frame'] or float('nan')):>8.1f} "
            f"{(r['graph_floor']['source_cpu_us_per_frame'] or float('nan')):>9.1f} "
            f"{g['frames_whole']:>5}/{g['frames']:<5}  {figures}",
            file=out,
        )
    touches = sorted({r["graph"]["touch"] for r in rows})
    print(
        f"sink touch: {'; '.join(touches)}. floor: the same sink fed by a source operator "
        "that emits a ready frame the same way (no transceiver): the graph's own cost; "
        "op us/f: the operator's compute() a frame (wall), cpu us/f: its CPU time, floor cpu: "
        "the floor source's CPU time a frame (Holoscan's part of emitting one)",
        file=out,
    )
