"""The repetition code's majority vote in Python: the reference examples/handlers/majority_vote.cu
is checked against (tests, the custom_handler app's checker)."""

from __future__ import annotations

__all__ = ["majority_correction"]


def majority_correction(reading: bytes, distance: int) -> bytes:
    """The correction of ``distance`` copies' readings, as majority_vote.cu answers: the readings
    are bits (copy i is bit i % 8 of byte i // 8), and the correction has a bit set for each
    copy that disagrees with the majority."""
    bits = [(reading[i // 8] >> (i % 8)) & 1 for i in range(distance)]
    majority = int(sum(bits) > distance // 2)
    out = bytearray((distance + 7) // 8)
    for i, b in enumerate(bits):
        out[i // 8] |= (b ^ majority) << (i % 8)
    return bytes(out)
