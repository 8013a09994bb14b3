"""SIGTERM and SIGHUP stop ``echo``, ``listen`` and ``run`` as Ctrl-C (SIGINT) does; a
Ctrl-C while a command is still starting ends it with one line and status 130.

Goal: how systemd, docker and Kubernetes stop a service (SIGTERM), and a closed terminal
(SIGHUP), end each long-running command cleanly: the transceiver stopped, the summary printed,
the exit status that SIGINT gives, and the capture (``socket.capture``) flushed and whole. Each
command runs as a process over UDP on ``lo`` (addresses of its own in 127.0.0.0/8), gets some
traffic, is signalled once it is up (its banner, or its first progress line), and must end
within the bound.

Oracles: the command's own summary (counters as JSON) against the capture read back by
``roce_transceiver.pcap.read_pcap``, which refuses a file cut inside a record: the capture holds
every frame the NIC moved (``nic_rx_frames + nic_tx_frames``), each a RoCE frame with a good
ICRC (``roce_transceiver.protocol.parse``). SIGINT runs alongside as the reference.

A command's first 0.2 s are imports: there the child interrupts itself (``signal.raise_signal``
from an audit hook) at the k-th module import from the first one the package's code makes, for
k spread over all of them, through both entry points (the console script, ``python -m``).
Deterministic, where a signal sent after a delay would land at random, often in Python's own
start-up (site, the editable install's finder), which no code of the package can handle. The
oracle: status 130 and stderr exactly ``roce-transceiver: interrupted (SIGINT)``.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
import yaml
from child_helpers import default_sigint
from cli_helpers import CLI, started

from roce_transceiver.config import load_config
from roce_transceiver.pcap import read_pcap
from roce_transceiver.protocol import build, parse

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
IDS = [s.name for s in SIGNALS]
END_S = 60.0  # bound on a command's clean stop after the signal (a loaded 2-core box)
# Linux's values; Python's socket module names them only on some builds.
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def addresses(n: int) -> tuple[str, str]:
    """Our and the peer's address for test ``n``: apart from other tests' 127.0.0.1/2."""
    return f"127.13.{n}.1", f"127.13.{n}.2"


def socket_config(tmp_path: Path, n: int, **extra: object) -> tuple[Path, Path]:
    """A udp-mode socket NIC transceiver's YAML with a capture: (config, capture)."""
    ours, peer = addresses(n)
    capture = tmp_path / "run.pcap"
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp", "capture": str(capture)},
        "local": {"ip": ours},
        "peer": {"ip": peer},
        "qp": {"transport": "UC"},
        **extra,
    }
    path = tmp_path / "transceiver.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, capture


def assert_capture_whole(capture: Path, counters: dict) -> None:
    records = read_pcap(capture)  # raises on a record cut short
    moved = counters.get("nic_rx_frames", 0) + counters.get("nic_tx_frames", 0)
    assert moved > 0, counters
    assert len(records) == moved, f"{len(records)} records for {moved} frames moved"
    assert all(parse(r.data).icrc_ok for r in records)


def end(proc: subprocess.Popen, sig: signal.Signals) -> tuple[str, str]:
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=END_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{sig.name}: still running {END_S} s later; stderr: {err[-2000:]}")


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_echo_stops_cleanly_on_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    n = SIGNALS.index(sig)
    path, capture = socket_config(tmp_path, n)
    ours, peer = addresses(n)
    with (
        started([*CLI, "echo", "--config", str(path), "--json"], "Ctrl-C stops") as proc,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
    ):
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)  # DF: IP ID 0
        s.bind((peer, 4791))
        s.settimeout(10.0)
        qpn = load_config(str(path))["qp"]["qpn"]
        for i in range(10):  # echoed: each request and its reply are in the capture
            frame = build(
                "UC_SEND_ONLY",
                b"ping-%d" % i,
                ip_src=peer,
                ip_dst=ours,
                udp_sport=4791,
                psn=i,
                dest_qp=qpn,
            )
            s.sendto(frame[42:], (ours, 4791))  # the datagram: BTH on
            s.recv(4096)
        out, err = end(proc, sig)
    assert proc.returncode == 0, err  # as after Ctrl-C
    stats = json.loads(out.splitlines()[-1])
    assert stats["replies"] == 10 and stats["nic_rx_frames"] == 10, stats
    if sig != signal.SIGINT:
        assert f"echo: {sig.name}: stopping" in err
    assert_capture_whole(capture, stats)


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_listen_stops_cleanly_on_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    n = 3 + SIGNALS.index(sig)
    path, capture = socket_config(
        tmp_path,
        n,
        handler="frames",
        frames={"pages": 4, "page_bytes": 65536, "metadata": True},
        queues={"rx_depth": 1024},
    )
    until = ["--frames", "1000", "--json"]  # more than are sent: the signal ends it
    with started([*CLI, "listen", "--config", str(path), *until], "listening") as proc:
        sensor = [*CLI, "peer", "sensor", "--config", str(path), "--frames", "3", "--json"]
        done = subprocess.run(
            [*sensor, "--frame-bytes", "5000"], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        lines = read_lines(proc.stdout, 3)  # the three frames, printed: listen has them all
        out, err = end(proc, sig)
    assert proc.returncode == 0, err  # every frame ok, as after Ctrl-C
    frames = [json.loads(x) for x in [*lines, *out.splitlines()[:-1]]]
    summary = json.loads(out.splitlines()[-1])
    assert [f["ok"] for f in frames] == [True] * 3 and summary["frames"] == 3, summary
    if sig != signal.SIGINT:
        assert f"listen: {sig.name}: stopping" in err
    assert_capture_whole(capture, summary["counters"])


def read_lines(stream: IO[str], count: int, text: str = "", timeout: float = 60.0) -> list[str]:
    """Lines of ``stream`` (a child's pipe, not read from before) up to the ``count``-th that
    holds ``text``, waiting at most ``timeout`` s in all. Reads the file descriptor itself, so
    what the pipe's own buffer would hold back is seen at once."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    data, lines, hits = b"", [], 0
    while hits < count:
        left = deadline - time.monotonic()
        ready = left > 0 and select.select([fd], [], [], left)[0]
        assert ready, f"{hits}/{count} lines with {text!r} within {timeout} s: {lines}"
        chunk = os.read(fd, 65536)
        assert chunk, f"the pipe closed after {hits}/{count} lines with {text!r}: {lines}"
        data += chunk
        *done, data = data.split(b"\n")
        for line in done:
            lines.append(line.decode())
            hits += text in lines[-1]
    return lines


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_run_stops_the_app_cleanly_on_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    pytest.importorskip("holoscan", reason="the apps need Holoscan (pip install '.[apps]')")
    n = 6 + SIGNALS.index(sig)
    ours, peer = addresses(n)
    capture = tmp_path / "run.pcap"
    sets = {
        "app.count": 10_000_000,  # far more than a run gets through: the signal ends it
        "app.progress_s": 0.2,
        "app.output_dir": str(tmp_path),
        "latency.floor": False,
        "transceiver.executor": "cpu",
        "transceiver.socket.capture": str(capture),
        "transceiver.local.ip": ours,
        "transceiver.peer.ip": peer,
    }
    args = [f"--set={k}={v}" for k, v in sets.items()]
    config = Path(__file__).parents[1] / "configs" / "roundtrip_udp.yaml"
    proc = subprocess.Popen(
        [*CLI, "run", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        read_lines(proc.stderr, 1, "round trips:")  # the graph runs, requests go on the wire
        out, err = end(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # As after Ctrl-C: the summary, its "answers" check failed (the count was not reached).
    assert proc.returncode == 1, err[-3000:]
    assert re.search(rf"^stopped by +{sig.name}$", out, re.M), out
    summary = json.loads((tmp_path / "roundtrip_latency_summary.json").read_text())
    assert summary["stopped_by"] == sig.name
    failed = [c["name"] for c in summary["checks"] if not c["ok"]]
    assert failed == ["answers"], summary["checks"]
    assert "Forcing exit" not in err  # Holoscan's own handling would end the process
    assert_capture_whole(capture, summary["counters"])


# The child of test_ctrl_c_while_starting: the command as its entry point runs it, SIGINT
# raised by the child itself at the k-th import from the first one the package's own code makes
# (argv: package folder, k (0: none), file for the count of those imports, entry, command...).
INTERRUPT_AT_IMPORT = r"""
import atexit, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal's foreground
package, at, count_file, entry, *command = sys.argv[1:]
at, seen = int(at), 0

def importer_is_ours():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(package + os.sep)

def hook(event, args):
    global seen
    if event != "import" or not (seen or importer_is_ours()):
        return
    seen += 1
    if seen == at:
        signal.raise_signal(signal.SIGINT)

atexit.register(lambda: open(count_file, "w").write(str(seen)))
sys.addaudithook(hook)
if entry == "module":
    sys.argv = ["roce-transceiver", *command]
    runpy.run_module("roce_transceiver", run_name="__main__", alter_sys=True)
else:
    sys.argv = [entry, *command]
    runpy.run_path(entry, run_name="__main__")
"""

INTERRUPTED = "roce-transceiver: interrupted (SIGINT)\n"


def entry_points() -> list[str]:
    """The console script beside this Python (where the package is installed), and -m."""
    script = Path(sys.executable).with_name("roce-transceiver")
    return [str(script) if script.exists() else "(no console script)", "module"]


@pytest.mark.parametrize("entry", entry_points(), ids=["console-script", "python-m"])
def test_ctrl_c_while_starting_is_one_line_and_130(tmp_path: Path, entry: str) -> None:
    if not Path(entry).exists() and entry != "module":
        pytest.skip(f"{entry}: the package is not installed with its console script here")
    import roce_transceiver

    package = str(Path(roce_transceiver.__file__).parent)
    count = tmp_path / "imports"

    def child(at: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", INTERRUPT_AT_IMPORT, package, str(at), str(count), entry]
        return subprocess.run(
            [*argv, "info"], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )

    done = child(0)  # not interrupted: how many imports there are to interrupt
    assert done.returncode == 0, done.stderr
    imports = int(count.read_text())
    assert imports > 50, f"{imports} imports: the hook does not see the package's code"
    points = sorted({1, 2, 3, *range(4, imports + 1, max(1, imports // 12)), imports})
    wrong = []
    for at in points:
        done = child(at)
        if (done.returncode, done.stderr) != (130, INTERRUPTED):
            wrong.append(f"import {at}/{imports}: status {done.returncode}, {done.stderr[-800:]}")
    assert not wrong, "\n".join(wrong)
