"""What the long-running commands (``echo``, ``listen``) share: a transceiver started from a
configuration, announced on stderr, stopped however the command ends (Ctrl-C, SIGTERM and SIGHUP
included), every failure one ``CommandError`` line naming the command."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from roce_transceiver.commands import CommandError

if TYPE_CHECKING:
    from roce_transceiver.transceiver import Transceiver

__all__ = [
    "Stopped",
    "capture_failed",
    "check_positive",
    "moved",
    "running_transceiver",
    "stop_signals",
]


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken as Ctrl-C is: a KeyboardInterrupt, named by its signal."""


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM (how systemd, docker and Kubernetes stop a service) and SIGHUP (a closed
    terminal) handled as SIGINT is: the first raises :class:`Stopped` in the main thread, so a
    command stops the way Ctrl-C stops it (transceiver stopped, capture closed, summary
    printed, the same exit status); later ones are ignored, the command being on its way out.
    The handlers before are back afterwards. Only the main thread takes signals: elsewhere this
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in signals}
    raised: list[str] = []

    def stop(signum: int, frame: object) -> None:
        if not raised:
            raised.append(signal.Signals(signum).name)
            raise Stopped(raised[0])

    try:
        for sig in signals:
            signal.signal(sig, stop)
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def check_positive(command: str, **values: float | None) -> None:
    """Options that, when given, must be positive: ``--frames 0`` is an error, not a hang."""
    for name, value in values.items():
        if value is not None and value <= 0:
            raise CommandError(f"{command}: --{name} {value}: must be positive")


@contextmanager
def running_transceiver(
    command: str, config: str, overrides: Mapping[str, Any] | None = None, banner: str = ""
) -> Iterator[Transceiver]:
    """The transceiver of ``config`` running; its banner (what runs it, the NIC, ``banner``)
    on stderr once it is up, which is also what a caller can wait for. Ctrl-C (and SIGTERM or
    SIGHUP under :func:`stop_signals`) ends the block."""
    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.transceiver import Transceiver, TransceiverError

    try:
        t = Transceiver(load_config(config, overrides))
        t.start()
    except (ConfigError, TransceiverError, OSError) as e:
        raise CommandError(f"{command}: {e}") from None
    print(f"{t.executor_reason}; nic {_nic(t)}; {banner}", file=sys.stderr, flush=True)
    try:
        yield t
    except Stopped as e:
        print(f"{command}: {e}: stopping", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        try:
            t.stop()
        except TransceiverError as e:
            raise CommandError(f"{command}: {e}") from None


def _nic(t: Transceiver) -> str:
    """The NIC, and for the socket NIC its mode and what receives: the mmap ring, or the
    receive buffer the kernel granted."""
    if t.config["nic"] != "socket":
        return t.config["nic"]
    info = t.nic_info()
    mode = t.config["socket"]["mode"]
    if info["rx_path"] == "mmap":
        return f"socket ({mode}, mmap ring {info['rx_ring_bytes'] >> 20} MiB)"
    granted, asked = info["rx_buffer_bytes"], info["rx_buffer_asked"]
    # Linux grants twice what it was asked (the rest is its bookkeeping); less means a cap.
    capped = "" if granted >= 2 * asked else " (capped by net.core.rmem_max: root lifts it)"
    size = f"{granted >> 20} MiB" if granted % (1 << 20) == 0 else f"{granted >> 10} KiB"
    fallback = f"; no mmap ring: {info['rx_fallback']}" if info["rx_fallback"] else ""
    return f"socket ({mode}, receive buffer {size}{capped}{fallback})"


def capture_failed(command: str, t: Transceiver) -> bool:
    """Says on stderr if the socket NIC's capture lost frames to a write error; True if so."""
    error = t.nic_info().get("capture_error")
    if not error:
        return False
    lost = t.stats().get("nic_capture_errors", 0)
    print(f"{command}: {error}; {lost} frames not captured", file=sys.stderr, flush=True)
    return True


def moved(stats: Mapping[str, int]) -> dict[str, int]:
    """The counters that are not zero."""
    return {k: v for k, v in stats.items() if v}
