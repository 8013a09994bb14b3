"""Regenerate the bundled sample captures from ``protocol.build``.

    python -m roce_transceiver.samples.make_samples [--out DIR]

Everything is deterministic (fixed addresses, payloads and timestamps), so the
output is byte-identical to the checked-in file unless the protocol core
changes what it builds; tests/test_cli.py checks that.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from roce_transceiver import hsb, protocol
from roce_transceiver.pcap import write_pcap
from roce_transceiver.samples import HSB_FRAME

__all__ = ["hsb_frame_packets", "main"]

# The sensor board and the host, as a Holoscan Sensor Bridge setup would address them.
SENSOR = {"eth_src": "02:48:53:42:00:02", "ip_src": "192.168.0.2", "udp_sport": 12288}
HOST = {"eth_src": "02:48:53:42:00:65", "ip_src": "192.168.0.101"}
SENSOR_QP = 2  # HSB's default peer QP for host -> sensor SENDs
HOST_QP = 0x000101  # the QP the host registered for the frame stream
FRAME_VA = 0x7F3A_0000_0000  # the GPU frame buffer the sensor writes into
FRAME_RKEY = 0x0001_2A15
LINE_BYTES = 256  # one packet per line of a tiny 4-line frame
LINES = 4
PTP_S = 1_700_000_000  # PTP time of the first data byte
START = float(PTP_S)  # capture time of the first packet
INTERVAL_S = 10e-6


def _to_host(**fields: object) -> dict[str, object]:
    return {**SENSOR, "eth_dst": HOST["eth_src"], "ip_dst": HOST["ip_src"], **fields}


def _to_sensor(**fields: object) -> dict[str, object]:
    return {**HOST, "eth_dst": SENSOR["eth_src"], "ip_dst": SENSOR["ip_src"], **fields}


def hsb_frame_packets() -> list[bytes]:
    """The frames of ``hsb_frame.pcap``, in order (see the package docstring)."""
    lines = [bytes((line * 16 + i) & 0xFF for i in range(LINE_BYTES)) for line in range(LINES)]
    frames = []
    # One frame: a UC RDMA WRITE Only per line, each with its own RETH (DESIGN section 3).
    for psn, data in enumerate(lines):
        va = FRAME_VA + psn * LINE_BYTES
        frames.append(
            protocol.build(
                "UC_RDMA_WRITE_ONLY",
                data,
                **_to_host(dest_qp=HOST_QP, psn=psn, va=va, rkey=FRAME_RKEY),
            )
        )
    # End of frame: WRITE Only with Immediate carrying the 128-byte metadata record.
    eof_psn = LINES
    frame_bytes = b"".join(lines)
    metadata = hsb.FrameMetadata(
        psn=eof_psn,
        crc=hsb.jamcrc(frame_bytes),  # as the FPGA computes it
        ptp_s=PTP_S,
        ptp_ns=0,
        bytes_written=len(frame_bytes),
        frame_number=0,
        meta_ptp_s=PTP_S,
        meta_ptp_ns=42_000,
    ).pack()
    frames.append(
        protocol.build(
            "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            metadata,
            **_to_host(
                dest_qp=HOST_QP,
                psn=eof_psn,
                va=FRAME_VA + len(frame_bytes),
                rkey=FRAME_RKEY,
                imm=hsb.imm_encode(eof_psn, 0),
            ),
        )
    )
    # Host -> sensor: a small control message, UC SEND Only to the sensor's QP.
    frames.append(
        protocol.build(
            "UC_SEND_ONLY", b"\x00\x00\x00\x01frame ok", **_to_sensor(dest_qp=SENSOR_QP, psn=0)
        )
    )
    # An RC exchange: a WRITE asking for an ACK, and the ACK (syndrome 0x1F, MSN 1).
    frames.append(
        protocol.build(
            "RC_RDMA_WRITE_ONLY",
            bytes(range(64)),
            **_to_sensor(dest_qp=0x12, psn=100, ack_req=True, va=0x1000, rkey=0x77),
        )
    )
    frames.append(
        protocol.build("RC_ACKNOWLEDGE", **_to_host(dest_qp=0x11, psn=100, syndrome=0x1F, msn=1))
    )
    # The next frame's first line, damaged in flight: its ICRC no longer matches.
    next_line = _to_host(dest_qp=HOST_QP, psn=eof_psn + 1, va=FRAME_VA, rkey=FRAME_RKEY)
    good = protocol.build("UC_RDMA_WRITE_ONLY", lines[0], **next_line)
    wrong = protocol.icrc(good) ^ 0x0000_FFFF
    frames.append(protocol.build("UC_RDMA_WRITE_ONLY", lines[0], icrc=wrong, **next_line))
    # The same frame cut short after its RETH, as a small capture snaplen would leave it.
    frames.append(good[:70])
    return frames


def write_hsb_frame(path: Path) -> int:
    stamped = [(START + i * INTERVAL_S, f) for i, f in enumerate(hsb_frame_packets())]
    return write_pcap(path, stamped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent, help="directory to write into"
    )
    args = parser.parse_args()
    path = args.out / HSB_FRAME
    print(f"wrote {write_hsb_frame(path)} packets to {path}")


if __name__ == "__main__":
    main()
