"""The CLI's subcommands, one module each.

Each module has ``register(subparsers)``, which adds its parser and sets
``run`` as the parser's default, and ``run(args) -> int``, the exit status.
"""

from __future__ import annotations


class CommandError(Exception):
    """A failure the CLI reports as one line, ``roce-transceiver: error: <message>``, status 2."""
