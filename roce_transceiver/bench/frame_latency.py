"""Frame end to host: how long after a frame's last packet reaches the engine the host has its
record (``bench ingest``'s second table).

One frame at a time on the loopback wire (the rx ring in pinned memory, as a NIC's would be):
the packets of a 64 KiB frame (4 KiB UC WRITEs) but its last are injected and taken by the
engine (its counters say so), then the host's clock is read as the last one (the WRITE with
Immediate that ends the frame) goes, and ``frames()`` is polled until the record comes; the next
frame goes only then. Each figure is the last packet's whole way (the engine's poll of the ring,
its placement, the page CRC, the record and its publish across the bus, the host's poll) with
nothing queued before it. On the cuda executor, once per epoch length (``cuda.epoch_us``: the
default 10 ms, 1 ms, and 0, one launch): a record that waited for its epoch's end would show
here as milliseconds. Every frame is checked (whole, its CRC that of the bytes sent).

The floor, in the same run: the host <-> persistent kernel ping-pong through pinned memory
(``pinned_pingpong``), the least a publish from the GPU and the host's poll of it can cost; on
the cpu executor, two CPU threads' ping-pong (``cpu_thread_pingpong``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import Any, TextIO

from roce_transceiver.bench.floors import measure_floors
from roce_transceiver.peers.sensor import Sensor, SentFrame
from roce_transceiver.stats import Percentiles
from roce_transceiver.transceiver import Transceiver

__all__ = ["EPOCHS_US", "last_packets", "run", "wait_taken"]

#: The cuda executor's epoch lengths measured: the default, a short one, one launch.
EPOCHS_US = (10_000, 1_000, 0)
FRAME_BYTES = 65536
PAYLOAD = 4096
WAIT_S = 5.0  # a frame not recorded by then is reported as missing, not waited for


def _config(executor: str, epoch_us: int | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "executor": executor,
        "handler": "frames",
        "qp": {"transport": "UC"},
        "frames": {"pages": 4, "page_bytes": FRAME_BYTES * 2, "metadata": True},
        "queues": {"rx_depth": 256, "slot_bytes": PAYLOAD + 256},
    }
    if epoch_us is not None:
        config["cuda"] = {"epoch_us": epoch_us}
    return config


def wait_taken(t: Transceiver, packets: int, wait_s: float = WAIT_S) -> None:
    """Until the engine has taken ``packets`` packets (its counters say so), at most ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while t.stats()["rx_packets"] < packets:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the engine took {t.stats()['rx_packets']} of {packets} packets in {wait_s} s"
            )
        time.sleep(20e-6)  # a poll interval, not a synchronisation


def last_packets(
    t: Transceiver, frames: int, frame_bytes: int, payload: int = PAYLOAD, wait_s: float = WAIT_S
) -> Iterator[tuple[SentFrame, bytes]]:
    """Frames one at a time on the loopback wire: each frame's packets but its last injected
    and taken by the engine (the counters are published once the loop settles), then (the
    frame, its last packet) for the caller to send and time: what is timed is the last
    packet's way alone, not a backlog behind it. The next frame goes when the caller asks."""
    sensor = Sensor.for_config(t.config, payload=payload)
    taken = 0  # packets the engine has had
    for sent in sensor.frames(frames, frame_bytes):
        *body, last = sent.packets
        for p in body:
            if not t.inject(p, wait=wait_s):
                raise RuntimeError(f"the rx ring stayed full for {wait_s} s")
        taken += len(body)
        wait_taken(t, taken, wait_s)
        taken += 1
        yield sent, last


def _row(executor: str, epoch_us: int | None, frames: int, out: TextIO) -> dict[str, Any]:
    t = Transceiver(_config(executor, epoch_us))
    samples: list[float] = []
    whole = 0
    with t:
        for sent, last in last_packets(t, frames, FRAME_BYTES):
            began = time.perf_counter_ns()
            if not t.inject(last, wait=WAIT_S):
                raise RuntimeError(f"the rx ring stayed full for {WAIT_S} s")
            got: list[Any] = []
            deadline = time.monotonic() + WAIT_S
            while not got and time.monotonic() < deadline:
                got = t.frames(timeout=0.0)
            arrived = time.perf_counter_ns()
            if not got:
                break  # reported below as frames missing
            samples.append(arrived - began)
            for f in got:
                whole += (
                    f.ok
                    and f.frame_number == sent.frame_number
                    and f.crc32 == zlib.crc32(sent.content)
                )
                f.release()
        epochs = t.epoch_stats().get("epochs", 0) if executor == "cuda" else 0
    name = "one launch" if epoch_us == 0 else (f"epoch_us {epoch_us}" if epoch_us else "")
    row: dict[str, Any] = {
        "epoch_us": epoch_us,
        "frames": frames,
        "frames_whole": whole,
        "epochs": epochs,
        "latency": Percentiles.from_samples(samples, "ns").to("us").as_dict() if samples else None,
    }
    lat = row["latency"]
    figures = f"p50 {lat['p50']:.1f} us, p99 {lat['p99']:.1f} us" if lat else "no frame recorded"
    print(
        f"  {executor} {name}: {whole}/{frames} frames whole, frame end to host {figures}", file=out
    )
    return row


def run(executor: str, frames: int, out: TextIO) -> dict[str, Any]:
    """The frame-end-to-host latency of ``frames`` frames, per epoch length on the cuda executor
    (one row on the cpu executor), with the floor of the same run."""
    epochs: tuple[int | None, ...] = EPOCHS_US if executor == "cuda" else (None,)
    rows = [_row(executor, e, frames, out) for e in epochs]
    floor_name = "pinned_pingpong" if executor == "cuda" else "cpu_thread_pingpong"
    floor = measure_floors([floor_name])[floor_name]
    floor_json = floor.to("us").as_dict() if isinstance(floor, Percentiles) else str(floor)
    print(f"{'epoch':>12} {'whole':>9} {'p50 us':>9} {'p99 us':>9}   floor: {floor_name}", file=out)
    for r in rows:
        lat = r["latency"] or {}
        name = (
            "-" if r["epoch_us"] is None else ("one launch" if not r["epoch_us"] else r["epoch_us"])
        )
        print(
            f"{name!s:>12} {r['frames_whole']:>4}/{r['frames']:<4} "
            f"{lat.get('p50', float('nan')):>9.1f} {lat.get('p99', float('nan')):>9.1f}",
            file=out,
        )
    shown = (
        f"p50 {floor_json['p50']:.2f} us, p99 {floor_json['p99']:.2f} us"
        if isinstance(floor_json, dict)
        else floor_json
    )
    print(f"{'floor':>12} {floor_name}: {shown}", file=out)
    return {
        "frame_bytes": FRAME_BYTES,
        "payload": PAYLOAD,
        "rows": rows,
        "floor": {floor_name: floor_json},
    }
