"""MAC addresses for ``auto`` (roce_transceiver.netinfo), from sysfs and /proc/net/arp.

Oracles: files written by the test in the kernel's formats, and ``lo``'s real sysfs entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roce_transceiver.netinfo import NetInfoError, interface_mac, neighbour_mac

ARP = """IP address       HW type     Flags       HW address            Mask     Device
10.0.0.2         0x1         0x2         aa:bb:cc:dd:ee:02     *        veth0
10.0.0.3         0x1         0x0         00:00:00:00:00:00     *        veth0
10.0.0.2         0x1         0x2         aa:bb:cc:dd:ee:99     *        eth9
"""


def test_neighbour_mac_takes_the_complete_entry_on_the_interface(tmp_path: Path) -> None:
    arp = tmp_path / "arp"
    arp.write_text(ARP)
    assert neighbour_mac("10.0.0.2", "veth0", arp) == "aa:bb:cc:dd:ee:02"
    assert neighbour_mac("10.0.0.2", "eth9", arp) == "aa:bb:cc:dd:ee:99"
    with pytest.raises(NetInfoError, match=r"no neighbour entry for 10\.0\.0\.3 on veth0"):
        neighbour_mac("10.0.0.3", "veth0", arp)  # incomplete: flags 0x0
    with pytest.raises(NetInfoError, match="cannot read"):
        neighbour_mac("10.0.0.2", "veth0", tmp_path / "missing")


def test_interface_mac_reads_sysfs(tmp_path: Path) -> None:
    (tmp_path / "veth7").mkdir()
    (tmp_path / "veth7" / "address").write_text("02:11:22:33:44:55\n")
    assert interface_mac("veth7", tmp_path) == "02:11:22:33:44:55"
    with pytest.raises(NetInfoError, match="interface 'nope' not found"):
        interface_mac("nope", tmp_path)
    if Path("/sys/class/net/lo/address").exists():
        assert interface_mac("lo") == "00:00:00:00:00:00"
