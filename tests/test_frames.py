"""The frames handler: HSB-style frame streams assembled into pages (rt/engine/frames.h).

Goal: what an HSB sensor sends becomes whole frames for the host, checked, without copies,
and a slow host costs dropped frames, never a stalled receiver.
- Frames of several sizes, with and without the metadata record, arrive byte-exact in the
  page the immediate names: CRC-32 of the page equals zlib's of what was sent (and the
  metadata's), byte counts, PSN ranges and packet counts as sent.
- Faults, placed by hand in one frame each: a lost packet (``packets_lost`` 1, CRC differs
  from the metadata's, counted), a reordered pair and a duplicate (frame whole and right),
  a corrupt ICRC (dropped by the engine, so the frame lost it).
- A host that holds its pages: frames for held pages are dropped and counted
  (``frames_dropped``, ``frame_page_busy``), and once it releases them frames flow again.

Oracles: the sensor's own content and zlib.crc32; the engine's counters. The sensor peer
builds packets with ``roce_transceiver.protocol.build`` (checked against scapy/tshark).
"""

from __future__ import annotations

import zlib

import pytest
from engine_helpers import EXECUTORS, wait_counters
from frames_helpers import PAGE, frames_config, one_frame, send, sensor_for

from roce_transceiver.config import ConfigError
from roce_transceiver.hsb import jamcrc
from roce_transceiver.peers.sensor import Sensor, SentFrame
from roce_transceiver.transceiver import Transceiver, TransceiverError


@pytest.mark.parametrize("metadata", [True, False])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_frames_arrive_byte_exact_in_the_named_page(executor: str, metadata: bool) -> None:
    with Transceiver(frames_config(executor, metadata)) as t:
        sensor = sensor_for(t, payload=1024)
        for n, size in enumerate([1, 1024, 5000, 16384, PAGE - 128, 300]):
            sent = sensor.frame(n, bytes((n * 31 + i * 7) & 0xFF for i in range(size)))
            send(t, sent.packets)
            f = one_frame(t)
            assert (f.frame_number, f.page, f.bytes) == (n, n % 4, size)
            assert f.crc32 == zlib.crc32(sent.content)
            assert f.data.tobytes() == sent.content
            on_gpu = f.array()  # the page where it lies: cupy on the GPU, else the numpy view
            held = on_gpu.get() if hasattr(on_gpu, "get") else on_gpu
            assert held.tobytes() == sent.content
            assert hasattr(on_gpu, "get") == (executor == "cuda")
            data_packets = -(-size // 1024)
            assert f.packets == data_packets + (1 if metadata else 0)
            assert f.packets_lost == 0 and f.page_match and f.ok
            assert f.has_metadata == metadata and f.crc_ok == metadata
            assert f.metadata_crc == (jamcrc(sent.content) if metadata else None)
            assert (f.psn_last - f.psn_first + 1) == f.packets
            f.release()
        wait_counters(t, frames=6, frames_dropped=0, frame_crc_errors=0, psn_gaps=0)


def faulty(sensor: Sensor, n: int, fault: str) -> SentFrame:
    """Frame ``n`` (8 data packets) with one fault placed by hand."""
    sent = sensor.frame(n, bytes((n + i) & 0xFF for i in range(8 * 1024)))
    p = sent.packets
    if fault == "loss":
        del p[3]
    elif fault == "reorder":
        p[3], p[4] = p[4], p[3]
    elif fault == "duplicate":
        p.insert(4, p[3])
    elif fault == "corrupt":
        p[3] = p[3][:-4] + bytes(b ^ 0xFF for b in p[3][-4:])
    return sent


@pytest.mark.parametrize("executor", EXECUTORS)
def test_faults_in_a_frame_give_exactly_the_expected_account(executor: str) -> None:
    with Transceiver(frames_config(executor)) as t:
        sensor = sensor_for(t, payload=1024)
        # The corrupt packet's ICRC is flipped, its payload intact. The stream step places a
        # UC packet's payload in the same pass as its ICRC (stream_batch.h), so its bytes may
        # be in the page though the packet counts as lost: the record's CRC is the page's,
        # whatever it holds (None: either, as the page says).
        expect = {  # fault: (packets_lost, crc_ok, packets that arrived)
            "loss": (1, False, 8),
            "reorder": (0, True, 9),
            "duplicate": (0, True, 9),
            "corrupt": (1, None, 8),
        }
        crc_errors = 0
        for n, (fault, (lost, crc_ok, packets)) in enumerate(expect.items()):
            sent = faulty(sensor, n, fault)
            send(t, sent.packets)
            f = one_frame(t)
            assert (f.packets_lost, f.packets) == (lost, packets), fault
            page_is_sent = f.data.tobytes() == sent.content
            assert f.crc_ok == (crc_ok if crc_ok is not None else page_is_sent), fault
            assert f.crc32 == zlib.crc32(f.data.tobytes()), fault
            assert f.ok == (lost == 0)
            if crc_ok:
                assert page_is_sent
            crc_errors += not f.crc_ok
            f.release()
        # The engine's view (UC restarts its PSN at every break): a lost packet and a
        # corrupt one each leave one gap; the swap three (ahead, behind, then the packet
        # after the pair is ahead again); the duplicate one (behind).
        wait_counters(t, frames=4, frame_crc_errors=crc_errors, icrc_errors=1, psn_gaps=6)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_host_that_holds_its_pages_costs_dropped_frames_never_a_stall(executor: str) -> None:
    with Transceiver(frames_config(executor, pages=2)) as t:
        sensor = sensor_for(t, payload=1024)
        frames = list(sensor.frames(6, 4096))  # 4 data packets + metadata each
        held = []
        for sent in frames[:2]:
            send(t, sent.packets)
            held.append(one_frame(t))  # pages 0 and 1, not released
        for sent in frames[2:4]:  # pages 0 and 1 again: still the host's
            send(t, sent.packets)
        wait_counters(t, frames=2, frames_dropped=2, frame_page_busy=10)
        assert t.frames(timeout=0.2) == []
        for f in held:
            f.release()
        for n, sent in enumerate(frames[4:], start=4):
            send(t, sent.packets)
            f = one_frame(t)
            assert f.frame_number == n and f.ok and f.data.tobytes() == sent.content
            f.release()
        wait_counters(t, frames=4, frames_dropped=2, frame_page_busy=10)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("reads", [8, 12])
def test_an_older_bridges_page_is_read_from_the_immediates_low_8_bits(
    executor: str, reads: int
) -> None:
    # A bridge before HSB IP 0x2603 names the page in the immediate's low 8 bits; the sensor
    # here sets bits 11:8 too, which are not the page's: read with hsb.page_bits 12, the
    # immediate names another page than the one the data went to.
    cfg = frames_config(executor) | {"hsb": {"page_bits": reads}}
    with Transceiver(cfg) as t:
        sensor = Sensor.for_config(t.config, page_bits=8)
        for n in range(3):
            sent = sensor.frame(n, bytes([n]) * 3000)
            send(t, sent.packets)
            f = one_frame(t)
            assert f.page == sent.page and f.data.tobytes() == sent.content
            assert (f.page_match, f.ok) == ((True, True) if reads == 8 else (False, False)), n
            f.release()


def test_the_pages_must_fit_the_immediates_page_bits() -> None:
    with pytest.raises(TransceiverError, match=r"frames.pages=512: .* 256 pages at most with"):
        Transceiver(frames_config("cpu", pages=512) | {"hsb": {"page_bits": 8}})
    with pytest.raises(ConfigError) as e:
        Transceiver(frames_config("cpu") | {"hsb": {"page_bits": 10}})
    assert e.value.key == "hsb.page_bits"


def test_frames_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        Transceiver({"handler": "frames", "completions": False})
    assert e.value.key == "completions"
    regions = [{"va": 0, "rkey": 0x46524D53, "length": 64}]
    with pytest.raises(ConfigError) as e:
        Transceiver({"handler": "frames", "regions": regions})
    assert e.value.key == "frames.rkey"
