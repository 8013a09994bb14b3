"""What the apps share: their command line, the scheduler, the run under a time limit, and the
summary table and JSON at the end (exit status 0 when every check held, 1 when one failed or a
file could not be written, 2 for a configuration or start-up error).

Every file a run writes (the summary JSON, the histogram PNG and JSON) is checked before the
run: one that cannot be written is exit 2 with one line naming its key and path, not a failure
after a run of minutes. One whose write fails all the same (a disk that fills up) costs only
that file: the summary table is printed first, the failed write said after it, exit 1.

SIGINT, SIGTERM and SIGHUP (Ctrl-C; how systemd, docker and Kubernetes stop a service; a closed
terminal) all stop a run the same way: the graph is interrupted, its operators stopped (the
transceiver with them: counters final, capture closed), and the summary printed as for a run
that ended; the checks then say what was not done (a count not reached fails, exit 1). Holoscan
would take SIGINT and SIGTERM itself and force the process out 3 s later, summary or not (and
ignore SIGHUP); so under main_for() the graph runs in a thread of its own, and the main thread
keeps the signals' handlers ours (it puts them back when Holoscan has put in its own) and
interrupts the graph when one comes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roce_transceiver.operators.app_config import APP, ConfigError, load_app_config
from roce_transceiver.operators.params import validated
from roce_transceiver.peers import LinkError
from roce_transceiver.transceiver import TransceiverError

__all__ = [
    "HOLOSCAN_ARGV",
    "LATENCY_FILES",
    "Check",
    "Report",
    "app_section",
    "check_writable",
    "counter_rows",
    "effective_config",
    "latency_report",
    "main_for",
    "make_scheduler",
    "peer_network",
    "round_trip_graph",
    "run_graph",
    "transceiver_op",
]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2

#: The command line the apps' Holoscan Application is given under main_for(): none of ours.
#: Holoscan parses sys.argv by default, and its own --config would replace the file
#: run_graph() gives the app (the user's, without the --set flags and the defaults).
HOLOSCAN_ARGV = ["roce-transceiver-app"]

#: What stops a run cleanly (module docstring).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: The keys of the files LatencyStatsOp writes (in app.output_dir unless absolute; null: none),
#: for the apps that have one to give main_for().
LATENCY_FILES = ("latency.png", "latency.json")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    """What an app measured (``rows``: label -> text) and checked, and the same as data."""

    title: str
    rows: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, bool(ok), detail))

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def table(self) -> str:
        width = max(len(k) for k in [*self.rows, *(c.name for c in self.checks), "x"])
        lines = [self.title, "-" * len(self.title)]
        lines += [f"{k:<{width}}  {v}" for k, v in self.rows.items()]
        lines += [
            f"{c.name:<{width}}  {'ok  ' if c.ok else 'FAIL'}  {c.detail}" for c in self.checks
        ]
        lines.append(f"{'result':<{width}}  {'all checks hold' if self.ok else 'FAILED'}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "ok": self.ok,
            "rows": self.rows,
            "checks": [c.__dict__ for c in self.checks],
            **self.data,
        }


def make_scheduler(app: Any, cfg: Mapping[str, Any]) -> Any:
    """The scheduler ``app.scheduler`` names, stopping the graph after ``app.timeout_s``."""
    from holoscan.schedulers import EventBasedScheduler, GreedyScheduler, MultiThreadScheduler

    a = cfg["app"]
    limit_ms = int(a["timeout_s"] * 1000)
    if a["scheduler"] == "greedy":
        return GreedyScheduler(app, name="greedy", stop_on_deadlock=True, max_duration_ms=limit_ms)
    kind = MultiThreadScheduler if a["scheduler"] == "multi_thread" else EventBasedScheduler
    return kind(
        app,
        name=a["scheduler"],
        worker_thread_number=a["worker_threads"],
        stop_on_deadlock=True,
        stop_on_deadlock_timeout=200,
        max_duration_ms=limit_ms,
    )


def _parser(name: str, doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"apps/{name}.py", description=doc)
    p.add_argument("--config", help="the app's YAML file (default: the embedded defaults)")
    p.add_argument("--count", type=int, help="app.count: messages or frames to send")
    p.add_argument("--executor", choices=("auto", "cpu", "cuda"), help="transceiver.executor")
    p.add_argument(
        "--scheduler", choices=("greedy", "multi_thread", "event_based"), help="app.scheduler"
    )
    p.add_argument("--output-dir", help="app.output_dir: where PNG and JSON files go")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any key, dotted (transceiver.qp.transport=UC); the value is read as YAML",
    )
    return p


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The dotted keys the command line sets, and the flag that sets each, as it was given
    (``--set app.count=0``, ``--count 0``): errors name the flag (load_app_config)."""
    from roce_transceiver.schema import parse_yaml_value, quote

    out: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {quote(item)}: expected KEY=VALUE", key=key or "(--set)")
        # The file's loader, limits and all: a flag is as hostile as a file can be.
        out[key] = parse_yaml_value(value, key=f"--set {key}")
        flags[key] = f"--set {item}" if len(item) <= 100 else f"--set {key}=..."
    for key, flag, value in (
        ("app.count", "--count", args.count),
        ("transceiver.executor", "--executor", args.executor),
        ("app.scheduler", "--scheduler", args.scheduler),
        ("app.output_dir", "--output-dir", args.output_dir),
    ):
        if value is not None:
            out[key] = value
            flags[key] = f"{flag} {value}"
    return out, flags


def _quiet_holoscan() -> None:
    """Holoscan's own [info] lines (graph activation, scheduler) would bury the app's progress
    and table: warnings and errors only, unless HOLOSCAN_LOG_LEVEL asks for more."""
    import os

    if "HOLOSCAN_LOG_LEVEL" in os.environ:
        return
    from holoscan.logger import LogLevel, set_log_level

    set_log_level(LogLevel.WARN)


def main_for(
    name: str,
    doc: str,
    defaults: Mapping[str, Any],
    run: Callable[[dict[str, Any]], Report],
    argv: Sequence[str] | None = None,
    files: Sequence[str] = (),
) -> int:
    """Parse the command line, load and check the configuration (``defaults`` when no file),
    run the app, print its summary table and write it as JSON to the output directory.
    ``files``: the keys of the other files the app writes (LATENCY_FILES), checked with the
    summary's before the run (module docstring)."""
    args = _parser(name, doc).parse_args(argv)
    _quiet_holoscan()
    with _stop_signals_noted():
        try:
            overrides, flags = _overrides(args)
            cfg = load_app_config(args.config or dict(defaults), overrides, app=name, flags=flags)
            if cfg["transceiver"]["nic"] == "doca":  # say what is missing before any graph
                from roce_transceiver.doca import missing

                raise TransceiverError(missing(cfg["transceiver"]["doca"]["device"]))
            path = check_writable(cfg, [f"{name}_summary.json"], files)[0]
            started = time.monotonic()
            report = run(cfg)
        except (ConfigError, TransceiverError, LinkError, OSError, ValueError) as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            return EXIT_ERROR
        report.data["elapsed_s"] = round(time.monotonic() - started, 3)
        report.data["config"] = cfg
        if _stopped_by:
            report.rows["stopped by"] = _stopped_by[0]
            report.data["stopped_by"] = _stopped_by[0]
        print(report.table(), flush=True)
        if not write_summary(name, path, report):
            return EXIT_FAILED
        return EXIT_OK if report.ok else EXIT_FAILED


def write_summary(name: str, path: Path, report: Report) -> bool:
    """``report`` as JSON at ``path``, said on stdout; a write that fails said on stderr (the
    table is out already), False."""
    try:
        path.write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n")
    except OSError as e:
        print(f"{name}: error: summary not written: {path}: {e.strerror or e}", file=sys.stderr)
        return False
    print(f"summary written to {path}")
    return True


def check_writable(
    cfg: Mapping[str, Any], summaries: Sequence[str], files: Sequence[str] = ()
) -> list[Path]:
    """Before the run: app.output_dir made, and every file the run will write there (the
    ``summaries``, by name; ``files``, by key: LATENCY_FILES) one that can be written: absent
    in a folder that takes a new file (made and removed again to see), or a regular file that
    opens for writing (not truncated). Returns the summaries' paths; ConfigError naming the key
    and the path otherwise. A device, a FIFO or a directory is refused: the run would hang on
    it, write into nothing, or fail at its end."""
    out = Path(cfg["app"]["output_dir"])
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: not a folder", key="app.output_dir")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"{out}: cannot be made: {e.strerror or e}", key="app.output_dir"
        ) from None
    paths = [("app.output_dir", out / name) for name in summaries]
    for key in files:
        section, leaf = key.split(".")
        if cfg[section][leaf]:
            paths.append((key, out / cfg[section][leaf]))  # an absolute one stays itself
    for key, path in paths:
        problem = _not_writable(path)
        if problem:
            none = "; null: none written" if key in files else ""
            raise ConfigError(f"{path}: {problem}{none}", key=key)
    return [path for _, path in paths[: len(summaries)]]


def _not_writable(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return "a link to nothing"
        if not path.parent.is_dir():
            return f"no folder {path.parent}"
        try:  # only creating one says (a read-only mount, /proc, a full inode table)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except OSError as e:
            return f"cannot be created: {e.strerror or e}"
        path.unlink()
        return None
    except OSError as e:  # a parent that is a file, a loop of links, no permission
        return f"cannot be written: {e.strerror or e}"
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if not stat.S_ISREG(mode):
        kind = "a character device" if stat.S_ISCHR(mode) else "a block device"
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else kind
        return f"{kind}, not a regular file"
    try:  # without O_TRUNC: the file stays as it is until the run writes it
        os.close(os.open(path, os.O_WRONLY))
    except OSError as e:
        return f"cannot be written: {e.strerror or e}"
    return None


#: The signal that stopped the run main_for() is running, by name; empty while none came.
_stopped_by: list[str] = []


def _note_stop(signum: int, frame: object) -> None:
    """A stop signal (module docstring): noted; run_graph() interrupts the graph for it."""
    if not _stopped_by:
        _stopped_by.append(signal.Signals(signum).name)
        print(f"{_stopped_by[0]}: stopping", file=sys.stderr, flush=True)


def _take_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _note_stop)


@contextmanager
def _stop_signals_noted() -> Iterator[None]:
    """STOP_SIGNALS noted, not acted on, for the whole run (the summary too); the handlers
    before are back after it. Only the main thread can take signals: elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    _stopped_by.clear()
    try:
        _take_stop_signals()
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def app_section(fragment: Any) -> dict[str, Any]:
    """The ``app`` keys of the file ``fragment.config()`` loaded, validated (exact types)."""
    values, _ = validated(fragment, APP, fragment.kwargs("app"), name="app", what="app")
    return values


def transceiver_op(fragment: Any) -> Any:
    """The graph's RoceTransceiverOp, from the file's ``transceiver`` and ``operator``
    sections (``self.kwargs``, as a user's app does)."""
    from roce_transceiver.operators.transceiver_op import RoceTransceiverOp

    return RoceTransceiverOp(
        fragment,
        name="roce",
        transceiver=fragment.kwargs("transceiver"),
        **fragment.kwargs("operator"),
    )


#: The addresses the RoCE headers carry across a namespace's veth pair (packet mode needs no
#: kernel IP configuration: the frames are raw).
NAMESPACE_IPS = ("10.78.0.1", "10.78.0.2")


@contextmanager
def peer_network(cfg: dict[str, Any]) -> Iterator[tuple[dict[str, Any], Any]]:
    """``(cfg, namespace)``: with ``peer.link: namespace``, a namespace and veth pair made for
    the run and removed after it, and the transceiver joined to our end (socket NIC, packet
    mode, the pair's MACs); otherwise ``cfg`` as it is and None."""
    if cfg["peer"]["link"] != "namespace":
        yield cfg, None
        return
    from roce_transceiver.config import load_config
    from roce_transceiver.netns import NetnsError, veth_namespace, why_not

    reason = why_not()
    if reason:
        raise ConfigError(f"'namespace' {reason}", key="peer.link")
    try:
        with veth_namespace() as v:
            overrides = {
                "nic": "socket",
                "socket.mode": "packet",
                "socket.interface": v.ours,
                "local.mac": v.mac("ours"),
                "local.ip": NAMESPACE_IPS[0],
                "peer.mac": v.mac("theirs"),
                "peer.ip": NAMESPACE_IPS[1],
            }
            joined = {**cfg, "transceiver": load_config(cfg["transceiver"], overrides)}
            yield joined, v
    except NetnsError as e:
        raise ConfigError(f"'namespace': {e}", key="peer.link") from None


def round_trip_graph(
    fragment: Any, *, title: str, qec: Any = None, messages: Any = None, namespace: Any = None
) -> Any:
    """The part of the graph the round-trip apps share, each operator from its section of the
    fragment's config: ``roce`` (RoceTransceiverOp), ``qpu`` (RoundTripPeerOp, echo requests,
    ``qec``'s syndromes or the MessagePool ``messages``) -> ``latency`` (LatencyStatsOp titled
    ``title``), and ``roce``'s counters -> ``stats``. Returns ``roce``, for the app to connect
    its messages to its own checker."""
    from roce_transceiver.operators import LatencyStatsOp, RoundTripPeerOp, StatsSinkOp

    app = app_section(fragment)
    roce = transceiver_op(fragment)
    peer = RoundTripPeerOp(
        fragment,
        name="qpu",
        transceiver_op=roce,
        count=app["count"],
        qec=qec,
        messages=messages,
        progress_s=app["progress_s"],
        namespace=namespace,
        **fragment.kwargs("peer"),
    )
    latency = LatencyStatsOp(
        fragment,
        name="latency",
        output_dir=app["output_dir"],
        title=title,
        **fragment.kwargs("latency"),
    )
    fragment.add_flow(peer, latency, {("results", "results")})
    fragment.add_flow(roce, StatsSinkOp(fragment, name="stats"), {("stats", "stats")})
    return roce


@contextmanager
def effective_config(cfg: Mapping[str, Any]) -> Iterator[Path]:
    """``cfg`` (validated: the file, the --set flags and the defaults together) as a YAML file
    for ``app.config()``, for as long as the run lasts."""
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory(prefix="roce-app-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(_plain(cfg), sort_keys=False))
        yield path


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_graph(app: Any, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Run ``app`` under the configured scheduler, ``cfg`` given to it by ``app.config()`` (its
    operators take their sections with ``self.kwargs``); returns the graph's operators by
    name. The scheduler ends the run at app.timeout_s, and SIGINT, SIGTERM or SIGHUP ends it
    early (module docstring). In the main thread the graph runs in a thread of its own, while
    this one keeps the signals ours and acts on them."""
    with effective_config(cfg) as path:
        app.config(str(path))
        app.compose_graph()  # here, not in the graph's thread: the operators are known first
        ops = {op.name: op for op in app.graph.get_nodes()}
        app.scheduler(make_scheduler(app, cfg))
        _run(app, ops.get("roce"))
    return ops


def _run(app: Any, roce: Any) -> None:
    if signal.getsignal(signal.SIGTERM) is not _note_stop:  # not under main_for (or not main)
        app.run()
        return
    failed: list[BaseException] = []

    def run() -> None:
        try:
            app.run()
        except BaseException as e:  # handed to the caller below, in its thread
            failed.append(e)

    graph = threading.Thread(target=run, name=f"{app.name}-graph")
    graph.start()
    seen_running = interrupted = interrupted_running = False
    while graph.is_alive():
        graph.join(0.05)  # the graph's end, or a moment to look at the signals
        # Holoscan installs its own handlers as the graph starts (they interrupt, then end
        # the process 3 s later, summary or not; SIGHUP they ignore): ours again.
        _take_stop_signals()
        # The transceiver operator publishes its transceiver once the graph runs.
        seen_running = seen_running or getattr(roce, "transceiver", None) is not None
        # An interrupt while the graph is still starting does not take (GXF: "not running"):
        # then once more when it runs. Later ones would only log that it is stopping.
        if _stopped_by and (not interrupted or (seen_running and not interrupted_running)):
            interrupted, interrupted_running = True, bool(seen_running)
            app.executor.interrupt()
    if failed:
        raise failed[0]


def counter_rows(stats: Mapping[str, int], names: Sequence[str]) -> str:
    """``name value`` pairs of the counters that matter to an app."""
    return ", ".join(f"{n} {stats.get(n, 0)}" for n in names)


def latency_report(title: str, ops: Mapping[str, Any], cfg: dict[str, Any]) -> Report:
    """The round-trip rows and checks the roundtrip and qec apps share, floor included."""
    from roce_transceiver.bench.floors import Percentiles, measure_floors

    lat, roce = ops["latency"], ops["roce"]
    report = Report(title)
    executor = roce.executor or "?"
    report.rows["executor / nic"] = f"{executor} / {roce.config['nic']} ({cfg['peer']['link']})"
    report.rows["scheduler"] = cfg["app"]["scheduler"]
    report.check(
        "answers",
        lat.sent == cfg["app"]["count"] and lat.lost == 0 and lat.wrong == 0,
        f"{lat.received}/{cfg['app']['count']} answered, {lat.lost} lost, {lat.wrong} wrong",
    )
    p = lat.percentiles
    if p is not None:
        report.rows["round trip (us)"] = (
            f"min {p.min:.2f}  p50 {p.p50:.2f}  p99 {p.p99:.2f}  p99.9 {p.p999:.2f}  "
            f"max {p.max:.2f}"
        )
        report.rows["msgs/s"] = f"{lat.messages_per_s:,.0f}"
        report.data["latency_us"] = p.as_dict()
        report.data["messages_per_s"] = lat.messages_per_s
    report.check("latency table", p is not None, f"{p.count if p else 0} round trips")
    if lat.png:
        report.rows["histogram"] = str(lat.png)
    if lat.floor and p is not None:
        floor = "pinned_pingpong" if executor == "cuda" else "cpu_thread_pingpong"
        measured = measure_floors([floor], lat.floor_iterations)[floor]
        if isinstance(measured, Percentiles):
            f = measured.to("us")
            report.rows[f"floor {floor} (us)"] = f"p50 {f.p50:.2f}  p99 {f.p99:.2f}"
            report.rows["p50 / floor p50"] = f"{p.p50 / f.p50:.2f}"
            report.data["floor"] = {"name": floor, **f.as_dict(), "ratio_p50": p.p50 / f.p50}
            if lat.histogram is not None:  # the pictures show the floor of the same run
                lat.histogram = lat.histogram.with_floor(f, floor)
                lat.write_histogram()
        else:
            report.rows[f"floor {floor}"] = f"not measured: {measured}"
    if lat.write_errors:  # checked writable before the run: a disk that filled up, say
        report.check("histogram files", False, "; ".join(lat.write_errors.values()))
    s = roce.final_stats
    report.rows["counters"] = counter_rows(
        s, ["rx_packets", "tx_packets", "express", "completion_drops", "ring_drops"]
    )
    report.data["counters"] = s
    return report
