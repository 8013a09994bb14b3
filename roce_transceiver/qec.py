"""Lookup-table decoding of the rotated surface code (the ``qec`` handler).

The data path's ``qec`` handler answers each request (one round of syndrome
bits) with a correction, by table lookup, inside the persistent loop. This
module builds the code and the tables at configuration time and writes them in
the byte layout the C++ handler (``rt/handlers/qec.h``) reads; it also decodes
in Python, so the two can be checked against each other.

The code (``RotatedSurfaceCode``, distance d = 3 or 5)
------------------------------------------------------
Data qubit ``r*d + c`` sits at row r, column c of a d x d grid. A plaquette is
named by its top-left corner (r, c), r and c from -1 to d-1, and acts on the
grid qubits among (r, c), (r, c+1), (r+1, c), (r+1, c+1). Bulk plaquettes
(weight 4) alternate in a checkerboard: X-type where r + c is even, Z-type
where it is odd. Weight-2 plaquettes continue that checkerboard on the
boundaries: **X-type on the top and bottom rows, Z-type on the left and right
columns.** Each type has (d^2 - 1)/2 checks, numbered in row-major order of
their plaquette corner (r first, then c); check i is bit i of a syndrome.

Logical X is X on column 0 (it runs between the X-type boundaries, top to
bottom); logical Z is Z on row 0. Z-type checks detect X errors and X-type
checks detect Z errors.

The wire format of one decode
-----------------------------
Bits are packed little-endian: bit i of a field is bit i % 8 of byte i // 8,
and unused high bits of the last byte are zero.

- request: the (d^2-1)/2 X-check bits, then the (d^2-1)/2 Z-check bits;
  ceil((d^2-1)/8) bytes (1 byte at d=3, 3 bytes at d=5). Bytes past these are
  ignored, as the C++ handler ignores them.
- reply: the X-correction bits over the d^2 data qubits, then the
  Z-correction bits; ceil(2*d^2/8) bytes (3 bytes at d=3, 7 at d=5).

The table blob (``LookupTableDecoder.table_blob()``)
----------------------------------------------------
All integers little-endian; the C++ side reads the tables in place as
uint32_t, so the blob must sit at a 4-byte aligned address there.

====== ==== ============ ================================================
offset size field        value
====== ==== ============ ================================================
0      4    magic        the ASCII bytes ``QECT``
4      2    version      1
6      2    distance     d
8      2    num_data     d*d (at most 32: a correction is a uint32 mask)
10     2    num_x_checks (d^2-1)/2
12     2    num_z_checks (d^2-1)/2
14     2    reserved     0
16     4*2^nz x_corrections[syndrome_z]: uint32 mask over the data qubits
...    4*2^nx z_corrections[syndrome_x]: uint32 mask over the data qubits
====== ==== ============ ================================================

``docs/handlers.md`` repeats this with a worked d=3 example.
"""

from __future__ import annotations

import functools
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "BLOB_HEADER",
    "BLOB_MAGIC",
    "BLOB_VERSION",
    "SUPPORTED_DISTANCES",
    "ErrorSample",
    "LookupTableDecoder",
    "RotatedSurfaceCode",
    "engine_table",
    "logical_failures",
    "pack_correction",
    "pack_syndrome",
    "pymatching_replies",
    "random_syndromes",
    "reply_bytes",
    "request_bytes",
    "sample_errors",
    "stim_syndromes",
    "unpack_correction",
    "unpack_syndrome",
]

SUPPORTED_DISTANCES = (3, 5)
BLOB_MAGIC = b"QECT"
BLOB_VERSION = 1
# magic, version, distance, num_data, num_x_checks, num_z_checks, reserved
BLOB_HEADER = struct.Struct("<4sHHHHHH")

Bits = npt.NDArray[np.uint8]


def _check_distance(distance: int) -> int:
    if isinstance(distance, bool) or not isinstance(distance, int | np.integer):
        raise ValueError(f"distance={distance!r}: must be an int, one of {SUPPORTED_DISTANCES}")
    if int(distance) not in SUPPORTED_DISTANCES:
        raise ValueError(
            f"distance={distance}: the lookup-table decoder supports {SUPPORTED_DISTANCES}"
        )
    return int(distance)


def request_bytes(distance: int) -> int:
    """Bytes of a request at this distance: ceil((d^2-1)/8)."""
    d = _check_distance(distance)
    return (d * d - 1 + 7) // 8


def reply_bytes(distance: int) -> int:
    """Bytes of a reply at this distance: ceil(2*d^2/8)."""
    d = _check_distance(distance)
    return (2 * d * d + 7) // 8


def _distance_from_checks(num_checks: int) -> int:
    for d in SUPPORTED_DISTANCES:
        if num_checks == (d * d - 1) // 2:
            return d
    sizes = ", ".join(f"{(d * d - 1) // 2} (d={d})" for d in SUPPORTED_DISTANCES)
    raise ValueError(f"{num_checks} checks of each type: expected {sizes}")


def _distance_from_length(length: int, size_of: dict[int, int], what: str) -> int:
    for d, n in size_of.items():
        if length == n:
            return d
    sizes = ", ".join(f"{n} (d={d})" for d, n in size_of.items())
    raise ValueError(f"{what} of {length}: expected {sizes}")


def _as_bits(bits: npt.ArrayLike, n: int, name: str) -> Bits:
    a = np.asarray(bits)
    if a.shape != (n,):
        raise ValueError(f"{name} has shape {a.shape}: expected ({n},)")
    if not np.isin(a, (0, 1)).all():
        raise ValueError(f"{name} holds values other than 0 and 1")
    return a.astype(np.uint8)


def _pack(bits: Bits, nbytes: int) -> bytes:
    return np.packbits(bits, bitorder="little").tobytes().ljust(nbytes, b"\0")


def _unpack(payload: bytes, nbits: int) -> Bits:
    return np.unpackbits(np.frombuffer(payload, np.uint8), bitorder="little", count=nbits)


def pack_syndrome(sx: npt.ArrayLike, sz: npt.ArrayLike) -> bytes:
    """The request payload: X-check bits, then Z-check bits, packed little-endian."""
    n = np.asarray(sx).shape[0] if np.ndim(sx) == 1 else -1
    d = _distance_from_checks(n)
    bits = np.concatenate([_as_bits(sx, n, "sx"), _as_bits(sz, n, "sz")])
    return _pack(bits, request_bytes(d))


def unpack_syndrome(payload: bytes, distance: int) -> tuple[Bits, Bits]:
    """(sx, sz) from a request payload; bytes past the syndrome are ignored."""
    n = (_check_distance(distance) ** 2 - 1) // 2
    need = request_bytes(distance)
    if len(payload) < need:
        raise ValueError(
            f"request of {len(payload)} bytes: distance {distance} needs at least {need}"
        )
    bits = _unpack(bytes(payload[:need]), 2 * n)
    return bits[:n], bits[n:]


def pack_correction(x: npt.ArrayLike, z: npt.ArrayLike) -> bytes:
    """The reply payload: X-correction bits, then Z-correction bits, packed little-endian."""
    n = np.asarray(x).shape[0] if np.ndim(x) == 1 else -1
    d = _distance_from_length(n, {d: d * d for d in SUPPORTED_DISTANCES}, "correction length")
    bits = np.concatenate([_as_bits(x, n, "x"), _as_bits(z, n, "z")])
    return _pack(bits, reply_bytes(d))


def unpack_correction(payload: bytes) -> tuple[Bits, Bits]:
    """(x, z) correction bits over the data qubits, from a reply payload.

    The distance follows from the length (3 bytes: d=3, 7 bytes: d=5).
    """
    sizes = {d: reply_bytes(d) for d in SUPPORTED_DISTANCES}
    d = _distance_from_length(len(payload), sizes, "reply bytes")
    bits = np.unpackbits(np.frombuffer(bytes(payload), np.uint8), bitorder="little")
    if bits[2 * d * d :].any():
        raise ValueError(f"reply {bytes(payload).hex()}: padding bits past bit {2 * d * d} set")
    return bits[: d * d].copy(), bits[d * d : 2 * d * d].copy()


class RotatedSurfaceCode:
    """The rotated surface code of distance 3 or 5.

    Convention (see the module docstring): data qubit r*d + c at row r,
    column c; bulk plaquette with corner (r, c) is X-type when r + c is even;
    weight-2 X-type checks on the top and bottom boundaries, weight-2 Z-type
    checks on the left and right ones; logical X on column 0, logical Z on
    row 0; checks numbered row-major by plaquette corner.

    Attributes:
        distance: d.
        num_data: d*d data qubits.
        x_checks, z_checks: the data qubits of each check, in check order.
        hx, hz: check matrices, uint8 of shape ((d*d-1)//2, d*d).
        lx, lz: supports of the logical X and logical Z operators, uint8 (d*d,).
    """

    def __init__(self, distance: int) -> None:
        d = _check_distance(distance)
        self.distance = d
        self.num_data = d * d
        x_checks: list[tuple[int, ...]] = []
        z_checks: list[tuple[int, ...]] = []
        for r in range(-1, d):
            for c in range(-1, d):
                qubits = tuple(
                    rr * d + cc
                    for rr in (r, r + 1)
                    for cc in (c, c + 1)
                    if 0 <= rr < d and 0 <= cc < d
                )
                is_x = (r + c) % 2 == 0
                if len(qubits) == 4:
                    (x_checks if is_x else z_checks).append(qubits)
                elif len(qubits) == 2:
                    on_rows = r in (-1, d - 1)
                    # Only every other boundary plaquette is a check: the one whose
                    # checkerboard type matches the type that boundary carries.
                    if on_rows and is_x:
                        x_checks.append(qubits)
                    elif not on_rows and not is_x:
                        z_checks.append(qubits)
        self.x_checks = tuple(x_checks)
        self.z_checks = tuple(z_checks)
        self.hx = self._matrix(self.x_checks)
        self.hz = self._matrix(self.z_checks)
        self.lx = np.zeros(self.num_data, np.uint8)
        self.lx[[r * d for r in range(d)]] = 1
        self.lz = np.zeros(self.num_data, np.uint8)
        self.lz[:d] = 1

    def _matrix(self, checks: tuple[tuple[int, ...], ...]) -> Bits:
        h = np.zeros((len(checks), self.num_data), np.uint8)
        for i, qubits in enumerate(checks):
            h[i, list(qubits)] = 1
        return h

    @property
    def num_x_checks(self) -> int:
        return len(self.x_checks)

    @property
    def num_z_checks(self) -> int:
        return len(self.z_checks)

    def __repr__(self) -> str:
        return f"RotatedSurfaceCode(distance={self.distance})"


def _column_syndromes(h: Bits) -> list[int]:
    """Syndrome (bit i = check i) of a single flip on each data qubit."""
    weights = 1 << np.arange(h.shape[0], dtype=np.uint64)
    return [int(v) for v in (h.astype(np.uint64) * weights[:, None]).sum(axis=0)]


def _min_weight_table(h: Bits) -> npt.NDArray[np.uint32]:
    """For every syndrome, a minimum-weight error (uint32 mask) that produces it.

    Breadth-first search from the empty syndrome with single-qubit flips as
    steps: the first time a syndrome is reached, the path to it is as short
    as any error with that syndrome, since flipping a qubit twice cancels.
    """
    columns = _column_syndromes(h)
    size = 1 << h.shape[0]
    table = np.zeros(size, np.uint32)
    seen = np.zeros(size, bool)
    seen[0] = True
    queue = deque([0])
    while queue:
        s = queue.popleft()
        for q, col in enumerate(columns):
            t = s ^ col
            if not seen[t]:
                seen[t] = True
                table[t] = table[s] | np.uint32(1 << q)
                queue.append(t)
    if not seen.all():
        # Only when the checks are dependent; the surface code's are not.
        raise ValueError(f"{size - int(seen.sum())} syndromes no error produces")
    return table


class LookupTableDecoder:
    """Minimum-weight lookup tables for both error types of a code.

    ``x_corrections[syndrome_z]``: the X errors to undo, a uint32 mask over
    the data qubits, for the Z-check syndrome read as an integer (bit i =
    check i). ``z_corrections[syndrome_x]`` likewise for Z errors. Among
    corrections of equal weight, the table holds the one the search met first
    (lower qubit indices first); any of them is correct up to a stabilizer
    when the error had weight (d-1)/2 or less.
    """

    def __init__(self, code: RotatedSurfaceCode) -> None:
        self.code = code
        self.x_corrections = _min_weight_table(code.hz)
        self.z_corrections = _min_weight_table(code.hx)

    def _mask_to_bits(self, mask: int) -> Bits:
        return ((mask >> np.arange(self.code.num_data)) & 1).astype(np.uint8)

    def decode(self, syndrome_x: npt.ArrayLike, syndrome_z: npt.ArrayLike) -> tuple[Bits, Bits]:
        """(x_correction, z_correction) bits over the data qubits for one syndrome round."""
        c = self.code
        sx = _as_bits(syndrome_x, c.num_x_checks, "syndrome_x")
        sz = _as_bits(syndrome_z, c.num_z_checks, "syndrome_z")
        ix = int(sx @ (1 << np.arange(c.num_x_checks)))
        iz = int(sz @ (1 << np.arange(c.num_z_checks)))
        return (
            self._mask_to_bits(int(self.x_corrections[iz])),
            self._mask_to_bits(int(self.z_corrections[ix])),
        )

    def decode_packed(self, request: bytes) -> bytes:
        """The reply payload for a request payload (the wire format above)."""
        sx, sz = unpack_syndrome(request, self.code.distance)
        return pack_correction(*self.decode(sx, sz))

    def table_blob(self) -> bytes:
        """The tables in the layout ``qec_table_from_blob`` reads (module docstring)."""
        c = self.code
        header = BLOB_HEADER.pack(
            BLOB_MAGIC,
            BLOB_VERSION,
            c.distance,
            c.num_data,
            c.num_x_checks,
            c.num_z_checks,
            0,
        )
        return (
            header
            + self.x_corrections.astype("<u4").tobytes()
            + self.z_corrections.astype("<u4").tobytes()
        )


def engine_table(distance: int) -> bytes:
    """The table the engine's qec handler decodes with (``qec.distance``): the lookup decoder's
    blob for the rotated surface code of ``distance``; built once a distance, for every
    transceiver of the process (Ethernet and Verbs mode alike)."""
    return _engine_table(_check_distance(distance))


@functools.lru_cache(maxsize=len(SUPPORTED_DISTANCES))
def _engine_table(distance: int) -> bytes:
    return LookupTableDecoder(RotatedSurfaceCode(distance)).table_blob()


@dataclass(frozen=True)
class ErrorSample:
    """Independent X and Z errors on the data qubits, one row per shot, with the requests
    (syndromes) they produce and the lookup-table decoder's replies to them."""

    code: RotatedSurfaceCode
    ex: Bits  # (shots, num_data)
    ez: Bits
    requests: list[bytes]
    expected: list[bytes]


def sample_errors(distance: int, count: int, p: float = 0.03, seed: int = 1) -> ErrorSample:
    """``count`` shots of independent X and Z errors of rate ``p`` on each data qubit."""
    code = RotatedSurfaceCode(distance)
    decoder = LookupTableDecoder(code)
    rng = np.random.default_rng(seed)
    ex = np.empty((count, code.num_data), np.uint8)
    ez = np.empty((count, code.num_data), np.uint8)
    requests, expected = [], []
    for i in range(count):
        ex[i] = rng.random(code.num_data) < p
        ez[i] = rng.random(code.num_data) < p
        request = pack_syndrome(code.hx @ ez[i] % 2, code.hz @ ex[i] % 2)
        requests.append(request)
        expected.append(decoder.decode_packed(request))
    return ErrorSample(code, ex, ez, requests, expected)


def random_syndromes(
    distance: int, count: int, p: float = 0.03, seed: int = 1
) -> tuple[list[bytes], list[bytes]]:
    """``count`` syndrome requests from independent X and Z errors of rate ``p`` on each data
    qubit, and the corrections the lookup-table decoder answers them with (packed)."""
    sample = sample_errors(distance, count, p, seed)
    return sample.requests, sample.expected


def logical_failures(
    code: RotatedSurfaceCode, ex: Bits, ez: Bits, replies: Sequence[bytes]
) -> npt.NDArray[np.bool_]:
    """Per shot: the error times its correction is a logical operator (the correction failed).
    A residual X error is a logical X when it overlaps logical Z an odd number of times, and a
    residual Z error likewise with logical X."""
    cx = np.array([unpack_correction(r)[0][: code.num_data] for r in replies], np.uint8)
    cz = np.array([unpack_correction(r)[1][: code.num_data] for r in replies], np.uint8)
    x_fail = ((ex ^ cx) @ code.lz) % 2 == 1
    z_fail = ((ez ^ cz) @ code.lx) % 2 == 1
    return np.asarray(x_fail | z_fail)


def pymatching_replies(code: RotatedSurfaceCode, requests: Sequence[bytes]) -> list[bytes]:
    """The corrections minimum-weight perfect matching (pymatching, uniform weights) gives for
    ``requests``: the reference the lookup tables are checked against."""
    try:
        import pymatching
    except ImportError:
        raise ValueError(
            "the pymatching reference needs pymatching (pip install pymatching)"
        ) from None
    sx = np.array([unpack_syndrome(r, code.distance)[0] for r in requests], np.uint8)
    sz = np.array([unpack_syndrome(r, code.distance)[1] for r in requests], np.uint8)
    cx = pymatching.Matching(code.hz).decode_batch(sz)
    cz = pymatching.Matching(code.hx).decode_batch(sx)
    return [pack_correction(x, z) for x, z in zip(cx, cz, strict=True)]


def stim_syndromes(code: RotatedSurfaceCode, n: int, p: float, seed: int) -> list[bytes]:
    """``n`` requests sampled by stim (needs the ``stim`` package): measure every stabilizer,
    depolarize the data with probability ``p``, measure again; detector i is the change of
    check i (X checks first, then Z checks)."""
    try:
        import stim
    except ImportError:
        raise ValueError("stim syndromes need the stim package (pip install stim)") from None

    def mpp(pauli: str, checks: tuple[tuple[int, ...], ...]) -> str:
        return "MPP " + " ".join("*".join(f"{pauli}{q}" for q in qs) for qs in checks)

    m = code.num_x_checks + code.num_z_checks
    rounds = [mpp("X", code.x_checks), mpp("Z", code.z_checks)]
    lines = [
        "R " + " ".join(map(str, range(code.num_data))),
        *rounds,
        f"DEPOLARIZE1({p}) " + " ".join(map(str, range(code.num_data))),
        *rounds,
    ]
    lines += [f"DETECTOR rec[{-m + i}] rec[{-2 * m + i}]" for i in range(m)]
    circuit = stim.Circuit("\n".join(lines))
    dets = circuit.compile_detector_sampler(seed=seed).sample(n).astype(np.uint8)
    nx = code.num_x_checks
    return [pack_syndrome(row[:nx], row[nx:]) for row in dets]
