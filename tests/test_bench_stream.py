"""``roce-transceiver bench stream``: the socket NIC across a veth pair, next to its floors.

Goal: the command runs end to end where it can (root, iproute2), prints its table and writes
JSON in which every frame arrived whole, both receivers saw traffic, and both round trips were
measured; where it cannot, it says why in one line. Figures are not asserted (a benchmark).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_helpers import CLI as MODULE
from conftest import skip_missing

from roce_transceiver import netns

CLI = [*MODULE, "bench", "stream"]


def test_bench_stream_runs_and_accounts_for_every_frame(tmp_path: Path) -> None:
    reason = netns.why_not()
    if reason:
        done = subprocess.run(CLI, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and reason in done.stderr
        skip_missing("netns", reason)
    out = tmp_path / "stream.json"
    args = ["--frames", "8", "--echo-count", "50", "--json", str(out)]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "packets/s ratio" in done.stdout and "raw socket echo" in done.stdout
    r = json.loads(out.read_text())
    ours = r["transceiver"]
    assert ours["frames"] == ours["frames_ok"] == 8
    assert ours["frames_dropped"] == ours["ring_drops"] == ours["kernel_drops"] == 0
    assert r["af_packet_floor"]["packets"] == ours["sent"]["frames"]
    assert r["roundtrip_us"]["transceiver"]["count"] == 50
    assert r["roundtrip_us"]["raw_socket_echo"]["count"] == 50
