"""The public Python API refuses bad arguments with errors that name them.

Goal: ``Transceiver.read_region``, ``collect``, ``roundtrip``, ``receive`` and ``send``,
``protocol.build``, ``parse``, ``icrc``, ``psn_add``, ``psn_diff``, ``opcode_name``, and
``hsb.imm_encode``, ``imm_decode``, ``FrameMetadata.pack`` and ``unpack`` answer a value of
the wrong type with a TypeError, and one out of range with a ValueError, each naming the
function, the argument and what it takes; never pybind11's "incompatible function arguments",
"Unable to cast", an IndexError from a C++ buffer, a hang on NaN, or a silent
reinterpretation (``bytes(5)`` as a payload, a PSN of 2**24 wrapped to 0). Values at the
edges of each range are still accepted.

Oracles: the ranges the docstrings give (region lengths from the config written here, the
uint32 request count of the far end, 24-bit PSNs, u32 immediates), and Python's own
``bytes``/``int`` for what an accepted value must produce.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from roce_transceiver import hsb, protocol
from roce_transceiver.transceiver import Transceiver, TransceiverError

REGION = 256
CONFIG = {
    "executor": "cpu",
    "handler": "echo",
    "qp": {"transport": "UC"},
    "regions": [{"va": 0x1000, "rkey": 7, "length": REGION}],
}
SLOT = 2048  # the default queues.slot_bytes


@pytest.fixture(scope="module")
def t() -> Iterator[Transceiver]:
    with Transceiver(CONFIG) as running:
        yield running


def returns_within(call: Callable[[], Any], seconds: float = 10.0) -> BaseException | None:
    """Run ``call`` in a thread; the exception it raised (None: it returned). Fails the test
    if it is still running after ``seconds``: a wait that can never end."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting after {seconds} s"
    return outcome[0]


# --- Transceiver.read_region ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((-1,), ValueError, r"read_region\(\): index=-1: must be at least 0"),
        ((1,), ValueError, r"read_region\(\): index=1: no such region \(the config has 1\)"),
        ((0, -1), ValueError, rf"offset=-1: out of range 0\.\.{REGION}"),
        ((0, REGION + 1), ValueError, rf"offset={REGION + 1}: out of range 0\.\.{REGION}"),
        ((0, 0, -1), ValueError, rf"length=-1: out of range 0\.\.{REGION}"),
        ((0, 0, REGION + 1), ValueError, rf"length={REGION + 1}: out of range 0\.\.{REGION}"),
        ((0, 200, 57), ValueError, r"length=57: out of range 0\.\.56"),
        (("0",), TypeError, r"index='0': expected an int, got str"),
        ((0, 1.5), TypeError, r"offset=1\.5: expected an int, got float"),
        ((0, 0, 2.0), TypeError, r"length=2\.0: expected an int, got float"),
    ],
)
def test_read_region_names_the_argument_out_of_range(t, args, error, match):
    with pytest.raises(error, match=match):
        t.read_region(*args)


def test_read_region_accepts_the_edges_of_the_region(t):
    assert t.read_region(0, REGION) == b""
    assert t.read_region(0, 200, 56) == bytes(56)
    assert t.read_region(np.int64(0), np.uint16(10), 6) == bytes(6)


def test_read_region_after_stop_is_a_transceiver_error():
    t = Transceiver(CONFIG).start()
    t.stop()
    with pytest.raises(TransceiverError, match=r"read_region\(\): the transceiver is stopped"):
        t.read_region(0)


# --- Transceiver.collect ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_frames": -1}, ValueError, r"max_frames=-1: out of range 1\.\.4294967295"),
        ({"max_frames": 0}, ValueError, r"max_frames=0: out of range 1\.\.4294967295"),
        ({"max_frames": 2**64}, ValueError, r"max_frames=18446744073709551616: out of range"),
        ({"max_frames": 1.5}, TypeError, r"max_frames=1\.5: expected an int, got float"),
        ({"timeout": -1}, ValueError, r"timeout=-1: must be finite and at least 0"),
        ({"timeout": math.nan}, ValueError, r"timeout=nan: must be finite and at least 0"),
        ({"timeout": math.inf}, ValueError, r"timeout=inf: must be finite and at least 0"),
        ({"timeout": "1"}, TypeError, r"timeout='1': expected a number, got str"),
        ({"want": -1}, ValueError, r"want=-1: out of range 0\.\.1024"),
        ({"max_frames": 4, "want": 5}, ValueError, r"want=5: out of range 0\.\.4"),
    ],
)
def test_collect_names_the_argument_out_of_range(t, kwargs, error, match):
    raised = returns_within(lambda: t.collect(**kwargs))  # a NaN deadline once never came
    assert isinstance(raised, error), repr(raised)
    assert re.search(r"collect\(\): " + match, str(raised)), str(raised)


def test_collect_accepts_the_edges(t):
    assert t.collect(max_frames=1, timeout=0, want=0) == []
    assert t.collect(max_frames=2**32 - 1, want=0) == []


# --- Transceiver.roundtrip --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"count": -1}, ValueError, r"count=-1: out of range 1\.\.4294967295"),
        ({"count": 0}, ValueError, r"count=0: out of range 1\.\.4294967295"),
        ({"count": 2**32}, ValueError, r"count=4294967296: out of range 1\.\.4294967295"),
        ({"count": "1"}, TypeError, r"count='1': expected an int, got str"),
        ({"size": -1}, ValueError, rf"size=-1: out of range 1\.\.{SLOT}"),
        ({"size": 0}, ValueError, rf"size=0: out of range 1\.\.{SLOT}"),
        ({"size": 10**9}, ValueError, rf"size=1000000000: out of range 1\.\.{SLOT}"),
        ({"window": 0}, ValueError, r"window=0: out of range 1\.\.4294967295"),
        ({"window": -1}, ValueError, r"window=-1: out of range 1\.\.4294967295"),
        ({"window": 2**32}, ValueError, r"window=4294967296: out of range"),
        ({"rate": -1}, ValueError, r"rate=-1: must be 1e-09 \.\. 1e\+09"),
        ({"rate": 0}, ValueError, r"rate=0: must be 1e-09 \.\. 1e\+09"),
        ({"rate": math.nan}, ValueError, r"rate=nan: must be 1e-09 \.\. 1e\+09"),
        ({"rate": math.inf}, ValueError, r"rate=inf: must be 1e-09 \.\. 1e\+09"),
        ({"rate": 1e-12}, ValueError, r"rate=1e-12: must be 1e-09 \.\. 1e\+09"),
        # The far end paces in whole nanoseconds: a faster rate would be no schedule at all.
        ({"rate": 2e9}, ValueError, r"rate=2000000000\.0: must be 1e-09 \.\. 1e\+09"),
        ({"queues": 0}, ValueError, r"queues=0: out of range 1\.\.1"),
        ({"queues": 2}, ValueError, r"queues=2: out of range 1\.\.1"),
        ({"late_after": 1e-6}, ValueError, r"late_after=1e-06: needs a rate"),
        ({"rate": 1e3, "drop_after": 0}, ValueError, r"drop_after=0: must be 1e-09 \.\. 1e\+10"),
        ({"rate": 1e3, "drop_after": "1"}, TypeError, r"drop_after='1': expected a number"),
        ({"timeout": -1}, ValueError, r"timeout=-1: must be 0 \.\. 1e\+10"),
        ({"timeout": math.nan}, ValueError, r"timeout=nan: must be 0 \.\. 1e\+10"),
        ({"timeout": math.inf}, ValueError, r"timeout=inf: must be 0 \.\. 1e\+10"),
        ({"payloads": [1]}, TypeError, r"payloads\[0\]: expected a bytes-like object, got int"),
        ({"payloads": b"ab"}, TypeError, r"payloads: expected a list of bytes-like objects"),
        ({"payloads": [b"ab"], "expected": ["ab"]}, TypeError, r"expected\[0\]: expected a"),
    ],
)
def test_roundtrip_names_the_argument_out_of_range(t, kwargs, error, match):
    with pytest.raises(error, match=r"roundtrip\(\): " + match):
        t.roundtrip(**{"count": 1, **kwargs})


def test_roundtrip_accepts_any_bytes_like_payloads(t):
    payloads = [b"abcd", bytearray(b"efgh"), memoryview(b"ijkl"), np.frombuffer(b"mnop", "u1")]
    rt = t.roundtrip(count=4, payloads=payloads, rate=1e3, timeout=10)
    assert (rt.status, rt.received, rt.wrong) == ("done", 4, 0)


# --- receive(), frames() and send(): a NaN timeout once waited forever ----------------------


@pytest.mark.parametrize("timeout", [-1.0, math.nan, math.inf])
@pytest.mark.parametrize("call", ["receive", "frames", "send"])
def test_waits_refuse_a_timeout_that_is_negative_or_not_finite(call, timeout):
    with Transceiver(CONFIG) as t:
        calls = {
            "receive": lambda: t.receive(timeout=timeout),
            "frames": lambda: t.frames(timeout=timeout),
            "send": lambda: t.send(b"x", timeout=timeout),
        }
        error = returns_within(calls[call])
    assert isinstance(error, ValueError), repr(error)
    assert f"{call}(): timeout={timeout!r}: must be finite and at least 0" in str(error)


# --- protocol ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"ack_req": "yes"}, r"ack_req='yes': expected a bool, got str"),
        ({"se": None}, r"se=None: expected a bool, got NoneType"),
        ({"fecn": 0.5}, r"fecn=0\.5: expected a bool, got float"),
        ({"psn": "5"}, r"psn='5': expected an int, got str"),
        ({"psn": 1.0}, r"psn=1\.0: expected an int, got float"),
        ({"vlan": "x"}, r"vlan='x': expected an int, got str"),
        ({"imm": b"\x00"}, r"imm=b'\\x00': expected an int, got bytes"),
        ({"eth_src": 5}, r"eth_src=5: expected a MAC address .*, got int"),
        ({"ip_src": 5, "ip_dst": 6}, r"ip_src=5: expected an IPv4 or IPv6 address as a str"),
        ({"ip_dst": None}, r"ip_dst=None: expected an IPv4 or IPv6 address as a str"),
    ],
)
def test_build_wrong_field_type_is_a_type_error_naming_field_and_type(fields, match):
    with pytest.raises(TypeError, match=r"build\(\): " + match):
        protocol.build("RC_SEND_ONLY", b"x", **fields)


@pytest.mark.parametrize(
    ("payload", "kind"), [(5, "int"), ("abc", "str"), (None, "NoneType"), (1.5, "float")]
)
def test_build_payload_must_be_bytes_like(payload, kind):
    # bytes(5) is five zero bytes: an int payload was once sent as that, silently.
    with pytest.raises(TypeError, match=rf"build\(\): payload: expected a bytes-like .* {kind}"):
        protocol.build("RC_SEND_ONLY", payload)


@pytest.mark.parametrize(("opcode", "kind"), [(1.5, "float"), (None, "NoneType")])
def test_opcode_of_the_wrong_type_is_a_type_error(opcode, kind):
    match = rf"opcode={opcode!r}: expected an int or a name .*, got {kind}"
    with pytest.raises(TypeError, match=match):
        protocol.build(opcode)
    with pytest.raises(TypeError, match=match):
        protocol.opcode_name(opcode)


def test_build_flag_takes_0_and_1_but_not_2():
    assert protocol.parse(protocol.build("RC_SEND_ONLY", ack_req=1)).ack_req is True
    assert protocol.parse(protocol.build("RC_SEND_ONLY", ack_req=np.bool_(True))).ack_req
    with pytest.raises(ValueError, match=r"build\(\): ack_req=2: expected a bool"):
        protocol.build("RC_SEND_ONLY", ack_req=2)


def test_build_takes_numpy_integers_and_buffers_as_their_values():
    want = protocol.build("RC_RDMA_WRITE_ONLY", bytes(range(8)), psn=5, va=0x1000, rkey=9)
    got = protocol.build(
        "RC_RDMA_WRITE_ONLY",
        np.arange(8, dtype=np.uint8),
        psn=np.uint32(5),
        va=np.int64(0x1000),
        rkey=np.uint8(9),
    )
    assert got == want
    # dma_len counts bytes, not elements: four uint16 are 8 bytes.
    as_u16 = protocol.build("RC_RDMA_WRITE_ONLY", np.arange(4, dtype="<u2"), va=1, rkey=9)
    assert protocol.parse(as_u16).reth.dma_len == 8


def test_build_range_errors_stay_value_errors():
    with pytest.raises(ValueError, match=r"psn=16777216: out of range 0\.\.16777215"):
        protocol.build("RC_SEND_ONLY", psn=1 << 24)


@pytest.mark.parametrize("call", [protocol.parse, protocol.icrc])
@pytest.mark.parametrize(("frame", "kind"), [("frame", "str"), (None, "NoneType"), (7, "int")])
def test_parse_and_icrc_need_a_bytes_like_frame(call, frame, kind):
    name = call.__name__
    with pytest.raises(TypeError, match=rf"{name}\(\): frame: expected a bytes-like .* {kind}"):
        call(frame)


def test_parse_reads_a_strided_view_in_its_logical_order():
    frame = protocol.build("UC_SEND_ONLY", b"abcdefgh", psn=3)
    strided = np.frombuffer(frame, dtype=np.uint8).repeat(2)[::2]  # every other byte
    assert not strided.flags.c_contiguous
    assert protocol.parse(strided) == protocol.parse(frame)
    assert protocol.icrc(strided) == protocol.icrc(frame)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: protocol.psn_add(-1, 1), ValueError, r"psn_add\(\): psn=-1: out of range"),
        (lambda: protocol.psn_add(1 << 24, 0), ValueError, r"psn=16777216: out of range"),
        (lambda: protocol.psn_add("1", 0), TypeError, r"psn='1': expected an int"),
        (lambda: protocol.psn_add(0, 0.5), TypeError, r"n=0\.5: expected an int"),
        (lambda: protocol.psn_diff(1 << 24, 0), ValueError, r"psn_diff\(\): b=16777216"),
        (lambda: protocol.psn_diff(0, -1), ValueError, r"psn_diff\(\): a=-1"),
    ],
)
def test_psn_arithmetic_refuses_what_is_not_a_psn(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_psn_add_steps_back_with_a_negative_n():
    assert protocol.psn_add(0, -1) == 0xFFFFFF
    assert protocol.psn_add(5, -(1 << 24) - 2) == 3
    assert protocol.psn_add(0xFFFFFF, 2**32 - 1) == (0xFFFFFF + 2**32 - 1) % (1 << 24)


# --- hsb -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: hsb.imm_encode(-1, 0), ValueError, r"imm_encode\(\): psn=-1: out of range"),
        (lambda: hsb.imm_encode(0, 2**32), ValueError, r"imm_encode\(\): page=4294967296"),
        (lambda: hsb.imm_encode("1", 0), TypeError, r"imm_encode\(\): psn='1': expected an int"),
        (lambda: hsb.imm_decode(-1), ValueError, r"imm_decode\(\): imm=-1: out of range"),
        (lambda: hsb.imm_decode(2**32), ValueError, r"imm_decode\(\): imm=4294967296"),
        (lambda: hsb.imm_decode(1.0), TypeError, r"imm_decode\(\): imm=1\.0: expected an int"),
        (
            lambda: hsb.FrameMetadata(psn="7").pack(),
            TypeError,
            r"FrameMetadata\.pack\(\): psn='7': expected an int, got str",
        ),
        (
            lambda: hsb.FrameMetadata(frame_number=1.5).pack(),
            TypeError,
            r"FrameMetadata\.pack\(\): frame_number=1\.5: expected an int, got float",
        ),
        (
            lambda: hsb.FrameMetadata.unpack("x" * 128),
            TypeError,
            r"FrameMetadata\.unpack\(\): data: expected a bytes-like object, got str",
        ),
    ],
)
def test_hsb_wrappers_name_the_bad_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_frame_metadata_packs_numpy_integers_as_their_values():
    ours = hsb.FrameMetadata(psn=np.uint32(7), bytes_written=np.int64(4096)).pack()
    assert ours == hsb.FrameMetadata(psn=7, bytes_written=4096).pack()
