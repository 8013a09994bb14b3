"""``roce-transceiver plot``: PNG figures for reports from the JSON the runs write.

``plot latency FILE.json -o OUT.png``: a latency histogram (the apps' ``latency.json``) with
its percentiles and floor marked, beside its tail as a CCDF. ``plot ingest FILE.json -o
OUT.png``: ``bench ingest --json``'s Gb/s per payload size against its copy floors. Needs
matplotlib (``pip install roce-transceiver[plots]``).
"""

from __future__ import annotations

import argparse

from roce_transceiver.commands import CommandError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a PNG from a latency histogram or a bench ingest JSON",
        description="Draw a PNG for a report from the JSON a run wrote (matplotlib: "
        "pip install roce-transceiver[plots]).",
    )
    kinds = p.add_subparsers(dest="plot", metavar="KIND", required=True)
    for kind, what in (
        (
            "latency",
            "a latency histogram JSON (the apps' latency.json): bins, percentiles, "
            "floor, and the tail as a CCDF",
        ),
        ("ingest", "bench ingest --json's rows: Gb/s per payload size against the copy floors"),
    ):
        k = kinds.add_parser(kind, help=what, description=f"Draw {what}.")
        k.add_argument("file", metavar="FILE.json", help="the JSON to draw")
        k.add_argument("-o", "--output", required=True, metavar="OUT.png", help="the PNG")
        k.add_argument("--title", default=None, help="the figure's title")
        k.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from roce_transceiver.plots import PlotError, plot_ingest, plot_latency

    try:
        if args.plot == "latency":
            plot_latency(args.file, args.output, args.title or "round trip")
        else:
            plot_ingest(args.file, args.output, args.title or "")
    except PlotError as e:
        raise CommandError(str(e)) from None
    print(f"{args.output}: {args.plot} plot of {args.file}")
    return 0
