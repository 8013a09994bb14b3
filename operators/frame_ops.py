"""Operators on the ``frames`` port: a checker against what the sensor sent, and a frame
statistic computed where the frame lies (GPU or host).

:class:`FrameCheckerOp` ticks on each frame. Each frame is checked when the sensor's record
of it is at hand (else a host copy waits for it): the engine's CRC-32 of the page against the
metadata's, packets lost against what the sensor dropped or corrupted, and every byte against
the content sent (intact frames). Frame numbers that never arrive are gaps.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from holoscan.core import ConditionType, Fragment, IOSpec, Operator, OperatorSpec

from roce_transceiver.frames import RECORD_FIELDS
from roce_transceiver.operators.app_config import FRAME_CHECK
from roce_transceiver.operators.params import operator_parameters
from roce_transceiver.operators.tensors import on_device, to_host
from roce_transceiver.operators.transceiver_op import FRAME_METADATA
from roce_transceiver.peers.sensor import SentFrame

__all__ = [
    "FRAME_RECORD",
    "SENT_RECORD",
    "FrameCheckerOp",
    "FramePackOp",
    "FrameStatisticOp",
    "FrameUnpackOp",
    "sent_frames",
    "sent_tensors",
]

# Steps of sensor records the checker can be behind by; the sensor waits beyond (policy 2:
# a full queue is an error, never a silent drop).
_SENT_BACKLOG = 4096


@dataclass
class _Arrived:
    frame_number: int
    data: np.ndarray  # a host copy: the page went back when the message was dropped
    crc_ok: bool
    crc32: int
    packets_lost: int


class FrameCheckerOp(Operator):
    """``frames`` from RoceTransceiverOp, ``sent`` from SensorPeerOp; ``allow_loss`` (the
    ``frame_check`` keys, validated): frames with lost packets (faults configured) do not fail
    the run when their loss is the one the sensor made."""

    def __init__(self, fragment: Fragment, *args: Any, **params: Any) -> None:
        p, holoscan = operator_parameters(fragment, FRAME_CHECK, params, "FrameCheckerOp")
        self.allow_loss: bool = p["allow_loss"]
        self.sent: dict[int, SentFrame] = {}
        self.sent_total = 0
        self.frames = 0
        self.exact = 0  # intact frames whose every byte is the one sent
        self.damaged_as_sent = 0  # frames that lost exactly the packets the sensor lost
        self.bad: list[str] = []
        self.bytes = 0
        self.out_of_order = 0
        self._last_number = -1
        self._waiting: dict[int, _Arrived] = {}
        self._seen: set[int] = set()
        self.first_s = self.last_s = 0.0
        super().__init__(fragment, *args, **holoscan)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("frames")
        # The sensor announces a step's frames before it sends them (SensorPeerOp), so a
        # frame's record is here by the time the frame is; reading it never waits.
        spec.input("sent").connector(
            IOSpec.ConnectorType.DOUBLE_BUFFER, capacity=_SENT_BACKLOG, policy=2
        ).condition(ConditionType.NONE)

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        while (step := op_input.receive("sent")) is not None:
            for s in step:
                self.sent[s.frame_number] = s
                self.sent_total += 1
        message = op_input.receive("frames")
        if message is not None:  # always, with the default condition; None-safe for reuse
            md = self.metadata
            arrived = _Arrived(
                int(md["frame_number"]),
                to_host(message["frame"]).copy(),
                bool(md["crc_ok"]),
                int(md["crc32"]),
                int(md["packets_lost"]),
            )
            now = time.perf_counter()
            self.first_s = self.first_s or now
            self.last_s = now
            self.frames += 1
            self.bytes += arrived.data.size
            if arrived.frame_number < self._last_number:
                self.out_of_order += 1
            self._last_number = arrived.frame_number
            self._seen.add(arrived.frame_number)
            self._waiting[arrived.frame_number] = arrived
        for number in [n for n in self._waiting if n in self.sent]:
            self._check(self._waiting.pop(number), self.sent.pop(number))

    def _check(self, a: _Arrived, s: SentFrame) -> None:
        def bad(why: str) -> None:
            self.bad.append(f"frame {a.frame_number}: {why}")

        if a.packets_lost != s.lost:
            bad(f"{a.packets_lost} packets lost, the sensor lost {s.lost}")
        elif s.lost:
            self.damaged_as_sent += 1
            if not self.allow_loss:
                bad(f"{s.lost} packets lost (frame_check.allow_loss is off)")
        elif not a.crc_ok or a.crc32 != s.crc32:
            bad(f"CRC-32 {a.crc32:#010x}, sent {s.crc32:#010x} (engine crc_ok {a.crc_ok})")
        elif a.data.tobytes() != s.content or zlib.crc32(a.data.tobytes()) != s.crc32:
            first = int(np.argmax(a.data[: len(s.content)] != np.frombuffer(s.content, np.uint8)))
            bad(f"{a.data.size} bytes differ from the {len(s.content)} sent (first at {first})")
        else:
            self.exact += 1

    @property
    def gaps(self) -> list[int]:
        """Frame numbers the sensor sent that never arrived."""
        return sorted(n for n in self.sent if n not in self._seen)

    @property
    def unmatched(self) -> int:
        """Frames that arrived with no record of them from the sensor."""
        return len(self._waiting)

    @property
    def ok(self) -> bool:
        return (
            self.frames > 0
            and not self.bad
            and not self.gaps
            and not self.unmatched
            and self.frames == self.sent_total
        )


# The statistic's GPU kernel: the sum of a frame's bytes, a grid-stride loop of fixed shape
# (one launch configuration, so the module loaded up front is the only one it ever needs).
_BYTE_SUM_SOURCE = r"""
extern "C" __global__ void rt_byte_sum(const unsigned char* data, unsigned long long n,
                                       unsigned long long* sum) {
  unsigned long long s = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    s += data[i];
  for (int d = 16; d > 0; d /= 2) s += __shfl_down_sync(0xffffffffu, s, d);
  if ((threadIdx.x & 31) == 0 && s) atomicAdd(sum, s);
}
"""
_BYTE_SUM_GRID, _BYTE_SUM_BLOCK = 64, 256


class GpuByteSum:
    """The byte sum on the GPU, its module compiled and loaded when made.

    A CUDA module load waits for the device to go idle, which a persistent kernel running with
    ``cuda.epoch_us: 0`` never lets happen (docs/gpu_sharing.md): an operator that loaded its
    kernel at its first frame would wait there until the transceiver stopped. Made when the
    graph is composed, before any operator starts, the load is over before the loop begins.
    """

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._kernel = cupy.RawKernel(_BYTE_SUM_SOURCE, "rt_byte_sum")
        self._kernel.compile()  # NVRTC, then the module load: both before the loop runs
        self._sum = cupy.zeros(1, dtype=cupy.uint64)

    def sum(self, tensor: Any) -> tuple[int, int]:
        """The sum of the frame's bytes and their count (bench graph's touch of a frame)."""
        cupy = self._cupy
        data = cupy.asarray(tensor).reshape(-1)
        if data.dtype != cupy.uint8:
            raise TypeError(f"frame statistic: a frame of uint8, not {data.dtype}")
        if data.size == 0:
            return 0, 0
        self._sum.fill(0)  # a memset: no kernel of its own
        args = (data, np.uint64(data.size), self._sum)
        self._kernel((_BYTE_SUM_GRID,), (_BYTE_SUM_BLOCK,), args)
        return int(self._sum.get()[0]), int(data.size)

    def sums_async(self, arrays: Sequence[Any]) -> tuple[Any, Any]:
        """Each array's byte sum into a device vector, the kernels queued on the current stream
        and not waited for: (the vector, an event recorded after them). The arrays must live
        until the event has completed (a frame's page goes back when its array goes)."""
        cupy = self._cupy
        out = cupy.zeros(len(arrays), dtype=cupy.uint64)
        for i, a in enumerate(arrays):
            data = cupy.asarray(a).reshape(-1)
            if data.size:
                self._kernel(
                    (_BYTE_SUM_GRID,), (_BYTE_SUM_BLOCK,), (data, np.uint64(data.size), out[i:])
                )
        done = cupy.cuda.Event(block=False, disable_timing=True)
        done.record()
        return out, done

    def mean(self, tensor: Any) -> float:
        total, size = self.sum(tensor)
        return total / size if size else float("nan")


def gpu_byte_sum() -> GpuByteSum | None:
    """The GPU statistic where cupy sees a GPU; None elsewhere (frames come as host tensors)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # no cupy, no driver, no device: the host path is the only one used
        return None
    return GpuByteSum()


class FrameStatisticOp(Operator):
    """The processing step of the sensor app: each frame's mean byte value, computed where the
    frame lies (a GPU kernel on a device tensor, numpy on a host one), without a copy.

    Its GPU kernel is compiled and loaded when the operator is made, while the graph is
    composed and before the transceiver's persistent kernel starts: it runs with every
    ``cuda.epoch_us``, 0 (one launch) included. A GPU operator that loads a kernel at its first
    frame instead waits for the next epoch boundary, and with ``epoch_us: 0`` until the
    transceiver stops (docs/gpu_sharing.md).
    """

    def __init__(self, fragment: Fragment, *args: Any, **kwargs: Any) -> None:
        self.frames = 0
        self.on_gpu = 0
        self.means: list[float] = []
        self._gpu = gpu_byte_sum()
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("frames")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        tensor = op_input.receive("frames")["frame"]
        if on_device(tensor):
            if self._gpu is None:  # a device tensor where cupy saw no GPU when composed
                self._gpu = GpuByteSum()
            mean = self._gpu.mean(tensor)
            self.on_gpu += 1
        else:
            mean = float(np.asarray(tensor).mean(dtype=np.float64))
        self.frames += 1
        self.means.append(mean)


#: The frame record carried across a fragment boundary, in this order, as one int64 tensor
#: (RoceTransceiverOp's metadata keys; booleans as 0/1; a field that is None without a
#: metadata record, as metadata_crc, -1).
FRAME_RECORD = FRAME_METADATA
_BOOLEAN = {name for name, kind in RECORD_FIELDS if kind == "bool"}
_OPTIONAL = {name for name, kind in RECORD_FIELDS if kind == "int?"}

#: A sensor record (SentFrame) across the boundary: one int64 row per frame, in this order;
#: its content rides in ``sent_content``, the rows' contents end to end (``bytes`` each).
#: The events (strings for a log) stay behind: no checker reads them.
SENT_RECORD = (
    "frame_number",
    "page",
    "bytes",
    "lost",
    "reordered",
    "duplicated",
    "corrupted",
    "end_lost",
)


def _sent_row(s: SentFrame) -> tuple[int, ...]:
    """``s`` as a SENT_RECORD row."""
    counts = (s.lost, s.reordered, s.duplicated, s.corrupted, int(s.end_lost))
    return (s.frame_number, s.page, len(s.content), *counts)


def sent_tensors(sent: list[SentFrame]) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, content)``: SENT_RECORD rows of ``sent`` and their contents end to end."""
    rows = np.array(
        [_sent_row(s) for s in sent],
        dtype=np.int64,
    ).reshape(len(sent), len(SENT_RECORD))
    content = np.frombuffer(bytearray(b"".join(s.content for s in sent)), dtype=np.uint8)
    return rows, content  # over a bytearray: a tensor is exported writable


def sent_frames(rows: np.ndarray, content: np.ndarray, where: str) -> list[SentFrame]:
    """The other way: SentFrame records (no packets, no events) from sent_tensors' output;
    ``where`` names the operator in the error a malformed pair raises."""
    if rows.ndim != 2 or rows.shape[1] != len(SENT_RECORD):
        raise ValueError(
            f"{where}: sent records of shape {rows.shape}, not (n, {len(SENT_RECORD)})"
        )
    sizes = rows[:, 2]
    if (sizes < 0).any() or int(sizes.sum()) != content.size:
        raise ValueError(
            f"{where}: sent records name {int(sizes.sum())} content bytes, {content.size} came"
        )
    out: list[SentFrame] = []
    at = 0
    for row in rows.tolist():
        number, page, size, lost, reordered, duplicated, corrupted, end_lost = row
        out.append(
            SentFrame(
                number,
                page,
                content[at : at + size].tobytes(),
                [],
                lost=lost,
                reordered=reordered,
                duplicated=duplicated,
                corrupted=corrupted,
                end_lost=bool(end_lost),
            )
        )
        at += size
    return out


class FramePackOp(Operator):
    """A frame and its record as tensors, for a link that carries tensors and nothing else:
    the fragment boundary of a distributed app (UCX). In ``frames`` (RoceTransceiverOp's) and
    ``sent`` (SensorPeerOp's, optional); out ``frames``: ``{"frame": uint8, "record": int64
    (FRAME_RECORD)}``, and, when the sensor announced frames since the last one, ``"sent_record"``
    (int64 rows, SENT_RECORD) and ``"sent_content"`` (uint8).

    The sensor's records ride in the frames' messages, not on a link of their own: the sensor
    announces a frame before its packets go, so its record is here before the frame is, and
    one link keeps that order across the boundary (two would race, and the checker ticks on
    frames). The frame's bytes are copied to the host, so that its page goes back to the ring
    at once, whatever the link does with the message (and a remote fragment need not reach
    this GPU). The record replaces the metadata on the wire: the operator's metadata is
    cleared before it emits."""

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("frames")
        spec.input("sent").connector(
            IOSpec.ConnectorType.DOUBLE_BUFFER, capacity=_SENT_BACKLOG, policy=2
        ).condition(ConditionType.NONE)
        spec.output("frames")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        from holoscan import as_tensor

        sent: list[SentFrame] = []
        while (step := op_input.receive("sent")) is not None:
            sent.extend(step)
        message = op_input.receive("frames")
        md = self.metadata
        missing = [k for k in FRAME_RECORD if k not in md]
        if missing:
            raise ValueError(
                f"{self.name}: a frame without {', '.join(missing)} in its metadata "
                "(RoceTransceiverOp's frames, with the fragment's metadata enabled)"
            )
        record = np.array(
            [-1 if md[k] is None else int(md[k]) for k in FRAME_RECORD], dtype=np.int64
        )
        md.clear()
        data = to_host(message["frame"]).copy()
        del message  # the page's lease: released here, before the link holds anything
        out = {"frame": as_tensor(data), "record": as_tensor(record)}
        if sent:  # UCX cannot carry a tensor with a zero dimension
            rows, content = sent_tensors(sent)
            out["sent_record"] = as_tensor(rows)
            out["sent_content"] = as_tensor(content)
        op_output.emit(out, "frames")


class FrameUnpackOp(Operator):
    """The other end of :class:`FramePackOp`: out ``frames``, ``{"frame": tensor}`` with the
    record back in the operator's metadata as RoceTransceiverOp emits it, and ``sent``, the
    SentFrame list the message carried (when it carried one), so that FrameCheckerOp and
    FrameStatisticOp run unchanged after the boundary. In ``frames``.

    The frame is copied out of the received message: Holoscan 4.6 re-emitting a tensor that
    UCX delivered hands the next operator a tensor whose shape is gone (dimensions read from
    freed memory, measured here), and a host copy of one frame costs little beside the link.
    """

    def __init__(self, fragment: Fragment, *args: Any, **kwargs: Any) -> None:
        super().__init__(fragment, *args, **kwargs)
        from holoscan.core import MetadataPolicy

        # The record is the truth: metadata the link may carry as well is replaced by it.
        self.metadata_policy = MetadataPolicy.UPDATE

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("frames")
        spec.output("frames")
        spec.output("sent")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        from holoscan import as_tensor

        message = op_input.receive("frames")
        if "frame" not in message or "record" not in message:
            raise ValueError(
                f"{self.name}: a message with {sorted(message)}, not FramePackOp's "
                "'frame' and 'record'"
            )
        record = np.asarray(message["record"])
        if record.shape != (len(FRAME_RECORD),):
            raise ValueError(
                f"{self.name}: a frame record of shape {record.shape}, not "
                f"({len(FRAME_RECORD)},): not FramePackOp's"
            )
        if ("sent_record" in message) != ("sent_content" in message):
            raise ValueError(f"{self.name}: sent_record and sent_content come together")
        sent = (
            sent_frames(
                np.asarray(message["sent_record"]), np.asarray(message["sent_content"]), self.name
            )
            if "sent_record" in message
            else []
        )
        frame = np.asarray(message["frame"]).copy()
        # The sensor's records go out bare (a message takes the metadata as it is at emit):
        # the checker receives them and the frame, and two copies of a key would clash.
        self.metadata.clear()
        if sent:
            op_output.emit(sent, "sent")
        for key, value in zip(FRAME_RECORD, record.tolist(), strict=True):
            if key in _BOOLEAN:
                self.metadata[key] = bool(value)
            else:
                self.metadata[key] = None if key in _OPTIONAL and value < 0 else value
        op_output.emit({"frame": as_tensor(frame)}, "frames")
