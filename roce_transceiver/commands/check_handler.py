"""``roce-transceiver check-handler FILE``: compile a user handler with NVRTC and report.

Runs nothing: it compiles the source against the handler ABI (``rt/handlers/custom.h``) for one
GPU architecture, which needs neither a GPU nor a driver. With ``--link`` it also builds what the
cuda executor starts with (the handler linked into the engine's kernels, custom_handler.
compile_engine, in a cache of its own so that it is built) and says how long the compile and
the link took. Exit status 0 when the handler compiles (and links), 1 when it does not (one line
naming the file and line; ``--verbose`` adds the compiler's or linker's whole log), 2 when it
cannot be checked here: bad arguments, a file that cannot be read, NVRTC missing (with
``--link``: nvJitLink, or a build without the engine's linkable code).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

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
    p.add_argument(
        "--link",
        action="store_true",
        help="also link it into the engine's kernels as the cuda executor does at start "
        "(nvJitLink; an sm_XX --arch), saying how long the compile and the link took",
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
    return _link(args) if args.link else 0


def _link(args: argparse.Namespace) -> int:
    """The cuda executor's build of the handler, cold: compiled alone and linked into the
    one-warp kernels (a cache of its own, removed after)."""
    path = Path(args.file)
    try:
        with tempfile.TemporaryDirectory(prefix="rt-check-handler-") as cache:
            built = custom_handler.compile_engine_file(
                path, entry=args.entry, arch=args.arch, cache=Path(cache)
            )
    except custom_handler.HandlerCompileError as e:
        print(f"roce-transceiver: error: {e}", file=sys.stderr)
        if args.verbose:
            print(e.log, file=sys.stderr)
        return EXIT_DOES_NOT_COMPILE
    except (custom_handler.HandlerBuildFailure, ValueError) as e:
        raise CommandError(f"cannot link {args.file}: {e}") from None
    print(
        f"{args.file}: linked into the engine's kernels for {built.arch} as the cuda executor "
        f"starts it: compiled in {built.compile_seconds:.3f} s, linked in "
        f"{built.link_seconds:.3f} s ({len(built.image)} bytes)"
    )
    if args.verbose and built.log:
        print(built.log)
    return 0
