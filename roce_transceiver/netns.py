"""A network namespace joined to this one by a veth pair, made and removed (root).

Used by the tests and by ``bench stream``: the peer runs inside the namespace, the
transceiver outside, so frames cross the kernel's network stack. Only what is created here
is touched, named after the process id, and removed on the way out whatever happened.

Made with iproute2's ``ip``; where it is missing (the GPU machine), with pyroute2 (netlink from
Python) if that is installed. Running a command inside the namespace (``VethNamespace.exec``)
needs ``ip``; code that only opens sockets there (``inside``) does not.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

__all__ = ["NetnsError", "VethNamespace", "inside", "run_cmd", "veth_namespace", "why_not"]

T = TypeVar("T")
_CLONE_NEWNET = 0x40000000


class NetnsError(RuntimeError):
    """A command that sets up the namespace failed; the message has its stderr."""


@dataclass(frozen=True)
class VethNamespace:
    namespace: str
    ours: str  # our end of the pair, in this namespace
    theirs: str  # the other end, inside the namespace

    def exec(self, *cmd: str) -> list[str]:
        """``cmd`` to run inside the namespace."""
        return ["ip", "netns", "exec", self.namespace, *cmd]

    def mac(self, which: str) -> str:
        """The MAC of ``ours`` or ``theirs`` (asked of the kernel inside the namespace)."""
        if which == "ours":
            return Path(f"/sys/class/net/{self.ours}/address").read_text().strip()
        return inside(self.namespace, lambda: _interface_mac(self.theirs))


_SIOCGIFHWADDR = 0x8927


def _interface_mac(name: str) -> str:
    """``name``'s MAC in the calling thread's network namespace (sysfs shows the namespace it
    was mounted in, not the thread's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = fcntl.ioctl(s.fileno(), _SIOCGIFHWADDR, struct.pack("256s", name.encode()[:15]))
    return ":".join(f"{b:02x}" for b in req[18:24])


def inside(namespace: str, make: Callable[[], T]) -> T:
    """``make()`` run with the network namespace ``namespace`` as its own: a socket it opens
    lives there and stays there. It runs on a thread of its own (setns changes only the calling
    thread's namespace), which ends with it; this thread is untouched."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f"/run/netns/{namespace}") as ns:
                if libc.setns(ns.fileno(), _CLONE_NEWNET) != 0:
                    raise NetnsError(f"setns {namespace}: {os.strerror(ctypes.get_errno())}")
            result.append(make())
        except BaseException as e:  # handed to the caller's thread
            error.append(e)

    worker = threading.Thread(target=run, name=f"in-{namespace}")
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():
        raise NetnsError(f"{namespace}: setting up inside the namespace took over 30 s")
    if error:
        raise error[0]
    return result[0]


def run_cmd(*cmd: str, timeout: float = 20) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def _pyroute2_usable() -> bool:
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return False
    return True


def why_not(exec_needed: bool = True) -> str | None:
    """Why a namespace cannot be made here, or None; ``exec_needed``: commands will run inside
    it (``VethNamespace.exec``), which takes iproute2."""
    if os.geteuid() != 0:
        return "needs root: creates a network namespace and a veth pair"
    if shutil.which("ip"):
        return None
    if exec_needed:
        return "needs iproute2 (ip) to create a namespace"
    if not _pyroute2_usable():
        return "needs iproute2 (ip) or pyroute2 to create a namespace"
    return None


def _disable_ipv6(interface: str) -> None:
    """No IPv6 on ``interface`` (no router solicitations in the captures): its sysctl, written
    in the calling thread's namespace."""
    Path(f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6").write_text("1\n")


@contextmanager
def _with_pyroute2(v: VethNamespace, mtu: int | None) -> Iterator[VethNamespace]:
    from pyroute2 import IPRoute, NetNS, netns

    netns.create(v.namespace)
    try:
        with IPRoute() as ip:
            ip.link("add", ifname=v.ours, kind="veth", peer=v.theirs)
            ip.link("set", index=ip.link_lookup(ifname=v.theirs)[0], net_ns_fd=v.namespace)
            ours = ip.link_lookup(ifname=v.ours)[0]
            _disable_ipv6(v.ours)
            if mtu:
                ip.link("set", index=ours, mtu=mtu)
            ip.link("set", index=ours, state="up")
        inside(v.namespace, lambda: _disable_ipv6(v.theirs))
        with NetNS(v.namespace) as ns:
            theirs = ns.link_lookup(ifname=v.theirs)[0]
            if mtu:
                ns.link("set", index=theirs, mtu=mtu)
            ns.link("set", index=theirs, state="up")
        yield v
    finally:
        try:
            with IPRoute() as ip:
                for index in ip.link_lookup(ifname=v.ours):
                    ip.link("del", index=index)
        finally:
            netns.remove(v.namespace)


@contextmanager
def veth_namespace(tag: str | None = None, mtu: int | None = None) -> Iterator[VethNamespace]:
    """A namespace and a veth pair between it and us, both ends up, IPv6 off (no chatter),
    with ``mtu`` on both ends when given (4 KiB RoCE payloads need more than 1500)."""
    reason = why_not(exec_needed=False)
    if reason:
        raise NetnsError(reason)
    tag = tag or f"rt{os.getpid() % 100000}"
    v = VethNamespace(f"{tag}ns", f"{tag}a", f"{tag}b")
    if not shutil.which("ip"):
        with _with_pyroute2(v, mtu):
            yield v
        return
    run_cmd("ip", "netns", "add", v.namespace)
    try:
        run_cmd("ip", "link", "add", v.ours, "type", "veth", "peer", "name", v.theirs)
        run_cmd("ip", "link", "set", v.theirs, "netns", v.namespace)
        run_cmd("sysctl", "-q", "-w", f"net.ipv6.conf.{v.ours}.disable_ipv6=1")
        run_cmd(*v.exec("sysctl", "-q", "-w", f"net.ipv6.conf.{v.theirs}.disable_ipv6=1"))
        if mtu:
            run_cmd("ip", "link", "set", v.ours, "mtu", str(mtu))
            run_cmd(*v.exec("ip", "link", "set", v.theirs, "mtu", str(mtu)))
        run_cmd("ip", "link", "set", v.ours, "up")
        run_cmd(*v.exec("ip", "link", "set", v.theirs, "up"))
        yield v
    finally:
        subprocess.run(["ip", "link", "del", v.ours], capture_output=True, timeout=20, check=False)
        subprocess.run(
            ["ip", "netns", "del", v.namespace], capture_output=True, timeout=20, check=False
        )
