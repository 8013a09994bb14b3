"""The operators take their parameters as Holoscan does: ``app.config(file)`` then
``**self.kwargs(section)``, or Python keyword arguments; both are validated by the project's
schema, with the key, the file and the line when the values are a section of the file.

Goal: a user's own app gets the errors the project's apps get. Oracles: line numbers counted in
the text the test writes; the echo checker's count of the round trips a user-style app ran; the
types the file writes (a quoted number stays a string, which Holoscan's kwargs() would not keep).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("holoscan", reason="the operators need Holoscan")

from holoscan.core import Application
from holoscan.schedulers import GreedyScheduler

from roce_transceiver.config import ConfigError
from roce_transceiver.operators import (
    EchoCheckerOp,
    FrameCheckerOp,
    LatencyStatsOp,
    RoceTransceiverOp,
    RoundTripPeerOp,
)

#: A user's file: one section per operator, named after it (Holoscan's examples' layout).
USER_FILE = """\
# my application
roce:
  transceiver:
    executor: cpu
    handler: echo
    qp:
      transport: UC
  max_messages: 64
qpu:
  size: 48
  chunk: 10
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my_app.yaml"
    path.write_text(text)
    return path


class UserApp(Application):
    """What docs/apps.md shows: the operator added to an app from its section."""

    def compose(self):
        roce = RoceTransceiverOp(self, name="roce", **self.kwargs("roce"))
        qpu = RoundTripPeerOp(self, name="qpu", transceiver_op=roce, count=30, **self.kwargs("qpu"))
        self.add_flow(qpu, LatencyStatsOp(self, name="latency", png=None, json=None))
        self.add_flow(roce, EchoCheckerOp(self, name="echo"), {("messages", "messages")})


def run(app: Application, seconds: float = 60) -> dict[str, object]:
    app.scheduler(
        GreedyScheduler(app, name="g", stop_on_deadlock=True, max_duration_ms=int(seconds * 1000))
    )
    app.run()
    return {op.name: op for op in app.graph.get_nodes()}


def test_a_users_app_builds_the_operator_from_kwargs_and_runs(tmp_path):
    app = UserApp()
    app.config(str(write(tmp_path, USER_FILE)))
    ops = run(app)
    roce, qpu, echo = ops["roce"], ops["qpu"], ops["echo"]
    assert roce.max_messages == 64 and roce.config["handler"] == "echo"
    assert roce.executor == "cpu" and qpu.size == 48 and qpu.chunk == 10
    assert qpu.received == 30 and echo.records == 30 and echo.ok, (echo.wrong, echo.no_reply)
    assert roce.transceiver is None  # stopped with the graph


@pytest.mark.parametrize(
    ("replace", "by", "key", "line", "says"),
    [
        ("  max_messages: 64", "  max_messages: 0", "roce.max_messages", 8, "below the minimum"),
        ("  max_messages: 64", "  max_mesages: 64", "roce.max_mesages", 8, "unknown key"),
        (
            "      transport: UC",
            "      transport: XX",
            "roce.transceiver.qp.transport",
            7,
            "one of",
        ),
        ("    handler: echo", "    handler: 5", "roce.transceiver.handler", 5, "must be str"),
        ("  size: 48", "  size: 2", "qpu.size", 10, "below the minimum"),
        ("  chunk: 10", "  chunks: 10", "qpu.chunks", 11, "unknown key"),
    ],
)
def test_errors_name_the_section_key_file_and_line(tmp_path, replace, by, key, line, says):
    assert replace in USER_FILE
    path = write(tmp_path, USER_FILE.replace(replace, by))
    app = UserApp()
    app.config(str(path))
    with pytest.raises(ConfigError) as e:
        app.compose_graph()
    assert (e.value.key, e.value.source, e.value.line) == (key, str(path), line), str(e.value)
    assert says in str(e.value) and f"{path}:{line}: {key}:" in str(e.value)


def test_a_quoted_number_stays_a_string(tmp_path):
    """Holoscan's kwargs() reads ``"1234"`` as the int 1234; the file says a string, and the
    schema (socket.interface: a string) gets what the file says."""
    text = USER_FILE.replace(
        "    handler: echo\n", '    handler: echo\n    socket: {interface: "1234"}\n'
    )
    app = UserApp()
    app.config(str(write(tmp_path, text)))
    assert app.kwargs("roce")["transceiver"]["socket"]["interface"] == 1234  # Holoscan's
    app.compose_graph()
    roce = next(op for op in app.graph.get_nodes() if op.name == "roce")
    assert roce.config["socket"]["interface"] == "1234"


def test_python_kwargs_are_validated_naming_the_operator():
    class App(Application):
        def compose(self):
            RoceTransceiverOp(self, name="rx", transceiver={"executor": "cpu"}, idle_wait_s=-1)

    with pytest.raises(ConfigError) as e:
        App().compose_graph()
    assert e.value.key == "idle_wait_s" and e.value.line is None
    assert str(e.value).startswith("RoceTransceiverOp 'rx': idle_wait_s: -1.0 is below")


def test_python_transceiver_keys_are_named_under_transceiver():
    class App(Application):
        def compose(self):
            RoceTransceiverOp(self, name="rx", transceiver={"queues": {"rx_depth": 3}})

    with pytest.raises(
        ConfigError, match=r"^RoceTransceiverOp 'rx': transceiver\.queues\.rx_depth"
    ):
        App().compose_graph()


def test_values_changed_after_kwargs_are_not_blamed_on_the_file(tmp_path):
    """A section changed by the caller is not the file's: its error names no line."""

    class App(Application):
        def compose(self):
            RoceTransceiverOp(self, name="roce", **{**self.kwargs("roce"), "max_messages": 0})

    app = App()
    app.config(str(write(tmp_path, USER_FILE)))
    with pytest.raises(ConfigError) as e:
        app.compose_graph()
    assert e.value.key == "max_messages" and e.value.line is None, str(e.value)
    assert e.value.source == "RoceTransceiverOp 'roce'"


def test_an_unknown_checker_keyword_is_an_error_not_a_holoscan_parameter():
    class App(Application):
        def compose(self):
            FrameCheckerOp(self, name="check", allow_los=True)

    with pytest.raises(ConfigError, match=r"FrameCheckerOp 'check': allow_los: unknown key"):
        App().compose_graph()


def test_the_projects_app_runs_the_holoscan_way(tmp_path):
    """The shipped app as any Holoscan app: config() with a file, run(), its operators found in
    the graph (none hang on the app)."""
    from roce_transceiver.apps.roundtrip_latency import RoundTripLatencyApp

    path = tmp_path / "rt.yaml"
    path.write_text(
        "app:\n  count: 40\n  output_dir: '" + str(tmp_path) + "'\n"
        "transceiver:\n  executor: cpu\n  handler: echo\n  qp: {transport: UC}\n"
        "latency:\n  png: null\n  json: null\n"
    )
    app = RoundTripLatencyApp()
    app.config(str(path))
    ops = run(app)
    assert ops["echo_check"].records == 40 and ops["echo_check"].ok
    assert ops["latency"].received == 40
    assert not [k for k, v in vars(app).items() if v in ops.values()]


CUSTOM_FILE = """\
roce:
  transceiver:
    executor: cpu
    handler: custom
    custom:
      source: handlers/vote.cu
      entry: team::vote
      state_bytes: 16
      params: {distance: 7, gains: [0.5, 2.0]}
"""


class CustomApp(Application):
    def compose(self):
        roce = RoceTransceiverOp(self, name="roce", **self.kwargs("roce"))
        self.add_flow(roce, EchoCheckerOp(self, name="echo"), {("messages", "messages")})


def test_the_operator_takes_the_whole_custom_section_source_from_the_files_folder(tmp_path):
    folder = tmp_path / "conf"
    (folder / "handlers").mkdir(parents=True)
    (folder / "handlers" / "vote.cu").write_text("// a handler\n")
    path = folder / "my_app.yaml"
    path.write_text(CUSTOM_FILE)
    app = CustomApp()
    app.config(str(path))
    app.compose_graph()
    roce = next(op for op in app.graph.get_nodes() if op.name == "roce")
    assert roce.config["custom"] == {
        "source": str(folder / "handlers" / "vote.cu"),
        "entry": "team::vote",
        "state_bytes": 16,
        "params": {"distance": 7, "gains": [0.5, 2.0]},
    }
    # A source that is not there: the file, the line and the key from the top of the file.
    path.write_text(CUSTOM_FILE.replace("handlers/vote.cu", "handlers/gone.cu"))
    app = CustomApp()
    app.config(str(path))
    with pytest.raises(ConfigError) as e:
        app.compose_graph()
    assert (e.value.key, e.value.line) == ("roce.transceiver.custom.source", 6), str(e.value)
    assert str(e.value).startswith(f"{path}:6: roce.transceiver.custom.source: 'handlers/gone")
