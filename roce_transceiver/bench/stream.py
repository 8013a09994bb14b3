"""``roce-transceiver bench stream --nic socket``: the socket NIC across a veth pair.

In a network namespace joined to us by a veth pair (root, iproute2), a sender replays HSB
frames (UC WRITE Only packets of ``payload`` bytes plus the end of frame) with sendmmsg as
fast as the kernel takes them. Measured in the same run:
- floor: a plain AF_PACKET receiver (recvmmsg batches, counting, nothing else) on our end;
- the transceiver: socket NIC in packet mode (receiving from its mmap ring: socket.rx_path
  auto, a one-way UC stream), frames handler, a host that releases each frame as it comes:
  frames/s, Gb/s of frame data, packets/s, and what it dropped;
- round trip: the ``qpu`` peer (echo, one at a time) against the transceiver's echo loop
  (recvmmsg, auto's choice for a loop that answers; and once more through the mmap ring,
  whose 1 ms block timeout a lone request waits for) and against a raw-socket echo (ends
  swapped, ICRC recomputed) on the same pair.
Ratios are printed; ``--json`` writes everything.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver import _core, netns
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.config import load_config
from roce_transceiver.netinfo import interface_mac
from roce_transceiver.peers.sensor import Sensor
from roce_transceiver.transceiver import Transceiver

__all__ = ["run"]

PY = sys.executable
# Where the programs this starts run: not a source tree, whose package has no _core.
OUTSIDE = tempfile.gettempdir()
PAGE = 1 << 20


def _config(v: netns.VethNamespace, peer_mac: str, handler: str, slot: int) -> dict[str, Any]:
    return {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "packet", "interface": v.ours, "batch": 64},
        "local": {"mac": interface_mac(v.ours), "ip": "10.79.0.1"},
        "peer": {"mac": peer_mac, "ip": "10.79.0.2"},
        "qp": {"transport": "UC"},
        "handler": handler,
        "frames": {"pages": 8, "page_bytes": PAGE, "metadata": True},
        "queues": {"rx_depth": 4096, "slot_bytes": slot, "completion_depth": 1024},
    }


def _bound(interface: str) -> socket.socket:
    """An AF_PACKET socket listening on ``interface`` from now on (root)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    # The socket NIC's receive buffer, so the floor is held to the same terms.
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 64 << 20)
    s.bind((interface, 0))
    return s


def _blast(
    v: netns.VethNamespace, packets: list[bytes], repeat: int, path: Path
) -> subprocess.Popen:
    """The sender, inside the namespace: packets saved to a file, replayed by packet_blast."""
    path.write_bytes(b"".join(len(p).to_bytes(4, "little") + p for p in packets))
    code = (
        "import sys, json\n"
        "from roce_transceiver import _core\n"
        "data = open(sys.argv[1], 'rb').read(); frames = []; i = 0\n"
        "while i < len(data):\n"
        "    n = int.from_bytes(data[i:i+4], 'little'); frames.append(data[i+4:i+4+n]); i += 4+n\n"
        "print(json.dumps(_core.packet_blast(sys.argv[2], frames, int(sys.argv[3]), 64)))\n"
    )
    return subprocess.Popen(
        v.exec(PY, "-c", code, str(path), v.theirs, str(repeat)),
        cwd=OUTSIDE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _sent(proc: subprocess.Popen) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"sender failed: {err.strip()}")
    return json.loads(out)


def _gbps(nbytes: float, seconds: float) -> float:
    return nbytes * 8 / seconds / 1e9 if seconds > 0 else 0.0


def run(
    frames: int = 400,
    payload: int = 4096,
    echo_count: int = 2000,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    reason = netns.why_not()
    if reason:
        raise RuntimeError(f"bench stream: {reason}")
    result: dict[str, Any] = {"benchmark": "stream", "payload": payload, "frames": frames}
    with netns.veth_namespace(mtu=9000) as v:
        peer_mac = netns.run_cmd(*v.exec("cat", f"/sys/class/net/{v.theirs}/address")).strip()
        slot = 8192 if payload > 1900 else 2048
        cfg = _config(v, peer_mac, "frames", slot)
        with Transceiver(cfg) as probe:
            sensor = Sensor.for_config(probe.config, payload=payload)
        one_round = [p for s in sensor.frames(8, PAGE - 128) for p in s.packets]
        repeat = max(1, frames // 8)
        total = len(one_round) * repeat
        tmp = Path(f"/tmp/rt-stream-{v.namespace}.bin")
        print(
            f"sending {repeat * 8} frames of {PAGE - 128} B in {payload}-byte packets "
            f"({total} packets) across {v.ours}<->{v.theirs}",
            file=out,
        )

        # Floor: a receiver that only counts.
        sink: dict[str, Any] = {}
        with _bound(v.ours) as rx:  # listening before the sender starts
            t = threading.Thread(
                target=lambda: sink.update(_core.packet_sink(rx.fileno(), total, 2.0, 64)),
                daemon=True,
            )
            t.start()
            floor_sent = _sent(_blast(v, one_round, repeat, tmp))
            t.join(timeout=60)

        # The transceiver, releasing every frame as it comes.
        with Transceiver(cfg) as tr:
            got = {"frames": 0, "bytes": 0, "ok": 0, "first": 0.0, "last": 0.0}
            proc = _blast(v, one_round, repeat, tmp)
            deadline = time.monotonic() + 120
            idle_since = time.monotonic()
            while time.monotonic() < deadline and time.monotonic() - idle_since < 2.0:
                for f in tr.frames(timeout=0.05):
                    now = time.perf_counter()
                    got["first"] = got["first"] or now
                    got["last"] = now
                    got["frames"] += 1
                    got["bytes"] += f.bytes
                    got["ok"] += f.ok
                    f.release()
                    idle_since = time.monotonic()
                if proc.poll() is not None and got["frames"] >= repeat * 8:
                    break
            ours_sent = _sent(proc)
        stats, rx_path = tr.stats(), tr.nic_info()["rx_path"]
        tmp.unlink(missing_ok=True)
        secs = got["last"] - got["first"]
        ours = {
            "frames": got["frames"],
            "frames_ok": got["ok"],
            "frames_per_s": got["frames"] / secs if secs > 0 else 0.0,
            "gbps": _gbps(got["bytes"], secs),
            "packets_per_s": stats["nic_rx_frames"] / secs if secs > 0 else 0.0,
            "frames_dropped": stats["frames_dropped"],
            "ring_drops": stats["ring_drops"],
            "kernel_drops": stats["nic_kernel_drops"],
            "rx_path": rx_path,
            "sent": ours_sent,
        }
        floor = {
            "packets": sink.get("frames", 0),
            "packets_per_s": sink["frames"] / sink["seconds"] if sink.get("seconds") else 0.0,
            "gbps": _gbps(sink.get("bytes", 0), sink.get("seconds", 0.0)),
            "sent": floor_sent,
        }
        result |= {"transceiver": ours, "af_packet_floor": floor}

        # Round trips: the same peer against our echo loop and against a raw-socket echo.
        rt: dict[str, Any] = {}
        peer_cfg = Path(f"/tmp/rt-stream-{v.namespace}.yaml")
        import yaml

        echo_cfg = _config(v, peer_mac, "echo", 2048)
        peer_cfg.write_text(yaml.safe_dump(echo_cfg))
        peer = v.exec(
            PY,
            "-m",
            "roce_transceiver",
            "peer",
            "qpu",
            "--config",
            str(peer_cfg),
            "--interface",
            v.theirs,
            "--count",
            str(echo_count),
            "--json",
        )
        # The echo loop receives with recvmmsg (socket.rx_path auto: it answers every frame);
        # once more through the mmap ring, whose blocks hold a lone request up to 1 ms.
        for name, rx_path in (("transceiver", "auto"), ("transceiver_mmap_ring", "mmap")):
            with Transceiver({**echo_cfg, "socket": {**echo_cfg["socket"], "rx_path": rx_path}}):
                done = subprocess.run(
                    peer, capture_output=True, text=True, timeout=300, check=False, cwd=OUTSIDE
                )
                rt[name] = json.loads(done.stdout)["rtt_us"] if done.stdout else None
        reflect: dict[str, Any] = {}
        qpn = load_config(echo_cfg)["qp"]["peer_qpn"]
        with _bound(v.ours) as echo:  # answering before the peer starts
            t = threading.Thread(
                target=lambda: reflect.update(
                    _core.packet_reflect(echo.fileno(), echo_count, qpn, 5.0)
                ),
                daemon=True,
            )
            t.start()
            done = subprocess.run(
                peer, capture_output=True, text=True, timeout=300, check=False, cwd=OUTSIDE
            )
            t.join(timeout=30)
        rt["raw_socket_echo"] = json.loads(done.stdout)["rtt_us"] if done.stdout else None
        peer_cfg.unlink(missing_ok=True)
        result["roundtrip_us"] = rt

    _print(result, out)
    result["machine"] = machine_info()
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _print(r: dict[str, Any], out: TextIO) -> None:
    ours, floor = r["transceiver"], r["af_packet_floor"]
    print(f"{'receiver':<26} {'packets/s':>12} {'Gb/s':>8} {'frames/s':>10}", file=out)
    print(
        f"{'AF_PACKET count only':<26} {floor['packets_per_s']:>12,.0f} "
        f"{floor['gbps']:>8.2f} {'-':>10}",
        file=out,
    )
    print(
        f"{'transceiver (frames, ' + ours['rx_path'] + ')':<26} {ours['packets_per_s']:>12,.0f} "
        f"{ours['gbps']:>8.2f} {ours['frames_per_s']:>10,.1f}",
        file=out,
    )
    if floor["packets_per_s"]:
        print(
            f"  packets/s ratio, transceiver / floor: "
            f"{ours['packets_per_s'] / floor['packets_per_s']:.2f}",
            file=out,
        )
    print(
        f"  frames {ours['frames']} ({ours['frames_ok']} ok), dropped "
        f"{ours['frames_dropped']}, ring drops {ours['ring_drops']}, "
        f"kernel drops {ours['kernel_drops']}",
        file=out,
    )
    for name, p in r["roundtrip_us"].items():
        if p:
            print(
                f"round trip, {name:<21} p50 {p['p50']:.1f} us, p99 {p['p99']:.1f} us "
                f"({p['count']} requests)",
                file=out,
            )
    a, b = r["roundtrip_us"].get("transceiver"), r["roundtrip_us"].get("raw_socket_echo")
    if a and b:
        print(f"  p50 transceiver / raw socket echo: {a['p50'] / b['p50']:.2f}", file=out)
