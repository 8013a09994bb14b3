"""``roce-transceiver doctor``: each check passes, fails and stands aside where it should.

Goal: every check reads the machine from its root (a faked sysfs/proc tree under tmp_path
here) and the probes a test can replace, says pass for a sound set-up, fail with the exact fix
for a broken one, and n/a where the configuration does not use what it checks. Oracles: the
faked files (what the kernel would say), and the fix each failure must name (the sysctl, the
ip command, the key). The CLI: exit 0 / 1 / 2 and one parseable JSON object; one run against
this real machine checks only the report's shape.

Hostile trees: what is not the kernel's file (a FIFO, a link to /dev/zero, a directory, an
unreadable or oversized file, a value out of the kernel's range or no number at all) is a
failure naming the path and what is wrong, never a pass, a traceback or a hang. The reads that
could hang or flood run the CLI in a child with a wall-clock limit and a memory limit, so a
regression fails the test instead of stopping the suite.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from roce_transceiver import cli, doctor
from roce_transceiver.config import load_config
from roce_transceiver.doctor import FAIL, NA, PASS, Machine
from roce_transceiver.hsb_control import EnumerationError, announcement_bytes, parse_announcement

ROOT_STATUS = "Name:\tpython\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n"
USER_STATUS = "Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n"
RAW_STATUS = "Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000002000\n"
# Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT (little-endian hex)
ROUTE_HEAD = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
ARP_HEAD = "IP address       HW type     Flags       HW address            Mask     Device\n"


class Tree:
    """A faked root: files written under it as the kernel would show them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, path: str, text: str) -> Tree:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return self

    def link(self, path: str, target: str) -> Tree:
        """``path`` -> ``target``, both under the root, as a relative symlink (sysfs's)."""
        p, t = self.root / path.lstrip("/"), self.root / target.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        t.mkdir(parents=True, exist_ok=True)
        p.symlink_to(os.path.relpath(t, p.parent))
        return self

    def iface(self, name: str, mtu: int) -> Tree:
        return self.write(f"/sys/class/net/{name}/mtu", f"{mtu}\n")

    def route(self, *rows: tuple[str, str, str, str, int]) -> Tree:
        """(iface, destination, gateway, mask, metric), addresses dotted."""

        def le(ip: str) -> str:
            return socket.inet_aton(ip)[::-1].hex().upper()

        lines = [
            f"{i}\t{le(d)}\t{le(g)}\t{'0003' if g != '0.0.0.0' else '0001'}\t0\t0\t{metric}\t"
            f"{le(m)}\t0\t0\t0"
            for i, d, g, m, metric in rows
        ]
        return self.write("/proc/net/route", ROUTE_HEAD + "\n".join(lines) + "\n")

    def gpu(self, addr: str, chain: str, numa: int = 0) -> Tree:
        dev = f"/sys/devices/{chain}/{addr}"
        self.link(f"/sys/bus/pci/devices/{addr}", dev)
        self.write(f"{dev}/vendor", "0x10de\n").write(f"{dev}/class", "0x030200\n")
        return self.write(f"{dev}/numa_node", f"{numa}\n")

    def rdma(self, name: str, addr: str, chain: str, numa: int = 0, state: str = "4: ACTIVE"):
        dev = f"/sys/devices/{chain}/{addr}"
        self.link(f"/sys/bus/pci/devices/{addr}", dev)
        self.write(f"{dev}/vendor", "0x15b3\n").write(f"{dev}/class", "0x020000\n")
        self.write(f"{dev}/numa_node", f"{numa}\n")
        self.link(f"/sys/class/infiniband/{name}/device", dev)
        self.write(f"/sys/class/infiniband/{name}/ports/1/state", state + "\n")
        return self.write(f"/sys/class/infiniband/{name}/ports/1/link_layer", "Ethernet\n")


NO_GPU = {"built": False, "gpus": [], "error": "built without CUDA", "driver_version": 0}
H200 = {
    "built": True,
    "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}],
    "driver_version": 13000,
    "runtime_version": 13000,
    "error": "",
}


def _announcement(ip: str, mac: str) -> bytes:
    return announcement_bytes(
        ip,
        mac,
        uuid="7a377bf7-76cb-4756-a4c5-7dddaed8354b",
        serial=b"1234567",
        hsb_ip_version=0x2602,
    )


def _no_bridge(ip: str, timeout: float, port: int):
    raise AssertionError("no bridge is configured: find_bridge must not be called")


@pytest.fixture
def tree(tmp_path):
    return Tree(tmp_path).write("/proc/self/status", USER_STATUS)


def machine(tree: Tree, **kw) -> Machine:
    kw.setdefault("cuda_info", lambda: NO_GPU)
    kw.setdefault("find_bridge", _no_bridge)
    kw.setdefault("environ", {})
    return Machine(root=tree.root, **kw)


def packet(**extra) -> dict:
    cfg = {"nic": "socket", "socket": {"mode": "packet", "interface": "eth1"}}
    cfg.update(extra)
    return load_config(cfg)


def udp(**extra) -> dict:
    cfg = {"nic": "socket", "socket": {"mode": "udp"}, "local": {"ip": "10.0.0.1"}}
    cfg.update(extra)
    return load_config(cfg)


LOOPBACK = load_config({"executor": "cpu"})


# ----------------------------------------------------------------------------- MTU
def test_mtu_passes_when_the_slot_holds_the_interfaces_frames(tree):
    tree.iface("eth1", 9000)
    c = doctor.check_mtu(machine(tree), packet(queues={"slot_bytes": 9024}))
    assert c.status == PASS and "MTU 9000" in c.detail


def test_mtu_fails_for_hsb_packets_over_the_mtu_and_names_both_fixes(tree):
    tree.iface("eth1", 1500)
    cfg = packet(
        handler="frames",
        qp={"transport": "UC"},
        hsb={"bridge": "192.168.0.2", "packet_bytes": 8192},
        queues={"slot_bytes": 9216},
    )
    c = doctor.check_mtu(machine(tree), cfg)
    assert c.status == FAIL and "8256 B" in c.detail
    assert "sudo ip link set dev eth1 mtu 8256" in c.fix
    assert "lower hsb.packet_bytes to 1408" in c.fix  # 1500 - 64, to 128-byte units


def test_mtu_fails_when_frames_outgrow_the_slot(tree):
    tree.iface("eth1", 9000)
    c = doctor.check_mtu(machine(tree), packet())  # slot_bytes 2048
    assert c.status == FAIL and "9014 B" in c.detail
    assert "sudo ip link set dev eth1 mtu 2034" in c.fix
    assert "queues.slot_bytes to 9024" in c.fix


def test_mtu_fails_for_doca_path_mtu_over_the_netdev(tree):
    tree.iface("ens1f0", 1500).rdma("mlx5_0", "0000:17:00.0", "pci0000:16/0000:16:02.0")
    tree.link("/sys/class/infiniband/mlx5_0/device/net/ens1f0", "/sys/class/net/ens1f0")
    c = doctor.check_mtu(machine(tree), load_config({"nic": "doca", "executor": "cuda"}))
    assert c.status == FAIL and "doca.mtu 4096" in c.detail
    assert "mtu 4160" in c.fix and "lower doca.mtu to 1024" in c.fix


def test_mtu_fails_naming_the_missing_interface_and_those_there(tree):
    tree.iface("eth0", 1500)
    c = doctor.check_mtu(machine(tree), packet())
    assert c.status == FAIL and "'eth1'" in c.detail and "eth0" in c.fix


def test_mtu_is_not_applicable_without_an_interface(tree):
    assert doctor.check_mtu(machine(tree), LOOPBACK).status == NA
    assert doctor.check_mtu(machine(tree), None).status == NA


# ----------------------------------------------------------------------------- rmem_max
def test_rmem_fails_below_what_the_socket_nic_asks_and_gives_the_sysctl(tree):
    tree.write("/proc/sys/net/core/rmem_max", "212992\n")
    c = doctor.check_rmem(machine(tree), udp())
    assert c.status == FAIL and "212992" in c.detail
    assert f"sudo sysctl -w net.core.rmem_max={64 << 20}" in c.fix
    assert "/etc/sysctl.d/" in c.fix


def test_rmem_passes_when_large_enough_or_when_forced_by_root(tree):
    tree.write("/proc/sys/net/core/rmem_max", f"{64 << 20}\n")
    assert doctor.check_rmem(machine(tree), udp()).status == PASS
    tree.write("/proc/sys/net/core/rmem_max", "212992\n").write("/proc/self/status", ROOT_STATUS)
    c = doctor.check_rmem(machine(tree), udp())
    assert c.status == PASS and "SO_RCVBUFFORCE" in c.detail


def test_rmem_is_not_applicable_off_the_socket_nic_or_on_the_ring(tree):
    assert doctor.check_rmem(machine(tree), LOOPBACK).status == NA
    ring = packet(handler="frames", qp={"transport": "UC"})  # rx_path auto: the mmap ring
    assert doctor.check_rmem(machine(tree), ring).status == NA


# ----------------------------------------------------------------------------- rp_filter
def _routes(tree: Tree) -> Tree:
    # eth1 holds 10.0.0.0/24 (local.ip 10.0.0.1); everything else by eth0's default route.
    return tree.route(
        ("eth0", "0.0.0.0", "192.168.1.1", "0.0.0.0", 100),
        ("eth0", "192.168.1.0", "0.0.0.0", "255.255.255.0", 100),
        ("eth1", "10.0.0.0", "0.0.0.0", "255.255.255.0", 0),
    )


def test_rp_filter_strict_fails_when_the_route_back_leaves_elsewhere(tree):
    _routes(tree).write("/proc/sys/net/ipv4/conf/all/rp_filter", "1\n")
    tree.write("/proc/sys/net/ipv4/conf/eth1/rp_filter", "1\n")
    c = doctor.check_rp_filter(machine(tree), udp(peer={"ip": "172.16.0.9"}))
    assert c.status == FAIL and "eth1" in c.detail and "eth0" in c.detail
    assert "net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.eth1.rp_filter=2" in c.fix


def test_rp_filter_passes_when_loose_or_when_the_route_matches(tree):
    _routes(tree).write("/proc/sys/net/ipv4/conf/all/rp_filter", "0\n")
    tree.write("/proc/sys/net/ipv4/conf/eth1/rp_filter", "2\n")
    assert doctor.check_rp_filter(machine(tree), udp(peer={"ip": "172.16.0.9"})).status == PASS
    tree.write("/proc/sys/net/ipv4/conf/eth1/rp_filter", "1\n")
    c = doctor.check_rp_filter(machine(tree), udp(peer={"ip": "10.0.0.2"}))
    assert c.status == PASS and "strict" in c.detail


def test_rp_filter_fails_without_a_route_to_the_peer(tree):
    tree.route(("eth1", "10.0.0.0", "0.0.0.0", "255.255.255.0", 0))
    c = doctor.check_rp_filter(machine(tree), udp(peer={"ip": "172.16.0.9"}))
    assert c.status == FAIL and "sudo ip route add 172.16.0.9/32" in c.fix


def test_rp_filter_is_not_applicable_in_packet_mode(tree):
    assert doctor.check_rp_filter(machine(tree), packet()).status == NA
    assert doctor.check_rp_filter(machine(tree), None).status == NA


# ----------------------------------------------------------------------------- ARP
def _arp(tree: Tree, flags: str = "0x2") -> Tree:
    row = f"10.0.0.2         0x1         {flags}         02:aa:bb:cc:dd:ee     *        eth1\n"
    return tree.write("/proc/net/arp", ARP_HEAD + row)


def test_arp_passes_for_mac_auto_with_a_resolved_entry(tree):
    c = doctor.check_arp(machine(_arp(tree)), packet(peer={"mac": "auto", "ip": "10.0.0.2"}))
    assert c.status == PASS and "02:aa:bb:cc:dd:ee" in c.detail


def test_arp_fails_for_mac_auto_with_an_incomplete_entry_and_says_how_to_resolve(tree):
    cfg = packet(peer={"mac": "auto", "ip": "10.0.0.2"})
    c = doctor.check_arp(machine(_arp(tree, flags="0x0")), cfg)
    assert c.status == FAIL and "ping -c 1 -I eth1 10.0.0.2" in c.fix
    assert "ip neigh replace 10.0.0.2" in c.fix


def test_arp_fails_when_the_given_mac_is_not_the_kernels(tree):
    cfg = packet(peer={"mac": "02:00:00:00:00:99", "ip": "10.0.0.2"})
    c = doctor.check_arp(machine(_arp(tree)), cfg)
    assert c.status == FAIL and c.fix == "set peer.mac: 02:aa:bb:cc:dd:ee (or auto)"


def test_arp_is_not_applicable_in_udp_mode(tree):
    assert doctor.check_arp(machine(tree), udp()).status == NA


# ----------------------------------------------------------------------------- privileges
def test_privileges_fail_for_a_plain_user_and_name_setcap(tree):
    c = doctor.check_privileges(machine(tree), packet())
    assert c.status == FAIL and "uid 1000" in c.detail
    assert "sudo setcap cap_net_raw,cap_net_admin+ep" in c.fix and "socket.mode: udp" in c.fix


def test_privileges_pass_for_root_or_cap_net_raw(tree):
    assert doctor.check_privileges(machine(tree.write("/proc/self/status", RAW_STATUS)), packet())
    c = doctor.check_privileges(machine(tree), packet())
    assert c.status == PASS and "CAP_NET_RAW" in c.detail
    tree.write("/proc/self/status", ROOT_STATUS)
    assert doctor.check_privileges(machine(tree), packet()).status == PASS


def test_privileges_are_not_applicable_in_udp_mode(tree):
    assert doctor.check_privileges(machine(tree), udp()).status == NA


# ----------------------------------------------------------------------------- GPU
CUDA = load_config({"executor": "cuda"})


def test_gpu_passes_with_a_visible_gpu(tree):
    c = doctor.check_gpu(machine(tree, cuda_info=lambda: H200), CUDA)
    assert c.status == PASS and "NVIDIA H200" in c.detail and "sm 9.0" in c.detail


def test_gpu_fails_for_a_build_without_cuda_when_the_config_needs_one(tree):
    c = doctor.check_gpu(machine(tree), CUDA)
    assert c.status == FAIL and "needed by executor cuda" in c.detail and "RT_CUDA=ON" in c.fix


def test_gpu_fails_naming_the_missing_driver_or_the_runtimes_error(tree):
    built = {"built": True, "gpus": [], "error": "no CUDA-capable device is detected"}
    c = doctor.check_gpu(machine(tree, cuda_info=lambda: built), CUDA)
    assert c.status == FAIL and "no NVIDIA driver" in c.detail and "nvidia-smi" in c.fix
    tree.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")
    m = machine(tree, cuda_info=lambda: built, environ={"CUDA_VISIBLE_DEVICES": ""})
    c = doctor.check_gpu(m, CUDA)
    assert c.status == FAIL and "no CUDA-capable device" in c.detail
    assert "CUDA_VISIBLE_DEVICES" in c.fix


def test_gpu_is_not_applicable_for_the_cpu_executor(tree):
    assert doctor.check_gpu(machine(tree), LOOPBACK).status == NA


# ----------------------------------------------------------------------------- topology
DOCA = load_config({"nic": "doca", "executor": "cuda"})


def test_topology_passes_for_a_gpu_and_nic_under_one_switch(tree):
    switch = "pci0000:00/0000:00:01.0/0000:01:00.0"
    tree.gpu("0000:03:00.0", f"{switch}/0000:02:00.0")
    tree.rdma("mlx5_0", "0000:04:00.0", f"{switch}/0000:02:08.0")
    c = doctor.check_topology(machine(tree), DOCA)
    assert c.status == PASS and "PIX/PXB" in c.detail


def test_topology_passes_through_the_host_bridge_with_a_note(tree):
    tree.gpu("0000:03:00.0", "pci0000:00/0000:00:01.0")
    tree.rdma("mlx5_0", "0000:04:00.0", "pci0000:00/0000:00:02.0")
    c = doctor.check_topology(machine(tree), DOCA)
    assert c.status == PASS and "PHB" in c.detail and "switch would be faster" in c.detail


def test_topology_fails_across_numa_nodes_and_picks_the_nearest_gpu(tree):
    tree.gpu("0000:03:00.0", "pci0000:00/0000:00:01.0", numa=0)
    tree.rdma("mlx5_0", "0000:84:00.0", "pci0000:80/0000:80:01.0", numa=1)
    c = doctor.check_topology(machine(tree), DOCA)
    assert c.status == FAIL and "SYS" in c.detail and "nvidia-smi topo -m" in c.fix
    tree.gpu("0000:85:00.0", "pci0000:80/0000:80:02.0", numa=1)  # a second GPU, nearer
    c = doctor.check_topology(machine(tree), DOCA)
    assert c.status == PASS and "0000:85:00.0" in c.detail


def test_topology_fails_for_a_gpu_pci_that_is_not_there(tree):
    tree.gpu("0000:03:00.0", "pci0000:00/0000:00:01.0")
    tree.rdma("mlx5_0", "0000:04:00.0", "pci0000:00/0000:00:02.0")
    cfg = load_config({"nic": "doca", "executor": "cuda", "doca": {"gpu_pci": "0000:99:00.0"}})
    c = doctor.check_topology(machine(tree), cfg)
    assert c.status == FAIL and "0000:03:00.0" in c.detail


def test_topology_is_not_applicable_for_a_virtual_interface_or_no_nic(tree):
    tree.iface("eth1", 1500).gpu("0000:03:00.0", "pci0000:00/0000:00:01.0")
    assert doctor.check_topology(machine(tree), packet()).status == NA  # no device link
    assert doctor.check_topology(machine(tree), LOOPBACK).status == NA


# ----------------------------------------------------------------------------- peer memory
def test_peer_memory_passes_with_nvidia_peermem_loaded(tree):
    tree.write("/proc/modules", "nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 - Live 0x0\n")
    c = doctor.check_peer_memory(machine(tree), DOCA)
    assert c.status == PASS and "nvidia-peermem" in c.detail


def test_peer_memory_passes_with_dmabuf_from_the_open_module(tree):
    tree.write(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15\n",
    ).write("/proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    c = doctor.check_peer_memory(machine(tree), DOCA)
    assert c.status == PASS and "dma-buf" in c.detail


def test_peer_memory_fails_with_the_proprietary_module_and_no_peermem(tree):
    tree.write(
        "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535\n"
    ).write("/proc/sys/kernel/osrelease", "6.8.0\n").write("/proc/modules", "nvidia 1 1\n")
    c = doctor.check_peer_memory(machine(tree), DOCA)
    assert c.status == FAIL and "proprietary" in c.detail
    assert "sudo modprobe nvidia-peermem" in c.fix


def test_peer_memory_is_not_applicable_off_doca(tree):
    assert doctor.check_peer_memory(machine(tree), packet()).status == NA
    assert doctor.check_peer_memory(machine(tree), None).status == NA  # no RDMA device


# ----------------------------------------------------------------------------- DOCA, RDMA
def test_doca_sdk_fails_with_the_real_probe_on_an_empty_root(tree):
    c = doctor.check_doca_sdk(machine(tree), DOCA)  # the C++ probe, looking under tmp_path
    assert c.status == FAIL and str(tree.root / "opt/mellanox/doca") in c.detail
    assert "DOCA_PATH" in c.fix


def test_doca_sdk_passes_when_the_probe_finds_it_under_the_root(tree):
    asked = []

    def probe(sdk: str) -> dict:
        asked.append(sdk)
        return {
            "sdk_path": sdk,
            "libraries_found": ["libdoca_common.so"],
            "libraries_missing": [],
            "symbols_missing": [],
        }

    m = machine(tree, doca_probe=probe, environ={"DOCA_PATH": "/opt/doca"})
    assert doctor.check_doca_sdk(m, DOCA).status == PASS
    assert asked == [str(tree.root / "opt/doca")]


def test_doca_sdk_and_rdma_are_not_applicable_off_doca(tree):
    assert doctor.check_doca_sdk(machine(tree), udp()).status == NA
    assert doctor.check_rdma(machine(tree), udp()).status == NA


def test_rdma_passes_with_an_active_roce_port(tree):
    tree.rdma("mlx5_0", "0000:04:00.0", "pci0000:00/0000:00:02.0")
    c = doctor.check_rdma(machine(tree), DOCA)
    assert c.status == PASS and "mlx5_0/1 4: ACTIVE Ethernet" in c.detail


def test_rdma_fails_with_no_device_the_wrong_device_or_a_port_down(tree):
    c = doctor.check_rdma(machine(tree), DOCA)
    assert c.status == FAIL and "modprobe mlx5_ib" in c.fix
    tree.rdma("mlx5_1", "0000:04:00.1", "pci0000:00/0000:00:02.0", state="1: DOWN")
    c = doctor.check_rdma(machine(tree), DOCA)
    assert c.status == FAIL and c.fix == "set doca.device to one of: mlx5_1"
    cfg = load_config({"nic": "doca", "executor": "cuda", "doca": {"device": "mlx5_1"}})
    c = doctor.check_rdma(machine(tree), cfg)
    assert c.status == FAIL and "1: DOWN" in c.detail and "ibv_devinfo" in c.fix


# ----------------------------------------------------------------------------- HSB
HSB = {"handler": "frames", "qp": {"transport": "UC"}}


def test_hsb_passes_when_the_bridge_announces_itself(tree):
    announcement = parse_announcement(
        _announcement("192.168.0.2", "02:11:22:33:44:55"), "192.168.0.2"
    )
    asked = []

    def find(ip: str, timeout: float, port: int):
        asked.append((ip, timeout, port))
        return announcement

    cfg = load_config({**HSB, "hsb": {"bridge": "192.168.0.2", "enumeration_timeout_s": 0.5}})
    c = doctor.check_hsb(machine(tree, find_bridge=find), cfg)
    assert c.status == PASS and "02:11:22:33:44:55" in c.detail
    assert asked == [("192.168.0.2", 0.5, 12267)]  # the configuration's bound on the wait


def test_hsb_fails_with_what_enumeration_heard_and_the_firewall_fix(tree):
    def find(ip: str, timeout: float, port: int):
        raise EnumerationError(f"no announcement from {ip} within {timeout:g} s")

    cfg = load_config({**HSB, "hsb": {"bridge": "192.168.0.2"}})
    c = doctor.check_hsb(machine(tree, find_bridge=find), cfg)
    assert c.status == FAIL and "no announcement from 192.168.0.2 within 3 s" in c.detail
    assert "--dport 12267" in c.fix


def test_hsb_is_not_applicable_without_a_bridge(tree):
    assert doctor.check_hsb(machine(tree), packet()).status == NA


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hsb_hears_a_real_announcement_on_localhost(tree):
    # A bridge announces itself over and over (hololink: once a second); this one every 20 ms
    # until the check is done, so the check's listener hears one whenever it binds.
    port, done = _free_udp_port(), threading.Event()

    def announce() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            while not done.wait(0.02):
                s.sendto(_announcement("127.0.0.1", "02:00:00:00:00:42"), ("127.0.0.1", port))

    sender = threading.Thread(target=announce, daemon=True)
    sender.start()
    try:
        cfg = load_config({**HSB, "hsb": {"bridge": "127.0.0.1", "enumeration_port": port}})
        c = doctor.check_hsb(Machine(root=tree.root), cfg)
    finally:
        done.set()
        sender.join(timeout=5)
    assert c.status == PASS and "02:00:00:00:00:42" in c.detail


# ----------------------------------------------------------------------------- the CLI
def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["doctor", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_exits_0_when_nothing_fails(tree, tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("executor: cpu\nnic: loopback\n")
    rc, out, _ = _cli(capsys, "--root", str(tree.root), "--config", str(tmp_path / "t.yaml"))
    assert rc == 0 and "doctor: nothing failed (11 checks" in out


def test_cli_exits_1_and_prints_the_fix_when_a_check_fails(tree, tmp_path, capsys):
    (tmp_path / "t.yaml").write_text(
        "executor: cpu\nnic: socket\nsocket:\n  mode: packet\n  interface: eth9\n"
    )
    rc, out, _ = _cli(capsys, "--root", str(tree.root), "--config", str(tmp_path / "t.yaml"))
    assert rc == 1 and "FAIL  interface MTU" in out and "fix: run it as root (sudo), or give" in out


def test_cli_json_is_one_object_with_the_checks(tree, tmp_path, capsys):
    (tmp_path / "t.yaml").write_text("executor: cpu\nnic: socket\nsocket:\n  mode: udp\n")
    rc, out, _ = _cli(
        capsys, "--json", "--root", str(tree.root), "--config", str(tmp_path / "t.yaml")
    )
    report = json.loads(out)
    assert rc == (1 if report["counts"]["fail"] else 0) and report["ok"] == (rc == 0)
    assert [c["name"] for c in report["checks"]] == [
        f(machine(tree), None).name for f in doctor.CHECKS
    ]
    rmem = next(c for c in report["checks"] if c["name"].startswith("socket receive"))
    assert rmem["status"] == FAIL  # a plain user, and no rmem_max in the faked /proc


def test_cli_bad_usage_is_exit_2_with_the_problem(tree, tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("executor: cpu\nnick: socket\n")
    rc, _, err = _cli(capsys, "--config", str(tmp_path / "bad.yaml"))
    assert rc == 2 and "bad.yaml:2" in err and "nick" in err
    rc, _, err = _cli(capsys, "--root", str(tmp_path / "nowhere"))
    assert rc == 2 and "--root" in err and "not a directory" in err
    rc, _, err = _cli(capsys, "--frobnicate")
    assert rc == 2 and "--frobnicate" in err


def test_cli_on_this_machine_reports_every_check(capsys):
    rc, out, _ = _cli(capsys, "--json")
    report = json.loads(out)
    assert rc in (0, 1) and rc == (1 if report["counts"]["fail"] else 0)
    assert len(report["checks"]) == len(doctor.CHECKS)
    for c in report["checks"]:
        assert set(c) == {"name", "status", "detail", "fix"} and c["detail"]
        assert c["status"] in (PASS, FAIL, NA)
        assert c["status"] != FAIL or c["fix"]  # every failure says what to do
    assert sum(report["counts"].values()) == len(doctor.CHECKS)


# ----------------------------------------------------------------------------- hostile trees
CHILD_TIMEOUT_S = 60  # the child's import and 11 checks take about 2 s on a loaded machine
CHILD_DATA_BYTES = 2 << 30  # far above what doctor needs, far below what /dev/zero would fill
PACKET_YAML = "executor: cpu\nnic: socket\nsocket:\n  mode: packet\n  interface: eth1\n"
UDP_YAML = "executor: cpu\nnic: socket\nsocket:\n  mode: udp\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (CHILD_DATA_BYTES, CHILD_DATA_BYTES))


def _doctor_child(tmp_path: Path, root: Path, yaml: str, *extra: str) -> tuple[int, dict]:
    """``doctor --json`` in a child, bounded in time and memory. A child past its time is
    killed by subprocess (SIGKILL: no disposition of the child's to set)."""
    (tmp_path / "t.yaml").write_text(yaml)
    config = str(tmp_path / "t.yaml")
    argv = ["doctor", "--json", "--root", str(root), "--config", config, *extra]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "roce_transceiver.cli", *argv],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"doctor still running after {CHILD_TIMEOUT_S} s: a read blocks")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _named(report: dict, prefix: str) -> dict:
    return next(c for c in report["checks"] if c["name"].startswith(prefix))


def test_a_fifo_at_the_mtu_is_a_failure_naming_it_not_a_hang(tree, tmp_path):
    mtu = tree.root / "sys/class/net/eth1/mtu"
    mtu.parent.mkdir(parents=True)
    os.mkfifo(mtu)  # nobody ever writes: an open or read of it waits for ever
    rc, report = _doctor_child(tmp_path, tree.root, PACKET_YAML)
    c = _named(report, "interface MTU")
    assert rc == 1 and c["status"] == FAIL
    assert str(mtu) in c["detail"] and "FIFO" in c["detail"] and c["fix"]


def test_a_link_to_dev_zero_at_rmem_max_is_a_failure_naming_it_not_a_flood(tree, tmp_path):
    rmem = tree.root / "proc/sys/net/core/rmem_max"
    rmem.parent.mkdir(parents=True)
    rmem.symlink_to("/dev/zero")
    rc, report = _doctor_child(tmp_path, tree.root, UDP_YAML)
    c = _named(report, "socket receive buffer")
    assert rc == 1 and c["status"] == FAIL
    assert str(rmem) in c["detail"] and "character device" in c["detail"]


def test_a_fifo_where_the_doca_probe_dlopens_ends_at_the_time_limit(tree, tmp_path):
    # The probe is C++ (dlopen): only the time limit ends it, which needs it to run without
    # the GIL. "lib" is the last folder the probe tries, so it gets there on every host.
    lib = tree.root / "opt/mellanox/doca/lib/libdoca_common.so"
    lib.parent.mkdir(parents=True)
    os.mkfifo(lib)
    started = time.monotonic()
    rc, report = _doctor_child(
        tmp_path, tree.root, "executor: cuda\nnic: doca\n", "--timeout", "10"
    )
    assert time.monotonic() - started < CHILD_TIMEOUT_S
    c = _named(report, "DOCA SDK")
    assert rc == 1 and c["status"] == FAIL and "did not finish within 10 s" in c["detail"]
    assert str(tree.root / "opt/mellanox/doca") in c["detail"]
    assert "not run" in _named(report, "RDMA devices")["detail"]


@pytest.mark.parametrize("value", ["-1", "0", "67", str(10**23), "2147483648"])
def test_an_mtu_outside_the_kernels_range_is_a_failure_naming_path_and_value(tree, value):
    tree.write("/sys/class/net/eth1/mtu", value + "\n")
    c = doctor.check_mtu(machine(tree), packet())
    assert c.status == FAIL and c.fix
    assert str(tree.root / "sys/class/net/eth1/mtu") in c.detail
    assert f"holds {value}, outside 68..2147483647" in c.detail


@pytest.mark.parametrize("value", ["1500x", "", "0x5dc", "1 500", "\u0661\u0665\u0660\u0660"])
def test_an_mtu_that_is_no_decimal_number_is_a_failure_naming_the_value(tree, value):
    tree.write("/sys/class/net/eth1/mtu", value + "\n")
    c = doctor.check_mtu(machine(tree), packet())
    assert c.status == FAIL and repr(value) in c.detail and "not an integer" in c.detail


@pytest.mark.parametrize("value", ["zz", "3", "-1"])
def test_a_garbage_rp_filter_is_a_failure_not_off(tree, value):
    _routes(tree).write("/proc/sys/net/ipv4/conf/all/rp_filter", "0\n")
    tree.write("/proc/sys/net/ipv4/conf/eth1/rp_filter", value + "\n")
    c = doctor.check_rp_filter(machine(tree), udp(peer={"ip": "172.16.0.9"}))
    assert c.status == FAIL and not c.detail.startswith("rp_filter off")
    assert str(tree.root / "proc/sys/net/ipv4/conf/eth1/rp_filter") in c.detail
    assert value in c.detail


def test_a_directory_where_the_mtu_should_be_is_a_failure_saying_so(tree):
    (tree.root / "sys/class/net/eth1/mtu").mkdir(parents=True)
    c = doctor.check_mtu(machine(tree), packet())
    assert c.status == FAIL and "is a directory, not a regular file" in c.detail
    assert str(tree.root / "sys/class/net/eth1/mtu") in c.detail


@pytest.mark.parametrize(
    "call, error",
    [
        ("open", PermissionError(errno.EACCES, "Permission denied")),
        ("read", OSError(errno.EINVAL, "Invalid argument")),  # sysfs: speed of a link down
    ],
)
def test_a_file_the_kernel_refuses_is_a_failure_naming_it_and_the_error(
    tree, monkeypatch, call, error
):
    # Any user, root too: the refusal comes from the system call (as the kernel would give
    # it), for this one file only.
    tree.write("/proc/sys/net/core/rmem_max", "212992\n")
    rmem = tree.root / "proc/sys/net/core/rmem_max"
    real_open, real_read, refused = os.open, os.read, set()

    def fake_open(path, flags, *args):
        if Path(path) == rmem and call == "open":
            raise error
        fd = real_open(path, flags, *args)
        if Path(path) == rmem:
            refused.add(fd)
        return fd

    def fake_read(fd, n):
        if fd in refused:
            raise error
        return real_read(fd, n)

    monkeypatch.setattr(doctor.os, "open", fake_open)
    monkeypatch.setattr(doctor.os, "read", fake_read)
    c = doctor.check_rmem(machine(tree), udp())
    monkeypatch.undo()
    assert c.status == FAIL and f"{rmem} cannot be read: {error.strerror}" in c.detail
    assert ("sudo chmod a+r" in c.fix) == (call == "open") and c.fix


def test_a_symlink_loop_is_a_failure_naming_it(tree):
    loop = tree.root / "proc/sys/net/core/rmem_max"
    loop.parent.mkdir(parents=True)
    loop.symlink_to("rmem_max")  # itself: ELOOP for every user, root too
    c = doctor.check_rmem(machine(tree), udp())
    assert c.status == FAIL and str(loop) in c.detail and "symbolic links" in c.detail


def test_a_file_larger_than_a_kernel_attribute_is_a_failure(tree):
    tree.write("/sys/class/net/eth1/mtu", "1" * 8192)  # sysfs writes one page at most
    c = doctor.check_mtu(machine(tree), packet())
    assert c.status == FAIL and "more than 4096 bytes" in c.detail


def test_a_file_that_is_not_text_is_a_failure_naming_the_byte(tree):
    (tree.root / "proc/sys/kernel").mkdir(parents=True)
    (tree.root / "proc/sys/kernel/osrelease").write_bytes(b"6.8\xff\n")
    tree.write("/proc/modules", "nvidia_peermem 1 0 - Live 0x0\n")
    c = doctor.check_peer_memory(machine(tree), DOCA)
    assert c.status == FAIL and "byte 0xff at offset 3" in c.detail


def test_a_process_status_with_garbage_ids_is_a_failure_not_a_traceback(tree):
    tree.write("/proc/self/status", "Uid:\tme\tme\tme\tme\nCapEff:\tzz\n")
    c = doctor.check_privileges(machine(tree), packet())
    assert c.status == FAIL and "'me'" in c.detail
    assert str(tree.root / "proc/self/status") in c.detail


def test_a_route_table_with_a_garbage_row_is_a_failure_naming_the_line(tree):
    tree.write("/proc/net/route", ROUTE_HEAD + "eth1\t1FFFFFFFFF\t00000000\t0001\t0\t0\t0\t0\n")
    c = doctor.check_rp_filter(machine(tree), udp(peer={"ip": "172.16.0.9"}))
    assert c.status == FAIL and "line 2's Destination" in c.detail
    assert "holds 0x1FFFFFFFFF, outside 0x0..0xFFFFFFFF" in c.detail


def test_a_module_list_with_a_blank_line_is_read_past(tree):
    tree.write("/proc/modules", "  \nnvidia_peermem 16384 0 - Live 0x0\n")
    assert doctor.check_peer_memory(machine(tree), DOCA).status == PASS


def test_a_numa_node_out_of_range_is_a_failure_naming_it(tree):
    tree.gpu("0000:03:00.0", "pci0000:00/0000:00:01.0", numa=0)
    tree.rdma("mlx5_0", "0000:84:00.0", "pci0000:80/0000:80:01.0", numa=5000)
    c = doctor.check_topology(machine(tree), DOCA)
    assert c.status == FAIL and "holds 5000, outside -1..1023" in c.detail


def test_a_check_that_never_returns_ends_the_run_at_the_time_limit(tree):
    # A probe that does not answer (a wedged driver): the run ends at its limit with the
    # checks done so far, the one that hung named, and the rest reported as not run.
    release = threading.Event()

    def hung() -> dict:
        release.wait(60)
        return NO_GPU

    started, m = time.monotonic(), machine(tree, cuda_info=hung)
    try:
        checks = doctor.run_checks(LOOPBACK, m, timeout_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 30 and m.left_behind
    names = [c.name for c in checks]
    assert names == [f.name for f in doctor.CHECKS]
    gpu = names.index("GPU and driver")
    assert all(c.status != FAIL for c in checks[:gpu])
    assert checks[gpu].status == FAIL and "did not finish within 0.5 s" in checks[gpu].detail
    assert "asking the CUDA runtime" in checks[gpu].detail
    assert all(c.status == FAIL and "not run" in c.detail for c in checks[gpu + 1 :])


def test_cli_timeout_must_be_a_positive_number(tree, tmp_path, capsys):
    rc, _, err = _cli(capsys, "--root", str(tree.root), "--timeout", "0")
    assert rc == 2 and "--timeout" in err and "0: must be more than 0" in err
    (tmp_path / "t.yaml").write_text("executor: cpu\nnic: loopback\n")
    argv = ("--root", str(tree.root), "--config", str(tmp_path / "t.yaml"), "--timeout", "20")
    rc, out, _ = _cli(capsys, *argv)
    assert rc == 0 and "doctor: nothing failed (11 checks" in out
