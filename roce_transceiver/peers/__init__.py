"""Software peers that talk to a transceiver over a real network (``roce-transceiver peer``).

- ``qpu``: a quantum controller: requests out (syndromes or echo payloads), answers checked
  and timed (:mod:`roce_transceiver.peers.qpu`).
- :mod:`roce_transceiver.peers.link`: how a peer puts frames on the wire, mirroring the
  socket NIC's two modes.
"""

from __future__ import annotations

from roce_transceiver.peers.link import Link, LinkError, open_link
from roce_transceiver.peers.qpu import QpuPeer, QpuReport

__all__ = ["Link", "LinkError", "QpuPeer", "QpuReport", "open_link"]
