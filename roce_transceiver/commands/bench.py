"""``roce-transceiver bench``: run a benchmark of ``roce_transceiver.bench``."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from roce_transceiver import _core
from roce_transceiver.argtypes import (
    COUNT,
    RATE_OR_MAX,
    U32_COUNT,
    integer,
    integer_list,
    real,
)
from roce_transceiver.commands import CommandError
from roce_transceiver.config import SCHEMA

__all__ = ["register", "run"]

_DEFAULT_SIZES = (64, 1024, 4096)
# A RoCEv2 frame over IPv4: at least Ethernet 14, IPv4 20, UDP 8, BTH 12 and ICRC 4 bytes; at
# most Ethernet 14 and the 65535 bytes an IPv4 total length counts.
_FRAME_SIZE = integer(58, 14 + 65535)
# Seconds per measurement: more than an hour is a typo, and would look like a hang.
_MEASURE_SECONDS = real(0, 3600, lo_open=True)
# bench stream gives payloads over 1900 bytes 8192-byte slots (bench/stream.py): 8192 less
# a UC WRITE with immediate's 78 header bytes over IPv4, to a multiple of 4 as the sensor
# sends them.
_STREAM_PAYLOAD = integer(4, 8112, multiple_of=4)
_FLOOR_ITERATIONS = integer(1, _core.FLOOR_MAX_ITERATIONS)
# bench qec's --late-us / --drop-us: more than 0, at most an hour.
_MICROSECONDS = real(0, 3.6e9, lo_open=True)
# bench qec's rings are sized for its window (bench/roundtrip.py): 65536 slots at most.
MAX_WINDOW = 16384


def _ring_slots(text: str) -> int:
    """rx ring slots: a power of two, 2 to 65536 (queues.rx_depth's range)."""
    value = integer(2, 65536)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"{text}: must be a power of two")
    return value


def _sizes(text: str) -> tuple[int, ...]:
    """Comma-separated frame sizes, each checked as one (the error names the bad one)."""
    return tuple(_FRAME_SIZE(part.strip()) for part in text.split(","))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark (icrc, roundtrip, qec, ops, stream, ingest, graph, share)",
        description="Run a benchmark; each prints one summary line and can write JSON.",
    )
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    icrc = benches.add_parser(
        "icrc",
        help="ICRC throughput of the host implementation against libz",
        description="Measure the ICRC throughput of the protocol core's implementations "
        "for frames of the given sizes.",
    )
    icrc.add_argument(
        "--sizes",
        type=_sizes,
        default=_DEFAULT_SIZES,
        metavar="N,N,...",
        help="frame sizes in bytes (default " + ",".join(map(str, _DEFAULT_SIZES)) + ")",
    )
    icrc.add_argument(
        "--seconds", type=_MEASURE_SECONDS, default=1.0, help="time per measurement (default 1)"
    )
    icrc.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    icrc.set_defaults(run=run)

    rt = benches.add_parser(
        "roundtrip",
        help="echo loop round trip next to the latency floors",
        description="Echo ping-pong through the loopback NIC, timed at the far end, printed "
        "next to the floors of the same run (thread ping-pong, pinned ping-pong, device block "
        "ping-pong, launch per message) and the ratios.",
    )
    _loop_options(rt)
    rt.add_argument("--size", type=COUNT, default=32, help="payload bytes (default 32)")
    rt.add_argument("--count", type=U32_COUNT, default=10_000, help="round trips (default 10000)")
    rt.add_argument(
        "--completions",
        action="store_true",
        help="also run the loop with completion records (batched, and a fence each), as the "
        "roundtrip app does, every record checked; prints their p50 against the bare loop's",
    )
    rt.add_argument(
        "--completion-batch",
        type=integer(1, 65536),
        default=None,
        dest="completion_batch",
        help="queues.completion_batch of the batched run (default: the configuration's)",
    )
    rt.add_argument(
        "--handler",
        choices=("echo", "custom"),
        default="echo",
        help="custom: also run the loop with a user handler that echoes (--custom-source), "
        "alternating with the built-in echo, and print its p50 against the echo's",
    )
    rt.add_argument(
        "--custom-source",
        dest="custom_source",
        metavar="FILE",
        help="with --handler custom: the handler's source (default examples/handlers/echo.cu); "
        "its replies must equal the requests",
    )
    rt.add_argument(
        "--custom-entry",
        dest="custom_entry",
        default=None,
        metavar="NAME",
        help="with --handler custom: the entry (default: echo for the example, else handle)",
    )
    rt.add_argument(
        "--repeats",
        type=integer(1, 20),
        default=3,
        help="with --handler custom or --reliable: loops of each kind, in turn (default 3); "
        "the ratios are of the fastest p50 of each",
    )
    rt.add_argument(
        "--reliable",
        action="store_true",
        help="also run the echo over UC, RC, and RC with qp.retransmit (the RC requester; the "
        "far end ACKs each reply), --repeats each, and print the lossless path's cost "
        "(docs/reliable_replies.md)",
    )
    rt.set_defaults(run=run_roundtrip)

    q = benches.add_parser(
        "qec",
        help="decoder loop throughput and round trip at an offered rate",
        description="Syndromes from the far end at an offered rate (open loop: each round trip "
        "counted from its due time), lookup-table decoding in the loop, corrections back and "
        "checked; sustained messages/s, late and dropped syndromes and round-trip "
        "percentiles next to the floors.",
    )
    _loop_options(q)
    q.add_argument("--distance", type=int, choices=(3, 5), default=5, help="code distance")
    q.add_argument("--count", type=U32_COUNT, default=100_000, help="messages (default 100000)")
    q.add_argument(
        "--rate",
        type=RATE_OR_MAX,
        default=None,
        help="offered messages/s over all queues, up to 1e9, or max: as fast as the window "
        "allows (default max)",
    )
    q.add_argument(
        "--window",
        type=integer(1, MAX_WINDOW),
        default=64,
        help=f"messages in flight at most, per queue, 1 to {MAX_WINDOW} (default 64)",
    )
    q.add_argument(
        "--queues",
        type=integer(1, 16),
        default=1,
        help="queues (queues.count), each with a far end and every N-th syndrome (default 1)",
    )
    q.add_argument(
        "--steer",
        choices=("qp", "udp_sport"),
        default="qp",
        help="how the syndromes pick their queue: QP qpn + i, or a UDP source port (default qp)",
    )
    q.add_argument(
        "--late-us",
        type=_MICROSECONDS,
        default=None,
        dest="late_us",
        help="a syndrome sent later than this after its due time is late (default: one "
        "interval of the rate)",
    )
    q.add_argument(
        "--drop-us",
        type=_MICROSECONDS,
        default=None,
        dest="drop_us",
        help="a syndrome that cannot be sent within this of its due time is dropped, counted "
        "and never sent (default: never)",
    )
    q.set_defaults(run=run_qec)

    ops = benches.add_parser(
        "ops",
        help="SM cycles of each piece of the engine on the GPU",
        description="Time each piece of the data path (decode, ICRC, encode, handler, memory "
        "operations, whole engine steps) with one warp on one SM, for a SEND Only request.",
    )
    ops.add_argument("--size", type=COUNT, default=32, help="payload bytes (default 32)")
    ops.add_argument("--transport", choices=("RC", "UC"), default="UC")
    ops.add_argument(
        "--repeats", type=integer(1, 64), default=32, help="samples per piece, 1 to 64 (default 32)"
    )
    ops.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ops.set_defaults(run=run_ops)

    st = benches.add_parser(
        "stream",
        help="the socket NIC across a veth pair: frames/s, Gb/s, round trips (root)",
        description="Frames from a sender in a network namespace through the socket NIC and the "
        "frames handler, next to a plain AF_PACKET receiver of the same traffic; echo round "
        "trips next to a raw-socket echo. Needs root and iproute2.",
    )
    st.add_argument("--nic", choices=("socket",), default="socket")
    st.add_argument("--frames", type=COUNT, default=400, help="frames (default 400)")
    st.add_argument(
        "--payload",
        type=_STREAM_PAYLOAD,
        default=4096,
        help="bytes per packet, a multiple of 4 up to 8112 (default 4096)",
    )
    st.add_argument("--echo-count", type=COUNT, default=2000, dest="echo_count")
    st.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    st.set_defaults(run=run_stream)

    ingest = benches.add_parser(
        "ingest",
        help="an HSB stream into the frames handler: Mpps and Gb/s next to a copy floor",
        description="Frames of 64 KiB in UC WRITE Only packets of each payload size, with and "
        "without metadata, preloaded into the rx ring (device memory on the cuda executor) "
        "and taken by the frames handler; every frame checked; rates by the engine's clock, "
        "next to a copy of the same bytes by the same GPU resources (or one CPU thread).",
    )
    ingest.add_argument("--executor", choices=("auto", "cpu", "cuda"), default="auto")
    ingest.add_argument(
        "--payloads",
        type=integer_list(1, 8192),
        default=(64, 1024, 4096),
        metavar="N,N,...",
        help="payload bytes per packet (default 64,1024,4096)",
    )
    ingest.add_argument(
        "--warps",
        type=integer_list(1, 16),
        default=(1, 4, 8, 16),
        metavar="N,N,...",
        help="cuda executor: the crews to run each stream with (cuda.warps; default 1,4,8,16)",
    )
    ingest.add_argument(
        "--queues",
        type=integer_list(1, 16),
        default=(1,),
        metavar="N,N,...",
        help="queues (queues.count) to run each row with: a stream a queue, on its own QP, "
        "a block (an SM) or thread a queue (default 1)",
    )
    ingest.add_argument(
        "--latency-frames",
        type=integer(0, 100_000),
        default=200,
        dest="latency_frames",
        metavar="N",
        help="frames sent one at a time for the frame-end-to-host latency, per cuda.epoch_us "
        "(default 200; 0 leaves it out)",
    )
    ingest.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ingest.set_defaults(run=run_ingest)

    graph = benches.add_parser(
        "graph",
        help="what a Holoscan graph receives from RoceTransceiverOp: frames/s, cost, latency",
        description="A preloaded HSB stream (4 KiB UC WRITEs, metadata on) into "
        "RoceTransceiverOp and a sink that touches each frame where it lies: frames/s and Gb/s "
        "into the graph next to bench ingest's rate for the same stream and the graph's own "
        "floor, the operator's compute time per frame, and the latency from a frame's last "
        "packet to the graph's first look (frames one at a time); every frame checked. "
        "Needs Holoscan.",
    )
    graph.add_argument("--executor", choices=("auto", "cpu", "cuda"), default="auto")
    graph.add_argument(
        "--frame-bytes",
        type=integer_list(256, 64 << 20),
        default=(65536, 1 << 20, 8 << 20),
        dest="frame_bytes",
        metavar="N,N,...",
        help="frame sizes in bytes (default 65536,1048576,8388608)",
    )
    graph.add_argument(
        "--epochs-us",
        type=integer_list(0, 10_000_000),
        default=(100, 1000, 10000),
        dest="epochs_us",
        metavar="N,N,...",
        help="cuda executor: the cuda.epoch_us values to run each size with (default "
        "100,1000,10000; 0: one launch)",
    )
    graph.add_argument(
        "--ring",
        type=_ring_slots,
        default=65536,
        help="rx ring slots the stream is preloaded into, a power of two (default 65536): "
        "the stream is as many frames as fit (4096 at most)",
    )
    graph.add_argument(
        "--latency-frames",
        type=integer(0, 100_000),
        default=100,
        dest="latency_frames",
        metavar="N",
        help="frames sent one at a time for the last-packet-to-graph latency, per row "
        "(default 100; 0 leaves it out)",
    )
    graph.add_argument(
        "--frame-batch",
        type=integer_list(1, 4096),
        default=(1, 64),
        dest="frame_batches",
        metavar="N,N,...",
        help="the operator's frame_batch values to run each row with (default 1,64: a "
        "tensor a message, and up to 64 frames a message)",
    )
    graph.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    graph.set_defaults(run=run_graph)

    share = benches.add_parser(
        "share",
        help="what the cuda executor's epochs cost, and what they let through",
        description="For each cuda.epoch_us (0: one launch for the run): the echo loop's "
        "round trip next to the pinned ping-pong of the same run, frames ingest, how long a "
        "kernel load at first use in another thread waits, and the relaunch gap measured on "
        "the GPU (docs/gpu_sharing.md). Needs a GPU and cupy.",
    )
    share.add_argument(
        "--epochs-us",
        type=_epochs,
        default=((0, 1), (1000, 1), (1000, 2), (10000, 1), (10000, 2)),
        dest="epochs_us",
        metavar="N[xK],...",
        help="epoch lengths in microseconds (0: one launch), each with K epochs queued at "
        "once (default 0,1000,1000x2,10000,10000x2)",
    )
    share.add_argument("--count", type=U32_COUNT, default=20_000, help="round trips per row")
    share.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    share.set_defaults(run=run_share)


def _epochs(text: str) -> tuple[tuple[int, int], ...]:
    """``N`` or ``NxK`` (K epochs queued at once), comma-separated."""
    out = []
    for part in text.split(","):
        us, _, queued = part.partition("x")
        try:
            value = (int(us), int(queued or 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: N or NxK (microseconds, queued)") from None
        if value[0] < 0 or not 1 <= value[1] <= 4:
            raise argparse.ArgumentTypeError(f"{part!r}: N >= 0 microseconds, K 1 to 4 queued")
        out.append(value)
    return tuple(out)


def _loop_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--nic", choices=("loopback",), default="loopback")
    p.add_argument("--far-end", choices=("cpu", "gpu"), default="cpu", dest="far_end")
    p.add_argument("--transport", choices=("RC", "UC"), default="UC")
    p.add_argument(
        "--floor-iterations", type=_FLOOR_ITERATIONS, default=10_000, dest="floor_iterations"
    )
    p.add_argument(
        "--warps",
        type=integer(0, 16),
        default=0,
        help="cuda.warps: warps of the block that serves a queue; 2-16 a crew, which takes "
        "the requests waiting in express batches; 0 (default) auto, 1 one warp",
    )
    p.add_argument(
        "--no-express",
        action="store_false",
        dest="express",
        help="every packet takes the general path (the express path's baseline)",
    )
    p.add_argument(
        "--mode",
        choices=("ethernet", "verbs"),
        default="ethernet",
        help="verbs: also run the loop in Verbs mode (one-sided WRITE + FETCH_ADD in, "
        "put_signal out, through the software ConnectX) and print both; each doorbell mode's "
        "row has its put_signal floor beside it (cuda executor: a kernel's put_signals alone, "
        "no handler; a mean, as that kernel times only its whole run)",
    )
    p.add_argument(
        "--nic-handler",
        choices=("all", *SCHEMA.keys["doca"].keys["nic_handler"].choices),  # type: ignore[union-attr]
        default="all",
        dest="nic_handler",
        help="with --mode verbs: who rings the queue pair's doorbell (doca.nic_handler's "
        "values); all (default): a row for each of cpu_proxy, gpu_sm_db and gpu_sm_bf",
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


def _run_loop(args: argparse.Namespace, name: str, options: dict[str, object]) -> int:
    """Run bench.roundtrip's ``run_<name>``; non-zero exit when replies were missing or wrong."""
    from roce_transceiver.bench import roundtrip
    from roce_transceiver.transceiver import TransceiverError

    bench = getattr(roundtrip, f"run_{name}")
    try:
        r = bench(
            executor=args.executor,
            far_end=args.far_end,
            transport=args.transport,
            floor_iterations=args.floor_iterations,
            express=args.express,
            json_path=args.json,
            mode=args.mode,
            nic_handler=args.nic_handler,
            warps=args.warps,
            **options,
        )
    except (TransceiverError, ValueError) as e:
        raise CommandError(f"bench {name}: {e}") from None
    return 0 if r["all_done"] else 1


def run_roundtrip(args: argparse.Namespace) -> int:
    options = {
        "size": args.size,
        "count": args.count,
        "completions": args.completions,
        "completion_batch": args.completion_batch,
        "reliable": args.reliable,
    }
    if args.reliable or args.handler == "custom":
        options["repeats"] = args.repeats
    if args.handler == "custom":
        options["custom"] = custom_echo(args.custom_source, args.custom_entry)
    elif args.custom_source or args.custom_entry:
        raise CommandError(
            "bench roundtrip: --custom-source and --custom-entry need --handler custom"
        )
    return _run_loop(args, "roundtrip", options)


def custom_echo(source: str | None, entry: str | None) -> dict[str, str]:
    """The custom section of bench roundtrip's user handler: the example echo unless told."""
    if source is None:
        from roce_transceiver.custom_handler import example_path

        return {"source": str(example_path("echo.cu")), "entry": entry or "echo"}
    if not Path(source).is_file():
        raise CommandError(f"bench roundtrip: --custom-source {source}: no such file")
    return {"source": source, "entry": entry or "handle"}


def run_qec(args: argparse.Namespace) -> int:
    if args.queues > args.count:
        raise CommandError(f"bench qec: --queues {args.queues}: more queues than messages")
    if args.rate is None and (args.late_us is not None or args.drop_us is not None):
        raise CommandError("bench qec: --late-us and --drop-us need a --rate (a schedule)")
    options = {
        "distance": args.distance,
        "count": args.count,
        "rate": args.rate,
        "window": args.window,
        "queues": args.queues,
        "steer": args.steer,
        "late_us": args.late_us,
        "drop_us": args.drop_us,
    }
    return _run_loop(args, "qec", options)


def run_stream(args: argparse.Namespace) -> int:
    from roce_transceiver.bench import stream

    try:
        stream.run(args.frames, args.payload, args.echo_count, json_path=args.json)
    except (RuntimeError, ValueError, OSError) as e:
        raise CommandError(f"bench stream: {e}") from None
    return 0


def run_ingest(args: argparse.Namespace) -> int:
    from roce_transceiver.bench import ingest
    from roce_transceiver.transceiver import TransceiverError

    try:
        r = ingest.run(
            args.executor,
            args.payloads,
            json_path=args.json,
            warps=args.warps,
            queues=args.queues,
            latency_frames=args.latency_frames,
        )
    except (TransceiverError, RuntimeError, ValueError, ImportError) as e:
        raise CommandError(f"bench ingest: {e}") from None
    rows = r["rows"] + (r["frame_to_host"] or {}).get("rows", [])
    return 0 if all(row["frames_whole"] == row["frames"] for row in rows) else 1


def run_graph(args: argparse.Namespace) -> int:
    from roce_transceiver.transceiver import TransceiverError

    try:
        # The operators' layer's bench (it runs a Holoscan graph); imported only when asked for.
        graph_bench = importlib.import_module("roce_transceiver.operators.graph_bench")
    except ImportError as e:
        raise CommandError(f"bench graph: needs Holoscan (pip install '.[apps]'): {e}") from None
    try:
        r = graph_bench.run(
            args.executor,
            args.frame_bytes,
            args.epochs_us,
            ring=args.ring,
            latency_frames=args.latency_frames,
            json_path=args.json,
            frame_batches=args.frame_batches,
        )
    except (TransceiverError, RuntimeError, ValueError, ImportError) as e:
        raise CommandError(f"bench graph: {e}") from None
    return 0 if graph_bench.all_whole(r) else 1


def run_share(args: argparse.Namespace) -> int:
    from roce_transceiver.bench import gpu_share
    from roce_transceiver.transceiver import TransceiverError

    try:
        gpu_share.run(args.epochs_us, count=args.count, json_path=args.json)
    except (TransceiverError, RuntimeError, ValueError, ImportError) as e:
        raise CommandError(f"bench share: {e}") from None
    return 0


def run_ops(args: argparse.Namespace) -> int:
    from roce_transceiver.bench import ops

    try:
        ops.run(size=args.size, transport=args.transport, repeats=args.repeats, json_path=args.json)
    except (RuntimeError, ValueError) as e:
        raise CommandError(f"bench ops: {e}") from None
    return 0


def run(args: argparse.Namespace) -> int:
    module_name = f"roce_transceiver.bench.{args.bench}"
    # Imported here: the benchmarks pull in heavier dependencies than the rest of the CLI.
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name in ("roce_transceiver.bench", module_name):
            raise CommandError(f"bench {args.bench}: {module_name} is not in this build") from None
        # Something the benchmark needs is missing: name it.
        raise CommandError(f"bench {args.bench}: cannot import {module_name}: {e}") from None
    try:
        module.run(sizes=args.sizes, seconds=args.seconds, json_path=args.json)
    except ValueError as e:
        raise CommandError(f"bench {args.bench}: {e}") from None
    return 0
