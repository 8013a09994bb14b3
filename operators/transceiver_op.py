"""RoceTransceiverOp: a Transceiver as a Holoscan operator.

``start()`` builds the transceiver and launches its persistent loop; ``stop()`` stops the loop
and frees everything, however the graph ends. ``compute()`` never blocks the loop: it takes what
the loop completed since the last call and emits it.

Ports (the data port is the one the handler fills, ``frames`` or ``messages``; it must be
connected, and the operator runs when there is room for a message on it):

- ``frames`` (frames handler): one message per frame, ``{"frame": tensor}``, the tensor viewing
  the frame where it lies (GPU memory on the cuda executor, host memory otherwise: no copy),
  the frame's record in the operator's metadata (``frame_number``, ``page``, ``bytes``,
  ``crc32``, ``crc_ok``, ``packets_lost``, ``psn_first`` ...). The page goes back to the ring
  when the last reference to the tensor is dropped downstream. Tensors are valid until the
  operator stops (the transceiver's memory is freed then). With ``frame_batch`` N > 1: a
  message a compute() of up to N frames ready, a Python list of ``(array, Frame)`` (the array
  a cupy or numpy view of the frame holding its page as the tensor does, the Frame its record),
  no metadata: for Python operators, which then pay Holoscan's cost of a message once a batch.
- ``slices`` (frames handler with ``frames.slice_bytes`` set; then it must be connected too):
  one message per slice of a frame, ``{"slice": tensor}``, the tensor viewing the slice's bytes
  in the page (as ``frames``: no copy), the slice's record in the metadata (``frame_number``,
  ``slice``, ``page``, ``offset``, ``bytes``, ``whole``, ``last``, ``rx_last_ns``). A frame's
  slices are all emitted before the frame is. A slice holds no page: its bytes stay as they
  are until its frame's page is given back after the frame (docs/frames.md, Slices).
- ``messages`` (echo, qec): a list of :class:`~roce_transceiver.transceiver.Completion`
  (request, reply, timestamps) per message, at most ``max_messages`` records.
- ``stats``: the transceiver's counters (a dict) every ``stats_period_s``, and once more, with
  ``"final": 1``, as the operator ends; connecting it is optional, and a slow reader sees the
  latest counters (older ones are dropped).
- input ``tx`` (optional): tensors (or bytes) to send to the peer as SENDs.

Output ports wait for room downstream, so a slow graph makes compute() run less often; the loop
goes on and counts what the host did not take (``completion_drops``, ``frames_dropped``).

A peer in the same graph says when it is done with :meth:`finish`; the operator then emits
what is still coming, up to what the peer expects or ``drain_timeout_s``, and stops itself.

With ``hsb.bridge`` set in the transceiver's configuration (its ``hsb:`` section, docs/hsb.md),
``start()`` also points that Holoscan Sensor Bridge at the transceiver (enumeration, checks,
data channel configured and started) and ``stop()`` stops and un-configures it before the
transceiver stops; a bridge that cannot be programmed fails ``start()`` naming the fix, and
so does a sensor that streams to another host (naming it) unless ``hsb.take_over: true``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from holoscan.core import ConditionType, Fragment, IOSpec, Operator, OperatorSpec, Tensor

from roce_transceiver.config import ConfigError, load_config
from roce_transceiver.frames import RECORD_NAMES, SLICE_NAMES, Frame, Slice
from roce_transceiver.operators.app_config import OPERATOR, ROCE_OP
from roce_transceiver.operators.params import Located, locate, validated
from roce_transceiver.schema import validate
from roce_transceiver.transceiver import Completion, Transceiver, TransceiverError

__all__ = ["RoceTransceiverOp", "roce_parameters"]

log = logging.getLogger(__name__)

#: The frame metadata keys a frame's tensor carries: the frame record's fields, in its order
#: (the distributed app's record tensor keeps the same order, frame_ops.FRAME_RECORD).
FRAME_METADATA = RECORD_NAMES
#: The metadata keys a slice's tensor carries: the slice record's fields, in its order.
SLICE_METADATA = SLICE_NAMES
#: Records taken from the loop in one poll at most (they wait in the operator's deque, a frame
#: a compute()): enough to spread the poll's own cost, few enough that the first of them does not
#: wait long for the rest to be made Frames.
_POLL_FRAMES = 16


class _PageLease:
    """Holds a frame's page for as long as something views it; gives it back when collected.

    numpy keeps the object whose ``__array_interface__`` it wraps alive, and so does cupy the
    owner of unowned memory: the tensor Holoscan passes downstream ends up holding this."""

    def __init__(self, frame: Frame, interface: dict[str, Any] | None = None) -> None:
        self.frame = frame
        if interface is not None:
            self.__array_interface__ = interface

    def __del__(self) -> None:
        # The transceiver may have stopped first: its pages went with it.
        with contextlib.suppress(TransceiverError, RuntimeError, ValueError):
            self.frame.release()


def frame_tensor_source(frame: Frame) -> Any:
    """An array over ``frame``'s page (cupy on the GPU, numpy on the host) that releases the
    page when the last reference to it goes."""
    if frame.on_device:
        return frame.array(owner=_PageLease(frame))
    interface = dict(frame.array().__array_interface__)
    # The page is the host's until released: writable, and DLPack cannot carry read-only.
    interface["data"] = (interface["data"][0], False)
    return np.asarray(_PageLease(frame, interface))


class _Held:
    """An array interface over memory that ``keep`` (an array, itself holding the page's
    memory) keeps alive: numpy keeps this object, and so the memory, as long as its view."""

    def __init__(self, keep: Any, interface: dict[str, Any]) -> None:
        self.keep = keep
        self.__array_interface__ = interface


def slice_tensor_source(part: Slice) -> Any:
    """An array over ``part``'s bytes in its page (cupy on the GPU, numpy on the host)."""
    view = part.array()
    if part.on_device:
        return view
    interface = dict(view.__array_interface__)
    interface["data"] = (interface["data"][0], False)  # DLPack cannot carry read-only
    return np.asarray(_Held(view, interface))


class RoceTransceiverOp(Operator):
    """Owns a Transceiver; see the module docstring for the ports.

    Keyword arguments, as Holoscan gives them (``**self.kwargs("roce")`` after
    ``app.config(file)``) or as Python: ``transceiver``, the Transceiver's configuration (a
    mapping of its keys or a YAML path; None: every default), and ``stats_period_s``,
    ``idle_wait_s``, ``max_messages``, ``drain_timeout_s`` (docs/configuration.md, the
    ``operator`` keys). They are validated here, at compose time: a bad one is a
    ``ConfigError`` naming the key, and the file and line when the values are a section of the
    fragment's config file (operators/params.py)."""

    def __init__(
        self,
        fragment: Fragment,
        *args: Any,
        transceiver: Mapping[str, Any] | str | None = None,
        **params: Any,
    ) -> None:
        name = params.pop("name", None)
        self.config, op = roce_parameters(fragment, transceiver, params, name)
        self.stats_period_s: float = op["stats_period_s"]
        self.idle_wait_s: float = op["idle_wait_s"]
        self.max_messages: int = op["max_messages"]
        self.frame_batch: int = op["frame_batch"]
        self.drain_timeout_s: float = op["drain_timeout_s"]
        self.transceiver: Transceiver | None = None
        self.hsb: Any = None  # the bridge's session (hsb.bridge set), while running
        self.bridge_report: dict[str, Any] = {}  # its steps and reconnections, once stopped
        self._bridge_ended = False  # its end logged
        self.executor: str | None = None  # what runs the loop, once started
        self.final_stats: dict[str, int] = {}
        self.emitted = {"frames": 0, "slices": 0, "messages": 0, "stats": 0, "tx": 0}
        self._finished = threading.Event()
        self._expect: int | None = None
        self._drain_deadline = 0.0
        self._next_stats = 0.0
        self._frames: deque[Frame] = deque()
        self._slices: deque[Slice] = deque()
        self._frames_on = self.config["handler"] == "frames"
        super().__init__(fragment, *args, **({"name": name} if name is not None else {}))

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("tx").condition(ConditionType.NONE)
        spec.output(self.data_port)
        if self.slices_on:
            spec.output("slices")
        spec.output("stats", policy=IOSpec.QueuePolicy.POP).condition(ConditionType.NONE)

    @property
    def data_port(self) -> str:
        """``frames`` for the frames handler, ``messages`` for the others."""
        return "frames" if self.config["handler"] == "frames" else "messages"

    @property
    def slices_on(self) -> bool:
        """The frames handler hands frames over in slices too (``frames.slice_bytes``): the
        ``slices`` port."""
        return self.config["handler"] == "frames" and bool(self.config["frames"]["slice_bytes"])

    # -- life cycle -------------------------------------------------------
    def start(self) -> None:
        config, announcement = self.config, None
        if config["hsb"]["bridge"]:
            from roce_transceiver.hsb_control import EnumerationError
            from roce_transceiver.hsb_stream import HsbError, HsbStream, bridge_overrides
            from roce_transceiver.schema import with_overrides

            # Heard first: the transceiver takes the bridge's MAC and page bits from it.
            try:
                announcement = HsbStream.find(config)
            except EnumerationError as e:
                raise HsbError(f"bridge {config['hsb']['bridge']}: {e}") from None
            config = with_overrides(config, bridge_overrides(config, announcement))
        t = self._make_transceiver(config)
        self.executor = t.executor
        t.start()
        if t.config["hsb"]["bridge"]:
            from roce_transceiver.hsb_session import BridgeSession

            # Programmed now (a failure fails start()), then watched and brought back after a
            # reset by the session's thread (hsb_session.py).
            session = BridgeSession(
                HsbStream(t.config),
                queues=t.config["queues"]["count"],
                say=lambda line: log.info("%s: %s", self.name, line),
            ).start(announcement)
            session.join()
            try:
                session.check()
            except BaseException:
                session.stop()
                t.stop()
                raise
            self.hsb = session
        # Published only once running: peers in other threads take it as "ready".
        self.transceiver = t
        self._next_stats = time.monotonic() + self.stats_period_s

    def _make_transceiver(self, config: Mapping[str, Any]) -> Transceiver:
        """The transceiver, made and not yet started: where a subclass prepares its far end
        before the loop runs (bench graph preloads its stream)."""
        return Transceiver(config)

    def stop(self) -> None:
        t, self.transceiver = self.transceiver, None
        if t is None:
            return
        self._frames.clear()
        self._slices.clear()
        hsb, self.hsb = self.hsb, None
        try:
            if hsb is not None:
                hsb.stop()
                self.bridge_report = hsb.as_dict()
                hsb.stream.close()  # the bridge first: it must not stream at a host that went away
        finally:
            try:
                t.stop()
            finally:
                self.final_stats = t.stats()

    def finish(self, expect: int | None = None) -> None:
        """The peer is done (any thread): emit what is left, ``expect`` messages or frames in
        all (None: what is ready now), then stop."""
        self._expect = expect
        self._drain_deadline = time.monotonic() + self.drain_timeout_s
        self._finished.set()

    # -- data -------------------------------------------------------------
    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        t = self.transceiver
        if t is None:
            raise TransceiverError(f"{self.name}: compute() before start()")
        self._transmit(t, op_input.receive("tx"))
        frames_on = self._frames_on
        slices_on = self.slices_on
        # Spinning while it waits: a record is taken the moment it is published (the greedy
        # scheduler would call compute() again at once anyway).
        wait = self.idle_wait_s if not (self._frames or self._slices) else 0.0
        if frames_on:
            if not (self._frames or self._slices):
                # Frames first, then slices: a frame's slices came before it on the ring, so
                # none of them is taken after it (and all are emitted before it, below). A batch
                # of the records ready in one poll; a frame a compute() leaves the deque.
                came = t.frames(
                    timeout=0.0 if slices_on else wait,
                    max_frames=max(_POLL_FRAMES, self.frame_batch),
                    spin=wait,
                )
                if slices_on:
                    self._slices.extend(t.slices(timeout=0.0 if came else wait, spin=wait))
                if self.hsb is not None:
                    self._watch_bridge(came)
                self._frames.extend(came)
            messages: list[Completion] = []
        else:
            messages = t.receive(timeout=wait, max_messages=self.max_messages, spin=wait)
        # One of them a compute: a slice's record and a frame's share the metadata's keys.
        if self._slices:
            self._emit_slice(op_output, self._slices.popleft())
        elif self._frames and self.frame_batch > 1:
            self._emit_batch(op_output)
        elif self._frames:
            self._emit_frame(op_output, self._frames.popleft())
        if messages:
            op_output.emit(messages, "messages")
            self.emitted["messages"] += len(messages)
        now = time.monotonic()
        if now >= self._next_stats:
            self._next_stats = now + self.stats_period_s
            self._emit_stats(op_output, t, final=False)
        idle = not (self._frames or self._slices)
        if self._finished.is_set() and idle and self._drained(t, frames_on, now):
            self._emit_stats(op_output, t, final=True)
            self.stop_execution()

    def _watch_bridge(self, frames: list[Frame]) -> None:
        """The bridge's session sees each frame (its watchdog); one that ended is logged once."""
        for f in frames:
            self.hsb.came(f.queue)
        if self.hsb.ended and not self._bridge_ended:
            self._bridge_ended = True
            lost = "; ".join(self.hsb.stream.lost) or self.hsb.error
            log.error("%s: the bridge's stream ended: %s", self.name, lost)

    def _drained(self, t: Transceiver, frames_on: bool, now: float) -> bool:
        if self._expect is None:
            return True
        if now >= self._drain_deadline:
            log.warning(
                "%s: the peer expected %d, %d came within drain_timeout_s=%g; stopping",
                self.name,
                self._expect,
                self.emitted["frames"] + self.emitted["messages"],
                self.drain_timeout_s,
            )
            return True
        s = t.stats()
        taken = self.emitted["frames"] if frames_on else self.emitted["messages"]
        lost = s.get("frames_dropped", 0) if frames_on else s.get("completion_drops", 0)
        return taken + lost >= self._expect

    def _emit_frame(self, op_output: Any, frame: Frame) -> None:
        md = self.metadata  # a new wrapper at each access: taken once
        for key, value in zip(FRAME_METADATA, frame.record(), strict=True):
            md[key] = value
        # Tensor.as_tensor, not holoscan.as_tensor: the latter's stride fix is for arrays of
        # more than one dimension, and a frame is one.
        op_output.emit({"frame": Tensor.as_tensor(frame_tensor_source(frame))}, "frames")
        self.emitted["frames"] += 1

    def _emit_batch(self, op_output: Any) -> None:
        """Up to ``frame_batch`` frames in one message: a list of (array, Frame), each array
        over its frame's page (cupy or numpy), holding the page until the last reference to it
        goes, the Frame its record (Holoscan's cost of a message, ~100-400 us in Python, paid
        once for the batch)."""
        frames = self._frames
        batch = [
            (frame_tensor_source(f), f)
            for f in (frames.popleft() for _ in range(min(self.frame_batch, len(frames))))
        ]
        op_output.emit(batch, "frames")
        self.emitted["frames"] += len(batch)

    def _emit_slice(self, op_output: Any, part: Slice) -> None:
        md = self.metadata  # a new wrapper at each access: taken once
        for key in SLICE_METADATA:
            md[key] = getattr(part, key)
        op_output.emit({"slice": Tensor.as_tensor(slice_tensor_source(part))}, "slices")
        self.emitted["slices"] += 1

    def _emit_stats(self, op_output: Any, t: Transceiver, *, final: bool) -> None:
        stats = dict(t.stats())
        stats["final"] = int(final)
        op_output.emit(stats, "stats")
        self.emitted["stats"] += 1

    def _transmit(self, t: Transceiver, message: Any) -> None:
        if message is None:
            return
        items = message.values() if isinstance(message, Mapping) else [message]
        for item in items:
            if isinstance(item, (bytes, bytearray, memoryview)):
                data = bytes(item)
            elif hasattr(item, "__cuda_array_interface__"):
                import cupy

                data = cupy.asnumpy(cupy.asarray(item)).tobytes()
            else:
                data = np.asarray(item).tobytes()
            t.send(data)
            self.emitted["tx"] += 1


def roce_parameters(
    fragment: Any,
    transceiver: Mapping[str, Any] | str | None,
    params: Mapping[str, Any],
    name: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """RoceTransceiverOp's keyword arguments validated: ``(transceiver config, operator
    keys)``. Where they are one section of the fragment's file (``roce: {transceiver: ...,
    max_messages: ...}``), errors name its keys and lines; else the transceiver's and the
    operator keys are each looked for as a section of their own (the project's apps:
    ``transceiver:`` and ``operator:``), and what is no section is named by the operator."""
    what = f"RoceTransceiverOp {name!r}" if name else "RoceTransceiverOp"
    whole = {**params, "transceiver": transceiver} if transceiver is not None else dict(params)
    where = locate(fragment, whole, name)
    if where is not None:
        op = validate(ROCE_OP, where.data, prefix=where.prefix, source=where.source)
        t = op.pop("transceiver")
        if isinstance(t, Mapping):
            prefix = f"{where.prefix}transceiver."
            return load_config(t, origin=where.source, prefix=prefix, base_dir=_folder(where)), op
        return load_config(t), op
    op, _ = validated(fragment, OPERATOR, params, name=name, what=what)
    if transceiver is None or isinstance(transceiver, (str, Path)):
        return load_config(transceiver), op
    if not isinstance(transceiver, Mapping):
        raise ConfigError(
            f"must be a mapping of the Transceiver's keys or a YAML path, not "
            f"{type(transceiver).__name__}",
            key="transceiver",
            source=what,
        )
    section = locate(fragment, transceiver)
    if section is not None:
        cfg = load_config(
            section.data, origin=section.source, prefix=section.prefix, base_dir=_folder(section)
        )
        return cfg, op
    return load_config(dict(transceiver), origin=what, prefix="transceiver."), op


def _folder(where: Located) -> Path:
    """The folder of the file a section is in: a relative custom.source is read from it, as
    from any YAML file's (roce_transceiver.config.load_config)."""
    return Path(where.source).parent
