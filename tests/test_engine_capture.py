"""What crosses the loopback wire is real RoCEv2: a capture of it dissects in tshark.

Goal: the frames the far end puts on the wire and the frames the engine answers
with (echo replies, RC ACKs and NAKs) are valid Ethernet/IPv4/UDP/RoCEv2 frames,
so a pcap of a loopback run opens in Wireshark. Oracle: tshark's InfiniBand
dissector (opcode, destination QP, PSN, AETH syndrome) and its ICRC-independent
field parsing, over a pcap written with roce_transceiver.pcap.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from engine_helpers import EXECUTORS, Peer, collect_n, running

from roce_transceiver.pcap import write_pcap
from roce_transceiver.protocol import parse

pytestmark = pytest.mark.tshark


def _tshark_rows(tshark: str, path: Path) -> list[list[str]]:
    fields = [
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.aeth.syndrome",
    ]
    cmd = [tshark, "-r", str(path), "-T", "fields", "-E", "separator=,", "-E", "occurrence=f"]
    cmd += ["-d", "udp.port==4791,infiniband"]
    for f in fields:
        cmd += ["-e", f]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [line.split(",") for line in done.stdout.splitlines()]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_loopback_capture_dissects_in_tshark(executor, tshark_path, tmp_path):
    with running(executor, "RC") as t:
        peer = Peer(t)
        sent = [peer.next("SEND_ONLY", b"request-%d" % i, ack_req=True) for i in range(4)]
        gap = peer.frame("SEND_ONLY", b"early", psn=peer.psn + 5)  # out of order: one NAK
        for frame in [*sent, gap]:
            assert t.inject(frame)
        # 4 echo replies + 4 ACKs + 1 NAK
        answered = collect_n(t, 9)
    path = tmp_path / "loopback.pcap"
    frames = [*sent, gap, *answered]
    write_pcap(path, frames)

    rows = _tshark_rows(tshark_path, path)
    assert len(rows) == len(frames)
    for row, frame in zip(rows, frames, strict=True):
        ours = parse(frame)
        assert ours.icrc_ok
        opcode, dest_qp, psn, syndrome = row
        assert int(opcode) == ours.opcode
        assert int(dest_qp, 0) == ours.dest_qp
        assert int(psn) == ours.psn
        if ours.aeth is not None:
            assert int(syndrome, 0) == ours.aeth.syndrome
    syndromes = sorted(parse(f).aeth.syndrome for f in answered if parse(f).aeth)
    assert syndromes == [0x1F] * 4 + [0x60]
