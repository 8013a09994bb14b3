"""The ``roce-transceiver`` command line: decode, craft, info, bench, echo, listen, peer, run,
hsb, doctor, plot, check-handler.

Every failure the user can cause (bad arguments, a file that is not a pcap, a
field out of range) is one line on stderr, ``roce-transceiver: error: ...``,
and exit status 2; a traceback means a bug in this package.
"""

# Nothing but this module's own definitions runs before main()'s try, not even `from
# __future__ import annotations` (an import of its own: the annotations are quoted). The
# console script imports this module and calls main(), and the commands' imports take about
# 0.2 s, in which a Ctrl-C must end the command as it does later (one line, status 130), not
# as a KeyboardInterrupt traceback. So every import is inside main() (or the functions it
# calls), and the module itself imports only what the interpreter has loaded before any code.
import sys

TYPE_CHECKING = False  # typing's flag without importing typing (25 ms) out here
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import NoReturn

__all__ = ["PROG", "build_parser", "main"]

PROG = "roce-transceiver"
EXIT_OK = 0
EXIT_ERROR = 2  # usage errors and unreadable input, as argparse uses for usage errors
EXIT_INTERRUPTED = 130  # the shell's status for SIGINT; a traceback would say nothing useful


def build_parser() -> "argparse.ArgumentParser":
    import argparse

    from roce_transceiver import __version__
    from roce_transceiver.commands import (
        bench,
        check_handler,
        craft,
        decode,
        doctor,
        echo,
        hsb,
        info,
        listen,
        peer,
        plot,
        run,
    )

    class _Parser(argparse.ArgumentParser):
        """argparse with one-line errors: argparse's usage block would bury the message."""

        def error(self, message: str) -> "NoReturn":
            self.exit(EXIT_ERROR, f"{PROG}: error: {message} (see: {self.prog} --help)\n")

    parser = _Parser(
        prog=PROG,
        description="GPU RoCEv2 transceiver for Holoscan: decode and craft RoCEv2 captures, "
        "report what this build supports, and benchmark the protocol core.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (
        decode,
        craft,
        info,
        bench,
        echo,
        listen,
        peer,
        run,
        hsb,
        doctor,
        plot,
        check_handler,
    ):
        command.register(sub)
    return parser


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _interrupted(e: KeyboardInterrupt) -> int:
    # A Stopped (SIGTERM, SIGHUP) carries its signal's name; Ctrl-C's KeyboardInterrupt none.
    print(f"{PROG}: interrupted ({e.args[0] if e.args else 'SIGINT'})", file=sys.stderr)
    return EXIT_INTERRUPTED


def main(argv: "Sequence[str] | None" = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); returns the exit status. A Ctrl-C
    from the first instruction on (the imports included) is one line and status 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # SIGTERM and SIGHUP too, once stop_signals() has them
        return _interrupted(e)


def _main(argv: "Sequence[str] | None") -> int:
    import os

    from roce_transceiver.commands import CommandError
    from roce_transceiver.commands.running import stop_signals
    from roce_transceiver.pcap import PcapError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors end here
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    try:
        with stop_signals():  # SIGTERM and SIGHUP end a command as Ctrl-C does
            status: int = args.run(args)
    except (CommandError, PcapError) as e:
        return _error(str(e))
    except BrokenPipeError:
        # The reader went away (`decode | head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        return _error(f"{where}{e.strerror or e}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
