"""Sample captures shipped with the package; ``make_samples.py`` regenerates them.

``hsb_frame.pcap``: a Holoscan Sensor Bridge style exchange (one frame written
with UC RDMA WRITE Only, closed by a WRITE with Immediate carrying the frame
metadata, a SEND back to the sensor), an RC WRITE/ACK pair, a packet with a
corrupted ICRC and a truncated one, so that ``roce-transceiver decode`` shows
every kind of row.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path

__all__ = ["HSB_FRAME", "sample_path"]

HSB_FRAME = "hsb_frame.pcap"


def sample_path(name: str = HSB_FRAME) -> AbstractContextManager[Path]:
    """A context manager giving a file system path to a bundled sample."""
    # as_file() because a package may live in a zip; installed wheels give the real file.
    return resources.as_file(resources.files(__name__) / name)
