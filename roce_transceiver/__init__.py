"""roce_transceiver: a GPU RoCEv2 transceiver for Holoscan.

The public API is typed Python over a private C++/CUDA core (``_core``).
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # _core is loaded on first use, not by importing the package: the console script imports
    # the package before the CLI's main() can take a Ctrl-C (roce_transceiver/cli.py), and
    # loading _core (with CUDA's libraries, in a CUDA build) is not instant.
    if name == "__version__":
        from roce_transceiver._core import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
