"""``roce-transceiver doctor``: the set-up checks HSB, DOCA and NCCL users keep asking about.

Each check says pass, fail or n/a (not applicable: the configuration does not use what it
checks) and, when it fails, the exact fix: the command to run, the sysctl, the key to change.
What they cover is what forums and issue trackers show going wrong most often: interface MTU
against the packet sizes, kernel receive buffers, the reverse-path filter and ARP, privileges
for packet sockets, GPU visibility, GPU-NIC PCIe distance, peer memory (nvidia-peermem or
dma-buf), the DOCA SDK and RDMA devices, and whether a Holoscan Sensor Bridge announces itself.

Every file is read under :attr:`Machine.root` (``/`` on a real machine), so a test can point
the checks at a faked sysfs/proc tree; what is not a file (the CUDA runtime, the DOCA probe,
the bridge's announcement) is a callable on :class:`Machine` a test can replace.

What is read is held to what the kernel writes: regular files only (never a FIFO, a device or
a directory), at most a page for a sysfs attribute and 1 MiB for a /proc table, text, and each
number in the kernel's range for it. Anything else is :class:`Unreadable`, and the check that
met it fails naming the path and what was wrong. The whole run has a time limit too: a probe
or a read that does not come back ends as a failure of its check, not as a doctor that hangs.

With a configuration, only what it uses is checked. Without one, every check that needs no
address runs as if every backend were wanted, and says which configuration needs it.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from roce_transceiver.hsb_stream import FRAME_OVERHEAD, IP_OVERHEAD, largest_packet

__all__ = [
    "FAIL",
    "NA",
    "PASS",
    "RX_BUFFER_BYTES",
    "TIMEOUT_S",
    "Check",
    "CheckFunction",
    "Machine",
    "Unreadable",
    "run_checks",
]

PASS, FAIL, NA = "pass", "fail", "n/a"
#: What the socket NIC asks for with SO_RCVBUF(FORCE) (kRxBufferBytes, socket_nic.cpp).
RX_BUFFER_BYTES = 64 << 20
_CAP_NET_ADMIN, _CAP_NET_RAW = 12, 13
_NVIDIA_VENDOR = "0x10de"
_VLAN_TAG = 4
_ETHERNET_HEADER = FRAME_OVERHEAD - IP_OVERHEAD
#: A sysfs attribute is at most one page (sysfs_emit); the /proc/sys values are shorter.
ATTRIBUTE_BYTES = 4096
#: /proc/net/route, /proc/net/arp, /proc/modules, /proc/self/status: about 8000 routes or
#: neighbours; a machine with more is no set-up these checks are for.
TABLE_BYTES = 1 << 20
#: Entries read of one directory (/sys/bus/pci/devices of a large host is about 1000).
DIRECTORY_ENTRIES = 1 << 16
#: The whole run's limit, the bridge's announcement wait (hsb.enumeration_timeout_s) aside:
#: the file reads take milliseconds; CUDA's first initialisation takes seconds on a host of
#: eight GPUs without persistence mode.
TIMEOUT_S = 30.0
_INT32_MAX = (1 << 31) - 1
_DECIMAL = re.compile(r"-?[0-9]+")
_HEX = re.compile(r"[0-9a-fA-F]{1,16}")


@dataclass(frozen=True)
class Check:
    """One finding: ``status`` is PASS, FAIL or NA; ``fix`` is what to do when it fails."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class Unreadable(Exception):
    """A file that is not what the kernel writes there: where, what was wrong, and the fix.
    The check that meets one fails with it (:class:`CheckFunction`)."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path, self.problem, self.fix = path, problem, fix


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((what for test, what in kinds if test(mode)), f"of file type 0o{mode:o}")


def _show(text: str, at_most: int = 40) -> str:
    """``text`` quoted, and cut: a value from a hostile file can be a page long."""
    return repr(text if len(text) <= at_most else text[:at_most] + "...")


def _cuda_info() -> Mapping[str, Any]:
    from roce_transceiver import _core

    return _core.cuda_runtime_info()


def _doca_probe(sdk: str) -> Mapping[str, Any]:
    from roce_transceiver import _core

    return _core.doca_probe(sdk)


def _find_bridge(ip: str, timeout: float, port: int) -> Any:
    from roce_transceiver.hsb_control import find_bridge

    return find_bridge(ip, timeout, port=port)


@dataclass
class Machine:
    """Where the checks look: files under ``root``, and the probes that are not files."""

    root: Path = Path("/")
    cuda_info: Callable[[], Mapping[str, Any]] = _cuda_info
    doca_probe: Callable[[str], Mapping[str, Any]] = _doca_probe
    find_bridge: Callable[[str, float, int], Any] = _find_bridge
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    #: What the checks' thread is doing now (a read, a probe), for the time limit's report.
    doing: str | None = field(default=None, init=False, repr=False, compare=False)
    #: Set when run_checks left its thread behind in a call that did not return.
    left_behind: bool = field(default=False, init=False, repr=False, compare=False)

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """Say ``what`` is being done while the block runs (a read, a probe)."""
        before, self.doing = self.doing, what
        try:
            yield
        finally:
            self.doing = before

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def _fix(self, path: Path) -> str:
        if self.root == Path("/"):
            return (
                f"{path} is not what the kernel writes there: see what is mounted on /sys and "
                "/proc (findmnt /sys; findmnt /proc)"
            )
        return (
            f"the tree under --root {self.root} is no copy of the kernel's files: make {path} "
            "a regular file holding what the kernel writes there"
        )

    def _unreadable(self, path: Path, problem: str) -> Unreadable:
        return Unreadable(path, problem, self._fix(path))

    def read(self, p: str, limit: int = ATTRIBUTE_BYTES) -> str | None:
        """The text of ``p``, None when it is not there. A FIFO, a device, a directory, a file
        of more than ``limit`` bytes or not UTF-8, or one this user may not read: Unreadable."""
        path = self.path(p)
        with self.busy(f"reading {path}"):
            data = self._read_regular(path, limit)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError as e:
            raise self._unreadable(
                path, f"is not text: byte 0x{data[e.start]:02x} at offset {e.start}"
            ) from None

    def _read_regular(self, path: Path, limit: int) -> bytes | None:
        # stat first: opening a device can act (a tape rewinds), and opening a FIFO waits
        # for a writer; fstat after the open catches a file swapped in between.
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                raise self._unreadable(path, f"is {_kind(mode)}, not a regular file")
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except PermissionError as e:
            raise Unreadable(
                path,
                f"cannot be read: {e.strerror}",
                f"run doctor as a user who may read it (sudo), or: sudo chmod a+r {path}",
            ) from None
        except OSError as e:
            raise self._unreadable(path, f"cannot be read: {e.strerror}") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self._unreadable(path, f"is {_kind(mode)}, not a regular file")
            # /proc hands its tables out a page per read: read until the end, or one byte
            # past the limit.
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as e:
            raise self._unreadable(path, f"cannot be read: {e.strerror}") from None
        finally:
            os.close(fd)
        if size > limit:
            raise self._unreadable(
                path, f"holds more than {limit} bytes (the kernel's file is shorter)"
            )
        return b"".join(chunks)

    def read_int(self, p: str, lo: int, hi: int, what: str) -> int | None:
        """The decimal integer in ``p``, None when it is not there; a value that is no
        decimal integer, or one outside ``lo..hi`` (the kernel's range for ``what``):
        Unreadable."""
        text = self.read(p)
        if text is None:
            return None
        return self._int(self.path(p), text.strip(), lo, hi, what)

    def _int(self, path: Path, text: str, lo: int, hi: int, what: str, base: int = 10) -> int:
        pattern = _DECIMAL if base == 10 else _HEX
        if not pattern.fullmatch(text):
            kind = "an integer" if base == 10 else "a hexadecimal number"
            raise self._unreadable(path, f"holds {_show(text)}, not {kind} ({what})")
        value = int(text, base)
        if not lo <= value <= hi:
            span = f"{lo}..{hi}" if base == 10 else f"0x{lo:X}..0x{hi:X}"
            shown = text if base == 10 else f"0x{text}"
            raise self._unreadable(path, f"holds {shown}, outside {span} ({what})")
        return value

    def listdir(self, p: str) -> list[str]:
        """The names in directory ``p``, [] when it is not there; not a directory, one this
        user may not read, or more than DIRECTORY_ENTRIES names: Unreadable."""
        path = self.path(p)
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISDIR(mode):
                raise self._unreadable(path, f"is {_kind(mode)}, not a directory")
            names = []
            with os.scandir(path) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if len(names) > DIRECTORY_ENTRIES:
                        raise self._unreadable(path, f"holds more than {DIRECTORY_ENTRIES} names")
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise self._unreadable(path, f"cannot be listed: {e.strerror}") from None
        return sorted(names)

    # -- the process --------------------------------------------------------------------
    def _status_field(self, name: str) -> list[str]:
        for line in (self.read("/proc/self/status", TABLE_BYTES) or "").splitlines():
            key, _, value = line.partition(":")
            if key == name:
                return value.split()
        return []

    def euid(self) -> int | None:
        uid = self._status_field("Uid")
        if len(uid) < 2:
            return None
        return self._int(self.path("/proc/self/status"), uid[1], 0, (1 << 32) - 1, "Uid")

    def has_cap(self, bit: int) -> bool:
        cap = self._status_field("CapEff")
        if not cap:
            return False
        path = self.path("/proc/self/status")
        return bool(self._int(path, cap[0], 0, (1 << 64) - 1, "CapEff", base=16) >> bit & 1)

    # -- the network --------------------------------------------------------------------
    def routes(self) -> Iterator[tuple[str, ipaddress.IPv4Network, bool, int]]:
        """(interface, network, via a gateway, metric) of each IPv4 route that is up."""
        path = self.path("/proc/net/route")
        table = (self.read("/proc/net/route", TABLE_BYTES) or "").splitlines()
        for number, line in enumerate(table[1:], start=2):
            f = line.split()
            if not f:
                continue
            if len(f) < 8:
                raise self._unreadable(
                    path, f"line {number}: {len(f)} fields, not the kernel's 11: {_show(line)}"
                )
            # Addresses and flags in hex (the kernel's %08X and %04X); the metric, a u32, in
            # decimal with %d, so above 2^31 it shows negative.
            dest, gateway, mask = (
                self._int(path, f[i], 0, (1 << 32) - 1, f"line {number}'s {what}", base=16)
                for i, what in ((1, "Destination"), (2, "Gateway"), (7, "Mask"))
            )
            flags = self._int(path, f[3], 0, 0xFFFF, f"line {number}'s Flags", base=16)
            metric = self._int(path, f[6], -(1 << 31), _INT32_MAX, f"line {number}'s Metric")
            metric &= 0xFFFFFFFF
            if not flags & 1:  # RTF_UP
                continue
            # The kernel writes addresses in its own (little-endian) byte order.
            net = ipaddress.IPv4Network(
                (struct.pack("<I", dest), bin(mask).count("1")), strict=False
            )
            yield f[0], net, gateway != 0, metric

    def route_to(self, ip: str) -> str | None:
        """The interface the longest matching route sends ``ip`` out of. /proc/net/route is
        the main table only: 127.0.0.0/8 (the local table's) is lo."""
        addr = ipaddress.IPv4Address(ip)
        if addr.is_loopback:
            return "lo"
        best = None
        for iface, net, _, metric in self.routes():
            if addr in net:
                key = (net.prefixlen, -metric)
                if best is None or key > best[0]:
                    best = (key, iface)
        return best[1] if best else None

    def connected_to(self, ip: str) -> str | None:
        """The interface whose own network (a route without gateway) holds ``ip``."""
        addr = ipaddress.IPv4Address(ip)
        if addr.is_loopback:
            return "lo"
        found = [
            (net.prefixlen, iface)
            for iface, net, via, _ in self.routes()
            if not via and net.prefixlen > 0 and addr in net
        ]
        return max(found)[1] if found else None

    def neighbour(self, ip: str, interface: str) -> str | None:
        """The MAC the kernel resolved for ``ip`` on ``interface`` (/proc/net/arp)."""
        for line in (self.read("/proc/net/arp", TABLE_BYTES) or "").splitlines()[1:]:
            f = line.split()
            if len(f) >= 6 and f[0] == ip and f[5] == interface and f[2] != "0x0":
                return f[3].lower()
        return None

    # -- PCI ------------------------------------------------------------------------------
    def pci_chain(self, device_link: str) -> list[str] | None:
        """The PCI path of a device (``.../device`` symlink or /sys/bus/pci/devices/ADDR):
        its host bridge (``pci0000:00``), then each bridge down to the device itself."""
        real = Path(os.path.realpath(self.path(device_link)))
        if not real.exists():
            return None
        parts = real.parts
        for i, part in enumerate(parts):
            if part.startswith("pci") and ":" in part:
                return list(parts[i:])
        return None

    def nvidia_gpus(self) -> list[str]:
        """PCI addresses of NVIDIA display and 3D controllers (class 0x03xxxx)."""
        out = []
        for addr in self.listdir("/sys/bus/pci/devices"):
            base = f"/sys/bus/pci/devices/{addr}"
            vendor = (self.read(f"{base}/vendor") or "").strip().lower()
            klass = (self.read(f"{base}/class") or "").strip().lower()
            if vendor == _NVIDIA_VENDOR and klass.startswith("0x03"):
                out.append(addr)
        return out


def _run_fix(interpreter: str) -> str:
    return (
        "run it as root (sudo), or give the interpreter the capabilities: "
        f"sudo setcap cap_net_raw,cap_net_admin+ep {os.path.realpath(interpreter)}; "
        "or use socket.mode: udp, which needs neither"
    )


Config = Mapping[str, Any] | None


@dataclass(frozen=True)
class CheckFunction:
    """One check: called with the machine and the configuration, it returns its Check. A
    file that is not the kernel's (Unreadable) fails the check, naming the path."""

    name: str
    body: Callable[[str, Machine, Config], Check]

    def __call__(self, m: Machine, cfg: Config) -> Check:
        try:
            return self.body(self.name, m, cfg)
        except Unreadable as e:
            return Check(self.name, FAIL, str(e), e.fix)


def _check(name: str) -> Callable[[Callable[[str, Machine, Config], Check]], CheckFunction]:
    def wrap(body: Callable[[str, Machine, Config], Check]) -> CheckFunction:
        return CheckFunction(name, body)

    return wrap


# ----------------------------------------------------------------------------- the checks
def _interface(m: Machine, cfg: Mapping[str, Any]) -> tuple[str | None, str]:
    """The interface the configuration's frames come in by, and how it was found."""
    if cfg["nic"] == "socket":
        sock = cfg["socket"]
        if sock["mode"] == "packet":
            return sock["interface"], "socket.interface"
        try:
            found = m.route_to(cfg["peer"]["ip"])
        except ValueError:  # IPv6: /proc/net/route has IPv4 only
            return None, "IPv6 peer"
        return found, f"the route to peer.ip {cfg['peer']['ip']}"
    if cfg["nic"] == "doca":
        dev = cfg["doca"]["device"]
        nets = m.listdir(f"/sys/class/infiniband/{dev}/device/net")
        return (nets[0] if nets else None), f"the netdev of doca.device {dev}"
    return None, f"nic {cfg['nic']}"


@_check("interface MTU")
def check_mtu(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is None:
        return Check(name, NA, "no --config: which interface and packet sizes is the file's")
    iface, how = _interface(m, cfg)
    if iface is None:
        return Check(name, NA, f"no interface to check ({how})")
    # 68: IPv4's least MTU (RFC 791); the kernel's MTU is an int, and lo's has no other bound.
    mtu = m.read_int(f"/sys/class/net/{iface}/mtu", 68, _INT32_MAX, "an interface MTU")
    if mtu is None:
        there = ", ".join(m.listdir("/sys/class/net")) or "none"
        return Check(
            name,
            FAIL,
            f"interface {iface!r} ({how}) not found: {m.path(f'/sys/class/net/{iface}')} is "
            f"missing (interfaces: {there})",
            f"name an interface of this machine (ip -br link lists them: {there})",
        )
    problems, fixes = [], []
    raise_to = 0
    h = cfg["hsb"]
    if h["bridge"] and h["packet_bytes"] and h["packet_bytes"] + IP_OVERHEAD > mtu:
        need = h["packet_bytes"] + IP_OVERHEAD
        problems.append(
            f"hsb.packet_bytes {h['packet_bytes']} makes IP packets of {need} B, more than "
            f"the MTU {mtu}"
        )
        raise_to = max(raise_to, need)
        fixes.append(f"or lower hsb.packet_bytes to {largest_packet(1 << 16, mtu, None)}")
    if cfg["nic"] == "doca" and cfg["doca"]["mtu"] + IP_OVERHEAD > mtu:
        need = cfg["doca"]["mtu"] + IP_OVERHEAD
        problems.append(
            f"the RoCE path MTU doca.mtu {cfg['doca']['mtu']} makes IP packets of {need} B, "
            f"more than the MTU {mtu}"
        )
        raise_to = max(raise_to, need)
        fits = [p for p in (4096, 2048, 1024) if p + IP_OVERHEAD <= mtu]
        if fits:
            fixes.append(f"or lower doca.mtu to {fits[0]}")
    if cfg["nic"] == "socket" and cfg["socket"]["mode"] == "packet":
        frame = mtu + _ETHERNET_HEADER + (_VLAN_TAG if cfg["vlan"] is not None else 0)
        slot = cfg["queues"]["slot_bytes"]
        if frame > slot:
            problems.append(
                f"frames of up to {frame} B come in by an MTU of {mtu}, and a longer one than "
                f"queues.slot_bytes {slot} is dropped"
            )
            fixes.append(f"or raise queues.slot_bytes to {-(-frame // 64) * 64}")
            if not raise_to:
                lower = slot - (frame - mtu)
                fixes.insert(0, f"sudo ip link set dev {iface} mtu {lower}")
    if not problems:
        return Check(name, PASS, f"{iface} ({how}): MTU {mtu} takes what the configuration sends")
    if raise_to:
        fixes.insert(0, f"sudo ip link set dev {iface} mtu {raise_to} (the peer's link too)")
    return Check(name, FAIL, f"{iface} ({how}): " + "; ".join(problems), "; ".join(fixes))


def _uses_ring(cfg: Mapping[str, Any]) -> bool:
    from roce_transceiver.socket_rx import rx_path

    return rx_path(dict(cfg))[0] in ("auto", "mmap")


@_check("socket receive buffer (net.core.rmem_max)")
def check_rmem(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is not None:
        if cfg["nic"] != "socket":
            return Check(name, NA, f"nic {cfg['nic']}: no socket receive buffer")
        if _uses_ring(cfg):
            return Check(name, NA, "packet mode receives from its mmap ring, not the buffer")
    who = "" if cfg is not None else " (needed by nic: socket, udp mode or recvmmsg)"
    if m.euid() == 0 or m.has_cap(_CAP_NET_ADMIN):
        return Check(
            name,
            PASS,
            f"root / CAP_NET_ADMIN: SO_RCVBUFFORCE grants the {RX_BUFFER_BYTES >> 20} MiB the "
            f"socket NIC asks for whatever net.core.rmem_max is{who}",
        )
    rmem = m.read_int("/proc/sys/net/core/rmem_max", 0, _INT32_MAX, "net.core.rmem_max, an int")
    if rmem is None:
        return Check(
            name,
            FAIL,
            f"cannot read {m.path('/proc/sys/net/core/rmem_max')}{who}",
            "sysctl net.core.rmem_max shows it; is /proc mounted?",
        )
    if rmem >= RX_BUFFER_BYTES:
        return Check(name, PASS, f"net.core.rmem_max {rmem} covers the 64 MiB asked for{who}")
    return Check(
        name,
        FAIL,
        f"net.core.rmem_max is {rmem} ({rmem / (1 << 20):.2f} MiB): the socket NIC asks "
        f"SO_RCVBUF {RX_BUFFER_BYTES >> 20} MiB and, without CAP_NET_ADMIN, gets at most that, "
        f"so a burst overflows it (dropped frames){who}",
        f"sudo sysctl -w net.core.rmem_max={RX_BUFFER_BYTES}; to keep it: echo "
        f"'net.core.rmem_max = {RX_BUFFER_BYTES}' | "
        "sudo tee /etc/sysctl.d/90-roce-transceiver.conf",
    )


def _ipv4(ip: str) -> bool:
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        return False
    return True


@_check("reverse-path filter (rp_filter)")
def check_rp_filter(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is None:
        return Check(name, NA, "no --config: the peer's address is the file's")
    if cfg["nic"] != "socket":
        return Check(name, NA, f"nic {cfg['nic']}: the kernel's IP stack does not receive")
    if cfg["socket"]["mode"] == "packet":
        return Check(name, NA, "packet mode: AF_PACKET sees frames before the filter drops any")
    peer, local = cfg["peer"]["ip"], cfg["local"]["ip"]
    if not _ipv4(peer):
        return Check(name, NA, f"peer.ip {peer}: IPv6 has no rp_filter")
    back = m.route_to(peer)
    arrive = m.connected_to(local) or back
    if back is None:
        return Check(
            name,
            FAIL,
            f"no route to peer.ip {peer} ({m.path('/proc/net/route')}): its packets are "
            "dropped as martians and our replies go nowhere",
            f"sudo ip route add {peer}/32 dev <the interface the peer is on>",
        )
    modes = "rp_filter: 0 off, 1 strict, 2 loose"
    values = [
        m.read_int(f"/proc/sys/net/ipv4/conf/{c}/rp_filter", 0, 2, modes) for c in ("all", arrive)
    ]
    mode = max((v for v in values if v is not None), default=0)
    if mode != 1 or arrive == back:
        what = ("off", "strict", "loose")[mode]
        return Check(
            name,
            PASS,
            f"rp_filter {what} on {arrive}; the route back to {peer} leaves by {back}",
        )
    return Check(
        name,
        FAIL,
        f"strict rp_filter on {arrive} (where local.ip {local} is) drops the peer's packets: "
        f"the route back to {peer} leaves by {back}",
        f"sudo sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{arrive}.rp_filter=2 "
        f"(loose), or route the peer by {arrive}: sudo ip route add {peer}/32 dev {arrive}",
    )


@_check("peer ARP entry")
def check_arp(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is None:
        return Check(name, NA, "no --config: the peer's address is the file's")
    if cfg["nic"] != "socket" or cfg["socket"]["mode"] != "packet":
        return Check(name, NA, "only packet mode writes the peer's MAC into its frames")
    peer, iface, mac = cfg["peer"]["ip"], cfg["socket"]["interface"], cfg["peer"]["mac"]
    if not _ipv4(peer) or not iface:
        return Check(name, NA, f"peer.ip {peer}: ARP is IPv4's (IPv6: ip -6 neigh)")
    found = m.neighbour(peer, iface)
    if mac == "auto":
        if found:
            return Check(name, PASS, f"peer.mac auto: {peer} is {found} on {iface}")
        return Check(
            name,
            FAIL,
            f"peer.mac auto, but the neighbour table ({m.path('/proc/net/arp')}) has no "
            f"complete entry for {peer} on {iface}",
            f"ping -c 1 -I {iface} {peer} (the kernel resolves it), or: sudo ip neigh replace "
            f"{peer} lladdr <its MAC> dev {iface} nud permanent, or set peer.mac",
        )
    if found and found != mac.lower():
        return Check(
            name,
            FAIL,
            f"peer.mac {mac}, but the kernel resolved {peer} on {iface} to {found}",
            f"set peer.mac: {found} (or auto)",
        )
    seen = f"; the kernel agrees ({found})" if found else ""
    return Check(name, PASS, f"peer.mac {mac} given{seen}")


@_check("packet mode privileges (root or CAP_NET_RAW)")
def check_privileges(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is not None and (cfg["nic"] != "socket" or cfg["socket"]["mode"] != "packet"):
        return Check(name, NA, "only the socket NIC's packet mode opens AF_PACKET sockets")
    who = "" if cfg is not None else " (needed by nic: socket, mode packet)"
    if m.euid() == 0:
        return Check(name, PASS, f"running as root{who}")
    if m.has_cap(_CAP_NET_RAW):
        return Check(name, PASS, f"CAP_NET_RAW held{who}")
    return Check(
        name,
        FAIL,
        f"neither root nor CAP_NET_RAW (uid {m.euid()}): AF_PACKET sockets are refused{who}",
        _run_fix(sys.executable),
    )


def _needs_gpu(cfg: Mapping[str, Any] | None) -> str | None:
    """Which key asks for a GPU, or None."""
    if cfg is None:
        return "executor cuda"
    if cfg["executor"] == "cuda":
        return "executor cuda"
    if cfg["far_end"] == "gpu":
        return "far_end gpu"
    if cfg["nic"] == "doca":
        return "nic doca"
    return None


@_check("GPU and driver")
def check_gpu(name: str, m: Machine, cfg: Config) -> Check:
    with m.busy("asking the CUDA runtime for its GPUs"):
        info = dict(m.cuda_info())
    gpus = list(info.get("gpus") or [])
    driver = (m.read("/proc/driver/nvidia/version") or "").splitlines()
    driver_line = driver[0].strip() if driver else ""
    if gpus:
        names = ", ".join(f"{g['index']}: {g['name']} (sm {g['compute_capability']})" for g in gpus)
        return Check(
            name,
            PASS,
            f"{len(gpus)} GPU(s) visible: {names}; driver {info.get('driver_version')}, "
            f"runtime {info.get('runtime_version')}",
        )
    needs = _needs_gpu(cfg)
    if not info.get("built"):
        detail = "this build has no CUDA (built without nvcc): the cuda executor is absent"
        fix = (
            "reinstall with the CUDA toolkit's nvcc on PATH: RT_CUDA=ON pip install "
            "--force-reinstall --no-deps . (roce-transceiver info says what was built)"
        )
    elif not driver_line:
        detail = f"no NVIDIA driver loaded ({m.path('/proc/driver/nvidia/version')} is missing)"
        fix = "install the NVIDIA driver (nvidia-smi must list the GPU); in a container: --gpus all"
    else:
        detail = f"driver loaded ({driver_line}), but the CUDA runtime sees no GPU: {info['error']}"
        fix = (
            "check CUDA_VISIBLE_DEVICES "
            f"({m.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}) and nvidia-smi; "
            "in a container: --gpus all (NVIDIA Container Toolkit)"
        )
    if needs is None:
        return Check(name, NA, f"{detail}; nothing in the configuration needs a GPU", fix)
    return Check(name, FAIL, f"{detail} (needed by {needs})", fix)


def _nic_devices(m: Machine, cfg: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(name, device symlink) of the NICs that matter: the configuration's, else every RDMA
    device."""
    if cfg is None:
        return [
            (d, f"/sys/class/infiniband/{d}/device") for d in m.listdir("/sys/class/infiniband")
        ]
    if cfg["nic"] == "doca":
        d = cfg["doca"]["device"]
        return [(d, f"/sys/class/infiniband/{d}/device")]
    if cfg["nic"] == "socket":
        iface, _ = _interface(m, cfg)
        if iface:
            return [(iface, f"/sys/class/net/{iface}/device")]
    return []


def _distance(m: Machine, gpu: list[str], nic: list[str], ga: str, na: str) -> tuple[str, int]:
    """nvidia-smi topo's words for a GPU and NIC path, and a rank (lower is nearer)."""
    if gpu[0] == nic[0]:
        shared = 0
        for a, b in zip(gpu[1:], nic[1:], strict=False):
            if a != b:
                break
            shared += 1
        # A common root port and at least one switch below it: PIX/PXB (peer to peer without
        # the CPU); the root port alone, or none: through the host bridge (PHB).
        return ("PCIe switch (PIX/PXB)", 0) if shared >= 2 else ("host bridge (PHB)", 1)
    # -1: no node; 1023: MAX_NUMNODES at the kernel's largest NODES_SHIFT, 10.
    gn = m.read_int(f"/sys/bus/pci/devices/{ga}/numa_node", -1, 1023, "a NUMA node")
    nn = m.read_int(f"/sys/bus/pci/devices/{na}/numa_node", -1, 1023, "a NUMA node")
    if gn is None or nn is None or gn < 0 or nn < 0 or gn == nn:
        return "host bridges of one NUMA node (NODE)", 2
    return f"NUMA nodes {gn} and {nn} (SYS)", 3


@_check("GPU-NIC PCIe topology")
def check_topology(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is not None and cfg["nic"] not in ("doca", "socket"):
        return Check(name, NA, f"nic {cfg['nic']}: no NIC")
    nics = [
        (n, chain) for n, link in _nic_devices(m, cfg) if (chain := m.pci_chain(link)) is not None
    ]
    if not nics:
        return Check(name, NA, "no PCIe NIC to place (virtual interface, or no RDMA device)")
    gpus = m.nvidia_gpus()
    pinned = cfg["doca"]["gpu_pci"] if cfg is not None and cfg["nic"] == "doca" else None
    if pinned:
        gpus = [g for g in gpus if g.lower() == pinned.lower()]
        if not gpus:
            return Check(
                name,
                FAIL,
                f"doca.gpu_pci {pinned} is not an NVIDIA GPU here "
                f"({m.path('/sys/bus/pci/devices')}: {', '.join(m.nvidia_gpus()) or 'none'})",
                "lspci -d 10de: lists them; set doca.gpu_pci to one, or null",
            )
    if not gpus:
        return Check(name, NA, "no NVIDIA GPU on the PCI bus")
    lines, worst = [], 0
    for nic, nchain in nics:
        scored = []
        for g in gpus:
            gchain = m.pci_chain(f"/sys/bus/pci/devices/{g}") or [g]
            words, rank = _distance(m, gchain, nchain, g, nchain[-1])
            scored.append((rank, g, words))
        rank, g, words = min(scored)
        worst = max(worst, rank)
        lines.append(f"{nic} ({nchain[-1]}) and GPU {g}: {words}")
    detail = "; ".join(lines)
    if worst < 3:
        note = "" if worst == 0 else " (GPUDirect RDMA works; a PCIe switch would be faster)"
        return Check(name, PASS, detail + note)
    return Check(
        name,
        FAIL,
        detail + ": GPUDirect RDMA traffic crosses the inter-socket link",
        "use a GPU on the NIC's NUMA node (doca.gpu_pci; nvidia-smi topo -m shows the matrix) "
        "or the NIC port beside the GPU",
    )


def _kernel_at_least(release: str, want: tuple[int, int]) -> bool:
    head = release.split("-")[0].split(".")
    try:
        return (int(head[0]), int(head[1])) >= want
    except (IndexError, ValueError):
        return False


@_check("GPU peer memory (nvidia-peermem or dma-buf)")
def check_peer_memory(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is not None and cfg["nic"] != "doca":
        return Check(name, NA, f"nic {cfg['nic']}: no NIC writes into GPU memory")
    if cfg is None and not m.listdir("/sys/class/infiniband"):
        return Check(name, NA, "no RDMA device: nothing writes into GPU memory")
    table = (m.read("/proc/modules", TABLE_BYTES) or "").splitlines()
    modules = {word for line in table for word in line.split()[:1]}
    peermem = m.path("/sys/module/nvidia_peermem").exists() or "nvidia_peermem" in modules
    version = (m.read("/proc/driver/nvidia/version") or "").splitlines()
    open_driver = bool(version) and "Open Kernel Module" in version[0]
    release = (m.read("/proc/sys/kernel/osrelease") or "").strip()
    dmabuf = open_driver and _kernel_at_least(release, (5, 12))
    if peermem or dmabuf:
        ways = [w for w, ok in (("nvidia-peermem loaded", peermem), ("dma-buf", dmabuf)) if ok]
        return Check(name, PASS, " and ".join(ways) + f" (kernel {release or '?'})")
    driver = (
        "no NVIDIA driver"
        if not version
        else ("the open GPU kernel module" if open_driver else "the proprietary kernel module")
    )
    return Check(
        name,
        FAIL,
        f"nvidia-peermem not loaded, and no dma-buf ({driver}, kernel {release or '?'}): the "
        "NIC cannot write into GPU memory",
        "sudo modprobe nvidia-peermem (ships with the NVIDIA driver; load DOCA-OFED/MLNX_OFED "
        "first), or use the open GPU kernel modules (driver 515+) on kernel 5.12+ for dma-buf",
    )


@_check("DOCA SDK")
def check_doca_sdk(name: str, m: Machine, cfg: Config) -> Check:
    from roce_transceiver.doca import DEFAULT_SDK, sdk_problem

    if cfg is not None and cfg["nic"] != "doca":
        return Check(name, NA, f"nic {cfg['nic']}: no DOCA")
    sdk = m.environ.get("DOCA_PATH", DEFAULT_SDK)
    with m.busy(f"in the DOCA probe, which dlopens the libraries under {m.path(sdk)}"):
        probe = dict(m.doca_probe(str(m.path(sdk))))
    problem = sdk_problem(probe, "DOCA_PATH" in m.environ)
    who = "" if cfg is not None else " (needed by nic: doca)"
    if problem is None:
        return Check(
            name,
            PASS,
            f"DOCA SDK at {probe['sdk_path']}: libraries and entry points found{who} (the "
            "doca backend's host set-up is not built yet: docs/deployment.md)",
        )
    return Check(
        name,
        FAIL,
        problem + who,
        "install DOCA (doca-networking from NVIDIA's DOCA repository, "
        "developer.nvidia.com/doca-downloads), or export DOCA_PATH=<its prefix>",
    )


@_check("RDMA devices")
def check_rdma(name: str, m: Machine, cfg: Config) -> Check:
    if cfg is not None and cfg["nic"] != "doca":
        return Check(name, NA, f"nic {cfg['nic']}: no RDMA device needed")
    devices = m.listdir("/sys/class/infiniband")
    who = "" if cfg is not None else " (needed by nic: doca)"
    if not devices:
        return Check(
            name,
            FAIL,
            f"no RDMA device ({m.path('/sys/class/infiniband')} is empty or missing){who}",
            "load the ConnectX driver: sudo modprobe mlx5_ib (DOCA-OFED / MLNX_OFED, or the "
            "kernel's rdma-core); ibv_devices must list it",
        )
    ports = []
    for d in devices:
        for p in m.listdir(f"/sys/class/infiniband/{d}/ports"):
            base = f"/sys/class/infiniband/{d}/ports/{p}"
            state = (m.read(f"{base}/state") or "?").strip()
            layer = (m.read(f"{base}/link_layer") or "?").strip()
            ports.append((d, p, state, layer))
    listing = ", ".join(f"{d}/{p} {s} {layer}" for d, p, s, layer in ports) or ", ".join(devices)
    want = cfg["doca"]["device"] if cfg is not None else None
    if want is not None and want not in devices:
        return Check(
            name,
            FAIL,
            f"doca.device {want!r} not present ({listing})",
            f"set doca.device to one of: {', '.join(devices)}",
        )
    mine = [x for x in ports if want is None or x[0] == want]
    if mine and not any("ACTIVE" in s and layer == "Ethernet" for _, _, s, layer in mine):
        return Check(
            name,
            FAIL,
            f"no active Ethernet (RoCE) port: {listing}",
            "connect the cable and check the link (ibv_devinfo; ip link set dev <netdev> up); "
            "an InfiniBand port needs: mlxconfig -d <dev> set LINK_TYPE_P1=2",
        )
    return Check(name, PASS, listing + who)


@_check("HSB reachability")
def check_hsb(name: str, m: Machine, cfg: Config) -> Check:
    from roce_transceiver.hsb_control import EnumerationError

    if cfg is None or not cfg["hsb"]["bridge"]:
        return Check(name, NA, "no hsb.bridge in the configuration")
    h = cfg["hsb"]
    ip, port, timeout = h["bridge"], h["enumeration_port"], h["enumeration_timeout_s"]
    try:
        with m.busy(f"waiting for {ip}'s announcement on UDP {port}"):
            a = m.find_bridge(ip, timeout, port)
    except EnumerationError as e:
        return Check(
            name,
            FAIL,
            str(e),
            f"check its power and cable, that {ip} is its address (hololink-enumerate lists "
            f"the bridges heard), and that nothing drops UDP {port}: sudo iptables -I INPUT "
            f"-p udp --dport {port} -j ACCEPT",
        )
    return Check(
        name,
        PASS,
        f"{ip} announced itself on UDP {port}: board {a.board[0]}, data plane {a.data_plane}, "
        f"MAC {a.mac}",
    )


CHECKS: tuple[CheckFunction, ...] = (
    check_mtu,
    check_rmem,
    check_rp_filter,
    check_arp,
    check_privileges,
    check_gpu,
    check_topology,
    check_peer_memory,
    check_doca_sdk,
    check_rdma,
    check_hsb,
)


def run_checks(
    cfg: Config, machine: Machine | None = None, timeout_s: float = TIMEOUT_S
) -> list[Check]:
    """Every check, in a fixed order, against ``machine`` (default: this one), within
    ``timeout_s`` seconds plus the bridge's announcement wait (hsb.enumeration_timeout_s).

    The checks run in a thread of their own: a probe or read that never returns (a wedged
    driver, a file system that does not answer) cannot be stopped, only left behind. The one
    running when the time is up fails, naming what it was doing; those after it fail as not
    run, and ``machine.left_behind`` is set. The thread is a daemon, but it may hold a lock
    that a normal exit takes (the dynamic loader's, in a dlopen that never returns): a
    process that is done should then end with os._exit."""
    m = machine or Machine()
    if cfg is not None and cfg["hsb"]["bridge"]:
        timeout_s += cfg["hsb"]["enumeration_timeout_s"]
    done: list[Check] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            for check in CHECKS:
                done.append(check(m, cfg))
        except BaseException as e:  # handed to the caller's thread, raised there
            failed.append(e)

    worker = threading.Thread(target=work, name="doctor checks", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if failed:
        raise failed[0]
    finished = list(done)
    if len(finished) == len(CHECKS):
        return finished
    stuck = CHECKS[len(finished)]
    m.left_behind = True
    doing = m.doing or "running"
    finished.append(
        Check(
            stuck.name,
            FAIL,
            f"did not finish within {timeout_s:g} s (still {doing})",
            "find what holds it up (a driver, a file system or a file that does not answer); "
            "doctor --timeout SECONDS waits longer",
        )
    )
    for check in CHECKS[len(finished) :]:
        finished.append(
            Check(
                check.name,
                FAIL,
                f"not run: the time limit ran out in {stuck.name!r}",
                f"fix what holds up {stuck.name!r}, then run doctor again",
            )
        )
    return finished
