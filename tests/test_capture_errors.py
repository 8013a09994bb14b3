"""The socket NIC's capture checks every write: an error is named, counted, and loses no traffic.

Goal (docs/socket_nic.md, "Capture"):
- A capture that cannot hold even its header (``socket.capture: /dev/full``) is refused at
  start(), naming the file and errno: ``TransceiverError``, and for ``echo`` one line, exit 2.
- A capture that fills up mid-run (a file size limit, RLIMIT_FSIZE, in an ``echo`` process):
  the capture stops, the loop goes on (every request still answered), the error names the file
  and errno on stderr, ``nic_capture_errors`` counts the frames the file lacks, the exit
  status is 1, and the file is whole up to its last record: its records plus the frames it
  lacks are exactly the frames the NIC moved.

Oracles: the peer's own count of answers; ``roce_transceiver.pcap.read_pcap``, which refuses a
record cut short; the NIC's rx/tx counters.
"""

from __future__ import annotations

import json
import resource
import selectors
import signal
import socket
import struct
import subprocess
from pathlib import Path

import pytest
import yaml
from child_helpers import default_sigint
from cli_helpers import CLI

from roce_transceiver.config import load_config
from roce_transceiver.pcap import read_pcap
from roce_transceiver.protocol import build, parse
from roce_transceiver.transceiver import Transceiver, TransceiverError

OURS, PEER = "127.13.30.1", "127.13.30.2"
REQUESTS = 100
LIMIT = 8192  # bytes the capture file may grow to: the header and some 30 records
# Linux's values; Python's socket module names them only on some builds.
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def config(capture: str) -> dict:
    return {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp", "capture": capture},
        "local": {"ip": OURS},
        "peer": {"ip": PEER},
        "qp": {"transport": "UC"},
    }


def test_a_capture_that_cannot_be_written_is_refused_at_start() -> None:
    t = Transceiver(config("/dev/full"))
    with pytest.raises(TransceiverError, match=r"capture: cannot write '/dev/full': No space left"):
        t.start()
    t.stop()


def test_echo_with_an_unwritable_capture_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(config("/dev/full")))
    done = subprocess.run(
        [*CLI, "echo", "--config", str(path), "--seconds", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "roce-transceiver: error: echo: start(): capture: cannot write '/dev/full': "
        "No space left on device"
    ]


def limit_file_size() -> None:
    """In the child, before exec: files stop growing at LIMIT bytes (EFBIG, not SIGXFSZ); and
    SIGINT, which stops it, at its default whatever the test was started from."""
    default_sigint()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_a_capture_that_fills_up_stops_and_the_loop_goes_on(tmp_path: Path) -> None:
    capture = tmp_path / "run.pcap"
    path = tmp_path / "echo.yaml"
    path.write_text(yaml.safe_dump(config(str(capture))))
    qpn = load_config(str(path))["qp"]["qpn"]
    args = [*CLI, "echo", "--config", str(path), "--json", "--quiet"]
    with (
        subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limit_file_size,
        ) as proc,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
    ):
        try:
            ready = selectors.DefaultSelector()
            ready.register(proc.stderr, selectors.EVENT_READ)
            assert ready.select(timeout=30.0), "echo printed nothing within 30 s"
            banner = proc.stderr.readline()  # its first line: up (or the error it exits with)
            assert "Ctrl-C stops" in banner, banner
            s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)  # DF: IP ID 0
            s.bind((PEER, 4791))
            s.settimeout(10.0)
            for i in range(REQUESTS):  # each answered: the loop goes on while the capture fails
                payload = b"%03d" % i + bytes(200)
                frame = build(
                    "UC_SEND_ONLY",
                    payload,
                    ip_src=PEER,
                    ip_dst=OURS,
                    udp_sport=4791,
                    psn=i,
                    dest_qp=qpn,
                )
                s.sendto(frame[42:], (OURS, 4791))
                assert parse_reply(s.recv(4096)) == payload
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # a failed check: the child goes too
                proc.kill()
    assert proc.returncode == 1, err
    stats = json.loads(out.splitlines()[-1])
    assert stats["replies"] == REQUESTS
    lost = stats["nic_capture_errors"]
    assert lost > 0, stats
    assert (
        f"echo: capture: writing '{capture}' failed: File too large (the capture stopped there, "
        f"its file cut back to"
        in err
        and f"; {lost} frames not captured" in err
    ), err
    records = read_pcap(capture)  # whole: it ends on a record boundary
    assert capture.stat().st_size <= LIMIT
    assert len(records) + lost == stats["nic_rx_frames"] + stats["nic_tx_frames"] == 2 * REQUESTS
    assert all(parse(r.data).icrc_ok for r in records)


def parse_reply(datagram: bytes) -> bytes:
    """The payload of a SEND Only datagram (BTH on)."""
    head = bytearray(build("UC_SEND_ONLY", b"", ip_src=OURS, ip_dst=PEER)[:42])
    struct.pack_into(">H", head, 16, 20 + 8 + len(datagram))  # IPv4 total length
    struct.pack_into(">H", head, 38, 8 + len(datagram))  # UDP length
    return parse(bytes(head) + datagram).payload
