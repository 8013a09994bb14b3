"""The qec handler: rotated surface code, lookup-table decoder, wire format, C++ lookup.

Goal: ``RotatedSurfaceCode(d)`` for d = 3 and 5 is a valid rotated surface code
with the documented boundary convention and distance d; the lookup tables hold,
for every syndrome, a correction that reproduces it with minimum weight; every
error of weight <= (d-1)/2 is corrected without a logical error; the C++
handler (``rt/handlers/qec.h`` through ``_core.qec_decode``) returns replies
byte-identical to the Python decoder and rejects bad tables and short requests.

Oracles:
- linear algebra over GF(2) written here (commutation, ranks) and brute-force
  enumeration (no logical operator of weight < d; minimum weights at d=3 over
  all 2^9 errors);
- pymatching (``Matching`` from the same check matrix with uniform weights,
  an exact minimum-weight decoder for these graph-like codes) for the weight
  of every syndrome's correction, and, built from stim's detector error model,
  for the logical outcome of each shot;
- stim, which simulates depolarizing noise on the data qubits of a circuit
  measuring our stabilizers (MPP) and so generates syndromes and the true
  logical flips independently of our decoder;
- golden bytes for the worked d=3 example of docs/handlers.md.
"""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pymatching
import pytest
import stim

from roce_transceiver import _core
from roce_transceiver.qec import (
    LookupTableDecoder,
    RotatedSurfaceCode,
    engine_table,
    pack_correction,
    pack_syndrome,
    reply_bytes,
    request_bytes,
    unpack_correction,
    unpack_syndrome,
)

DISTANCES = (3, 5)


@pytest.fixture(scope="module", params=DISTANCES, ids=lambda d: f"d{d}")
def decoder(request) -> LookupTableDecoder:
    return LookupTableDecoder(RotatedSurfaceCode(request.param))


def gf2_rank(m: np.ndarray) -> int:
    a = (np.array(m, dtype=np.uint8) % 2).copy()
    rank = 0
    for col in range(a.shape[1]):
        pivots = np.nonzero(a[rank:, col])[0]
        if pivots.size == 0:
            continue
        p = rank + pivots[0]
        a[[rank, p]] = a[[p, rank]]
        others = np.nonzero(a[:, col])[0]
        others = others[others != rank]
        a[others] ^= a[rank]
        rank += 1
        if rank == a.shape[0]:
            break
    return rank


def masks_to_bits(masks: np.ndarray, n: int) -> np.ndarray:
    return ((np.asarray(masks, np.uint64)[:, None] >> np.arange(n, dtype=np.uint64)) & 1).astype(
        np.uint8
    )


def bits_to_ints(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.int64) @ (1 << np.arange(bits.shape[1], dtype=np.int64))


def errors_up_to_weight(n: int, w: int) -> np.ndarray:
    rows = []
    for k in range(w + 1):
        for qubits in itertools.combinations(range(n), k):
            e = np.zeros(n, np.uint8)
            e[list(qubits)] = 1
            rows.append(e)
    return np.array(rows)


# ---------------------------------------------------------------- the code


@pytest.mark.parametrize("bad", [1, 2, 4, 7, 9, 0, -3, 3.0, "3", True])
def test_code_rejects_unsupported_distance(bad):
    with pytest.raises(ValueError, match=f"distance={bad!r}"):
        RotatedSurfaceCode(bad)


@pytest.mark.parametrize("d", DISTANCES, ids=lambda d: f"d{d}")
def test_code_stabilizers_commute_and_are_independent(d):
    c = RotatedSurfaceCode(d)
    m = (d * d - 1) // 2
    assert c.hx.shape == c.hz.shape == (m, d * d)
    assert c.hx.dtype == c.hz.dtype == np.uint8
    assert not (c.hx.astype(int) @ c.hz.T.astype(int) % 2).any()
    assert gf2_rank(c.hx) == gf2_rank(c.hz) == m
    for h in (c.hx, c.hz):
        weights = h.sum(axis=1)
        assert sorted(set(weights.tolist())) == [2, 4]
        assert (weights == 4).sum() == (d - 1) ** 2 // 2
        assert (weights == 2).sum() == d - 1
        # Every qubit is in at most two checks of a type: each error is an edge of a graph,
        # which is what makes pymatching an exact minimum-weight oracle below.
        assert h.sum(axis=0).max() == 2


@pytest.mark.parametrize("d", DISTANCES, ids=lambda d: f"d{d}")
def test_code_boundary_convention_x_on_rows_z_on_columns(d):
    c = RotatedSurfaceCode(d)
    for checks, line in ((c.x_checks, "row"), (c.z_checks, "col")):
        for qubits in (q for q in checks if len(q) == 2):
            rows = {q // d for q in qubits}
            cols = {q % d for q in qubits}
            if line == "row":
                assert len(rows) == 1 and rows <= {0, d - 1}, qubits
            else:
                assert len(cols) == 1 and cols <= {0, d - 1}, qubits
    # The bulk checkerboard: X-type plaquette at corner (0, 0) covers qubits 0, 1, d, d+1.
    assert (0, 1, d, d + 1) in c.x_checks
    assert (1, 2, d + 1, d + 2) in c.z_checks
    assert np.nonzero(c.lx)[0].tolist() == [r * d for r in range(d)]  # column 0
    assert np.nonzero(c.lz)[0].tolist() == list(range(d))  # row 0


@pytest.mark.parametrize("d", DISTANCES, ids=lambda d: f"d{d}")
def test_code_logicals_commute_with_stabilizers_and_anticommute(d):
    c = RotatedSurfaceCode(d)
    assert not (c.hz.astype(int) @ c.lx % 2).any()
    assert not (c.hx.astype(int) @ c.lz % 2).any()
    assert int(c.lx.astype(int) @ c.lz) % 2 == 1
    # Not stabilizers themselves: each raises the rank of its own type's stabilizers.
    assert gf2_rank(np.vstack([c.hx, c.lx])) == c.num_x_checks + 1
    assert gf2_rank(np.vstack([c.hz, c.lz])) == c.num_z_checks + 1
    assert int(c.lx.sum()) == int(c.lz.sum()) == d


@pytest.mark.parametrize("d", DISTANCES, ids=lambda d: f"d{d}")
def test_code_distance_is_d(d):
    # No X (Z) operator of weight < d commutes with all Z (X) checks and flips the other
    # logical; lx and lz reach weight d (checked above), so the distance is exactly d.
    c = RotatedSurfaceCode(d)
    errors = errors_up_to_weight(d * d, d - 1).astype(int)
    for h_other, l_other in ((c.hz, c.lz), (c.hx, c.lx)):
        undetected = ~(errors @ h_other.T % 2).any(axis=1)
        flips_logical = (errors @ l_other % 2) == 1
        assert not (undetected & flips_logical).any()


# ---------------------------------------------------------------- the tables


def test_tables_reproduce_every_syndrome(decoder):
    c = decoder.code
    for table, h in ((decoder.x_corrections, c.hz), (decoder.z_corrections, c.hx)):
        assert table.dtype == np.uint32 and table.shape == (1 << h.shape[0],)
        bits = masks_to_bits(table, c.num_data)
        syndromes = bits_to_ints(bits.astype(int) @ h.T % 2)
        assert (syndromes == np.arange(1 << h.shape[0])).all()


def test_table_weights_equal_pymatching_on_every_syndrome(decoder):
    # All 2^m syndromes of each type (16 at d=3, 4096 at d=5): pymatching is minimum weight
    # with uniform weights, so the weights must agree even where the chosen qubits differ.
    c = decoder.code
    for table, h in ((decoder.x_corrections, c.hz), (decoder.z_corrections, c.hx)):
        m = h.shape[0]
        syndromes = masks_to_bits(np.arange(1 << m), m)
        pm = pymatching.Matching(h).decode_batch(syndromes)
        assert ((pm.astype(int) @ h.T % 2) == syndromes).all()
        ours = masks_to_bits(table, c.num_data).sum(axis=1)
        assert (ours == pm.sum(axis=1)).all()
        assert ours.max() <= (c.distance**2) // 2


def test_table_weights_equal_brute_force_d3():
    c = RotatedSurfaceCode(3)
    dec = LookupTableDecoder(c)
    all_errors = masks_to_bits(np.arange(1 << 9), 9).astype(int)
    weights = all_errors.sum(axis=1)
    for table, h in ((dec.x_corrections, c.hz), (dec.z_corrections, c.hx)):
        syndromes = bits_to_ints(all_errors @ h.T % 2)
        best = np.full(1 << h.shape[0], 99)
        np.minimum.at(best, syndromes, weights)
        assert (masks_to_bits(table, 9).sum(axis=1) == best).all()


def test_every_error_up_to_half_distance_is_corrected(decoder):
    # All of them: 1 + 9 per type at d=3, 1 + 25 + 300 at d=5; X and Z errors together,
    # each round through the packed request, the Python decoder and the C++ handler.
    c = decoder.code
    t = (c.distance - 1) // 2
    blob = decoder.table_blob()
    errors = errors_up_to_weight(c.num_data, t)
    rng = np.random.default_rng(7)
    partners = errors[rng.permutation(len(errors))]
    for ex, ez in zip(errors, partners, strict=True):
        sx = ez.astype(int) @ c.hx.T % 2
        sz = ex.astype(int) @ c.hz.T % 2
        request = pack_syndrome(sx, sz)
        reply = decoder.decode_packed(request)
        assert _core.qec_decode(blob, request) == reply
        cx, cz = unpack_correction(reply)
        rx, rz = ex ^ cx, ez ^ cz
        assert not (c.hz.astype(int) @ rx % 2).any() and not (c.hx.astype(int) @ rz % 2).any()
        assert int(rx.astype(int) @ c.lz) % 2 == 0, f"logical X after X error {ex}"
        assert int(rz.astype(int) @ c.lx) % 2 == 0, f"logical Z after Z error {ez}"


# ---------------------------------------------------------------- stim as the noise source


def memory_circuit(c: RotatedSurfaceCode, basis: str, p: float) -> stim.Circuit:
    """Code-capacity memory: prepare a logical basis state, measure every stabilizer, apply
    depolarizing noise to the data, measure every stabilizer again, then the logical.

    Detectors 0..nx-1 are the X checks and nx..nx+nz-1 the Z checks (both rounds XORed),
    so a detector sample row is (sx, sz); observable 0 is logical Z (basis "z") or X ("x").
    """
    n = c.num_data

    def mpp(pauli: str, checks) -> str:
        return "MPP " + " ".join("*".join(f"{pauli}{q}" for q in qs) for qs in checks)

    checks = [mpp("X", c.x_checks), mpp("Z", c.z_checks)]
    logical = c.lz if basis == "z" else c.lx
    support = [tuple(int(q) for q in np.nonzero(logical)[0])]
    m = c.num_x_checks + c.num_z_checks
    lines = [
        ("R " if basis == "z" else "RX ") + " ".join(map(str, range(n))),
        *checks,
        f"DEPOLARIZE1({p}) " + " ".join(map(str, range(n))),
        *checks,
        mpp(basis.upper(), support),
    ]
    lines += [f"DETECTOR rec[{-1 - m + i}] rec[{-1 - 2 * m + i}]" for i in range(m)]
    lines.append("OBSERVABLE_INCLUDE(0) rec[-1]")
    return stim.Circuit("\n".join(lines))


def table_decode_batch(decoder: LookupTableDecoder, dets: np.ndarray) -> tuple:
    """Vectorised lookup: (x_correction, z_correction) bit rows for rows of (sx, sz)."""
    c = decoder.code
    sx = bits_to_ints(dets[:, : c.num_x_checks])
    sz = bits_to_ints(dets[:, c.num_x_checks :])
    return (
        masks_to_bits(decoder.x_corrections[sz], c.num_data),
        masks_to_bits(decoder.z_corrections[sx], c.num_data),
    )


@pytest.mark.parametrize("basis", ["z", "x"])
def test_stim_syndromes_table_matches_pymatching_weight(decoder, basis):
    # A high error rate (p = 0.1) so most shots carry several defects.
    c = decoder.code
    circuit = memory_circuit(c, basis, 0.1)
    dets = circuit.compile_detector_sampler(seed=11).sample(3000).astype(np.uint8)
    sx, sz = dets[:, : c.num_x_checks], dets[:, c.num_x_checks :]
    assert (sx.any(axis=1) & sz.any(axis=1)).mean() > 0.3
    cx, cz = table_decode_batch(decoder, dets)
    for corr, synd, h in ((cx, sz, c.hz), (cz, sx, c.hx)):
        assert ((corr.astype(int) @ h.T % 2) == synd).all()
        pm = pymatching.Matching(h).decode_batch(synd)
        assert (corr.sum(axis=1) == pm.sum(axis=1)).all()


@pytest.mark.parametrize("basis", ["z", "x"])
def test_logical_failures_agree_with_pymatching_at_low_noise(decoder, basis):
    """Table and pymatching (from stim's detector error model) predict the same logical flip.

    Both decoders are minimum weight, so they can only disagree on a shot whose minimum
    correction has weight >= (d+1)/2: below that, two corrections of the same weight differ
    by fewer than d qubits, hence by a stabilizer. stim's model merges the two qubits of a
    weight-2 stabilizer into one edge of higher probability, shrinking its weight by a factor
    1.16 at p = 0.01; that still cannot let pymatching pick 3 qubits over 2. So: exact
    agreement on every shot whose table correction weighs <= (d-1)/2, and overall at least
    99% (a heavier correction needs (d+1)/2 faults in one sector: under 0.5% of shots at
    p = 0.01 for d = 3 and far fewer at d = 5).
    """
    c = decoder.code
    p = 0.01
    circuit = memory_circuit(c, basis, p)
    dets, obs = circuit.compile_detector_sampler(seed=5).sample(20000, separate_observables=True)
    dets = dets.astype(np.uint8)
    actual = obs[:, 0].astype(np.uint8)
    matching = pymatching.Matching.from_detector_error_model(
        circuit.detector_error_model(decompose_errors=True)
    )
    pm_flip = matching.decode_batch(dets)[:, 0].astype(np.uint8)
    cx, cz = table_decode_batch(decoder, dets)
    corr, logical = (cx, c.lz) if basis == "z" else (cz, c.lx)
    table_flip = (corr.astype(int) @ logical % 2).astype(np.uint8)

    light = corr.sum(axis=1) <= (c.distance - 1) // 2
    assert light.mean() > 0.95
    assert (table_flip[light] == pm_flip[light]).all()
    assert (table_flip == pm_flip).mean() >= 0.99
    # Sanity of the whole loop: the decoded logical error rate is well below the physical.
    assert (table_flip != actual).mean() < p / 2


# ---------------------------------------------------------------- wire format and blob


def test_wire_sizes():
    assert [request_bytes(d) for d in DISTANCES] == [1, 3]
    assert [reply_bytes(d) for d in DISTANCES] == [3, 7]


def test_worked_example_d3_golden_bytes():
    # docs/handlers.md: X error on qubit 4 (fires Z checks 1 and 2), Z error on qubit 0
    # (fires X check 1). Request: sx = 0b0010, sz = 0b0110 -> 0x62. Reply: X bit 4, Z bit 0
    # at reply bit 9 -> 10 02 00.
    c = RotatedSurfaceCode(3)
    dec = LookupTableDecoder(c)
    sx, sz = [0, 1, 0, 0], [0, 1, 1, 0]
    request = pack_syndrome(sx, sz)
    assert request == bytes([0x62])
    assert dec.decode_packed(request) == bytes.fromhex("100200")
    assert _core.qec_decode(dec.table_blob(), request) == bytes.fromhex("100200")
    x, z = dec.decode(sx, sz)
    assert np.nonzero(x)[0].tolist() == [4] and np.nonzero(z)[0].tolist() == [0]
    assert dec.table_blob()[:16] == bytes.fromhex("51454354010003000900040004000000")


def test_blob_layout_field_by_field(decoder):
    c = decoder.code
    blob = decoder.table_blob()
    magic, version, d, n, nx, nz, reserved = struct.unpack_from("<4sHHHHHH", blob)
    assert (magic, version, d, n, nx, nz, reserved) == (
        b"QECT",
        1,
        c.distance,
        c.distance**2,
        c.num_x_checks,
        c.num_z_checks,
        0,
    )
    assert len(blob) == 16 + 4 * ((1 << nz) + (1 << nx))
    x_table = struct.unpack_from(f"<{1 << nz}I", blob, 16)
    z_table = struct.unpack_from(f"<{1 << nx}I", blob, 16 + 4 * (1 << nz))
    assert list(x_table) == decoder.x_corrections.tolist()
    assert list(z_table) == decoder.z_corrections.tolist()


def test_pack_unpack_round_trip(decoder):
    c = decoder.code
    rng = np.random.default_rng(3)
    for _ in range(50):
        sx, sz = rng.integers(0, 2, (2, c.num_x_checks), dtype=np.uint8)
        x, z = rng.integers(0, 2, (2, c.num_data), dtype=np.uint8)
        ux, uz = unpack_syndrome(pack_syndrome(sx, sz), c.distance)
        assert (ux == sx).all() and (uz == sz).all()
        vx, vz = unpack_correction(pack_correction(x, z))
        assert (vx == x).all() and (vz == z).all()
    # The documented bit order, checked on one bit: Z check 0 is request bit nx.
    one = pack_syndrome(np.zeros(c.num_x_checks), np.eye(c.num_z_checks)[0])
    assert int.from_bytes(one, "little") == 1 << c.num_x_checks


def test_unpack_correction_rejects_wrong_length_and_padding():
    with pytest.raises(ValueError, match=r"reply bytes of 4: expected 3 \(d=3\), 7 \(d=5\)"):
        unpack_correction(bytes(4))
    with pytest.raises(ValueError, match="padding bits"):
        unpack_correction(bytes([0, 0, 0x04]))


def test_decode_rejects_bad_syndrome_shapes_and_values():
    dec = LookupTableDecoder(RotatedSurfaceCode(3))
    with pytest.raises(ValueError, match=r"syndrome_x has shape \(3,\): expected \(4,\)"):
        dec.decode([0, 0, 0], [0, 0, 0, 0])
    with pytest.raises(ValueError, match="syndrome_z holds values other than 0 and 1"):
        dec.decode([0, 0, 0, 0], [0, 2, 0, 0])
    with pytest.raises(ValueError, match="5 checks of each type"):
        pack_syndrome([0] * 5, [0] * 5)
    with pytest.raises(ValueError, match=r"correction length of 10: expected 9 \(d=3\)"):
        pack_correction([0] * 10, [0] * 10)


# ---------------------------------------------------------------- the C++ handler


def test_cpp_matches_python_on_every_d3_request_and_20k_d5_requests():
    for d, requests in (
        (3, [bytes([i]) for i in range(256)]),
        (5, [bytes(r) for r in np.random.default_rng(1).integers(0, 256, (20000, 3), np.uint8)]),
    ):
        dec = LookupTableDecoder(RotatedSurfaceCode(d))
        blob = dec.table_blob()
        for request in requests:
            assert _core.qec_decode(blob, request) == dec.decode_packed(request), request.hex()


def test_cpp_ignores_bytes_past_the_syndrome():
    dec = LookupTableDecoder(RotatedSurfaceCode(5))
    blob = dec.table_blob()
    assert _core.qec_decode(blob, b"\x5a\xa5\x3c\xff\xff") == dec.decode_packed(b"\x5a\xa5\x3c")


def test_cpp_rejects_short_request(decoder):
    blob = decoder.table_blob()
    short = bytes(request_bytes(decoder.code.distance) - 1)
    with pytest.raises(ValueError, match="request too short"):
        _core.qec_decode(blob, short)
    with pytest.raises(ValueError, match="needs at least"):
        decoder.decode_packed(short)


def _patched(blob: bytes, offset: int, value: bytes) -> bytes:
    return blob[:offset] + value + blob[offset + len(value) :]


BAD_BLOBS = {
    "empty": lambda b: b"",
    "header only": lambda b: b[:16],
    "truncated table": lambda b: b[:-4],
    "trailing byte": lambda b: b + b"\0",
    "magic": lambda b: _patched(b, 0, b"QECX"),
    "version 2": lambda b: _patched(b, 4, struct.pack("<H", 2)),
    "distance 4": lambda b: _patched(b, 6, struct.pack("<H", 4)),
    "num_data 33": lambda b: _patched(b, 8, struct.pack("<H", 33)),
    "check counts 3 and 5": lambda b: _patched(b, 10, struct.pack("<HH", 3, 5)),
    "reserved 1": lambda b: _patched(b, 14, b"\x01\x00"),
}


@pytest.mark.parametrize("corrupt", BAD_BLOBS.values(), ids=BAD_BLOBS.keys())
def test_cpp_rejects_bad_blob(decoder, corrupt):
    blob = corrupt(decoder.table_blob())
    with pytest.raises(ValueError, match=f"qec table blob of {len(blob)} bytes rejected"):
        _core.qec_decode(blob, bytes(request_bytes(decoder.code.distance)))


@pytest.mark.parametrize("distance", DISTANCES)
def test_the_engine_table_is_the_lookup_decoders_blob_built_once(distance: int) -> None:
    blob = engine_table(distance)
    assert blob == LookupTableDecoder(RotatedSurfaceCode(distance)).table_blob()
    assert engine_table(distance) is blob  # one build a distance, for every transceiver


def test_the_engine_table_names_a_distance_it_has_no_decoder_for() -> None:
    with pytest.raises(ValueError, match="distance=7: the lookup-table decoder supports"):
        engine_table(7)
