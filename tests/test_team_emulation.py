"""The warp (32-lane) paths of the engine, run on the host by an emulated warp.

Goal: what the CUDA executor runs with a warp (``icrc_team``, ``icrc_team2``, ``crc32_team``,
the express path and the rest of ``engine_step`` with staging buffers, one frame a pass) gives
what the CPU executor's team of one gives, byte for byte, here where there is no GPU. The
team is ``tests/cpp/host_warp_team.h``: 32 std::threads with WarpTeam's interface, every
team-wide call a rendezvous of all lanes that aborts on a divergent or missing call.

Oracles: zlib (Python's) for every CRC-32; the frames' own ICRC as ``protocol.build`` wrote it
(checked against scapy in test_protocol_scapy.py, and again here for a sample); for the
engine, the CPU executor's way (SoloTeam, no staging): the driver
(tests/cpp/team_emulation.cpp) compares every tx frame, completion record, counter, region
byte and final state field of the warp's runs with it, and, with the express path on, that
run with the general path's alone (express off: all the same but the ``express`` counter);
this module checks that run on its own terms (every echo is its request, the express path
took the requests it should).
Built by g++ with AddressSanitizer and UBSan; a ThreadSanitizer build checks the lanes'
shared-state accesses for races (a sync() missing from team-wide code).
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import oracles
import pytest

from roce_transceiver.protocol import OPCODES, build, parse, psn_add

TESTS = Path(__file__).resolve().parent
CORE = TESTS.parent / "roce_transceiver" / "core"
SOURCES = [
    TESTS / "cpp" / "team_emulation.cpp",
    CORE / "src" / "crc32_host.cpp",
    CORE / "src" / "describe.cpp",
]
RUN_TIMEOUT_S = 300

# team_emulation.cpp's queue pair and memory (the Python configuration's defaults).
QPN, PEER_QPN = 0x11, 0x12
REGION_VA, REGION_RKEY, REGION_BYTES = 0x10000, 0x100, 8192
PAGES_VA, PAGES_RKEY, PAGE_BYTES, PAGES = 0x1_0000_0000, 0x46524D53, 4096, 4
# Frames from the peer (02:..:02, 10.0.0.2) to us (02:..:01, 10.0.0.1).
PEER = {"eth_src": "02:00:00:00:00:02", "eth_dst": "02:00:00:00:00:01"}
PEER_IP = {"ip_src": "10.0.0.2", "ip_dst": "10.0.0.1"}


def _compile(tmp_path_factory: pytest.TempPathFactory, name: str, sanitize: str) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found on PATH: the team emulation is built with it")
    out = tmp_path_factory.mktemp("team") / name
    cmd = [compiler, "-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"]
    cmd += [f"-fsanitize={sanitize}", "-fno-sanitize-recover=all", f"-I{CORE / 'include'}"]
    if sanitize == "thread":
        # TSan models no fences: the rx ring's producer runs before the lanes start, and the
        # lanes order their accesses by the rendezvous' mutex, which it does model.
        cmd.append("-Wno-tsan")
    built = subprocess.run(
        [*cmd, *map(str, SOURCES), "-o", str(out)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr[-6000:]
    return out


@pytest.fixture(scope="module")
def emulation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, under AddressSanitizer and UBSan."""
    return _compile(tmp_path_factory, "team_emulation", "address,undefined")


@pytest.fixture(scope="module")
def emulation_tsan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, under ThreadSanitizer."""
    return _compile(tmp_path_factory, "team_emulation_tsan", "thread")


def write_records(path: Path, records: list[tuple[int, bytes]]) -> Path:
    """team_emulation.cpp's input: u32 alignment offset, u32 length, the bytes."""
    path.write_bytes(b"".join(struct.pack("<II", a, len(b)) + b for a, b in records))
    return path


def run(exe: Path, tmp_path: Path, mode: str, records: list[tuple[int, bytes]], *args: str):
    src = write_records(tmp_path / f"{mode}.in", records)
    out = tmp_path / f"{mode}.out"
    done = subprocess.run(
        [str(exe), mode, str(src), str(out), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"{exe.name} {mode} {' '.join(args)}: exit {done.returncode}\n"
        f"{done.stdout[-4000:]}{done.stderr[-6000:]}"
    )
    return out.read_text().splitlines()


# --- CRC-32 and ICRC --------------------------------------------------------------------------


def crc_cases() -> list[tuple[int, bytes]]:
    """Lengths around every boundary of the warp's chunking (16-byte chunks, 32 lanes: 512
    bytes a round), and random ones, each at a random offset from 64-byte alignment."""
    rng = random.Random("crc32_team")
    lengths = list(range(0, 70)) + [n + d for n in (496, 512, 1024, 1536) for d in (-1, 0, 1)]
    lengths += [rng.randrange(1, 9000) for _ in range(150)] + [65536 + 3, 1 << 20]
    return [(rng.randrange(64), rng.randbytes(n)) for n in lengths]


def test_crc32_team_with_32_lanes_is_zlib_crc32(emulation, tmp_path):
    cases = crc_cases()
    lines = run(emulation, tmp_path, "crc", cases)
    assert len(lines) == len(cases)
    wrong = []
    for (align, data), line in zip(cases, lines, strict=True):
        solo, warp = (int(x, 16) for x in line.split())
        want = zlib.crc32(data)
        if (solo, warp) != (want, want):
            wrong.append(f"{len(data)} B at +{align}: solo {solo:08x}, 32 lanes {warp:08x}")
    assert not wrong, f"zlib.crc32 differs from crc32_team: {wrong[:10]}"


def icrc_cases() -> list[tuple[int, bytes]]:
    """Frames of every opcode, IPv4/IPv6, with and without VLAN, payloads up to 1500 bytes
    (several 512-byte rounds), at random offsets."""
    rng = random.Random("icrc_team")
    frames = []
    for _name, opcode in sorted(OPCODES.items()):
        for i in range(4):
            spec = oracles.random_spec(rng, opcode, ip_version=(4, 6)[i % 2], max_payload=1500)
            frames.append((rng.randrange(64), build(**oracles.build_kwargs(spec))))
    return frames


def test_icrc_team_with_32_lanes_is_the_frames_icrc(emulation, tmp_path):
    frames = icrc_cases()
    lines = run(emulation, tmp_path, "icrc", frames)
    assert len(lines) == len(frames)
    wire = [int.from_bytes(f[-4:], "little") for _, f in frames]
    wrong = []
    for i, line in enumerate(lines):
        assert line != "-", f"frame {i}: the driver found no ICRC layout: {frames[i][1].hex()}"
        got = [int(x, 16) for x in line.split()]
        want = wire[i]
        # solo, 32 lanes, 32 lanes with the masks precomputed; then icrc_team2 of this frame
        # (masks) and the next (none): solo, then 32 lanes.
        expected = [want, want, want, want, wire[(i + 1) % len(frames)]] * 1
        expected += [want, wire[(i + 1) % len(frames)]]
        if got != expected:
            wrong.append(f"frame {i} ({len(frames[i][1])} B): {line} want {want:08x}")
    assert not wrong, "\n".join(wrong[:10])
    # The frames' ICRC is the one scapy computes (a sample: scapy is slow).
    for _, frame in frames[::9]:
        assert frame[-4:] == oracles.scapy_icrc_bytes(frame)


def test_icrc_words_with_32_lanes_is_the_frames_icrc(emulation, tmp_path):
    """The position tables' ICRC (icrc_words, icrc_words2: a word a lane) of short frames of
    every opcode, IPv4/IPv6, VLAN or not, payloads 0-100 bytes at random offsets; frames over
    the 128 input bytes it covers are refused (left to icrc_team), never answered wrong."""
    rng = random.Random("icrc_words")
    frames = []
    for _name, opcode in sorted(OPCODES.items()):
        for i in range(6):
            spec = oracles.random_spec(rng, opcode, ip_version=(4, 6)[i % 2], max_payload=100)
            frames.append((rng.randrange(64), build(**oracles.build_kwargs(spec))))
    lines = run(emulation, tmp_path, "icrc_words", frames)
    assert len(lines) == len(frames)
    wire = [int.from_bytes(f[-4:], "little") for _, f in frames]
    taken = 0
    wrong = []
    for i, line in enumerate(lines):
        frame = frames[i][1]
        l3 = 18 if frame[12:14] == b"\x81\x00" else 14  # 802.1Q
        words = (len(frame) - 4 - l3 + 4) // 4  # the input: 4 ones + IP header .. payload
        if line == "-":
            assert words > 32, f"frame {i}: {words} input words refused: {frame.hex()}"
            continue
        assert words <= 32, f"frame {i}: {words} input words taken"
        taken += 1
        got = line.split()
        if int(got[0], 16) != wire[i]:
            wrong.append(f"frame {i} ({len(frame)} B): {got[0]} want {wire[i]:08x}")
        j = (i + 1) % len(frames)
        if got[1] != "-" and [int(x, 16) for x in got[1:]] != [wire[i], wire[j]]:
            wrong.append(f"pair {i},{j}: {line} want {wire[i]:08x} {wire[j]:08x}")
    assert not wrong, "\n".join(wrong[:10])
    assert taken >= len(frames) // 2, f"only {taken} of {len(frames)} frames were short enough"


# --- engine_step ------------------------------------------------------------------------------


@dataclass
class Stream:
    """Frames from the peer to the driver's queue pair, with what the engine must echo."""

    transport: str
    psn: int = 0
    frames: list[bytes] = field(default_factory=list)
    echoes: list[bytes] = field(default_factory=list)  # the echo handler's replies, in order

    def add(
        self,
        op: str,
        payload: bytes = b"",
        *,
        takes_psn: bool = True,
        echo: bytes | None = None,
        **fields,
    ) -> bytes:
        """A frame at the expected PSN (or ``psn=``), which it takes when the engine accepts
        it (``takes_psn``); ``echo``: the reply it completes."""
        name = op if op.startswith(("RC_", "UC_")) else f"{self.transport}_{op}"
        psn = fields.pop("psn", self.psn)
        if takes_psn:
            self.psn = psn_add(psn, 1)
        fields.setdefault("dest_qp", QPN)
        fields.setdefault("ip_src", PEER_IP["ip_src"])
        fields.setdefault("ip_dst", PEER_IP["ip_dst"])
        frame = build(name, payload, **PEER, psn=psn, **fields)
        self.frames.append(frame)
        if echo is not None:
            self.echoes.append(echo)
        return frame

    def send(self, payload: bytes, **fields) -> None:
        """A SEND Only at the expected PSN: the express path's once one like it was taken."""
        self.add("SEND_ONLY", payload, echo=payload, **fields)


def echo_stream(transport: str, seed: str, check_icrc: bool = True) -> Stream:
    """SEND Onlys of many lengths (the express path's), broken up by everything that must
    leave it to the general path and that the general path shares with the warp (long
    WRITEs: the team's ICRC verdict), then SEND Onlys with ACK requests and WRITE Onlys with
    Immediate (the express path's too, among WRITEs it must refuse), SEND Onlys again."""
    rng = random.Random(seed)
    rc = transport == "RC"
    s = Stream(transport)
    for n in [0, 1, 2, 3, 4, 15, 16, 17, 100, 400, 430, 431, 432, 433, 500, 1000, 1400, 1900]:
        s.send(rng.randbytes(n))
    bad = bytearray(
        build(f"{transport}_SEND_ONLY", b"corrupt", **PEER, **PEER_IP, dest_qp=QPN, psn=s.psn)
    )
    bad[-1] ^= 0x01  # the express path compares the header, then fails the ICRC
    s.frames.append(bytes(bad))
    if not check_icrc:
        s.psn = psn_add(s.psn, 1)
        s.echoes.append(b"corrupt")
    s.send(b"after the bad ICRC")
    s.send(b"ack me", ack_req=True)  # not predicted: the general path answers, RC ACKs too
    s.add("SEND_FIRST", rng.randbytes(600))
    s.add("SEND_MIDDLE", rng.randbytes(600))
    # A First or Only inside a message: RC refuses it (NAK), UC drops the old message.
    s.add("SEND_ONLY", b"inside", takes_psn=not rc, echo=None if rc else b"inside")
    first, last = rng.randbytes(256), rng.randbytes(1000)
    s.add("SEND_FIRST", first)
    s.add("SEND_LAST", last, echo=first + last)
    s.add("SEND_ONLY_WITH_IMMEDIATE", b"with imm", imm=0xDEADBEEF, echo=b"with imm")
    s.add("RDMA_WRITE_ONLY", rng.randbytes(1200), va=REGION_VA + 64, rkey=REGION_RKEY)
    data = rng.randbytes(3 * 1024)  # its echo does not fit a slot: a handler error
    s.add("RDMA_WRITE_FIRST", data[:1024], va=REGION_VA + 4096, rkey=REGION_RKEY, dma_len=3072)
    s.add("RDMA_WRITE_MIDDLE", data[1024:2048])
    s.add("RDMA_WRITE_LAST_WITH_IMMEDIATE", data[2048:], imm=7)
    s.add("RDMA_WRITE_ONLY", b"x" * 64, va=REGION_VA + REGION_BYTES - 8, rkey=REGION_RKEY,
          takes_psn=False)  # fmt: skip
    # RC opcodes: on UC, the wrong transport (malformed); on RC, READ is not served.
    s.add("RC_RDMA_READ_REQUEST", va=REGION_VA, rkey=REGION_RKEY, dma_len=64, takes_psn=False)
    s.add("RC_FETCH_ADD", va=REGION_VA + 8, rkey=REGION_RKEY, swap_add=5, takes_psn=rc)
    s.add("RC_COMPARE_SWAP", va=REGION_VA + 16, rkey=REGION_RKEY, swap_add=9, takes_psn=rc)
    s.add("RC_ACKNOWLEDGE", psn=0, syndrome=0x1F, msn=1, takes_psn=False)
    s.send(b"back on track")
    s.send(rng.randbytes(700))
    # A PSN behind and one ahead: RC drops both (re-ACK, NAK); UC takes each as a new start.
    expected = s.psn
    s.add("SEND_ONLY", b"behind", psn=(s.psn - 2) & 0xFFFFFF, takes_psn=not rc,
          echo=None if rc else b"behind")  # fmt: skip
    s.add("SEND_ONLY", b"ahead", psn=psn_add(s.psn, 5), takes_psn=not rc,
          echo=None if rc else b"ahead")  # fmt: skip
    s.psn = expected  # UC resynchronises on whatever starts a message next
    s.add("SEND_ONLY", b"wrong qp", dest_qp=QPN + 1, takes_psn=False)
    s.add("SEND_ONLY", b"bad pkey", pkey=0x1234, takes_psn=False)
    s.send(b"vlan", vlan=0x2005)  # another header: predicted anew
    s.send(b"ipv6", ip_src="fd00::2", ip_dst="fd00::1")
    s.send(b"ipv4 again")
    padded = build(f"{transport}_SEND_ONLY", b"padded", **PEER, **PEER_IP, dest_qp=QPN, psn=s.psn)
    s.psn = psn_add(s.psn, 1)
    s.echoes.append(b"padded")
    s.frames.append(padded + bytes(20))  # Ethernet padding: taken, never predicted
    s.frames.append(padded[:30])  # truncated: malformed
    # RC requests as an RC requester sends them, each asking for its ACK: the express path
    # sends the echo and then the ACK (UC ignores the bit).
    for n in (0, 5, 64, 700):
        s.send(rng.randbytes(n), ack_req=True)
    # WRITE Onlys with Immediate (NVQLink's shape): the first teaches its header, the rest
    # are placed, handed to the handler and echoed the express way; those the general path
    # refuses (an unknown rkey, past the region's end) or drops (a corrupt ICRC) write nothing.
    write_imm = "RDMA_WRITE_ONLY_WITH_IMMEDIATE"
    for k in range(8):
        data = rng.randbytes(rng.choice((0, 1, 2, 3, 32, 300, 1000)))
        s.add(write_imm, data, va=REGION_VA + 128 * k, rkey=REGION_RKEY, imm=k, echo=data,
              ack_req=rc and k % 2 == 0)  # fmt: skip
    s.add(write_imm, b"no", va=REGION_VA, rkey=REGION_RKEY + 1, imm=8, takes_psn=False)
    s.add(write_imm, b"far" * 8, va=REGION_VA + REGION_BYTES - 4, rkey=REGION_RKEY, imm=9,
          takes_psn=False)  # fmt: skip
    data = rng.randbytes(40)
    bad = bytearray(build(f"{transport}_{write_imm}", data, **PEER, **PEER_IP, dest_qp=QPN,
                          psn=s.psn, va=REGION_VA + 2048, rkey=REGION_RKEY, imm=10))  # fmt: skip
    bad[-1] ^= 0x01
    s.frames.append(bytes(bad))
    if not check_icrc:
        s.psn = psn_add(s.psn, 1)
        s.echoes.append(data)
    data = rng.randbytes(40)
    s.add(write_imm, data, va=REGION_VA + 2100, rkey=REGION_RKEY, imm=11, echo=data)
    for _ in range(30):
        s.send(rng.randbytes(rng.choice((8, 32, 64, 256, 600, 1450))))
    return s


def frames_stream(metadata: bool, seed: str) -> Stream:
    """HSB-style frames into the pages: WRITE Onlys with a RETH each, the last with the
    immediate naming the page, ~3 KiB a frame (the team's page CRC over several rounds);
    one frame loses a packet, one arrives reordered, two hit pages the host still holds."""
    rng = random.Random(seed)
    s = Stream("UC")
    for number, page in enumerate([0, 1, 2, 3, 0, 1]):
        data = rng.randbytes(rng.randrange(2000, 4000))
        chunks = [data[i : i + 900] for i in range(0, len(data), 900)]
        base = PAGES_VA + page * PAGE_BYTES
        packets = []
        for k, chunk in enumerate(chunks):
            packets.append(("RDMA_WRITE_ONLY", chunk, base + 900 * k))
        if metadata:
            packets.append(("RDMA_WRITE_ONLY_WITH_IMMEDIATE", rng.randbytes(128), base + 3968))
        else:
            op, chunk, va = packets.pop()
            packets.append(("RDMA_WRITE_ONLY_WITH_IMMEDIATE", chunk, va))
        psns = [psn_add(s.psn, k) for k in range(len(packets))]
        s.psn = psn_add(s.psn, len(packets))
        order = list(range(len(packets)))
        if number == 1:
            order.pop(1)  # lost
        if number == 2:
            order[0], order[1] = order[1], order[0]  # reordered
        for k in order:
            op, chunk, va = packets[k]
            imm = {"imm": (psns[k] & 0xFFFFF) << 12 | page} if "IMMEDIATE" in op else {}
            s.add(op, chunk, psn=psns[k], va=va, rkey=PAGES_RKEY, takes_psn=False, **imm)
    return s


@dataclass
class Result:
    counters: dict[str, int]
    state: dict[str, int]
    tx: list[bytes]
    completions: list[bytes]


def run_engine(exe: Path, tmp_path: Path, stream: Stream, *options: str) -> Result:
    lines = run(exe, tmp_path, "engine", [(0, f) for f in stream.frames], *options)
    r = Result({}, {}, [], [])
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind in ("counter", "state"):
            name, value = rest.split()
            (r.counters if kind == "counter" else r.state)[name] = int(value)
        elif kind == "tx":
            r.tx.append(bytes.fromhex(rest)[4:])  # after the descriptor's flags
        elif kind == "completion":
            r.completions.append(bytes.fromhex(rest))
    return r


ECHO_RUNS = [
    pytest.param(("RC", "express=1", "check_icrc=1"), id="rc"),
    pytest.param(("UC", "express=1", "check_icrc=1"), id="uc"),
    pytest.param(("RC", "express=1", "check_icrc=0"), id="rc-no-icrc-check"),
    pytest.param(("UC", "express=0", "check_icrc=1"), id="uc-no-express"),
]


@pytest.mark.parametrize("setup", ECHO_RUNS)
def test_engine_step_with_32_lanes_is_the_cpu_executors_byte_for_byte(emulation, tmp_path, setup):
    transport, express, check = setup
    stream = echo_stream(transport, f"echo-{transport}", check_icrc=check == "check_icrc=1")
    r = run_engine(emulation, tmp_path, stream, f"transport={transport}", express, check)
    c = r.counters
    assert c["rx_packets"] == len(stream.frames), c
    # The driver compared the warp's runs with this one; now this one on its own terms:
    # every frame the engine sent is well formed, and its SENDs are the expected echoes.
    sent = [parse(f) for f in r.tx]
    assert all(p.icrc_ok and p.dest_qp == PEER_QPN for p in sent)
    echoed = [p.payload for p in sent if p.opcode & 0x1F == 0x04]
    assert echoed == stream.echoes, (len(echoed), len(stream.echoes), c)
    if express == "express=1":
        # The express path took the SEND Onlys and WRITE Onlys with Immediate after the first
        # of each run of them alike, those with ACK requests too; and the driver found the
        # general path alone giving the same results.
        assert c["express"] >= len(stream.echoes) - 14, c
    else:
        assert c["express"] == 0, c


@pytest.mark.parametrize("metadata", ["metadata=0", "metadata=1"])
def test_frames_with_32_lanes_are_the_cpu_executors_byte_for_byte(emulation, tmp_path, metadata):
    stream = frames_stream(metadata == "metadata=1", f"frames-{metadata}")
    r = run_engine(emulation, tmp_path, stream, "transport=UC", "handler=frames", metadata)
    c = r.counters
    assert c["rx_packets"] == len(stream.frames), c
    # Four pages: the first frames are recorded, the two after them find their page still
    # held by the host (nobody releases pages here).
    assert c["frames"] >= 3 and c["frame_page_busy"] > 0, c
    assert len(r.completions) == c["frames"], c
    # A sensor's WRITE Only with Immediate ends a frame: the frames handler keeps its
    # account on the general path, never the express path (NVQLink's shape is not HSB's).
    assert c["express"] == 0, c


def test_lanes_share_the_engine_state_without_races(emulation_tsan, tmp_path):
    """ThreadSanitizer over the warp's runs: every lane's read of the shared state, the
    staging buffers and the rings is ordered after the write it needs by a sync()."""
    for name, stream, options in [
        ("echo", echo_stream("RC", "tsan-echo"), ("transport=RC",)),
        ("frames", frames_stream(True, "tsan-frames"), ("transport=UC", "handler=frames")),
    ]:
        sub = tmp_path / name
        sub.mkdir()
        run_engine(emulation_tsan, sub, stream, *options)


# --- the completion ring's publication ---------------------------------------------------------

SETTLE_PASSES = 8  # rt/engine/engine.h kSettlePasses: idle passes before the loop settles
RETRY_PASSES = 32  # rt/engine/records.h kCompletionRetryPasses


def run_publish(exe: Path, tmp_path: Path, n: int, passes: str, *options: str) -> list[tuple]:
    """``n`` echo SEND Onlys through the driver's publish mode: after each pass (``passes``:
    1 takes a frame, 0 is an idle pass), what the host was shown (the completion ring's
    producer index) and the completion drops; the CPU executor's way, the kernel's agreeing."""
    s = Stream("UC")
    for i in range(n):
        s.send(b"message %04d" % i)
    lines = run(exe, tmp_path, "publish", [(0, f) for f in s.frames], f"passes={passes}", *options)
    return [tuple(map(int, line.split())) for line in lines]


def test_completion_records_are_published_a_batch_at_a_time_then_when_the_loop_settles(
    emulation, tmp_path
):
    # Goal: no fence a record (issue 16): the host is shown records completion_batch at a time
    # while messages keep coming, and the rest once the loop has been idle kSettlePasses.
    n, batch = 200, 64
    passes = "1" * n + "0" * 20
    shown = run_publish(emulation, tmp_path, n, passes, "transport=UC", f"batch={batch}")
    busy, idle = shown[:n], shown[n:]
    assert [p for p, _ in busy] == [(k // batch) * batch for k in range(1, n + 1)]
    assert [p for p, _ in idle] == [192] * (SETTLE_PASSES - 1) + [n] * (21 - SETTLE_PASSES)
    assert all(d == 0 for _, d in shown)


def test_completion_batch_zero_shows_each_record_at_once(emulation, tmp_path):
    # A zeroed descriptor (op_costs.cu's, this driver's default) keeps the old way: a fence each.
    shown = run_publish(emulation, tmp_path, 20, "1" * 20, "transport=UC")
    assert [p for p, _ in shown] == list(range(1, 21))


def test_full_completion_ring_drops_counted_and_reads_the_host_index_once_per_32_passes(
    emulation, tmp_path
):
    # A ring of 8 records, published 4 at a time. The host drains the first 4 after pass 5;
    # the message of pass 8 finds the ring full by the loop's last reading, reads the host's
    # index at once and is recorded; so are the next three. The message of pass 12 finds it
    # full again (the host has not read more): a reading, still full, dropped and counted; the
    # next reading is 32 passes later, so the messages up to pass 20 are dropped, though the
    # host drains again after pass 19, and the one of pass 61 is recorded, shown once the loop
    # settles. The old way read the index at every full message (pass 20's recorded).
    passes = "1" * 21 + "0" * 40 + "1" + "0" * 20
    shown = run_publish(
        emulation,
        tmp_path,
        22,
        passes,
        "transport=UC",
        "batch=4",
        "comp_log2=3",
        "drain_after=5,19",
    )
    producer = [p for p, _ in shown]
    drops = [d for _, d in shown]
    assert producer[:12] == [0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12]
    assert drops[:12] == [0] * 12
    assert drops[12:21] == list(range(1, 10))  # passes 12 to 20
    settled = 61 + SETTLE_PASSES
    assert producer[12:settled] == [12] * (settled - 12)
    assert drops[21:] == [9] * (len(passes) - 21)  # pass 61's recorded...
    assert producer[settled:] == [13] * (len(passes) - settled)  # ...and shown once idle
