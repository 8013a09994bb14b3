"""The applications' configuration: one schema for every key of an app's YAML file.

An app file has an ``app:`` section (which app, scheduler, count, ...), the ``transceiver:``
section (roce_transceiver.config.SCHEMA), and sections for the operators of the graph:
``operator`` (RoceTransceiverOp), ``peer`` (the far end), ``latency``, ``frame_check`` and
``qec_check``. Each app uses the sections it has operators for; every key is validated
whichever app reads the file, so a typo is an error naming its line, never silently ignored.

This module does not import Holoscan: the schema, the docs and ``roce-transceiver run``'s
validation work where Holoscan is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roce_transceiver.config import SCHEMA as TRANSCEIVER
from roce_transceiver.config import ConfigError, load_config
from roce_transceiver.config import reference_markdown as transceiver_reference
from roce_transceiver.schema import (
    Field,
    Section,
    line_of,
    load_yaml_with_lines,
    render_markdown,
    validate,
    with_overrides,
)

__all__ = [
    "APP",
    "APPS",
    "APP_SCHEMA",
    "FRAME_CHECK",
    "LATENCY",
    "OPERATOR",
    "PEER",
    "QEC_CHECK",
    "ROCE_OP",
    "ConfigError",
    "load_app_config",
    "reference_markdown",
]

#: The applications ``roce-transceiver run`` knows, by ``app.name``.
APPS = (
    "roundtrip_latency",
    "sensor_stream",
    "qec_loop",
    "sensor_stream_distributed",
    "custom_handler",
)

APP_SCHEMA = Section(
    "An application's file: the app, its transceiver, its operators.",
    {
        "app": Section(
            "The application and how the graph runs.",
            {
                "name": Field(str, None, "which app the file is for", choices=(*APPS, None)),
                "scheduler": Field(
                    str,
                    "greedy",
                    "Holoscan scheduler",
                    choices=("greedy", "multi_thread", "event_based"),
                ),
                "worker_threads": Field(
                    int,
                    2,
                    "threads of the multi_thread / event_based scheduler",
                    minimum=1,
                    maximum=64,
                ),
                "count": Field(
                    int,
                    10_000,
                    "messages (roundtrip, qec, custom_handler) or frames (sensor) the peer sends",
                    minimum=1,
                    maximum=10**9,
                ),
                "timeout_s": Field(
                    float,
                    120.0,
                    "the whole run's limit; past it the graph is stopped and the run fails",
                    minimum=1.0,
                    maximum=86_400.0,
                ),
                "progress_s": Field(
                    float,
                    2.0,
                    "seconds between progress lines on stderr; 0: none",
                    minimum=0.0,
                    maximum=3600.0,
                ),
                "output_dir": Field(
                    str, ".", "where the histogram PNG / JSON and the summary JSON are written"
                ),
            },
        ),
        "transceiver": TRANSCEIVER,
        "operator": Section(
            "RoceTransceiverOp (operators/transceiver_op.py).",
            {
                "stats_period_s": Field(
                    float,
                    1.0,
                    "period of the counters on the stats port",
                    minimum=0.01,
                    maximum=3600.0,
                ),
                "idle_wait_s": Field(
                    float,
                    0.001,
                    "how long compute() waits for the loop when nothing is ready, spinning "
                    "in the core without the GIL (a record is taken as it is published; "
                    "bounds the scheduler's spin)",
                    minimum=0.0,
                    maximum=1.0,
                ),
                "frame_batch": Field(
                    int,
                    1,
                    "frames per message on the frames port: 1, a tensor a compute() with its "
                    "record in the metadata (what C++ and distributed operators take); more, a "
                    "list of up to this many (array, Frame) pairs a compute(), each array "
                    "holding its frame's page until dropped (Python operators; Holoscan's cost "
                    "a message shared by the batch: docs/apps.md)",
                    minimum=1,
                    maximum=4096,
                ),
                "max_messages": Field(
                    int,
                    1024,
                    "records per message on the messages port at most",
                    minimum=1,
                    maximum=65536,
                ),
                "drain_timeout_s": Field(
                    float,
                    5.0,
                    "after the peer is done: how long to wait for what it expects",
                    minimum=0.01,
                    maximum=600.0,
                ),
            },
        ),
        "peer": Section(
            "The far end: the loopback NIC's, or a software peer over the socket NIC.",
            {
                "link": Field(
                    str,
                    "loopback",
                    "loopback: the in-memory far end (no network); udp: the qpu / sensor peer "
                    "over UDP port 4791 (transceiver.nic socket, socket.mode udp); namespace: "
                    "the app makes a network namespace and veth pair (root, iproute2), puts the "
                    "peer in it and joins the transceiver to our end (socket NIC, packet mode)",
                    choices=("loopback", "udp", "namespace"),
                ),
                "size": Field(int, 32, "roundtrip: request bytes", minimum=4, maximum=4096),
                "window": Field(
                    int, 1, "loopback: requests in flight at most", minimum=1, maximum=1024
                ),
                "rate": Field(
                    float,
                    None,
                    "requests (frames) per second; null: as fast as answers come",
                    nullable=True,
                    minimum=1.0,
                ),
                "chunk": Field(
                    int,
                    1000,
                    "requests (frames) per peer step: the progress grain",
                    minimum=1,
                    maximum=10**6,
                ),
                "timeout_s": Field(
                    float,
                    1.0,
                    "udp: how long the qpu peer waits for each answer",
                    minimum=0.001,
                    maximum=60.0,
                ),
                "seed": Field(
                    int, 1, "seed of payloads, syndromes, readings and faults", minimum=0
                ),
                "error_rate": Field(
                    float,
                    0.03,
                    "qec: rate of X and of Z errors per data qubit; custom_handler: rate of "
                    "flipped copies in a repetition code's readings",
                    minimum=0.0,
                    maximum=0.5,
                ),
                "pool": Field(
                    int,
                    4096,
                    "qec, custom_handler: distinct error samples (readings) sent in turn",
                    minimum=1,
                    maximum=1 << 20,
                ),
                "frame_bytes": Field(
                    int,
                    65536,
                    "sensor: bytes per frame (at most page_bytes - 128 with metadata)",
                    minimum=1,
                    maximum=1 << 30,
                ),
                "payload": Field(
                    int,
                    1024,
                    "sensor: bytes per RDMA WRITE packet (a multiple of 4)",
                    minimum=4,
                    maximum=8192,
                ),
                "loss": Field(float, 0.0, "sensor: data packets dropped", minimum=0.0, maximum=1.0),
                "reorder": Field(
                    float,
                    0.0,
                    "sensor: data packets swapped with the next",
                    minimum=0.0,
                    maximum=1.0,
                ),
                "duplicate": Field(
                    float, 0.0, "sensor: data packets sent twice", minimum=0.0, maximum=1.0
                ),
                "corrupt": Field(
                    float, 0.0, "sensor: data packets with a bad ICRC", minimum=0.0, maximum=1.0
                ),
            },
        ),
        "latency": Section(
            "LatencyStatsOp: the round trips' percentiles and histogram.",
            {
                "png": Field(
                    str,
                    "roundtrip_latency.png",
                    "histogram picture (in app.output_dir); null: none",
                    nullable=True,
                ),
                "json": Field(
                    str,
                    "roundtrip_latency.json",
                    "histogram and percentiles as JSON; null: none",
                    nullable=True,
                ),
                "bins": Field(int, 60, "histogram bins", minimum=1, maximum=10_000),
                "floor": Field(
                    bool,
                    True,
                    "after the graph: measure the ping-pong floor the round trip "
                    "is read against (cpu: two threads; cuda: host <-> persistent kernel)",
                ),
                "floor_iterations": Field(
                    int, 10_000, "round trips of the floor", minimum=100, maximum=10**7
                ),
            },
        ),
        "frame_check": Section(
            "FrameCheckerOp: every frame against what the sensor sent.",
            {
                "allow_loss": Field(
                    bool,
                    False,
                    "frames with lost packets are expected (faults configured) and "
                    "do not fail the run; their intact frames must still be exact",
                ),
            },
        ),
        "qec_check": Section(
            "QecCheckerOp: corrections against the lookup table and pymatching.",
            {
                "sample": Field(
                    int,
                    1000,
                    "records also decoded by pymatching (the first ones)",
                    minimum=0,
                    maximum=10**7,
                ),
            },
        ),
    },
)


# Each operator's part of the schema: what it validates its keyword arguments against, however
# they come (``**self.kwargs(section)`` of an ``app.config`` file, or Python; operators/params.py).
def _section(name: str) -> Section:
    section = APP_SCHEMA.keys[name]
    assert isinstance(section, Section), name
    return section


APP = _section("app")
OPERATOR = _section("operator")
PEER = _section("peer")
LATENCY = _section("latency")
FRAME_CHECK = _section("frame_check")
QEC_CHECK = _section("qec_check")

#: RoceTransceiverOp's keyword arguments: the ``operator`` keys and its ``transceiver`` (the
#: Transceiver's keys, roce_transceiver.config.SCHEMA, checked by load_config with its own
#: rules). A user's app gives it one section, ``roce: {transceiver: {...}, max_messages: ...}``.
ROCE_OP = Section(
    "RoceTransceiverOp's keyword arguments.",
    {
        "transceiver": Field(
            (dict, str),
            None,
            "the Transceiver's configuration: a mapping of its keys, or a YAML file; "
            "null: every default",
            nullable=True,
        ),
        **OPERATOR.keys,
    },
)


def load_app_config(
    source: Mapping[str, Any] | str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    app: str | None = None,
    flags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole file validated, every default filled in. ``overrides`` are dotted keys
    (``{"app.count": 100, "transceiver.executor": "cpu"}``) applied on top, ``flags`` the
    command-line flag that gave each (``{"app.count": "--count 100"}``): an error in one names
    its flag, not the file's line of the value it replaced, and a relative
    ``transceiver.custom.source`` given by one is the working directory's. ``app`` is the app
    that reads the file (an ``app.name`` naming another one is an error)."""
    origin = str(source) if isinstance(source, (str, Path)) else None
    data: Mapping[str, Any] = (
        load_yaml_with_lines(source) if isinstance(source, (str, Path)) else (source or {})
    )
    if overrides:
        data = with_overrides(data, overrides, flags)
    cfg = validate(APP_SCHEMA, data, source=origin)
    # The transceiver's own rules (keys together, MAC auto, ...) with their lines. A relative
    # custom.source is the file's folder's (a mapping's: the working directory's), made
    # absolute: run_graph() gives Holoscan a copy of the file written elsewhere.
    section = data.get("transceiver") or {}
    base = Path(source).parent if isinstance(source, (str, Path)) else Path.cwd()
    cfg["transceiver"] = load_config(section, origin=origin, prefix="transceiver.", base_dir=base)
    _check_together(cfg, data, origin, app)
    return cfg


def _check_together(
    cfg: dict[str, Any], data: Mapping[str, Any], source: str | None, app: str | None
) -> None:
    def fail(message: str, key: str) -> ConfigError:
        return ConfigError(message, key=key, source=source, line=line_of(data, key))

    name = cfg["app"]["name"]
    if app is not None and name is not None and name != app:
        raise fail(f"this file is for {name!r}, not for {app!r}", "app.name")
    t, peer = cfg["transceiver"], cfg["peer"]
    if peer["link"] == "udp" and (t["nic"] != "socket" or t["socket"]["mode"] != "udp"):
        raise fail(
            "peer.link 'udp' needs transceiver.nic 'socket' with transceiver.socket.mode 'udp'",
            "peer.link",
        )
    if peer["link"] == "namespace" and t["nic"] != "loopback":
        raise fail(
            "peer.link 'namespace' joins the transceiver to the veth pair itself: leave "
            "transceiver.nic at 'loopback'",
            "peer.link",
        )
    if peer["link"] == "loopback" and t["nic"] == "socket":
        raise fail(
            "transceiver.nic 'socket' needs a peer on the network: peer.link 'udp'", "peer.link"
        )
    if peer["payload"] % 4:
        raise fail(f"{peer['payload']}: must be a multiple of 4", "peer.payload")
    want = {
        "roundtrip_latency": "echo",
        "qec_loop": "qec",
        "sensor_stream": "frames",
        "sensor_stream_distributed": "frames",
        "custom_handler": "custom",
    }.get(app or name or "")
    if want and t["handler"] != want:
        raise fail(
            f"{app or name} runs the {want!r} handler, not {t['handler']!r}", "transceiver.handler"
        )
    if want == "frames":
        from roce_transceiver.peers.link import packet_bytes

        slot = t["queues"]["slot_bytes"]
        packet = packet_bytes(t, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", peer["payload"])
        if packet > slot:
            most = (slot - (packet - peer["payload"])) // 4 * 4
            raise fail(
                f"{peer['payload']}: its packets are {packet} bytes, more than "
                f"transceiver.queues.slot_bytes {slot} (the transceiver would drop every one); "
                f"at most {most} fit",
                "peer.payload",
            )
        fr = t["frames"]
        most = fr["page_bytes"] - (128 if fr["metadata"] else 0)
        if peer["frame_bytes"] > most:
            raise fail(
                f"{peer['frame_bytes']} bytes do not fit a page of {fr['page_bytes']} "
                f"(at most {most} with metadata {fr['metadata']})",
                "peer.frame_bytes",
            )
        if t["qp"]["transport"] != "UC":
            raise fail("an HSB sensor speaks UC", "transceiver.qp.transport")


def reference_markdown() -> str:
    """docs/configuration.md: the transceiver's keys, then every app key (tests check it)."""
    return (
        transceiver_reference().replace(
            "Generated from `roce_transceiver/config.py` by\n"
            "`python -m roce_transceiver.config > docs/configuration.md`",
            "Generated from `roce_transceiver/config.py` and `operators/app_config.py` by\n"
            "`python -m roce_transceiver.operators.app_config > docs/configuration.md`",
        )
        + "\n## Application files (`configs/*.yaml`)\n\n"
        "An app's file (`python apps/X.py --config FILE`, `roce-transceiver run FILE`) holds "
        "the transceiver's keys above under `transceiver:` and these sections; every key is "
        "optional and checked the same way, whichever app reads the file.\n\n"
        + render_markdown(
            Section("", {k: v for k, v in APP_SCHEMA.keys.items() if k != "transceiver"})
        )
    )


if __name__ == "__main__":
    print(reference_markdown(), end="")
