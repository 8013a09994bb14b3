"""HSB's control plane, host side (hsb_control.py, hsb_stream.py) against the software bridge
(peers/bridge.py) on loopback.

Goal: the ECB client reads and writes what the bridge holds (single and block, blocks split
at 511), names every status the bridge answers, rides out lost requests and replies with
bounded retries, and gives up on a silent bridge in bounded time with an error saying what
it tried; it asks for the sequence check on every request but its first, ignores a late
reply to an earlier request, and turns a successful reply too short for its pairs into an
error saying how short (not a struct.error); the bridge refuses what a bridge refuses
(sequence, length, flags, command, block size); enumeration lists the bridge and says at
which offset a datagram is not an announcement; the checks before streaming each name the
key and the fix; streams that would mix (one QP, one rkey, one sensor for two) are caught.
Oracles: the bridge's own registers and request log; HSB's user guide for the formats.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from hsb_helpers import bridge_host_config

from roce_transceiver.config import load_config
from roce_transceiver.hsb_control import (
    RETRYABLE,
    STATUS,
    Ecb,
    EcbError,
    EcbStatusError,
    EcbTimeout,
    EnumerationError,
    announcement_bytes,
    enumerate_bridges,
    find_bridge,
    parse_announcement,
)
from roce_transceiver.hsb_stream import Channel, HsbError, check_plan, check_streams, plan_for
from roce_transceiver.peers.bridge import BRIDGE_UUID, BridgeFaults, SoftwareBridge

BRIDGE_IP = "127.0.17.9"
HOST_IP = "127.0.17.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST_IP, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bridge(request: pytest.FixtureRequest) -> Iterator[SoftwareBridge]:
    faults = getattr(request, "param", None) or BridgeFaults()
    with SoftwareBridge(BRIDGE_IP, control_port=0, faults=faults) as b:
        yield b
    assert not b.errors


def client(b: SoftwareBridge, **kw: object) -> Ecb:
    kw.setdefault("timeout", 0.1)
    return Ecb(BRIDGE_IP, b.control_port, **kw)  # type: ignore[arg-type]


def test_read_write_single_and_block_hold_what_the_bridge_holds(bridge: SoftwareBridge) -> None:
    with client(bridge) as e:
        assert e.read(0x80) == 0x2603  # HSB_IP_VERSION
        e.write(0x1000, 0x123)
        e.write_block([(0x1004, 0xDEADBEEF), (0x1008, 7), (0x02000304, 11)])
        assert e.read_block([0x1000, 0x1004, 0x1008]) == [0x123, 0xDEADBEEF, 7]
        assert e.read(0x02000304) == 11
    assert bridge.register(0x1004) == 0xDEADBEEF and bridge.register(0x1000) == 0x123
    assert e.counters.retries == 0


def test_blocks_are_split_at_511(bridge: SoftwareBridge) -> None:
    with client(bridge) as e:
        values = e.read_block([0x80] * 600)
    assert values == [0x2603] * 600
    assert [r[0] for r in bridge.requests] == [0x19, 0x19]  # READ_BLOCK of 511, then of 89


@pytest.mark.parametrize("code", sorted(c for c in STATUS if c))
def test_every_status_is_named_and_only_busy_ones_are_retried(code: int) -> None:
    faults = BridgeFaults(status={0x1000: code})
    b = SoftwareBridge(BRIDGE_IP, control_port=0, faults=faults)
    with b, client(b, retries=2) as e, pytest.raises(EcbStatusError) as err:
        e.write(0x1000, 1)
    name, _ = STATUS[code]
    assert err.value.status == code
    assert f"{code:#04x} {name}" in str(err.value) and "write 0x1000" in str(err.value)
    assert len(b.requests) == (3 if code in RETRYABLE else 1)


def test_the_bridge_refuses_unknown_addresses_and_read_only_registers(
    bridge: SoftwareBridge,
) -> None:
    with client(bridge) as e:
        with pytest.raises(EcbStatusError, match="0x03 INVALID_ADDR"):
            e.read(0x5000)
        with pytest.raises(EcbStatusError, match="0x03 INVALID_ADDR"):
            e.write(0x80, 1)  # HSB_IP_VERSION is read only
        with pytest.raises(ValueError, match="4-byte aligned"):
            e.read(0x1001)


def raw(b: SoftwareBridge, request: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(request, (BRIDGE_IP, b.control_port))
        return s.recv(2048)


def test_the_bridge_checks_sequence_length_flags_command_and_block_size(
    bridge: SoftwareBridge,
) -> None:
    def status(cmd: int, flags: int, seq: int, body: bytes) -> int:
        reply = raw(bridge, struct.pack(">BBHBB", cmd, flags, seq, 0, 0) + body)
        assert reply[0] == cmd | 0x80 and struct.unpack_from(">H", reply, 2)[0] == seq
        return reply[4]

    read80 = struct.pack(">I", 0x80)
    assert status(0x14, 0x01, 10, read80) == 0x00  # latches 10
    assert status(0x14, 0x03, 12, read80) == 0x0B  # checked: 11 was due
    assert status(0x14, 0x03, 11, read80) == 0x00
    assert status(0x14, 0x01, 500, read80) == 0x00  # unchecked: any sequence, latched
    assert status(0x14, 0x03, 501, read80) == 0x00
    assert status(0x04, 0x01, 502, read80) == 0x05  # WRITE_DWORD without its value
    assert status(0x14, 0x81, 503, read80) == 0x06  # a flag bit the bridge does not know
    assert status(0x33, 0x01, 504, read80) == 0x04
    assert status(0x19, 0x01, 505, struct.pack(">II", 0x80, 0) * 512) == 0x08


@pytest.mark.parametrize(
    "bridge", [BridgeFaults(drop_requests=0.25, drop_replies=0.25)], indirect=True
)
def test_lost_requests_and_replies_are_sent_again_and_the_registers_are_right(
    bridge: SoftwareBridge,
) -> None:
    with client(bridge, retries=8, timeout=0.05) as e:
        for i in range(40):
            e.write(0x1000 + 4 * (i % 12), i)
            assert e.read(0x1000 + 4 * (i % 12)) == i
    assert e.counters.retries > 0  # the seed lost some
    assert e.counters.requests == 80


@pytest.mark.parametrize("bridge", [BridgeFaults(mute_after=2)], indirect=True)
def test_a_bridge_that_stops_answering_is_a_bounded_timeout_naming_the_tries(
    bridge: SoftwareBridge,
) -> None:
    with client(bridge, retries=3, timeout=0.1) as e:
        e.read(0x80)
        e.read(0x80)
        start = time.monotonic()
        with pytest.raises(EcbTimeout) as err:
            e.write(0x1000, 5)
        took = time.monotonic() - start
    assert 0.35 < took < 2.0
    assert "no reply to 4 tries of 0.1 s" in str(err.value) and "write 0x1000" in str(err.value)


def test_every_request_after_the_first_asks_for_the_sequence_check(
    bridge: SoftwareBridge,
) -> None:
    """The first request latches the client's sequence (unchecked); every later one is
    checked, one more than the last."""
    with client(bridge, first_sequence=0x4242) as e:
        e.read(0x80)
        e.write(0x1000, 1)
        e.write_block([(0x1004, 2), (0x1008, 3)])
        e.read_block([0x1000, 0x1004])
        e.read(0x84)
    flags = [r.flags & 0x02 for r in bridge.requests]
    assert flags == [0, 0x02, 0x02, 0x02, 0x02]
    assert [r.sequence for r in bridge.requests] == [0x4242 + i for i in range(5)]
    assert all(r.status == 0 for r in bridge.requests)
    with client(bridge, sequence_check=False) as e:
        e.read(0x80)
        e.read(0x80)
    assert [r.flags & 0x02 for r in bridge.requests[5:]] == [0, 0]


@pytest.mark.parametrize("bridge", [BridgeFaults(late={0: 2})], indirect=True)
def test_a_late_reply_to_an_earlier_request_is_ignored(bridge: SoftwareBridge) -> None:
    """The reply to the first try of request A comes only after the host gave up on that
    try, retried A (answered at once) and sent request B: it is counted and ignored, and B
    gets its own reply."""
    with client(bridge, timeout=0.2, retries=2) as e:
        assert e.read(0x80) == 0x2603  # HSB_IP_VERSION, by its second try
        assert e.read(0x84) == 0x20261201  # FPGA_DATE, not A's late reply
    assert e.counters.retries == 1 and e.counters.ignored == 1
    assert bridge.answered == 3


@pytest.mark.parametrize("bridge", [BridgeFaults(truncate=7)], indirect=True)
def test_a_successful_reply_too_short_for_its_pairs_is_an_error_saying_so(
    bridge: SoftwareBridge, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_helpers import run_cli

    where = f"{BRIDGE_IP}:{bridge.control_port}"
    with client(bridge) as e:
        with pytest.raises(
            EcbError, match=rf"ECB read 0x80 at {where}: the reply .* 7 bytes, 14 needed"
        ):
            e.read(0x80)
        with pytest.raises(EcbError, match=r"read block 0x1000\+2 .* 7 bytes, 22 needed"):
            e.read_block([0x1000, 0x1004])
        e.write(bridge.vp_address(0), 5)  # a write's success is its status: the bare header will do
        assert bridge.register(bridge.vp_address(0)) == 5
    at = ["--bridge", BRIDGE_IP, "--port", str(bridge.control_port)]
    status, out, err = run_cli(capsys, "hsb", "read", "0x80", *at)
    assert status == 2 and out == "" and "Traceback" not in err
    assert f"hsb read: ECB read 0x80 at {where}: the reply (status 0x00 SUCCESS) has 7 bytes" in err


def test_nothing_on_the_control_port_says_port_unreachable() -> None:
    port = free_port()
    with Ecb(HOST_IP, port, timeout=1.0) as e, pytest.raises(EcbTimeout, match="unreachable"):
        e.read(0x80)


def test_enumeration_lists_the_bridge_and_says_where_garbage_goes_wrong() -> None:
    port = free_port()
    bad = bytearray(
        announcement_bytes(
            BRIDGE_IP,
            "02:00:00:00:00:09",
            uuid=BRIDGE_UUID,
            serial=b"1234567",
            hsb_ip_version=0x2602,
        )
    )
    bad[236] = 0x55  # not HSB's vendor tag
    stop = threading.Event()

    def garbage() -> None:  # on the port while the enumeration listens, until it is done
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            while not stop.wait(0.02):
                s.sendto(bytes(bad), (HOST_IP, port))

    sender = threading.Thread(target=garbage)
    with SoftwareBridge(
        BRIDGE_IP, control_port=0, announce_to=(HOST_IP, port), announce_interval=0.05
    ):
        sender.start()
        try:
            found, problems = enumerate_bridges(0.5, port=port)
        finally:
            stop.set()
            sender.join(5)
    (a,) = found
    assert (a.ip, a.mac, a.data_plane, a.hsb_ip_version) == (
        BRIDGE_IP,
        "02:48:53:42:00:01",
        0,
        0x2603,
    )
    assert a.uuid == BRIDGE_UUID and a.board[0] == "unknown board" and a.as_dict()["sensors"] == 2
    assert problems and "offset 236: vendor tag 0x55" in problems[0]


def test_announcements_v1_and_short_datagrams() -> None:
    v2 = bytearray(
        announcement_bytes(
            "10.0.0.2",
            "02:00:00:00:00:09",
            uuid=BRIDGE_UUID,
            serial=b"\x03\x01\x04\x01\x05\x09\x03",
            hsb_ip_version=0x2602,
            board_id=2,
        )
    )
    v2[236 + 7] = 1  # enumeration v1: a board id and a board version instead of a UUID
    a = parse_announcement(bytes(v2), "10.0.0.2")
    assert a.enum_version == 1 and a.board[0] == "hololink-lite" and a.serial == "03010401050903"
    with pytest.raises(EnumerationError, match=r"40 bytes from 10\.0\.0\.2"):
        parse_announcement(bytes(40), "10.0.0.2")
    v2[236 + 7] = 9
    with pytest.raises(EnumerationError, match="offset 243: enumeration version 9"):
        parse_announcement(bytes(v2), "10.0.0.2")


def test_find_bridge_gives_up_in_time_naming_what_it_heard() -> None:
    start = time.monotonic()
    with pytest.raises(EnumerationError, match=r"no announcement from 10\.9\.9\.9 within 0\.2 s"):
        find_bridge("10.9.9.9", 0.2, port=free_port())
    assert time.monotonic() - start < 2


# ------------------------------------------------------------------------ checks
def hsb_config(**hsb: object) -> dict:
    return bridge_host_config(HOST_IP, BRIDGE_IP, rx_depth=None, bridge=BRIDGE_IP, **hsb)


def problems(cfg: dict, path_mtu: int | None = None) -> list[str]:
    loaded = load_config(cfg)
    return check_plan(loaded, plan_for(loaded, mtu=path_mtu), path_mtu=path_mtu)


def test_a_good_plan_has_no_problems_and_the_registers_hololink_writes() -> None:
    loaded = load_config(hsb_config(frame_bytes=20000))
    plan = plan_for(loaded)
    assert check_plan(loaded, plan) == []
    regs = {name: value for _, value, name in [*plan.hif, *plan.vp]}
    assert regs["PACKET_SIZE"] == (2048 - 78) // 128  # the largest payload a slot takes
    assert regs["PAGE_INC"] == 65536 // 128 and regs["MAX_BUFF"] == 3
    assert regs["PAGE_LSB"] == 0 and regs["PAGE_MSB"] == 1  # frames.va 0x1_0000_0000
    assert regs["HOST_IP"] == 0x7F001101 and regs["HOST_UDP_PORT"] == 4791
    assert regs["QP"] == 0x11 and regs["BUFFER_LENGTH"] == 20000
    # The destination is written last: HSB's emulator starts on it.
    assert [n for _, _, n in plan.vp][-2:] == ["HOST_IP", "HOST_UDP_PORT"]


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"qp": {"transport": "RC"}}, "set qp.transport: UC"),
        ({"frames": {"metadata": False}}, "set frames.metadata: true"),
        ({"frames": {"page_bytes": 65536 + 64}}, "not a multiple of 128 (the bridge's PAGE_INC"),
        ({"frames": {"va": 0x1000_0040}}, "is not 128-aligned"),
        ({"hsb": {"frame_bytes": 65500}}, "raise frames.page_bytes to 65664 or lower"),
        ({"hsb": {"packet_bytes": 4096}}, "raise queues.slot_bytes to 4224"),
        ({"hsb": {"packet_bytes": 1000}}, "counts 128-byte units"),
        ({"local": {"ip": "fd00::1"}, "peer": {"ip": "fd00::2"}}, "not IPv4"),
        ({"hsb": {"frame_rate": 2000, "link_gbps": 1.0}}, "lower the rate to"),
    ],
)
def test_each_check_names_the_key_and_the_fix(change: dict, expect: str) -> None:
    cfg = hsb_config()
    for key, value in change.items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) else value
    found = problems(cfg)
    assert any(expect in p for p in found), found


def test_the_path_mtu_bounds_the_packet_and_the_default_fits_it() -> None:
    found = problems(hsb_config(packet_bytes=1920), path_mtu=1500)
    assert any("MTU 1500" in p and "lower hsb.packet_bytes to 1408" in p for p in found), found
    loaded = load_config(hsb_config())
    assert plan_for(loaded, mtu=1500).packet_bytes == 1408  # hololink's figure for 1500 too


def test_each_queue_gets_a_stream_of_its_own_qp_pages_and_sensor() -> None:
    """queues.count 4: queue q's plan is QP qpn + q, the q-th quarter of the pages, sensor
    hsb.sensor + q; the four do not mix, and steering by UDP port is refused for a bridge."""
    cfg = {**hsb_config(), "queues": {"count": 4}}
    cfg["frames"] = {**cfg.get("frames", {}), "pages": 8}
    loaded = load_config(cfg)
    plans = [plan_for(loaded, queue=q) for q in range(4)]
    fr = loaded["frames"]
    assert [p.qpn for p in plans] == [loaded["qp"]["qpn"] + q for q in range(4)]
    assert [p.pages for p in plans] == [2] * 4
    assert [p.va for p in plans] == [fr["va"] + q * 2 * fr["page_bytes"] for q in range(4)]
    assert [p.channel.sensor for p in plans] == [0, 1, 2, 3]
    assert check_streams(plans) == [] and all(check_plan(loaded, p) == [] for p in plans)
    overlapping = dataclasses.replace(plans[1], qpn=0x99, va=plans[1].va + 1)
    assert any("overlap stream" in p for p in check_streams([plans[1], overlapping]))
    with pytest.raises(HsbError, match="queue 4: the transceiver has 4"):
        plan_for(loaded, queue=4)
    by_port = load_config({**cfg, "queues": {"count": 4, "steer": "udp_sport"}})
    assert any("set queues.steer: qp" in p for p in check_plan(by_port, plan_for(by_port)))


def test_streams_that_would_mix_are_caught() -> None:
    a = plan_for(load_config(hsb_config()))
    b = plan_for(
        load_config(
            {
                **hsb_config(sensor=1),
                "qp": {"transport": "UC", "qpn": 0x22},
                "frames": {"pages": 4, "page_bytes": 65536, "rkey": 7},
            }
        )
    )
    assert check_streams([a, b]) == []
    same_qp = plan_for(
        load_config(
            {**hsb_config(sensor=1), "frames": {"pages": 4, "page_bytes": 65536, "rkey": 7}}
        )
    )
    assert any("qp.qpn 0x11" in p and "own QP" in p for p in check_streams([a, same_qp]))
    same_rkey = plan_for(
        load_config({**hsb_config(sensor=1), "qp": {"transport": "UC", "qpn": 0x22}})
    )
    assert any("frames.rkey" in p and "overlap" in p for p in check_streams([a, same_rkey]))
    assert any("pick another hsb.sensor" in p for p in check_streams([a, a]))
    assert Channel(0, 1, 2).vp_address == 0x1080 and Channel(1, 0, 1).hif_address == 0x02010300


def test_the_bridge_record_is_appended_when_it_fits_else_its_own_packet_at_the_same_place() -> None:
    from roce_transceiver.peers.link import Addresses
    from roce_transceiver.peers.sensor import Sensor
    from roce_transceiver.protocol import parse

    a = Addresses(
        "02:00:00:00:00:09", BRIDGE_IP, 12288, 1, "02:00:00:00:00:01", HOST_IP, 0x11, "UC"
    )
    s = Sensor(a, va=0x10000, rkey=5, page_bytes=8192, pages=2, payload=1024, record="hsb")
    fits = [parse(p) for p in s.frame(0, bytes(1000)).packets]  # 1000 + 24 pad + 128 > 1024
    assert [len(p.payload) for p in fits] == [1000, 128]
    assert fits[1].reth.va == 0x10000 + 1024 and fits[1].opcode == 0x2B
    small = [parse(p) for p in s.frame(1, bytes(700)).packets]  # 700 + 68 + 128 <= 1024
    assert [len(p.payload) for p in small] == [896] and small[0].opcode == 0x2B


def test_cli_hsb_enumerate_read_write(capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    port = free_port()
    with SoftwareBridge(
        BRIDGE_IP, control_port=0, announce_to=(HOST_IP, port), announce_interval=0.05
    ) as b:
        status, out, _ = run_cli(capsys, "hsb", "enumerate", "--port", str(port), "--json")
        assert status == 0 and json.loads(out.splitlines()[0])["ip"] == BRIDGE_IP
        at = ["--bridge", BRIDGE_IP, "--port", str(b.control_port)]
        assert run_cli(capsys, "hsb", "write", "0x1000", "7", "0x9", *at)[0] == 0
        status, out, _ = run_cli(capsys, "hsb", "read", "0x1000", "--count", "2", *at)
        assert status == 0 and out.split() == [
            "0x00001000",
            "0x00000007",
            "0x00001004",
            "0x00000009",
        ]
        status, _, err = run_cli(capsys, "hsb", "read", "0x5000", *at)
        assert status == 2 and "0x03 INVALID_ADDR" in err
    status, out, _ = run_cli(
        capsys, "hsb", "enumerate", "--port", str(free_port()), "--seconds", "0.1"
    )
    assert status == 1 and "no bridge heard" in out
