"""The Transceiver: queues, a persistent loop (CPU thread or CUDA kernel), a
handler, and the loopback NIC's far end, behind one context manager.

    with Transceiver({"handler": "echo"}) as t:
        result = t.roundtrip(count=1000, size=32)
        print(result.percentiles())

The loop never waits for the host: completion records the host does not read
in time are counted (``completion_drops``), never a stall.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roce_transceiver import _core
from roce_transceiver._checks import check_buffers, check_int, check_real
from roce_transceiver.config import core_config, load_config
from roce_transceiver.cuda_warps import cuda_warps
from roce_transceiver.frames import RECORD_NAMES, Frame, Slice
from roce_transceiver.netinfo import NetInfoError, with_resolved_macs
from roce_transceiver.schema import ConfigError
from roce_transceiver.stats import Percentiles

__all__ = ["Completion", "RoundTrip", "Transceiver", "TransceiverError", "pick_executor"]

log = logging.getLogger(__name__)

#: Transceivers whose loop did not stop (stop() timed out): kept so that nothing frees memory
#: a loop still running uses.
_LEFT_RUNNING: list[Any] = []

_U32_MAX = 2**32 - 1  # the far end counts requests and its window in uint32
_MAX_TIMEOUT_S = 1e10  # the far end's deadline is uint64 nanoseconds: 1.8e10 s at most
_MIN_RATE = 1e-9  # requests/s: the far end's interval is uint64 nanoseconds (1e18 here)
_MAX_RATE = 1e9  # requests/s: the far end paces in whole nanoseconds (1 here)
_RECORD_PAGE = RECORD_NAMES.index("page")  # where the page and its bytes are in a record
_RECORD_BYTES = RECORD_NAMES.index("bytes")
_WAIT_SLICE_S = 0.01  # frames() and receive() look at the loop's health this often while they wait


class TransceiverError(RuntimeError):
    """The loop failed, would not stop, or was used in a way it cannot serve."""


@dataclass(frozen=True)
class Completion:
    """One message the loop completed: the request, the handler's reply, timestamps."""

    request: bytes  # truncated to half the completion slot; request_len is the whole
    reply: bytes
    request_len: int
    reply_len: int  # -1: the handler sent no reply; -2: the handler failed
    imm: int | None
    opcode: int
    psn: int
    handler_error: bool
    reply_dropped: bool  # the handler answered, but the tx ring was full or the RC
    # requester is in its error state (qp.retransmit): not sent
    rx_timestamp_ns: int
    done_timestamp_ns: int
    queue: int = 0  # the queue (queues.count) whose engine completed it

    @property
    def request_array(self) -> np.ndarray:
        """``request`` as a read-only uint8 numpy array viewing the same bytes (no copy)."""
        return np.frombuffer(self.request, dtype=np.uint8)

    @property
    def reply_array(self) -> np.ndarray:
        """``reply`` as a read-only uint8 numpy array viewing the same bytes (no copy)."""
        return np.frombuffer(self.reply, dtype=np.uint8)


@dataclass(frozen=True)
class RoundTrip:
    """Requests from the far end, replies back, timed where they start and end.

    At a ``rate``, the load is offered open loop: request i is due at i / rate after the
    start, its round trip counted from its due time (so a loop that falls behind shows its
    queue), and one that went out more than ``late_after`` after its due time is ``late``;
    one that could not go out within ``drop_after`` is ``dropped`` (never sent)."""

    status: str  # "done", "timeout", "stopped"
    sent: int
    received: int
    wrong: int  # replies whose payload was not the expected one
    bad_frames: int
    ring_full: int  # times the engine's rx ring was full and a request waited
    elapsed_ns: int  # the first request's due (or send) time to the last reply
    rtt_ns: np.ndarray  # one per reply, queue by queue, in order
    late: int = 0  # requests sent more than late_after after their due time
    dropped: int = 0  # requests not sent: not out within drop_after of their due time
    max_lag_ns: int = 0  # the latest a request went out after its due time
    slow_checks: int = 0  # frames from the engine the far end had to decode to check
    # The far end's own part (its clock), added up: building and publishing each request
    # (inside its round trip) and checking each reply (after it; a ping-pong waits for it).
    send_ns: int = 0
    check_ns: int = 0
    per_queue: tuple[dict[str, Any], ...] = ()  # each queue's counts (roundtrip(queues=N))

    def percentiles(self, unit: str = "us") -> Percentiles | None:
        """min, p50, p99, p99.9, max and mean of the round trips; None without replies."""
        if self.rtt_ns.size == 0:
            return None
        return Percentiles.from_samples(self.rtt_ns.astype(np.float64), "ns").to(unit)

    @property
    def messages_per_s(self) -> float:
        """Replies per second, from the first due (or send) time to the last reply."""
        return self.received / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0


class HandlerBuildError(TransceiverError):
    """handler custom cannot be built: ``str()`` is one line naming the file and line (or the
    compiler, or the cache folder), ``log`` the compiler's whole output."""

    def __init__(self, message: str, log: str, file: str | None, line: int | None) -> None:
        super().__init__(message)
        self.log, self.file, self.line = log, file, line


def _gpu_arch(device: int) -> str:
    """The architecture NVRTC compiles for: the GPU's own (compute capability 9.0 -> sm_90)."""
    gpus = _core.cuda_runtime_info()["gpus"]
    if device >= len(gpus):
        raise TransceiverError(f"cuda.device {device}: this machine has {len(gpus)} GPU(s)")
    major, minor = gpus[device]["compute_capability"].split(".")
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class CustomSource:
    """custom.source as the compilers take it: the text, the name errors give, include folders."""

    text: bytes
    name: str
    entry: str
    include_dirs: tuple[Path, ...]


def custom_source(custom: Mapping[str, Any]) -> CustomSource:
    """custom.source read: text holding a newline is the source (named ``custom.source``), else
    the name of a file (its folder on the include path)."""
    source, entry = custom["source"], custom["entry"]
    if "\n" in source:
        return CustomSource(source.encode(), "custom.source", entry, ())
    try:
        text = Path(source).read_bytes()
    except OSError as e:
        raise TransceiverError(
            f"custom.source: cannot read {source!r} ({e.strerror or e}); a file, relative "
            "to the working directory, or the source text itself (holding a newline)"
        ) from None
    return CustomSource(text, source, entry, (Path(source).resolve().parent,))


def link_custom_handler(src: CustomSource, device: int, kernels: int) -> bytes:
    """The kernels ``kernels`` (a set of custom_handler.ENGINE_SETS) with the handler linked in,
    for GPU ``device``: compiled and linked (custom_handler.compile_engine) or from the cache,
    saying which and how long it took in the log. Raises custom_handler's HandlerBuildFailure or
    ValueError."""
    from roce_transceiver import custom_handler as ch

    arch = _gpu_arch(device)
    what = "Verbs serve kernels" if kernels == ch.VERBS_SERVE_KERNELS else "engine's kernels"
    built = ch.compile_engine(
        src.text,
        name=src.name,
        entry=src.entry,
        arch=arch,
        kernels=kernels,
        include_dirs=src.include_dirs,
        on_compile=lambda: log.info(
            "custom handler %s: compiling it (NVRTC) and linking it into the %s (nvJitLink) for "
            "%s; kept in %s",
            src.name,
            what,
            arch,
            ch.cache_dir(),
        ),
    )
    if built.cached:
        log.info(
            "custom handler %s: the %s for %s from the cache in %.3f s",
            src.name,
            what,
            arch,
            built.seconds,
        )
    else:
        log.info(
            "custom handler %s: compiled in %.3f s, linked into the %s for %s in %.3f s "
            "(%.3f s in all)",
            src.name,
            built.compile_seconds,
            what,
            arch,
            built.link_seconds,
            built.seconds,
        )
    return built.image


def _build_custom(config: Mapping[str, Any], executor: str) -> dict[str, Any]:
    """custom.source compiled for the executor, as the core's keys: on the cpu executor a shared
    object (custom_handler.build_host_handler), on the cuda executor the engine's kernels with
    the handler linked in (custom_handler.compile_engine)."""
    from roce_transceiver import custom_handler as ch

    src = custom_source(config["custom"])
    try:
        if executor == "cpu":
            host = ch.build_host_handler(
                src.text, name=src.name, entry=src.entry, include_dirs=src.include_dirs
            )
            return {"custom_library": str(host.library)}
        # The set of the engine's kernels this loop launches one of: a crew's (cuda.warps > 1)
        # or one warp's.
        kernels = ch.ENGINE_SETS["crew" if cuda_warps(config) > 1 else "lone"]
        image = link_custom_handler(src, config["cuda"]["device"], kernels)
        return {"custom_kernel_image": image}
    except ch.HandlerBuildFailure as e:  # the source's, the compiler's or the cache's
        raise HandlerBuildError(str(e), e.log, e.file, e.line) from None
    except ValueError as e:
        raise TransceiverError(f"custom: {e}") from None


def pick_executor(requested: str) -> tuple[str, str]:
    """(executor, why): 'auto' becomes cuda when this build has CUDA and a GPU is visible."""
    info = _core.cuda_runtime_info()
    if requested == "cpu":
        return "cpu", "executor: cpu (as configured)"
    if requested == "cuda":
        if not info["gpus"]:
            raise TransceiverError(f"executor 'cuda' cannot run here: {info['error']}")
        return "cuda", f"executor: cuda on {info['gpus'][0]['name']} (as configured)"
    if info["gpus"]:
        return "cuda", f"executor: auto picked cuda ({info['gpus'][0]['name']} visible)"
    return "cpu", f"executor: auto picked cpu ({info['error'] or 'no GPU visible'})"


def request_payloads(
    size: int, payloads: list[bytes] | None, expected: list[bytes] | None
) -> list[bytes]:
    """A round trip's requests: ``payloads`` (checked against ``expected``) or one of ``size``
    bytes; raises TransceiverError naming what does not fit."""
    if payloads is None:
        payloads = [bytes((i * 7 + 1) & 0xFF for i in range(size))]
    if not payloads or len({len(p) for p in payloads}) != 1:
        raise TransceiverError("roundtrip(): payloads must be non-empty and of one length")
    if expected is not None and (
        len(expected) != len(payloads) or len({len(e) for e in expected}) != 1
    ):
        raise TransceiverError("roundtrip(): one expected reply per payload, all one length")
    return payloads


@dataclass(frozen=True)
class RoundTripPlan:
    """roundtrip()'s arguments as checked: what a mode's far end runs (times in ns; 0: none)."""

    payloads: list[bytes]
    expected: list[bytes] | None
    count: int
    window: int
    interval_ns: int
    timeout: float
    queues: int
    late_ns: int
    drop_ns: int


class Transceiver:
    """Owns the queues, the loop and the far end; ``stop()`` frees everything."""

    def __init__(
        self,
        config: Mapping[str, Any] | str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        nic: _core.Nic | None = None,
    ) -> None:
        self.config = load_config(config, overrides)
        # A NIC the caller brings (a subclass of _core.Nic: roce_transceiver.nic) carries the
        # frames instead of the configuration's ``nic``.
        self.nic = nic
        self.executor, self.executor_reason = pick_executor(self.config["executor"])
        if self.config["far_end"] == "gpu" and self.executor != "cuda":
            raise TransceiverError("far_end 'gpu' needs the cuda executor; " + self.executor_reason)
        log.info(self.executor_reason)
        # The qec handler's decoder, as a table the handler looks syndromes up in (one for
        # every mode: the engine's and Verbs mode's serve loop take the same blob).
        self._qec_blob = b""
        if self.config["handler"] == "qec":
            from roce_transceiver.qec import engine_table

            self._qec_blob = engine_table(self.config["qec"]["distance"])
        self._core: Any = self._make_core()
        self._started = False
        self._stopped = False
        self._messages: deque[Completion] = deque()
        self._frames: deque[Frame] = deque()
        self._slices: deque[Slice] = deque()

    def _make_core(self) -> Any:
        """What runs: the C++ core's Transceiver, its queues' rings and engines behind the
        configuration's NIC (or the caller's). Verbs mode's is its own (verbs_mode.py)."""
        try:
            resolved = with_resolved_macs(self.config)
        except NetInfoError as e:
            raise ConfigError(str(e), key=f"{e.side}.mac") from None
        core = core_config(resolved, self.executor, self._qec_blob or None)
        if core["handler"] == "custom" or core["frames_statistic"]:
            core.update(_build_custom(self.config, self.executor))
        try:
            return _core.Transceiver(core, self.nic)
        except (ValueError, RuntimeError) as e:
            raise TransceiverError(str(e)) from None

    # -- life cycle -------------------------------------------------------
    def start(self) -> Transceiver:
        """Launch the persistent loop."""
        if self._started:
            raise TransceiverError("start(): already started; a Transceiver starts once")
        self._started = True
        try:
            self._core.start()
        except (ValueError, RuntimeError) as e:
            raise TransceiverError(f"start(): {e}") from None
        return self

    def stop(self) -> None:
        """Stop the loop and free what it used. Safe to call twice and after errors."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._core.stop()
        except RuntimeError as e:
            if "did not stop within" in str(e):
                # Its loop still runs (in a user handler's call that never returns) and uses
                # the core's memory: the core is kept, never freed, for the process's life.
                _LEFT_RUNNING.append(self._core)
            raise TransceiverError(f"stop(): {e}") from None

    def __enter__(self) -> Transceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._core.running())

    def _check(self) -> None:
        try:
            self._core.check()
        except RuntimeError as e:
            raise TransceiverError(str(e)) from None

    def _require_open(self, what: str) -> None:
        if self._stopped:
            raise TransceiverError(f"{what}: the transceiver is stopped")
        self._check()

    def _require_running(self, what: str) -> None:
        if not self._started or self._stopped:
            raise TransceiverError(f"{what}: the transceiver is not running (use start())")
        self._check()

    # -- data -------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """The loop's counters, read while it runs; after stop(), their final values.
        With the socket NIC (or a NIC of the caller's that counts), its own counters too
        (``nic_*``)."""
        if not self._stopped:
            self._check()
        out = {k: int(v) for k, v in self._core.counters().items()}
        out.update({k: int(v) for k, v in self._core.nic_stats().items()})
        return out

    def queue_stats(self, queue: int) -> dict[str, int]:
        """One queue's counters (``stats()`` adds every queue's up): 0 to queues.count - 1."""
        queue = check_int("queue_stats()", "queue", queue, 0, self.config["queues"]["count"] - 1)
        if not self._stopped:
            self._check()
        return {k: int(v) for k, v in self._core.queue_counters(queue).items()}

    def epoch_stats(self) -> dict[str, Any]:
        """cuda executor: its epochs so far (``epochs``) and the relaunch gaps between them,
        measured on the GPU (``gap_total_ns``, ``gap_max_ns``); with a crew of warps
        (``cuda.warps`` > 1) its batches: ``batch_depth``, ``batches``, ``batch_frames`` and
        ``batch_cycles`` (SM cycles in classify, commit, execute, publish: where a batch's
        time goes), added up over the queues; ``blocks``: the engines, one a queue (a block,
        or a thread). Zeros on the cpu executor but its batches after stop(). After stop(),
        the final figures."""
        return {
            k: tuple(int(x) for x in v) if isinstance(v, tuple) else int(v)
            for k, v in self._core.epoch_stats().items()
        }

    def nic_info(self) -> dict[str, Any]:
        """The socket NIC's receive buffer (``rx_buffer_bytes`` as the kernel granted it: Linux
        reports twice what was asked, the rest its bookkeeping; ``rx_buffer_asked``) and
        ``capture_error``: the capture's first write error, naming the file (None while the
        capture is whole; the frames it lacks are ``nic_capture_errors`` in stats()). How it
        receives: ``rx_path`` (``mmap``: the TPACKET_V3 ring, ``rx_ring_bytes`` in
        ``rx_ring_blocks`` blocks of ``rx_ring_block_bytes``, each ours once full or
        ``rx_ring_block_timeout_ms`` old; ``recvmmsg``), ``rx_path_reason`` (socket.rx_path's
        rule) and ``rx_fallback`` (why the ring could not be set up; None when it was or was
        not asked for). Empty with the loopback NIC; after stop(), final (docs/socket_nic.md)."""
        info = dict(self._core.nic_info())
        for key in ("capture_error", "rx_fallback"):  # the socket NIC's: empty is None
            if key in info:
                info[key] = info[key] or None
        return info

    def send(self, data: bytes | bytearray | memoryview, timeout: float = 1.0) -> None:
        """Queue ``data`` to be sent to the peer as a SEND; waits up to ``timeout``
        seconds for room in the host ring, then raises TransceiverError."""
        timeout = check_real("send()", "timeout", timeout, 0)
        self._require_running("send()")
        payload = bytes(data)
        deadline = time.monotonic() + timeout
        while not self._send_once(payload):
            if time.monotonic() > deadline:
                raise TransceiverError(f"send(): the host ring stayed full for {timeout} s")
            self._check()
            time.sleep(50e-6)

    def _send_once(self, payload: bytes) -> bool:
        try:
            return bool(self._core.send(payload))
        except (ValueError, RuntimeError) as e:
            raise TransceiverError(f"send(): {e}") from None

    def _poll(self, max_records: int) -> None:
        """Move what the engine completed into the message and frame queues: a frame comes
        as a tuple (``_frame``'s arguments), a message as a dict (Completion's fields)."""
        for r in self._core.poll_completions(max_records):
            if type(r) is tuple:
                self._frames.append(self._frame(*r))
                continue
            part = r.pop("slice")
            if part is not None:
                self._slices.append(
                    self._slice({**part, "done_ns": r["done_timestamp_ns"], "queue": r["queue"]})
                )
            else:
                self._messages.append(Completion(**r))

    def _frame(
        self,
        record: tuple[Any, ...],
        done_ns: int,
        queue: int,
        result: bytes | None,
        result_error: bool,
    ) -> Frame:
        """A Frame over ``record``, the core's frame record (RECORD_NAMES' order)."""
        page, n = record[_RECORD_PAGE], record[_RECORD_BYTES]
        # The frame's share of its page's memory: the page stays readable while the frame or an
        # array over it lives, after stop() too (the region goes with the last of them).
        memory = self._core.page_memory(page, n)

        def data() -> np.ndarray:
            if memory.on_device:  # GPU memory: a copy
                return np.frombuffer(memory.read(), dtype=np.uint8)
            return np.frombuffer(memory, dtype=np.uint8)  # the page itself, read-only

        def on_gpu(owner: object | None) -> Any:
            import cupy  # only where the pages are in GPU memory

            keep = memory if owner is None else owner
            unowned = cupy.cuda.UnownedMemory(memory.device_ptr, max(n, 1), owner=keep)
            return cupy.ndarray((n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(unowned, 0))

        def release() -> None:
            if self._stopped:  # no engine reads the release words any more: nothing to give
                return
            try:
                self._core.release_page(page)
            except RuntimeError:  # a stop() in another thread came first
                if not self._stopped:
                    raise

        return Frame(
            *record,
            done_ns=done_ns,
            queue=queue,
            result=result,
            result_error=result_error,
            on_device=bool(memory.on_device),
            _data=data,
            _device=on_gpu,
            _release=release,
            _record=record,
        )

    def _slice(self, f: dict[str, Any]) -> Slice:
        start, n = f["offset"], f["bytes"]
        # A share of the page's memory from its start to the slice's end: the slice is the tail.
        memory = self._core.page_memory(f["page"], start + n)

        def data() -> np.ndarray:
            whole = memory.read() if memory.on_device else memory  # GPU memory: a copy
            return np.frombuffer(whole, dtype=np.uint8)[start:]

        def on_gpu(owner: object | None) -> Any:
            import cupy  # only where the pages are in GPU memory

            keep = memory if owner is None else owner
            unowned = cupy.cuda.UnownedMemory(memory.device_ptr, start + max(n, 1), owner=keep)
            return cupy.ndarray(
                (n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(unowned, start)
            )

        return Slice(**f, on_device=bool(memory.on_device), _data=data, _device=on_gpu)

    def _take(
        self, queue: deque[Any], what: str, timeout: float | None, most: int, spin: float
    ) -> list[Any]:
        if timeout is not None:  # NaN would wait forever: no deadline is ever reached
            timeout = check_real(what, "timeout", timeout, 0)
        spin = check_real(what, "spin", spin, 0)
        self._require_running(what)
        began = time.monotonic()
        deadline = None if timeout is None else began + timeout
        while True:
            try:
                # No more than the caller takes: a record waits in the ring, not converted ahead
                # of the frames before it (a graph's first frame would wait for the batch).
                if len(queue) < most:
                    self._poll(most - len(queue))
                now = time.monotonic()
                if queue or (deadline is not None and now >= deadline):
                    break
                self._check()
                # In the core, without the GIL, in slices that let _check() see a failed loop.
                left = _WAIT_SLICE_S if deadline is None else min(deadline - now, _WAIT_SLICE_S)
                spin_left = max(0.0, began + spin - now)
                self._core.wait_completions(int(left * 1e9), int(spin_left * 1e9))
            except RuntimeError:
                if not self._stopped:
                    raise
                break  # stop() in another thread: what came before it is all there is
        return [queue.popleft() for _ in range(min(most, len(queue)))]

    def receive(
        self, timeout: float | None = 0.0, max_messages: int = 1024, spin: float = 0.0
    ) -> list[Completion]:
        """Completed messages, oldest first; waits up to ``timeout`` s for at least one,
        spinning (a core busy, the lowest latency) for the first ``spin`` s of it, then
        looking every 20 us."""
        return self._take(self._messages, "receive()", timeout, max_messages, spin)

    def frames(
        self, timeout: float | None = 0.0, max_frames: int = 1024, spin: float = 0.0
    ) -> list[Frame]:
        """Frames the frames handler completed, oldest first (waits up to ``timeout`` s for
        one, as :meth:`receive` does). Each holds its page until released
        (:meth:`Frame.release`)."""
        return self._take(self._frames, "frames()", timeout, max_frames, spin)

    def slices(
        self, timeout: float | None = 0.0, max_slices: int = 1024, spin: float = 0.0
    ) -> list[Slice]:
        """Slices of frames (``frames.slice_bytes``), oldest first (waits up to ``timeout`` s
        for one, as :meth:`receive` does). A frame's slices all come before the frame
        (:meth:`frames`) does: the host takes both from one ring, in the engine's order."""
        return self._take(self._slices, "slices()", timeout, max_slices, spin)

    def __iter__(self) -> Iterator[Completion]:
        """Completed messages as they come, until the transceiver stops."""
        while not self._stopped:
            yield from self.receive(timeout=0.1)

    # -- the loopback far end ----------------------------------------------
    def preload(self, frames: Iterable[bytes | bytearray | memoryview]) -> int:
        """Before start(): put ``frames`` on the loopback wire's rx ring at once, as a NIC
        would have written them, wherever the ring lies (device memory with ``far_end:
        gpu``, where inject() cannot reach); for ingest benchmarks. Returns how many fit (the
        ring's depth at most); ValueError for a frame longer than a slot."""
        if self._started:
            raise TransceiverError("preload(): before start() only")
        data = [bytes(f) for f in frames]
        try:
            return int(self._core.preload(data))
        except ValueError as e:
            raise ValueError(f"preload(): {e}") from None
        except RuntimeError as e:
            raise TransceiverError(f"preload(): {e}") from None

    def inject(self, frame: bytes, wait: float = 0.0) -> bool:
        """Put a raw frame on the wire towards the engine (far_end cpu). False when
        the engine's rx ring is full: the frame is dropped and ``ring_drops`` counted.
        ``wait`` > 0 makes the wire lossless (as a link with pause frames): it waits up to
        ``wait`` seconds for room, and drops and counts only when none came.
        Allowed before start(), to fill the ring while the loop is not yet draining it."""
        self._require_open("inject()")
        data = bytes(frame)
        try:
            if wait > 0:
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline:
                    if self._core.inject(data, count_drop=False):
                        return True
                    self._check()
                    time.sleep(10e-6)
            return bool(self._core.inject(data))  # the last try counts a drop
        except (ValueError, RuntimeError) as e:
            raise TransceiverError(f"inject(): {e}") from None

    def collect(self, max_frames: int = 1024, timeout: float = 0.0, want: int = 1) -> list[bytes]:
        """Frames the engine transmitted (far_end cpu), at most ``max_frames`` (1 to 2**32-1);
        waits up to ``timeout`` s (finite, at least 0) until at least ``want`` (0 to
        ``max_frames``) have come. An argument out of range is a ValueError naming it."""
        where = "collect()"
        max_frames = check_int(where, "max_frames", max_frames, 1, _U32_MAX)
        timeout = check_real(where, "timeout", timeout, 0)
        want = check_int(where, "want", want, 0, max_frames)
        self._require_open("collect()")
        deadline = time.monotonic() + timeout
        frames: list[bytes] = []
        while True:
            try:
                frames += self._core.collect(max_frames - len(frames))
            except RuntimeError as e:
                raise TransceiverError(f"collect(): {e}") from None
            if len(frames) >= want or time.monotonic() >= deadline:
                return frames
            self._check()
            time.sleep(20e-6)

    def roundtrip(
        self,
        count: int = 1000,
        size: int = 32,
        *,
        payloads: list[bytes] | None = None,
        expected: list[bytes] | None = None,
        window: int = 1,
        rate: float | None = None,
        timeout: float = 10.0,
        queues: int = 1,
        late_after: float | None = None,
        drop_after: float | None = None,
    ) -> RoundTrip:
        """Run the far end: ``count`` requests (``size`` bytes, or ``payloads`` in
        turn), at most ``window`` in flight (per queue), at ``rate`` requests/s (None: as
        fast as the window allows; RoundTrip says how a rate is offered); each reply is
        checked against ``expected`` (in the same turn) or, without it, must echo its
        request; ``timeout`` s for the whole run. ``queues``: the first that many queues
        (queues.count) each get a far end of their own and every queues-th request of the
        schedule, addressed as the NIC steers them (their QP, or a UDP source port).
        ``late_after`` (s, default one interval of the rate) and ``drop_after`` (s, default
        never) need a ``rate``.

        ``count`` and ``window`` are 1 to 2**32-1, ``size`` 1 to ``queues.slot_bytes``,
        ``rate`` 1e-9 to 1e9 (the far end paces in whole nanoseconds), ``queues`` 1 to
        queues.count (and at most ``count``), ``late_after`` and ``drop_after`` above 0 and
        ``timeout`` 0 to 1e10, all finite: a value outside is a ValueError naming the
        argument and its range (TypeError: not a number, or payloads that are not bytes). A
        request that fits no slot, or payloads of unequal lengths, is a TransceiverError."""
        where = "roundtrip()"
        count = check_int(where, "count", count, 1, _U32_MAX)
        timeout = check_real(where, "timeout", timeout, 0, _MAX_TIMEOUT_S)
        if payloads is None:
            size = check_int(where, "size", size, 1, self._request_bytes_max())
        expected = check_buffers(where, "expected", expected)
        payloads = request_payloads(size, check_buffers(where, "payloads", payloads), expected)
        window = check_int(where, "window", window, 1, _U32_MAX)
        if rate is not None:
            rate = check_real(where, "rate", rate, _MIN_RATE, _MAX_RATE)
        queues = check_int(where, "queues", queues, 1, self.config["queues"]["count"])
        if queues > count:
            raise ValueError(f"{where}: queues={queues}: more queues than requests ({count})")
        for name, value in (("late_after", late_after), ("drop_after", drop_after)):
            if value is None:
                continue
            check_real(where, name, value, 1e-9, _MAX_TIMEOUT_S)
            if rate is None:
                raise ValueError(f"{where}: {name}={value}: needs a rate (a schedule to keep)")
        self._require_running(where)
        return self._run_round_trips(
            RoundTripPlan(
                payloads=payloads,
                expected=expected,
                count=count,
                window=window,
                interval_ns=0 if not rate else max(1, round(1e9 / rate)),
                timeout=timeout,
                queues=queues,
                late_ns=0 if late_after is None else max(1, round(late_after * 1e9)),
                drop_ns=0 if drop_after is None else max(1, round(drop_after * 1e9)),
            )
        )

    def _request_bytes_max(self) -> int:
        """The largest request roundtrip() takes: an rx slot's bytes (the engine's frames)."""
        return int(self.config["queues"]["slot_bytes"])

    def _run_round_trips(self, plan: RoundTripPlan) -> RoundTrip:
        """The checked plan, run by the loopback's far end (the core's)."""
        try:
            r = self._core.run_far_end(
                b"".join(plan.payloads),
                len(plan.payloads[0]),
                b"".join(plan.expected) if plan.expected else b"",
                len(plan.expected[0]) if plan.expected else 0,
                plan.count,
                plan.window,
                plan.interval_ns,
                plan.timeout,
                plan.expected is None,
                plan.queues,
                plan.late_ns,
                plan.drop_ns,
            )
        except (ValueError, RuntimeError) as e:
            raise TransceiverError(f"roundtrip(): {e}") from None
        rtt = np.frombuffer(r.pop("rtt_ns"), dtype=np.uint64).copy()
        per_queue = tuple(dict(q) for q in r.pop("per_queue"))
        return RoundTrip(rtt_ns=rtt, per_queue=per_queue, **r)

    def read_region(self, index: int, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes of a registered memory region (where RDMA WRITEs landed): ``length`` bytes
        from ``offset`` (None: to the region's end). An index that names no configured
        region, or an offset or length that reaches outside it, is a ValueError naming the
        argument and its range (TypeError: not an int); after stop(), TransceiverError."""
        where = "read_region()"
        regions = self.config["regions"]
        index = check_int(where, "index", index, 0)
        if index >= len(regions):
            raise ValueError(
                f"{where}: index={index}: no such region (the config has {len(regions)})"
            )
        size = regions[index]["length"]
        offset = check_int(where, "offset", offset, 0, size)
        if length is not None:
            length = check_int(where, "length", length, 0, size - offset)
        if self._stopped:
            raise TransceiverError(f"{where}: the transceiver is stopped")
        n = size - offset if length is None else length
        return bytes(self._core.read_region(index, offset, n))
