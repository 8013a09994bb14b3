"""``roce-transceiver check-handler FILE``: compile a user handler with NVRTC and report.

Runs nothing: it compiles the source against the handler ABI (``rt/handlers/custom.h``) for one
GPU architecture, which needs neither a GPU nor a driver. Exit status 0 when the handler compiles,
1 when it does not (one line naming the file and line; ``--verbose`` adds NVRTC's whole log), 2
when it cannot be checked here: bad arguments, a file that cannot be read, NVRTC missing.
"""

from __future__ import annotations

import argparse
import sys

from roce_transceiver import custom_handler
from roce_transceiver.commands import CommandError

__all__ = ["EXIT_DOES_NOT_COMPILE", "register", "run"]

EXIT_DOES_NOT_COMPILE = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-handler",
        help="compile a user handler (CUDA C++) with NVRTC and report errors",
        description="Compile FILE, the CUDA C++ source of a user handler, with NVRTC against "
        "the handler ABI (rt/handlers/custom.h): the entry must be "
        f"'{custom_handler.SIGNATURE.format(entry='ENTRY')}'. Needs no GPU. Exit status 0 "
        "when it compiles, 1 when it does not (the first error as FILE:LINE), 2 when it cannot "
        "be checked (bad arguments, unreadable file, NVRTC not installed).",
    )
    p.add_argument("file", metavar="FILE", help="the handler's source")
    p.add_argument(
        "--entry",
        default=custom_handler.DEFAULT_ENTRY,
        metavar="NAME",
        help=f"the entry function (default {custom_handler.DEFAULT_ENTRY}; may be ns::name)",
    )
    p.add_argument(
        "--arch",
        default=custom_handler.DEFAULT_ARCH,
        metavar="ARCH",
        help=f"GPU architecture, sm_XX (cubin) or compute_XX (PTX); default "
        f"{custom_handler.DEFAULT_ARCH}, the H200",
    )
    p.add_argument("--verbose", "-v", action="store_true", help="print NVRTC's whole log")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        compiled = custom_handler.compile_handler_file(args.file, entry=args.entry, arch=args.arch)
    except custom_handler.HandlerCompileError as e:
        print(f"roce-transceiver: error: {e}", file=sys.stderr)
        if args.verbose:
            print(e.log, file=sys.stderr)
        return EXIT_DOES_NOT_COMPILE
    except FileNotFoundError:
        raise CommandError(f"{args.file}: no such file") from None
    except IsADirectoryError:
        raise CommandError(f"{args.file}: is a directory, not a handler's source") from None
    except (custom_handler.NvrtcUnavailable, ValueError) as e:
        raise CommandError(f"cannot check {args.file}: {e}") from None
    kind = "cubin" if compiled.arch.startswith("sm_") else "PTX"
    print(
        f"{args.file}: entry {compiled.entry} compiles for {compiled.arch} "
        f"(NVRTC {compiled.nvrtc_version}, {len(compiled.cubin)} bytes of {kind})"
    )
    if args.verbose and compiled.log:
        print(compiled.log)
    return 0
