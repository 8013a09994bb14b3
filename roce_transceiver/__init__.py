"""roce_transceiver: a GPU RoCEv2 transceiver for Holoscan.

The public API is typed Python over a private C++/CUDA core (``_core``).
"""

from roce_transceiver._core import __version__

__all__ = ["__version__"]
