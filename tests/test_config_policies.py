"""Policies live with their owners, not in the configuration's translation (issue 29).

Goal: the custom.params packer (custom_params.py), cuda.warps' auto (cuda_warps.py) and
socket.rx_path's auto (socket_rx.py) are their owners' code, still importable from config as
before; the translation for the core (config.core_config) reads nothing but the configuration:
``auto`` MACs are looked up before it (netinfo.with_resolved_macs), which the Transceiver
does once.

Oracles: identity of the old names with the owners' objects; the loopback interface's own
address in sysfs ("lo" has 00:00:00:00:00:00 on Linux); the configuration left as it was.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from roce_transceiver import config, cuda_warps, custom_params, netinfo, socket_rx
from roce_transceiver.config import core_config, load_config
from roce_transceiver.netinfo import NetInfoError, with_resolved_macs
from roce_transceiver.schema import ConfigError


def test_the_old_names_are_the_owners_objects() -> None:
    assert config.custom_params_bytes is custom_params.custom_params_bytes
    assert config.pack_params is custom_params.pack_params
    assert config.ParamsError is custom_params.ParamsError
    assert config.MAX_CUSTOM_PARAMS == custom_params.MAX_CUSTOM_PARAMS
    assert config.cuda_warps is cuda_warps.cuda_warps
    assert config.rx_path is socket_rx.rx_path


def _udp(mac_local: str = "02:00:00:00:00:01", mac_peer: str = "02:00:00:00:00:02") -> dict:
    return load_config(
        {
            "nic": "socket",
            "socket": {"mode": "udp"},
            "local": {"mac": mac_local},
            "peer": {"mac": mac_peer},
        }
    )


def test_core_config_does_no_lookup_and_names_an_unresolved_mac() -> None:
    cfg = load_config(
        {
            "nic": "socket",
            "socket": {"mode": "packet", "interface": "lo"},
            "peer": {"mac": "auto", "ip": "10.0.0.2"},
        }
    )
    with pytest.raises(ConfigError) as e:
        core_config(cfg, "cpu", None)
    assert e.value.key == "peer.mac" and "look it up first" in str(e.value)


@pytest.mark.skipif(not Path("/sys/class/net/lo/address").exists(), reason="no sysfs here")
def test_auto_macs_are_resolved_on_a_copy() -> None:
    cfg = load_config(
        {"nic": "socket", "socket": {"mode": "packet", "interface": "lo"}, "local": {"mac": "auto"}}
    )
    before = copy.deepcopy(cfg)
    out = with_resolved_macs(cfg)
    assert out["local"]["mac"] == Path("/sys/class/net/lo/address").read_text().strip()
    assert out["peer"]["mac"] == cfg["peer"]["mac"]
    assert cfg == before  # the caller's configuration keeps its auto
    assert core_config(out, "cpu", None)["local_mac"] == bytes(
        int(p, 16) for p in out["local"]["mac"].split(":")
    )


def test_a_failed_lookup_names_its_side(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_entry(ip: str, interface: str) -> str:
        raise NetInfoError(f"no neighbour entry for {ip} on {interface}")

    monkeypatch.setattr(netinfo, "neighbour_mac", no_entry)
    cfg = load_config(
        {
            "nic": "socket",
            "socket": {"mode": "packet", "interface": "lo"},
            "peer": {"mac": "auto", "ip": "10.0.0.2"},
        }
    )
    with pytest.raises(NetInfoError) as e:
        with_resolved_macs(cfg)
    assert e.value.side == "peer" and "10.0.0.2" in str(e.value)


def test_a_configuration_without_auto_is_returned_as_it_is() -> None:
    cfg = _udp()
    assert with_resolved_macs(cfg) is cfg
