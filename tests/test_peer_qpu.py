"""The ``qpu`` peer and the ``echo`` command: a transceiver and its peer as two programs.

Goal: what a user runs works end to end over a real network stack.
- ``roce-transceiver peer qpu`` (another process) against a transceiver with the socket NIC in
  udp mode on ``lo``: every echo and every QEC correction comes back right (corrections checked
  against the Python decoder), with a latency report; its exit status says so.
- The same across a network namespace in packet mode, the peer inside the namespace (root).
- ``roce-transceiver echo`` runs a transceiver from its YAML until ``--seconds``, and its final
  counters account for what a peer sent.
- Errors are one line naming the problem.

Oracles: the peer's own checks (decoder, payload comparison, ICRC) and the transceiver's
counters.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_helpers import CLI, started
from engine_helpers import wait_counters
from net_helpers import run_cmd

from roce_transceiver.config import load_config
from roce_transceiver.peers import QpuPeer, open_link
from roce_transceiver.transceiver import Transceiver


def udp_yaml(tmp_path: Path, **extra: object) -> Path:
    cfg: dict = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": "127.0.0.1"},
        "peer": {"ip": "127.0.0.2"},
        "qp": {"transport": "UC"},
        **extra,
    }
    path = tmp_path / "transceiver.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def namespace_yaml(veth: tuple[str, str, str], tmp_path: Path, qp: dict) -> Path:
    """A transceiver on our end of the veth pair (packet mode), its peer in the namespace."""
    ns, ours, theirs = veth
    peer_mac = run_cmd("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{theirs}/address")
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "packet", "interface": ours},
        "local": {"mac": Path(f"/sys/class/net/{ours}/address").read_text().strip()},
        "peer": {"mac": peer_mac.strip()},
        "qp": qp,
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def peer_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "peer", "qpu", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    ("handler", "extra", "flags"),
    [
        ("echo", {}, []),
        ("qec", {"qec": {"distance": 3}}, []),
        ("qec", {"qec": {"distance": 5}}, ["--syndromes", "stim"]),
    ],
    ids=["echo", "qec-random", "qec-stim"],
)
def test_peer_qpu_over_udp_every_answer_right(
    handler: str, extra: dict, flags: list[str], tmp_path: Path
) -> None:
    path = udp_yaml(tmp_path, handler=handler, **extra)
    n = 300
    with Transceiver(str(path)) as t:
        done = peer_cli("--config", str(path), "--count", str(n), "--json", *flags)
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert (report["sent"], report["received"], report["lost"], report["wrong"]) == (n, n, 0, 0)
        assert 0 < report["rtt_us"]["min"] <= report["rtt_us"]["p50"] <= report["rtt_us"]["max"]
        wait_counters(t, messages=n, replies=n, icrc_errors=0, nic_filtered=0)


def test_echo_command_runs_a_transceiver_a_peer_can_reach(tmp_path: Path) -> None:
    path = udp_yaml(tmp_path)
    args = [*CLI, "echo", "--config", str(path), "--seconds", "60", "--json", "--quiet"]
    with started(args, "nic socket") as proc:  # the banner: the loop and the socket are up
        with open_link(load_config(str(path)), "udp") as link:
            report = QpuPeer(link).run(100, timeout_s=2.0)
        assert (report.received, report.lost, report.wrong) == (100, 0, 0)
        proc.send_signal(2)  # Ctrl-C: the command stops the loop and prints its counters
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    stats = json.loads(out)
    assert stats["nic_rx_frames"] == stats["replies"] == 100


def test_peer_and_echo_errors_are_one_line(tmp_path: Path) -> None:
    done = peer_cli("--config", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2 and done.stderr.startswith("roce-transceiver: error: peer qpu:")
    path = udp_yaml(tmp_path)
    done = peer_cli("--config", str(path), "--mode", "packet")
    assert done.returncode == 2 and "packet mode needs an interface" in done.stderr
    done = subprocess.run(
        [*CLI, "echo", "--config", str(path), "--seconds", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "argument --seconds: -1: must be more than 0" in done.stderr
    done = subprocess.run(
        [*CLI, "listen", "--config", str(path), "--frames", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "argument --frames: 0: must be at least 1" in done.stderr


def test_peer_qpu_in_a_namespace_over_packet_mode(
    veth_namespace: tuple[str, str, str], tmp_path: Path
) -> None:
    ns, _, theirs = veth_namespace
    path = namespace_yaml(veth_namespace, tmp_path, {"transport": "UC"})
    with Transceiver(str(path)):
        peer = ["peer", "qpu", "--config", str(path), "--interface", theirs, "--count", "200"]
        done = subprocess.run(
            ["ip", "netns", "exec", ns, *CLI, *peer, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["received"], report["lost"], report["wrong"]) == (200, 0, 0)


def test_peer_qpu_writes_with_immediate_into_a_region(tmp_path: Path) -> None:
    regions = [{"va": 0x20000, "rkey": 0x77, "length": 4096}]
    path = udp_yaml(tmp_path, regions=regions)
    with Transceiver(str(path)) as t:
        done = peer_cli("--config", str(path), "--count", "100", "--opcode", "write-imm", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert (report["received"], report["lost"], report["wrong"]) == (100, 0, 0)
        wait_counters(t, messages=100, replies=100, out_of_range=0)
        first = t.receive(timeout=1.0)[0]
        assert first.imm == 0 and first.opcode == 0x2B  # UC RDMA WRITE Only with Immediate


RELIABLE_QP = {"transport": "RC", "retransmit": True, "ack_timeout_us": 20_000}
FAULTS = ["--loss", "0.05", "--answer-loss", "0.05", "--rnr-every", "25", "--rnr-burst", "2"]


def _reliable_report(done: subprocess.CompletedProcess[str], n: int) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["sent"], report["received"], report["lost"], report["wrong"]) == (n, n, 0, 0)
    rc = report["rc"]
    assert rc["taken"] == n and rc["lost"] > 0 and rc["rnr_naks"] > 0, rc
    return report


@pytest.mark.parametrize("nak", [True, False], ids=["nak", "timer"])
def test_peer_qpu_as_the_answers_rc_responder_over_udp_every_answer_once(
    tmp_path: Path, nak: bool
) -> None:
    """qp.retransmit: the peer ACKs each answer, loses 5 % of them and of its ACKs, pushes back
    with RNR bursts; the transceiver sends again what it must, and every answer comes once."""
    path = udp_yaml(tmp_path, qp=RELIABLE_QP)
    n = 300
    with Transceiver(str(path)) as t:
        args = ["--config", str(path), "--count", str(n), "--json", *FAULTS]
        done = peer_cli(*args, *([] if nak else ["--no-nak"]))
        _reliable_report(done, n)
        stats = wait_counters(t, rc_acked=n, rc_errors=0, rc_dropped=0)
    assert stats["rc_retransmits"] > 0 and stats["rnr_naks_received"] > 0
    assert stats["rc_timeouts"] > 0 or nak


def test_peer_qpu_faults_need_a_retransmitting_transceiver(tmp_path: Path) -> None:
    path = udp_yaml(tmp_path)  # UC
    done = peer_cli("--config", str(path), "--loss", "0.1")
    assert done.returncode == 2 and "qp.retransmit true" in done.stderr


def test_peer_qpu_rc_responder_in_a_namespace_over_packet_mode(
    veth_namespace: tuple[str, str, str], tmp_path: Path
) -> None:
    ns, _, theirs = veth_namespace
    path = namespace_yaml(veth_namespace, tmp_path, RELIABLE_QP)
    n = 200
    with Transceiver(str(path)) as t:
        peer = ["peer", "qpu", "--config", str(path), "--interface", theirs, "--count", str(n)]
        done = subprocess.run(
            ["ip", "netns", "exec", ns, *CLI, *peer, *FAULTS, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        _reliable_report(done, n)
        stats = wait_counters(t, rc_acked=n, rc_errors=0, rc_dropped=0)
    assert stats["rc_retransmits"] > 0
