"""A NIC of your own for a Transceiver: subclass :class:`Nic` and pass it as
``Transceiver(config, nic=...)``.

A Transceiver is its memory (the queues' rings), one NIC and one executor
(docs/ARCHITECTURE.md). The configuration's ``nic`` picks a built-in one: ``loopback`` (the
host drives the wire: inject, collect, the far end) or ``socket`` (a thread of the core joining
the rings to Linux). A NIC brought by the caller takes their place, with the same rings:

- ``name()`` (required): what it is called in errors;
- ``attach(ports)``: the queues' rings, one :class:`NicPort` a queue, when the Transceiver is
  made (before ``start()``). A port's ``produce(frame)`` puts a frame on its rx ring (False:
  the ring is full) and ``take(max)`` returns what its engine sent. A port is valid until
  ``detach()``;
- ``start()`` / ``stop()``: around the loop's run (``stop()`` comes first when it stops);
- ``detach()``: after ``stop()``, once the engines have stopped: the ports go (drop them);
- ``error()``: what failed while it ran ('' while it is fine; the Transceiver raises it);
- ``stats()`` / ``info()``: dicts of name: int or str, merged into ``Transceiver.stats()``
  (name them ``nic_*``) and returned by ``Transceiver.nic_info()``.

Its rings are in host memory (``far_end: cpu``) on either executor. The loopback's own calls
(``inject``, ``collect``, ``roundtrip``) are refused: the wire is the NIC's.
"""

from __future__ import annotations

from roce_transceiver import _core

__all__ = ["Nic", "NicPort"]

Nic = _core.Nic
NicPort = _core.NicPort
