"""The transceiver's configuration: one schema for every key.

A configuration comes from a dict, a YAML file (the mapping itself, or its
``transceiver:`` section) and dotted overrides (``{"queues.rx_depth": 64}``).
Every key has a default; unknown keys, wrong types and out-of-range values
raise :class:`~roce_transceiver.schema.ConfigError` naming the key, and the
file and line for YAML.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Policies that live with their owners, importable from here as before: the custom.params
# packer, cuda.warps' auto, socket.rx_path's auto.
from roce_transceiver import _core
from roce_transceiver.cuda_warps import AUTO_FRAMES_WARPS as AUTO_FRAMES_WARPS
from roce_transceiver.cuda_warps import cuda_warps as cuda_warps
from roce_transceiver.custom_params import MAX_CUSTOM_PARAMS as MAX_CUSTOM_PARAMS
from roce_transceiver.custom_params import ParamsError as ParamsError
from roce_transceiver.custom_params import check as _custom_params
from roce_transceiver.custom_params import custom_params_bytes as custom_params_bytes
from roce_transceiver.custom_params import pack_params as pack_params
from roce_transceiver.doca import sdk_path as doca_sdk_path
from roce_transceiver.hsb import DEFAULT_PAGE_BITS
from roce_transceiver.schema import (
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_FILE_BYTES,
    ConfigError,
    Field,
    Section,
    given_by_flag,
    leaves,
    line_of,
    load_yaml_with_lines,
    quote,
    render_markdown,
    validate,
    with_overrides,
)
from roce_transceiver.socket_rx import rx_path as rx_path

__all__ = [
    "BY_PYTHON",
    "COMPUTED",
    "NOT_IN_ENGINE",
    "NULL_TO_CORE",
    "SCHEMA",
    "TO_CORE",
    "ConfigError",
    "ParamsError",
    "core_config",
    "load_config",
    "pack_params",
    "reference_markdown",
    "rx_path",
]


#: The bounds of the core's fixed arrays (queues, registered regions, frame pages): the
#: schema's maxima for them, defined once, in C++.
_LIMITS: dict[str, int] = dict(_core.LIMITS)


def _power_of_two(v: int) -> str | None:
    """a power of two."""
    return None if v & (v - 1) == 0 else "must be a power of two"


def _multiple_of_64(v: int) -> str | None:
    """a multiple of 64."""
    return None if v % 64 == 0 else "must be a multiple of 64"


#: The smallest frames.slice_bytes (rt/engine/frames.h, kMinSliceBytes): each slice is a
#: completion record the host takes.
MIN_SLICE_BYTES = 256


def _slice_bytes(v: int) -> str | None:
    """0 (no slices), or a multiple of 64 of at least 256."""
    if v == 0 or (v % 64 == 0 and v >= MIN_SLICE_BYTES):
        return None
    return f"must be 0 (no slices) or a multiple of 64 of at least {MIN_SLICE_BYTES}"


def _mac(v: str) -> str | None:
    """a MAC address, aa:bb:cc:dd:ee:ff, or auto (socket NIC, packet mode)."""
    if v == "auto":
        return None
    parts = v.replace("-", ":").split(":")
    ok = len(parts) == 6 and all(len(p) == 2 for p in parts)
    try:
        bytes(int(p, 16) for p in parts)
    except ValueError:
        ok = False
    return None if ok else "not a MAC address (aa:bb:cc:dd:ee:ff) nor auto"


def _ip(v: str) -> str | None:
    """an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return "not an IPv4 or IPv6 address"
    return None


def _ipv4(v: str) -> str | None:
    try:
        if ipaddress.ip_address(v).version == 4:
            return None
    except ValueError:
        pass
    return "must be an IPv4 address (a bridge's control plane is IPv4)"


def _entry_name(v: str) -> str | None:
    if re.fullmatch(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*", v) is None:
        return "not a C++ function name"
    return None


def _regions(v: list[Any]) -> str | None:
    if len(v) > _LIMITS["regions"]:
        return f"at most {_LIMITS['regions']} regions"
    rkeys = set()
    for i, r in enumerate(v):
        if not isinstance(r, Mapping) or set(r) != {"va", "rkey", "length"}:
            return f"entry {i}: needs exactly the keys va, rkey, length"
        for k, hi in (("va", 2**64 - 1), ("rkey", 2**32 - 1), ("length", 2**32 - 1)):
            if not isinstance(r[k], int) or isinstance(r[k], bool) or not 0 <= r[k] <= hi:
                return f"entry {i}: {k} must be an integer from 0 to {hi:#x}"
        if r["length"] == 0:
            return f"entry {i}: length must be > 0"
        if r["va"] + r["length"] > 2**64:
            return f"entry {i}: va + length runs past the end of the 64-bit address space"
        if r["rkey"] in rkeys:
            return f"entry {i}: rkey {r['rkey']:#x} is used twice"
        rkeys.add(r["rkey"])
    return None


# What the reference's "allowed" column says: the bound is the core's (_core.LIMITS).
_regions.__doc__ = (
    f"at most {_LIMITS['regions']} entries {{va, rkey, length}}, rkeys distinct, length > 0"
)


def allowed_cores() -> set[int]:
    """The cores this process may run on (its affinity mask: taskset, a container's cpuset)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def _ranges(cores: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5'."""
    out: list[str] = []
    for c in sorted(cores):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def _usable_core(v: int) -> str | None:
    """a core this process may run on (its affinity mask)."""
    allowed = allowed_cores()
    if v in allowed:
        return None
    return f"not a core this process may run on (cores {_ranges(allowed)})"


_DEPTH = {"minimum": 2, "maximum": 65536, "check": _power_of_two}

SCHEMA = Section(
    "The transceiver: queues, executor, NIC and handler.",
    {
        "executor": Field(
            str, "auto", "who runs the persistent loop", choices=("auto", "cpu", "cuda")
        ),
        "nic": Field(
            str,
            "loopback",
            "what the queues are joined to: the in-memory far end, Linux (socket NIC), or a "
            "ConnectX through DOCA GPUNetIO (doca: not built yet, see docs/deployment.md)",
            choices=("loopback", "socket", "doca"),
        ),
        "doca": Section(
            "A ConnectX through DOCA GPUNetIO (nic: doca); validated everywhere, runs nowhere yet.",
            {
                "device": Field(str, "mlx5_0", "the RDMA device (ibv_devices lists them)"),
                "gpu_pci": Field(
                    str,
                    None,
                    "PCI address of the GPU (e.g. 0000:06:00.0); null: the one the executor uses",
                    nullable=True,
                ),
                "nic_handler": Field(
                    str,
                    "auto",
                    "who rings the doorbell (GPUNetIO's NIC handler): a CPU proxy thread, the "
                    "GPU (doorbell record and UAR), or the GPU by BlueFlame (the WQE into the "
                    "doorbell window); auto: gpu_sm_db. Verbs mode's software ConnectX serves "
                    "each (docs/verbs_mode.md)",
                    choices=("auto", "cpu_proxy", "gpu_sm_db", "gpu_sm_bf"),
                ),
                "gid_index": Field(
                    int, 3, "GID table index (RoCEv2 over IPv4)", minimum=0, maximum=255
                ),
                "mtu": Field(int, 4096, "path MTU", choices=(1024, 2048, 4096)),
            },
        ),
        "socket": Section(
            "The socket NIC (nic: socket; docs/socket_nic.md).",
            {
                "mode": Field(
                    str,
                    "packet",
                    "packet: AF_PACKET on an interface, whole frames (root); udp: port 4791",
                    choices=("packet", "udp"),
                ),
                "interface": Field(str, None, "packet mode: the interface to bind", nullable=True),
                "capture": Field(
                    str, None, "pcap file of every frame in and out; null: none", nullable=True
                ),
                "batch": Field(int, 32, "frames per recvmmsg / sendmmsg", minimum=1, maximum=1024),
                "rx_path": Field(
                    str,
                    "auto",
                    "how packet mode receives: mmap, from a ring shared with the kernel "
                    "(TPACKET_V3: no syscall, no batch copy; a frame is ours once its block is "
                    "full, or at most 1 ms later); recvmmsg, a copy per batch (a lone frame at "
                    "once); auto: the ring for a one-way UC stream (handler frames or sink), "
                    "recvmmsg for traffic that answers or is answered (docs/socket_nic.md)",
                    choices=("auto", "mmap", "recvmmsg"),
                ),
            },
        ),
        "cuda": Section(
            "The cuda executor (docs/gpu_sharing.md).",
            {
                "epoch_us": Field(
                    int,
                    10000,
                    "the persistent kernel returns and is relaunched this often, so that kernel "
                    "loads elsewhere in the process (cupy, cuBLAS at first use) go through; "
                    "0: one launch for the run (lowest jitter; a kernel load anywhere in the "
                    "process then waits until stop())",
                    minimum=0,
                    maximum=10_000_000,
                ),
                "epochs_in_flight": Field(
                    int,
                    2,
                    "epoch launches queued at once: 2 has the next epoch start as the running "
                    "one ends (a gap of microseconds); a load then goes through once the "
                    "queued epoch ends (docs/gpu_sharing.md)",
                    minimum=1,
                    maximum=4,
                ),
                "warps": Field(
                    int,
                    0,
                    "warps of the block that serves the queue: 1, one warp that takes a frame "
                    "at a time (requests: the express path); 2-16, a crew that takes batches "
                    "of frames, each classified and placed by its own warp (requests with the "
                    "express path: the ones waiting in express batches, a request a warp, a "
                    "lone one at once; docs/ARCHITECTURE.md, the batch steps); 0: auto, 8 for "
                    "the frames handler, else 1",
                    minimum=0,
                    maximum=16,
                ),
                "device": Field(
                    int,
                    0,
                    "the GPU the loop runs on and keeps its memory on, as CUDA numbers the "
                    "visible ones (CUDA_VISIBLE_DEVICES); one transceiver per GPU in a graph",
                    minimum=0,
                    maximum=63,
                ),
            },
        ),
        "far_end": Field(
            str,
            "cpu",
            "loopback: where the far end of the wire runs (gpu needs executor cuda)",
            choices=("cpu", "gpu"),
        ),
        "handler": Field(
            str,
            "echo",
            "what runs on each message (frames: HSB frame streams into pages; custom: your "
            "own function, custom.*)",
            choices=("echo", "sink", "qec", "frames", "custom"),
        ),
        "custom": Section(
            "The custom handler: your own function, compiled at start (docs/handlers.md, "
            '"Your own handler"); cpu executor only for now.',
            {
                "source": Field(
                    str,
                    None,
                    "the handler's CUDA C++: a file (in a YAML file relative to the file's "
                    "folder, else to the working directory), or the source itself when the "
                    "text holds a newline",
                    nullable=True,
                ),
                "entry": Field(
                    str,
                    "handle",
                    "the function called per message: RT_HD int ENTRY(const rt::CustomCall&)",
                    check=_entry_name,
                ),
                "state_bytes": Field(
                    int,
                    0,
                    "memory each queue keeps from call to call (CustomCall::state), zeroed at "
                    "start",
                    minimum=0,
                    maximum=1 << 20,
                ),
                "params": Field(
                    (list, str, dict, bytes),
                    "",
                    "constant data for every call (CustomCall::params): byte values [3], hex "
                    "digits '03', a mapping {threshold: 1000, gains: [0.5, 2.0]} packed as a C "
                    "struct of 4-byte little-endian members (int32, float32, arrays of them), "
                    "or bytes from Python",
                    check=_custom_params,
                ),
            },
        ),
        "frames": Section(
            "The frames handler: a ring of pages the sensor writes frames into (docs/frames.md).",
            {
                "pages": Field(int, 8, "frame buffers", minimum=1, maximum=_LIMITS["pages"]),
                "page_bytes": Field(
                    int,
                    1 << 20,
                    "bytes per frame buffer",
                    minimum=256,
                    maximum=1 << 30,
                    check=_multiple_of_64,
                ),
                "metadata": Field(
                    bool, True, "the end-of-frame packet carries the 128-byte metadata record"
                ),
                "check_crc": Field(
                    bool,
                    True,
                    "with metadata: a frame is ok only if the record's CRC matches the page "
                    "(false for senders that leave it 0, as HSB's emulator does)",
                ),
                "slice_bytes": Field(
                    int,
                    None,
                    "hand each frame over in slices of this many bytes (at most page_bytes) "
                    "too, each as the frame's packets cover it, before the frame "
                    "(docs/frames.md, Slices); 0 or null: no slices",
                    nullable=True,
                    minimum=0,
                    maximum=1 << 30,
                    check=_slice_bytes,
                ),
                "va": Field(
                    int,
                    0x1_0000_0000,
                    "address the sensor writes page 0 at",
                    minimum=0,
                    maximum=2**64 - 1,
                ),
                "rkey": Field(int, 0x46524D53, "the pages' rkey", minimum=0, maximum=2**32 - 1),
            },
        ),
        "hsb": Section(
            "A Holoscan Sensor Bridge to program over its control plane, so that it streams "
            "into the frames handler (docs/hsb.md; listen --hsb, RoceTransceiverOp).",
            {
                "bridge": Field(
                    str,
                    None,
                    "the bridge's IPv4 address; null: no bridge is programmed",
                    nullable=True,
                    check=_ipv4,
                ),
                "sensor": Field(
                    int, 0, "which of its sensors (data channels) streams", minimum=0, maximum=31
                ),
                "data_plane": Field(
                    int,
                    None,
                    "its Ethernet port; null: the one its announcement names (0 without)",
                    nullable=True,
                    minimum=0,
                    maximum=255,
                ),
                "sifs_per_sensor": Field(
                    int,
                    None,
                    "sensor interfaces per sensor (spaces the sensors' registers); null: by "
                    "the board its announcement names (hololink's table; 2 when unknown)",
                    nullable=True,
                    minimum=1,
                    maximum=32,
                ),
                "control_port": Field(
                    int, 8192, "its control (ECB) UDP port", minimum=1, maximum=65535
                ),
                "enumerate": Field(
                    bool,
                    True,
                    "wait for its announcement before programming it (learns its MAC, data "
                    "plane and board); false: program it at once",
                ),
                "enumeration_port": Field(
                    int, 12267, "UDP port the announcements come to", minimum=1, maximum=65535
                ),
                "enumeration_timeout_s": Field(
                    float, 3.0, "how long to wait for its announcement", minimum=0.01, maximum=60.0
                ),
                "timeout_s": Field(
                    float,
                    0.25,
                    "how long one control request waits for its reply",
                    minimum=0.001,
                    maximum=60.0,
                ),
                "retries": Field(
                    int,
                    4,
                    "times a request is sent again after a silence",
                    minimum=0,
                    maximum=100,
                ),
                "sequence_check": Field(
                    bool, True, "ask the bridge to refuse requests out of sequence"
                ),
                "watchdog_s": Field(
                    float,
                    1.0,
                    "no frame on a queue for this long: read its sensor's registers (taken over? "
                    "reset?)",
                    minimum=0.05,
                    maximum=60.0,
                ),
                "reconnect": Field(
                    bool,
                    True,
                    "a bridge that resets (goes silent, or forgets its registers) is waited for, "
                    "checked to be the same board, and programmed again; false: the stream ends",
                ),
                "reconnect_timeout_s": Field(
                    float,
                    30.0,
                    "how long to wait for a lost bridge to come back",
                    minimum=0.1,
                    maximum=3600.0,
                ),
                "page_bits": Field(
                    int,
                    None,
                    "bits of the end-of-frame immediate that name the page: 12 (HSB IP "
                    "0x2603 and later), 8 (before); null: by the HSB IP version the bridge "
                    "announces (listen --hsb), else 12",
                    choices=(8, 12),
                    nullable=True,
                ),
                "take_over": Field(
                    bool,
                    False,
                    "program the sensor even when its registers send to another host (that "
                    "host's stream ends); false: refuse, naming the host",
                ),
                "packet_bytes": Field(
                    int,
                    None,
                    "payload bytes per packet the bridge sends (a multiple of 128); null: the "
                    "largest the MTU and queues.slot_bytes take",
                    nullable=True,
                    minimum=128,
                    maximum=65408,
                ),
                "frame_bytes": Field(
                    int,
                    None,
                    "bytes per frame (the sensor's frame size); null: the largest a page holds",
                    nullable=True,
                    minimum=1,
                    maximum=1 << 30,
                ),
                "frame_rate": Field(
                    float,
                    None,
                    "frames per second the sensor sends, for the link budget check; null: "
                    "not checked",
                    nullable=True,
                    minimum=0.001,
                    maximum=1e6,
                ),
                "link_gbps": Field(
                    float,
                    None,
                    "the link's speed for the budget; null: the interface's (sysfs)",
                    nullable=True,
                    minimum=0.001,
                    maximum=1e4,
                ),
            },
        ),
        "qec": Section(
            "The qec handler.",
            {"distance": Field(int, 3, "rotated surface code distance", choices=(3, 5))},
        ),
        "qp": Section(
            "Our queue pair.",
            {
                "transport": Field(str, "RC", "RC (ACK/NAK) or UC (no ACKs)", choices=("RC", "UC")),
                "qpn": Field(int, 0x11, "our QP number", minimum=1, maximum=0xFFFFFF),
                "peer_qpn": Field(int, 0x12, "the peer's QP number", minimum=1, maximum=0xFFFFFF),
                "pkey": Field(int, 0xFFFF, "partition key", minimum=0, maximum=0xFFFF),
                "rx_psn": Field(
                    int, 0, "first PSN expected from the peer", minimum=0, maximum=0xFFFFFF
                ),
                "tx_psn": Field(int, 0, "first PSN we send", minimum=0, maximum=0xFFFFFF),
                "retransmit": Field(
                    bool,
                    False,
                    "RC: keep every packet we send (replies, host sends) until the peer "
                    "acknowledges it, and send it again after a NAK, an RNR NAK's timer or "
                    "ack_timeout_us (an RC requester; docs/reliable_replies.md); false: sent "
                    "once, the peer's ACKs only counted. UC ignores it",
                ),
                "window": Field(
                    int,
                    64,
                    "retransmit: packets outstanding at most, a power of two; a request whose "
                    "reply finds the window full is refused with an RNR NAK",
                    minimum=1,
                    maximum=4096,
                    check=_power_of_two,
                ),
                "ack_timeout_us": Field(
                    int,
                    1000,
                    "retransmit: no acknowledgement of the oldest packet within this: "
                    "everything from it goes again",
                    minimum=1,
                    maximum=10_000_000,
                ),
                "retry_count": Field(
                    int,
                    7,
                    "retransmit: timeouts and sequence NAKs in a row (no progress between) "
                    "before the requester gives up (rc_errors)",
                    minimum=0,
                    maximum=7,
                ),
                "rnr_retry": Field(
                    int,
                    7,
                    "retransmit: RNR NAKs in a row before the requester gives up; 7: for ever",
                    minimum=0,
                    maximum=7,
                ),
                "rnr_timer": Field(
                    int,
                    1,
                    "retransmit: the timer our RNR NAKs ask the peer to wait, IBA table 45's "
                    "code (1: 10 us, 14: 1.28 ms, 0: 655 ms)",
                    minimum=0,
                    maximum=31,
                ),
            },
        ),
        "local": Section(
            "Our addresses.",
            {
                "mac": Field(
                    str, "02:00:00:00:00:01", "our MAC; auto: the interface's", check=_mac
                ),
                "ip": Field(str, "10.0.0.1", "our IPv4 or IPv6 address", check=_ip),
                "udp_sport": Field(
                    int, 49152, "UDP source port of what we send", minimum=1, maximum=65535
                ),
            },
        ),
        "peer": Section(
            "The peer's addresses.",
            {
                "mac": Field(
                    str,
                    "02:00:00:00:00:02",
                    "the peer's MAC; auto: from the kernel's neighbour table (IPv4)",
                    check=_mac,
                ),
                "ip": Field(str, "10.0.0.2", "the peer's IP (same version as local.ip)", check=_ip),
            },
        ),
        "vlan": Field(
            int,
            None,
            "802.1Q TCI to tag frames with (not in socket.mode udp); null: untagged",
            nullable=True,
            minimum=0,
            maximum=0xFFFF,
        ),
        "queues": Section(
            "The queues (GPUNetIO-shaped rx/tx ring pairs) and their ring sizes.",
            {
                "count": Field(
                    int,
                    1,
                    "rx/tx ring pairs, each served by its own engine (cuda: a block of "
                    "cuda.warps warps on its own SM; cpu: a thread); the NIC steers each packet "
                    "to one (queues.steer)",
                    minimum=1,
                    maximum=_LIMITS["queues"],
                ),
                "steer": Field(
                    str,
                    "qp",
                    "how a packet picks its queue: qp, queue i is QP qp.qpn + i (its peer "
                    "qp.peer_qpn + i; a sensor stream each); udp_sport, every queue is QP "
                    "qp.qpn and a packet goes to queue (UDP source port mod count)",
                    choices=("qp", "udp_sport"),
                ),
                "rx_depth": Field(int, 256, "rx ring slots, per queue", **_DEPTH),
                "tx_depth": Field(int, 256, "tx ring slots, per queue", **_DEPTH),
                "slot_bytes": Field(
                    int,
                    2048,
                    "bytes per packet slot",
                    minimum=128,
                    maximum=65536,
                    check=_multiple_of_64,
                ),
                "batch": Field(
                    int,
                    32,
                    (
                        "the batch depth: rx packets a loop pass takes at most, on every "
                        "executor (an express batch of requests: at most 16; the frames "
                        "handler: a packet a thread of the crew, so 32 x "
                        "cuda.warps fills it; its records, 208 bytes a packet, must fit "
                        "shared memory: on an H200 about 800 at the default slot size, and a "
                        "depth that does not fit is refused at start naming the most that does)"
                    ),
                    minimum=1,
                    maximum=1024,
                ),
                "host_tx_depth": Field(int, 64, "slots for messages the host sends", **_DEPTH),
                "completion_depth": Field(
                    int, 1024, "completion records the host has not read yet", **_DEPTH
                ),
                "completion_slot_bytes": Field(
                    int,
                    1024,
                    "bytes per completion record (request and reply are truncated to fit)",
                    minimum=128,
                    maximum=65536,
                    check=_multiple_of_64,
                ),
                "completion_batch": Field(
                    int,
                    128,
                    "completion records published to the host together, one fence across the "
                    "bus for them: a record is seen once this many are written or the loop "
                    "idles; at most half of completion_depth is used (1: each record at once)",
                    minimum=1,
                    maximum=65536,
                ),
                "max_message_bytes": Field(
                    int, 65536, "largest multi-packet SEND assembled", minimum=64, maximum=1 << 24
                ),
                "settle_passes": Field(
                    int,
                    8,
                    "idle loop passes in a row before an engine settles: gives its rx slots "
                    "back and publishes its counters and completion records (fewer: the host "
                    "sees them sooner after a burst; more: fewer writes across the bus while "
                    "traffic pauses)",
                    minimum=1,
                    maximum=1 << 16,
                ),
            },
        ),
        "regions": Field(
            list, [], "memory regions RDMA WRITEs may land in: [{va, rkey, length}]", check=_regions
        ),
        "check_icrc": Field(bool, True, "drop frames whose ICRC is wrong"),
        "express": Field(
            bool,
            True,
            "take SEND Onlys and WRITE Onlys with Immediate that match the last accepted "
            "header the short way, RC ACKs included (same results)",
        ),
        "completions": Field(
            bool, True, "record each message for the host (receive()); off for benchmarks"
        ),
        "cpu_core": Field(
            int,
            None,
            "pin the cpu executor's thread to this core (refused with the cuda executor); "
            "start() fails naming the core if the pinning does; null: no pinning",
            nullable=True,
            minimum=0,
            check=_usable_core,
        ),
        "stop_timeout_s": Field(
            float,
            5.0,
            "how long stop() waits for the loop before it reports it stuck",
            minimum=0.1,
            maximum=600.0,
        ),
    },
)


def _resolve_source(
    cfg: dict[str, Any], data: Mapping[str, Any], source: str | None, base_dir: Path
) -> None:
    """A ``custom.source`` file read from ``base_dir`` (a YAML file's folder), or from the
    working directory when a command-line flag gave it (the folder a command line's paths are
    relative to): made absolute, so that it names the same file wherever the configuration
    goes next (Holoscan's copy of it is written elsewhere); with ``handler: custom``, a file
    that is not there is an error naming the key and its line (or flag)."""
    given = cfg["custom"]["source"]
    if given is None or "\n" in given:
        return
    flag = given_by_flag(data, "custom.source")
    path = Path(os.path.abspath((Path.cwd() if flag else base_dir) / given))  # absolute: itself
    cfg["custom"]["source"] = str(path)
    if cfg["handler"] == "custom" and not path.is_file():
        what = "is not a file" if path.exists() else "no such file"
        rule = "the working directory" if flag else "the folder of the YAML file that gives it"
        raise ConfigError(
            f"{quote(given)}: {what} ({path}: a relative path is read from {rule})",
            key="custom.source",
            source=source,
            line=line_of(data, "custom.source"),
        )


def load_config(
    source: Mapping[str, Any] | str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    origin: str | None = None,
    prefix: str = "",
    base_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Validated configuration with every default filled in.

    ``source`` is a mapping, a YAML path or None (all defaults). A YAML file
    may hold the keys at its top level or under ``transceiver:``.
    ``overrides`` are dotted keys applied on top (CLI flags). ``origin`` and ``prefix``
    name a mapping that is a section of a bigger file, for the error messages;
    ``base_dir`` is that file's folder, which a relative ``custom.source`` is read from
    (for a YAML path: its folder; for a mapping without it: the working directory, as the
    compiler reads it). An override's ``custom.source`` is the working directory's, and an
    error in an override names the override (schema.with_overrides), not the file's line.
    """
    if isinstance(source, (str, Path)):
        origin = str(source)
        if base_dir is None:
            base_dir = Path(source).parent
        data: Mapping[str, Any] = load_yaml_with_lines(source)
        if "transceiver" in data:
            section = data["transceiver"]
            if not isinstance(section, Mapping):
                raise ConfigError(
                    "must be a mapping",
                    key="transceiver",
                    source=origin,
                    line=getattr(data, "lines", {}).get("transceiver"),
                )
            data = section
    else:
        data = source or {}
    if overrides:
        data = with_overrides(data, overrides)
    cfg = validate(SCHEMA, data, source=origin, prefix=prefix)
    try:
        _check_together(cfg, data, origin)
        if base_dir is not None:
            _resolve_source(cfg, data, origin, Path(base_dir))
    except ConfigError as e:
        if not prefix:
            raise
        message = str(e).split(f"{e.key}: ", 1)[-1]
        raise ConfigError(message, key=prefix + e.key, source=e.source, line=e.line) from None
    return cfg


def _check_together(cfg: dict[str, Any], data: Mapping[str, Any], source: str | None) -> None:
    """Rules that involve more than one key."""
    if cfg["far_end"] == "gpu" and cfg["executor"] == "cpu":
        raise ConfigError(
            "far_end 'gpu' needs executor 'cuda' (or 'auto' on a GPU machine)",
            key="far_end",
            source=source,
            line=line_of(data, "far_end"),
        )

    def fail(message: str, key: str) -> ConfigError:
        return ConfigError(message, key=key, source=source, line=line_of(data, key))

    if cfg["handler"] == "frames":
        if not cfg["completions"]:
            raise fail("the frames handler hands frames over as completions: on", "completions")
        if len(cfg["regions"]) >= _LIMITS["regions"]:
            raise fail(
                f"the frames' pages are a region of their own: at most "
                f"{_LIMITS['regions'] - 1} regions beside them",
                "regions",
            )
        if any(r["rkey"] == cfg["frames"]["rkey"] for r in cfg["regions"]):
            raise fail("the frames' rkey is used by a region too", "frames.rkey")
        if cfg["frames"]["pages"] * cfg["frames"]["page_bytes"] >= 1 << 32:
            raise fail("pages x page_bytes must stay under 4 GiB (one region)", "frames.page_bytes")
        if (cfg["frames"]["slice_bytes"] or 0) > cfg["frames"]["page_bytes"]:
            raise fail(
                f"{cfg['frames']['slice_bytes']} bytes: a slice is a part of a page "
                f"(frames.page_bytes {cfg['frames']['page_bytes']})",
                "frames.slice_bytes",
            )
        if cfg["frames"]["va"] + cfg["frames"]["pages"] * cfg["frames"]["page_bytes"] > 2**64:
            raise fail("the pages run past the end of the 64-bit address space", "frames.va")
    if cfg["handler"] == "custom" and cfg["custom"]["source"] is None:
        raise fail("handler 'custom' needs its source (a file or the text)", "custom.source")
    params = cfg["custom"]["params"]
    if isinstance(params, Mapping):
        try:
            n = len(pack_params(params))
        except ParamsError as e:
            line = line_of(data, f"custom.params.{e.member.split('[')[0]}")
            raise ConfigError(
                e.message, key=f"custom.params.{e.member}", source=source, line=line
            ) from None
        if n > MAX_CUSTOM_PARAMS:
            raise fail(f"{n} bytes packed, at most {MAX_CUSTOM_PARAMS}", "custom.params")
    if cfg["executor"] == "cuda" and cfg["cpu_core"] is not None:
        raise fail("pins the cpu executor's thread; executor 'cuda' has none", "cpu_core")
    if cfg["executor"] == "cpu" and cfg["cuda"]["device"]:
        raise fail("the GPU of executor 'cuda'; executor 'cpu' runs on none", "cuda.device")
    queues = cfg["queues"]["count"]
    if cfg["handler"] == "frames" and cfg["frames"]["pages"] % queues:
        raise fail(
            f"{cfg['frames']['pages']} pages for {queues} queues: each queue takes an equal "
            "share of the pages (queue i's are pages i*pages/count on), so frames.pages must "
            "be a multiple of queues.count",
            "frames.pages",
        )
    if queues > 1 and cfg["queues"]["steer"] == "qp":
        for key in ("qp.qpn", "qp.peer_qpn"):
            section, name = key.split(".")
            if cfg[section][name] + queues - 1 > 0xFFFFFF:
                raise fail(
                    f"queue i is QP {key} + i: {queues} queues from {cfg[section][name]} run "
                    "past the 24-bit QP numbers",
                    key,
                )
    sock = cfg["socket"]
    if sock["rx_path"] == "mmap" and sock["mode"] != "packet":
        raise fail(
            "socket.rx_path 'mmap' is packet mode's; udp mode receives with recvmmsg",
            "socket.rx_path",
        )
    if cfg["nic"] == "doca" and cfg["far_end"] != "cpu":
        raise fail("nic 'doca': the far end is the network; far_end must be 'cpu'", "far_end")
    if cfg["nic"] == "socket":
        if cfg["far_end"] != "cpu":
            raise fail("nic 'socket': the far end is the network; far_end must be 'cpu'", "far_end")
        if sock["mode"] == "packet" and not sock["interface"]:
            raise fail("socket.mode 'packet' needs socket.interface", "socket.interface")
        # udp mode: the kernel's UDP socket writes the Ethernet header and picks the interface
        # by route, so neither of these could take effect.
        if sock["mode"] == "udp" and sock["interface"]:
            raise fail(
                "socket.mode 'udp' binds to local.ip, not to an interface: leave it null, "
                "or use socket.mode 'packet'",
                "socket.interface",
            )
        if sock["mode"] == "udp" and cfg["vlan"] is not None:
            raise fail(
                "socket.mode 'udp' leaves the Ethernet header to the kernel, which would send "
                "untagged: use a VLAN interface's address, or socket.mode 'packet'",
                "vlan",
            )
    for side in ("local", "peer"):
        if cfg[side]["mac"] == "auto" and (cfg["nic"] != "socket" or sock["mode"] != "packet"):
            raise fail("'auto' needs nic 'socket' in packet mode (an interface)", f"{side}.mac")
    local = ipaddress.ip_address(cfg["local"]["ip"])
    peer = ipaddress.ip_address(cfg["peer"]["ip"])
    if local.version != peer.version:
        raise ConfigError(
            f"{cfg['peer']['ip']} is IPv{peer.version}, local.ip is IPv{local.version}",
            key="peer.ip",
            source=source,
            line=line_of(data, "peer.ip"),
        )


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(p, 16) for p in mac.replace("-", ":").split(":"))


def _mac_of(cfg: dict[str, Any], side: str) -> bytes:
    """``side``'s MAC. ``auto`` is looked up before the translation (the kernel's tables:
    netinfo.with_resolved_macs, which Transceiver calls), never while translating."""
    mac = cfg[side]["mac"]
    if mac == "auto":
        raise ConfigError(
            "auto: look it up first (netinfo.with_resolved_macs: the interface's own address, "
            "or the peer's neighbour entry)",
            key=f"{side}.mac",
        )
    return _mac_bytes(mac)


# ---------------------------------------------------------------- what reaches the engine
# The core takes a flat dict: its keys, and the member each sets, are listed once, in
# roce_transceiver/core/include/rt/host/transceiver.h (for_each_config_key; the engine's own
# settings in rt/engine/settings.h), and _core.engine_config_keys() returns them with their
# kinds. A core key that is a schema leaf has the leaf's dotted name and takes its value as it
# is (TO_CORE: no table to keep, nothing renamed); the others are COMPUTED below.
# tests/test_config_mapping.py holds them to the schema (every leaf placed, each one reaching
# what it claims) and to the core (every key it takes, no other).


#: What a null goes across as, for the keys of TO_CORE whose core member has no None.
NULL_TO_CORE: dict[str, Any] = {
    "socket.interface": "",
    "socket.capture": "",
    "cpu_core": -1,
    "frames.slice_bytes": 0,
}


@dataclass(frozen=True)
class Computed:
    """A core key computed from schema keys (``reads``), or from what the Transceiver resolved:
    ``value(cfg, executor, qec_blob)``."""

    reads: tuple[str, ...]
    value: Callable[[dict[str, Any], str, bytes | None], Any]


def _address(cfg: dict[str, Any], side: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(cfg[side]["ip"])


def _core_regions(cfg: dict[str, Any]) -> list[tuple[int, int, int]]:
    """The configured regions, then the frames handler's pages as one more region."""
    out = [(r["va"], r["rkey"], r["length"]) for r in cfg["regions"]]
    if cfg["handler"] == "frames":
        fr = cfg["frames"]
        out.append((fr["va"], fr["rkey"], fr["pages"] * fr["page_bytes"]))
    return out


#: What rx_path() decides from.
_RX_PATH_READS = ("socket.rx_path", "socket.mode", "handler", "qp.transport")

#: Core keys computed from several schema keys or resolved by the Transceiver: core key ->
#: how. (``auto`` MACs are looked up before: netinfo.with_resolved_macs.)
COMPUTED: dict[str, Computed] = {
    "executor": Computed((), lambda cfg, executor, blob: executor),
    "local_mac": Computed(("local.mac",), lambda cfg, ex, blob: _mac_of(cfg, "local")),
    "peer_mac": Computed(("peer.mac",), lambda cfg, ex, blob: _mac_of(cfg, "peer")),
    "ip_version": Computed(("local.ip",), lambda cfg, ex, blob: _address(cfg, "local").version),
    "local_ip": Computed(("local.ip",), lambda cfg, ex, blob: _address(cfg, "local").packed),
    "peer_ip": Computed(("peer.ip",), lambda cfg, ex, blob: _address(cfg, "peer").packed),
    "regions": Computed(
        ("regions", "handler", "frames.va", "frames.rkey", "frames.pages", "frames.page_bytes"),
        lambda cfg, ex, blob: _core_regions(cfg),
    ),
    # The frames' pages are the region after the configured ones.
    "frames_region": Computed(("regions",), lambda cfg, ex, blob: len(cfg["regions"])),
    "qec_blob": Computed((), lambda cfg, ex, blob: blob or b""),
    "custom_params": Computed(
        ("custom.params",), lambda cfg, ex, blob: custom_params_bytes(cfg["custom"]["params"])
    ),
    # The compiled handler: Transceiver builds it from custom.source and custom.entry (a shared
    # object for the cpu executor, the engine's kernels for the cuda executor) and sets these.
    "custom_library": Computed((), lambda cfg, ex, blob: ""),
    "custom_kernel_image": Computed((), lambda cfg, ex, blob: b""),
    # The immediate's page bits: the bridge's (null: 12; listen --hsb resolves null from the
    # bridge's announcement, hsb_stream.page_bits_for).
    "frames_page_bits": Computed(
        ("hsb.page_bits",), lambda cfg, ex, blob: cfg["hsb"]["page_bits"] or DEFAULT_PAGE_BITS
    ),
    # custom.source with the frames handler: the handler is the stream's statistic.
    "frames_statistic": Computed(
        ("handler", "custom.source"),
        lambda cfg, ex, blob: cfg["handler"] == "frames" and cfg["custom"]["source"] is not None,
    ),
    # socket.rx_path as resolved for this configuration, and why (rx_path()).
    "cuda_warps": Computed(("cuda.warps", "handler"), lambda cfg, ex, blob: cuda_warps(cfg)),
    "socket_rx_path": Computed(_RX_PATH_READS, lambda cfg, ex, blob: rx_path(cfg)[0]),
    "socket_rx_path_reason": Computed(_RX_PATH_READS, lambda cfg, ex, blob: rx_path(cfg)[1]),
    # nic 'doca': where the probe of its NIC looks for the SDK (DOCA_PATH, else the usual).
    "doca_sdk_path": Computed((), lambda cfg, ex, blob: doca_sdk_path()),
    "doca_sdk_path_chosen": Computed((), lambda cfg, ex, blob: "DOCA_PATH" in os.environ),
}

#: Schema keys the core takes one for one, under their own names: the core's keys that are
#: schema leaves and not computed (read from _core, so a key added there needs nothing here).
TO_CORE: tuple[str, ...] = tuple(
    key for key, _ in _core.engine_config_keys() if key in leaves(SCHEMA) and key not in COMPUTED
)

#: Schema keys Python consumes before the core, and what reaches the core in their place.
BY_PYTHON: dict[str, str] = {
    "executor": "transceiver.pick_executor() resolves auto to cpu or cuda, which the core "
    "gets as executor",
    "qec.distance": "transceiver.Transceiver builds the decoder's lookup table for it, which "
    "the core gets as qec_blob",
    "custom.entry": "transceiver.Transceiver compiles it with custom.source: for the cpu "
    "executor a shared object the core gets as custom_library, for the cuda executor the "
    "engine's kernels it gets as custom_kernel_image",
}

#: Schema keys that do not reach the engine, and why.
NOT_IN_ENGINE: dict[str, str] = {
    f"doca.{key}": "nic 'doca' is not built: its NIC (rt/host/doca_nic.h) refuses to start, "
    "saying what this machine lacks (docs/deployment.md)"
    for key in ("gpu_pci", "gid_index", "mtu")
}
NOT_IN_ENGINE["doca.nic_handler"] = (
    "the queue pair's, not the engine's: Verbs mode's software ConnectX takes it "
    "(roce_transceiver/verbs_mode.py, VerbsLoopback(nic_handler=...)); nic 'doca' is not built"
)
NOT_IN_ENGINE.update(
    {
        f"hsb.{key}": "the bridge's control plane: roce_transceiver/hsb_stream.py programs "
        "the bridge from it before the engine's frames arrive; the engine never sees it"
        for key in SCHEMA.keys["hsb"].keys  # type: ignore[union-attr]
        if key != "page_bits"  # the engine reads the immediate with it: frames_page_bits
    }
)


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def core_config(cfg: dict[str, Any], executor: str, qec_blob: bytes | None) -> dict[str, Any]:
    """The flat dict the C++ core takes: every key of ``_core.engine_config_keys()``, from
    TO_CORE and COMPUTED. ``executor`` is the one the Transceiver picked (not auto);
    ``qec_blob`` the qec handler's table."""
    if executor == "cuda" and cfg["cpu_core"] is not None:
        raise ConfigError(
            f"pins the cpu executor's thread, and executor '{cfg['executor']}' runs cuda here, "
            "which has none: set executor: cpu, or cpu_core: null",
            key="cpu_core",
        )
    out: dict[str, Any] = {}
    for dotted in TO_CORE:
        value = _get(cfg, dotted)
        out[dotted] = NULL_TO_CORE[dotted] if value is None and dotted in NULL_TO_CORE else value
    for key, computed in COMPUTED.items():
        out[key] = computed.value(cfg, executor, qec_blob)
    return out


def reference_markdown() -> str:
    """docs/configuration.md: every key of the schema (tests check the file is current)."""
    return (
        "# Configuration reference\n\n"
        "Generated from `roce_transceiver/config.py` by\n"
        "`python -m roce_transceiver.config > docs/configuration.md`; "
        "`tests/test_config_reference.py` fails when this file and the schema disagree.\n\n"
        "A configuration is a mapping (a dict, or a YAML file whose top level or "
        "`transceiver:` section holds it). Every key is optional. An unknown key, a "
        "wrong type or a value out of range is a `ConfigError` naming the dotted key, "
        "and for YAML the file and line.\n\n"
        "A YAML file is read as UTF-8 (else the error gives the offset of the first bad byte) "
        f"and refused, naming file, line and key, when it is larger than {MAX_FILE_BYTES >> 20} "
        f"MiB, nests mappings and lists deeper than {MAX_DEPTH} levels, grows past "
        f"{MAX_EXPANDED >> 20} Mi nodes and characters once its aliases are expanded (a "
        '"billion laughs" of a few lines), or has a key '
        "that is not a string (merge keys `<<` included). Every float must be finite "
        "(`.nan` and `.inf` are refused) and no string may hold a NUL byte. Values quoted in "
        "errors are cut short.\n\n"
        "`cpu_core` must be a core the process may run on (its affinity mask, as `taskset` or "
        "a container's cpuset leaves it); when the pinning itself fails, `start()` raises "
        "`TransceiverError` naming the core and the reason, and nothing runs.\n\n"
        "No key is silently ignored. The keys of a section apply where its line says "
        "(`socket.*` with `nic: socket`, `cuda.*` with the cuda executor, `frames.*` with "
        "`handler: frames`, `qec.*` with `handler: qec`, `custom.*` with `handler: custom`) "
        "and are unused elsewhere; `doca.*` "
        "is validated only (`nic: doca` is refused, saying what is missing). A key set where "
        "it cannot take effect is refused: `socket.interface` and `vlan` with "
        "`socket.mode: udp` (the kernel's UDP socket writes the Ethernet header and picks the "
        "interface by route), `cpu_core` with the cuda executor (when `executor: auto` picks "
        "cuda, `Transceiver()` refuses it). Which schema key becomes which engine key: "
        "the same dotted key (`TO_CORE`, read from the core), else `COMPUTED` in "
        "`roce_transceiver/config.py`; checked by "
        "`tests/test_config_mapping.py`.\n\n" + render_markdown(SCHEMA)
    )


if __name__ == "__main__":
    print(reference_markdown(), end="")
