"""A bridge's stream kept up over time: programmed in a thread while the caller takes frames,
watched by its frames, and brought back when the bridge resets (docs/hsb.md, "When the bridge
goes away"). ``listen --hsb`` and ``RoceTransceiverOp``'s ``hsb:`` section run one.

The caller reports each frame (:meth:`BridgeSession.came`). When a queue has had none for
``hsb.watchdog_s``, the session looks at the bridge (one register read a sensor) and acts on
what it finds, a small state machine:

- **streaming**: the registers are still this session's: the frames are only slow.
- **taken**: another host's registers are there (it took the sensor over): the session ends and
  leaves the sensor to it (``HsbStream.lost`` names it), as before reconnection existed.
- **lost**: the bridge does not answer, or its registers were cleared (a reset forgets them):
  with ``hsb.reconnect`` the session waits up to ``hsb.reconnect_timeout_s`` for the bridge to
  announce itself again from its address (without ``hsb.enumerate``: to answer again).
- **re-enumerated**: it did. A board at that address with another MAC, serial or UUID, or the
  same board at another address, is **refused** (an error naming both): not this stream's
  bridge. The same board whose uptime went on (it was only unreachable) and whose registers are
  still this session's streams on; one whose registers were cleared without a restart was
  cleared on purpose (another host, ``hsb write``), which the session does not undo: it ends as
  **lost** for good.
- **re-programmed**: a restarted board (its announced uptime began again; or one that went
  silent and answers again with its registers clear, which is also what a board without
  announcements must show) is checked and programmed as at the start, and **streaming** again.

Frames the bridge sent while it was gone are never seen: the session estimates how many from
the frames' interval before the loss (``frames_missed``, a count per reconnection).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roce_transceiver.hsb_control import Announcement, EnumerationError, enumerate_bridges
from roce_transceiver.hsb_stream import HsbBridgeLost, HsbError, HsbStream

__all__ = ["BridgeSession", "SessionEvent"]

log = logging.getLogger(__name__)

# States (SessionEvent.state).
PROGRAMMING = "programming"
STREAMING = "streaming"
LOST = "lost"
REENUMERATED = "re-enumerated"
REPROGRAMMED = "re-programmed"
TAKEN = "taken"  # another host has a sensor: the session ended
REFUSED = "refused"  # the bridge came back as another board, or could not be programmed
STOPPED = "stopped"

# An announced uptime this many seconds short of the one expected is a restart: the field is
# whole seconds (each side rounds down). A board that restarts within its first seconds is
# not told from one whose registers someone cleared (docs/hsb.md).
_RESTART_MARGIN_S = 2
_LISTEN_SLICE_S = 0.25  # how long one wait for announcements lasts: a stop is seen between
_POLL_S = 0.05  # the supervisor's tick


@dataclass(frozen=True)
class SessionEvent:
    """One step of the session: seconds since it started, the state entered, and why."""

    seconds: float
    state: str
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "state": self.state, "why": self.why}


class BridgeSession:
    """Runs ``stream`` (an :class:`HsbStream`, not yet open) for ``queues`` queues: programs it
    in a thread, then supervises it there until :meth:`stop`. ``say``: a line for the user at
    each step (stderr for listen); the events are kept in :attr:`events` too."""

    def __init__(
        self,
        stream: HsbStream,
        *,
        queues: int = 1,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        h = stream.cfg["hsb"]
        self.stream = stream
        self.watchdog_s: float = h["watchdog_s"]
        self.reconnect: bool = h["reconnect"]
        self.reconnect_timeout_s: float = h["reconnect_timeout_s"]
        self.events: list[SessionEvent] = []
        self.reconnects = 0
        self.frames_missed: list[int | None] = []  # an estimate a reconnection (None: unknown)
        self.error: BaseException | None = None  # what ended it badly, for check()
        self.streaming = threading.Event()  # set while the bridge streams (as far as seen)
        self._say = say or (lambda line: log.info("%s", line))
        self._clock = clock
        self._started = clock()
        self._state = PROGRAMMING
        self._queues = queues
        self._last = [0.0] * queues  # per queue: its last frame, or since when it streams
        self._gaps = [0.0] * queues  # per queue: the frames' interval (a running mean)
        self._next_look = 0.0
        self._heard: Announcement | None = None  # the bridge as last heard, and when
        self._heard_at = 0.0
        self._gave_up = False  # lost, and not to be waited for (any more)
        self._reported = False
        self._stop = threading.Event()
        self._lock = threading.Lock()  # came() against the supervisor's reads of the times
        self._thread: threading.Thread | None = None

    # -- the caller's side ------------------------------------------------------------
    def start(self, announcement: Announcement | None = None) -> BridgeSession:
        """Program the bridge (its announcement heard already, or None) and supervise it, in a
        thread; returns at once."""
        self._thread = threading.Thread(
            target=self._run, args=(announcement,), name="hsb-session", daemon=True
        )
        self._thread.start()
        return self

    @property
    def state(self) -> str:
        return self._state

    @property
    def ended(self) -> bool:
        """The session is over by itself: a sensor taken over, the bridge refused or not back
        in time, or the first programming failed (check() raises the error)."""
        return self._state in (TAKEN, REFUSED) or (self._state == LOST and self._gave_up)

    def came(self, queue: int) -> None:
        """A frame came on ``queue``: its sensor streams here."""
        now = self._clock()
        with self._lock:
            if queue < self._queues and self.streaming.is_set():
                last, self._last[queue] = self._last[queue], now
                if last:
                    gap = now - last
                    mean = self._gaps[queue]
                    self._gaps[queue] = gap if not mean else 0.875 * mean + 0.125 * gap

    @property
    def programmed(self) -> bool:
        """The bridge was programmed and streamed, at least once."""
        return any(e.state == STREAMING for e in self.events)

    def check(self) -> None:
        """Raise what the first programming failed with (HsbError, or what the stream
        raised), once. What ends the session later is in ``error`` and ``ended``."""
        if self.error is None or self._reported or self.programmed:
            return
        self._reported = True
        raise self.error

    def join(self) -> None:
        """Wait for the first programming to end (bounded: every request's tries are)."""
        while self._thread is not None and self._thread.is_alive() and self._state == PROGRAMMING:
            self._thread.join(_POLL_S)

    def stop(self, timeout: float = 30.0) -> None:
        """End the supervision (a wait for the bridge ends at once; a request in flight is
        finished, bounded by its tries); the stream stays open for the caller to stop and
        close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if not self.ended:
            self._enter(STOPPED, "stopped")

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self._state,
            "reconnects": self.reconnects,
            "frames_missed": self.frames_missed,
            "events": [e.as_dict() for e in self.events],
        }

    # -- the supervisor's thread -------------------------------------------------------
    def _enter(self, state: str, why: str) -> None:
        self._state = state
        self.events.append(SessionEvent(self._clock() - self._started, state, why))
        if state == STREAMING:
            now = self._clock()
            with self._lock:
                self._last = [now] * self._queues
            self.streaming.set()
        else:
            self.streaming.clear()

    def _run(self, announcement: Announcement | None) -> None:
        try:
            try:
                self.stream.open(announcement)
            except HsbBridgeLost as e:
                # Silent, or forgot what was written: it may have restarted meanwhile.
                self._heard, self._heard_at = self.stream.announcement, self._clock()
                if not self._program_again(e):
                    raise
        except BaseException as e:  # handed to the caller by check()
            self.error = e
            self._enter(REFUSED, str(e))
            return
        self._heard = self.stream.announcement
        self._heard_at = self._clock()
        self._enter(STREAMING, "programmed and started")
        many = len(self.stream.plans) > 1
        for q, plan in enumerate(self.stream.plans):  # a sensor a queue
            self._say(
                f"hsb: {plan.bridge} sensor {plan.channel.sensor} (data plane "
                f"{plan.channel.data_plane}) streaming to {plan.host_ip}:{plan.host_port} qp "
                f"{plan.qpn:#x}{f' (queue {q})' if many else ''}, "
                f"{plan.frame_bytes}-byte frames in {plan.packet_bytes}-byte packets"
            )
        while not self._stop.wait(_POLL_S):
            if self._state != STREAMING or not self._silent():
                continue
            if not self._look():
                return

    def _program_again(self, first: HsbBridgeLost) -> bool:
        """After the first programming failed for a bridge that stopped answering or forgot
        what was written: with hsb.reconnect, wait for it to restart and program it again.
        True once programmed; False to fail with ``first``."""
        if not self.reconnect or self._heard is None:
            return False
        self._enter(LOST, f"while programming: {first}")
        self._say(
            f"hsb: {first}; waiting up to {self.reconnect_timeout_s:g} s for the bridge to "
            "restart (hsb.reconnect_timeout_s)"
        )
        back = self._back(self._clock() + self.reconnect_timeout_s, restart_only=True)
        if back is None:
            return False
        self._enter(REENUMERATED, back[1])
        self.stream.reopen(self.stream.announcement)  # its failure is the session's
        self._enter(REPROGRAMMED, "configured and started")
        return True

    def _silent(self) -> bool:
        """Has a queue had no frame for watchdog_s (looked at most once a watchdog_s)?"""
        now = self._clock()
        if now < self._next_look:
            return False
        with self._lock:
            silent = any(now - last >= self.watchdog_s for last in self._last)
        if silent:
            self._next_look = now + self.watchdog_s
        return silent

    def _look(self) -> bool:
        """The bridge's registers, read: False when the session has ended."""
        try:
            states = self.stream.states()
        except HsbError as e:
            return self._lost(f"no answer: {e}", silent=True)
        if self._taken(states):
            return False
        cleared = [ch for ch, state, _ in states if state == "cleared"]
        for ch in cleared:
            ch.configured = False  # nothing of ours there to clear on the way out
        if cleared:
            names = ", ".join(f"sensor {ch.plan.channel.sensor}" for ch in cleared)
            return self._lost(f"the registers of {names} were cleared (a restart forgets them)")
        return True  # still this session's: the frames are only slow

    def _taken(self, states: list[tuple[Any, str, Any]]) -> bool:
        """Another host's registers on a sensor (or this stream's with other values): the
        sensor is marked lost (HsbStream.lost names who has it) and the session ends."""
        others = [ch for ch, state, _ in states if state in ("taken", "changed")]
        for ch in others:
            ch.still_ours()  # marks it lost, naming the holder
        if others:
            self._enter(TAKEN, "; ".join(str(ch.lost) for ch in others))
        return bool(others)

    def _lost(self, why: str, silent: bool = False) -> bool:
        bridge = self.stream.cfg["hsb"]["bridge"]
        lost_at = max(self._last)
        self._enter(LOST, why)
        if not self.reconnect:
            self.error = HsbError(f"bridge {bridge} lost ({why}); hsb.reconnect is false")
            self._say(f"hsb: {self.error}: ending")
            self._gave_up = True
            return False
        self._say(
            f"hsb: bridge {bridge} lost ({why}); waiting up to {self.reconnect_timeout_s:g} s "
            "for it to come back (hsb.reconnect_timeout_s)"
        )
        deadline = self._clock() + self.reconnect_timeout_s
        try:
            back = self._back(deadline)
        except HsbError as e:
            self.error = e
            self._enter(REFUSED, str(e))
            self._say(f"hsb: {e}")
            return False
        if back is None:
            if self._stop.is_set():
                return False
            self.error = HsbError(
                f"bridge {bridge} lost ({why}) and not back within {self.reconnect_timeout_s:g} "
                "s (hsb.reconnect_timeout_s); it may still be streaming here when it comes back: "
                f"roce-transceiver hsb write --bridge {bridge} ... clears it"
            )
            self._gave_up = True
            self._say(f"hsb: {self.error}")
            return False
        restarted, how, states = back
        if not restarted and silent and any(state == "cleared" for _, state, _ in states):
            # Silent, then back with its registers gone: a restart whose uptime did not show
            # (HSB's emulator sends it little-endian, BOOTP and hololink read big-endian).
            restarted, how = True, f"{how}; silent, then its registers clear: a restart"
        if not restarted:
            return self._unchanged(how, states)
        self._enter(REENUMERATED, how)
        try:
            self.stream.reopen(self.stream.announcement)
        except HsbError as e:
            self.error = e
            self._enter(REFUSED, f"could not be programmed again: {e}")
            self._say(f"hsb: bridge {bridge} back but not programmed again: {e}")
            return False
        self._enter(REPROGRAMMED, "configured and started again")
        self._heard, self._heard_at = self.stream.announcement, self._clock()
        gone = self._clock() - lost_at
        missed = self._missed(gone)
        self.frames_missed.append(missed)
        self.reconnects += 1
        self._enter(STREAMING, f"after {gone:.1f} s without frames")
        about = f", about {missed} frames missed" if missed is not None else ""
        self._say(f"hsb: bridge {bridge} streaming again ({how}; {gone:.1f} s gone{about})")
        return True

    def _unchanged(self, how: str, states: list[tuple[Any, str, Any]]) -> bool:
        """The bridge is back without a restart: streams on when its registers are still
        this session's; cleared on purpose (not by a restart): ended, not undone."""
        bridge = self.stream.cfg["hsb"]["bridge"]
        if self._taken(states):
            return False
        cleared = [ch for ch, state, _ in states if state == "cleared"]
        if cleared:
            for ch in cleared:
                ch.still_ours()  # marks it lost: cleared by someone else
            self._gave_up = True
            self.error = HsbError(
                f"bridge {bridge} is back without a restart ({how}) and {cleared[0].lost}: "
                "left as it is (cleared on purpose)"
            )
            self._say(f"hsb: {self.error}")
            return False
        self._heard, self._heard_at = self.stream.announcement, self._clock()
        self._enter(STREAMING, f"back ({how}), its registers still this session's")
        self._say(f"hsb: bridge {bridge} answers again ({how}): streaming on")
        return True

    def _missed(self, gone: float) -> int | None:
        """Frames the bridge would have sent in ``gone`` s, by the interval before the loss
        (None: too few frames to know it), every queue's."""
        with self._lock:
            gaps = list(self._gaps)
        if not all(gaps):
            return None
        return sum(max(0, round(gone / gap) - 1) for gap in gaps)

    def _back(
        self, deadline: float, restart_only: bool = False
    ) -> tuple[bool, str, list[tuple[Any, str, Any]]] | None:
        """Wait for the bridge: (restarted, how it came back, its sensors' states), or None at
        the deadline or a stop (``restart_only``: or when it is back without a restart).
        HsbError when it came back as another board."""
        h = self.stream.cfg["hsb"]
        if self._heard is None:  # no announcements to go by: it is back once it answers
            while not self._stop.is_set() and self._clock() < deadline:
                try:
                    states = self.stream.states()
                except HsbError:
                    self._stop.wait(_LISTEN_SLICE_S)
                    continue
                # Cleared registers: a restart, as far as this session can tell without an
                # announcement's uptime (docs/hsb.md).
                cleared = any(state == "cleared" for _, state, _ in states)
                how = "answers again" + (", its registers clear" if cleared else "")
                return cleared, how, states
            return None
        while not self._stop.is_set() and self._clock() < deadline:
            try:
                found, _ = enumerate_bridges(
                    min(_LISTEN_SLICE_S, max(0.01, deadline - self._clock())),
                    port=h["enumeration_port"],
                )
            except EnumerationError as e:
                raise HsbError(str(e)) from None
            for a in found:
                restarted = self._same_board(a)
                if restarted is None:
                    continue
                self.stream.announcement = a
                if restarted:
                    return True, f"restarted: announced, uptime {a.seconds} s", []
                if restart_only:
                    continue
                try:
                    states = self.stream.states()
                except HsbError:
                    continue  # it announces but does not answer yet
                return False, f"announced, uptime {a.seconds} s", states
        return None

    def _same_board(self, a: Announcement) -> bool | None:
        """For an announcement heard while waiting: None when it is not about this bridge;
        whether it restarted when it is; HsbError when this bridge's address or identity
        changed."""
        heard = self._heard
        assert heard is not None
        ours = (heard.mac.lower(), heard.serial, heard.uuid)
        theirs = (a.mac.lower(), a.serial, a.uuid)
        if a.ip != heard.ip:
            if a.mac.lower() == heard.mac.lower() or (heard.serial and a.serial == heard.serial):
                raise HsbError(
                    f"bridge {heard.ip} (MAC {heard.mac}, serial {heard.serial}) came back at "
                    f"{a.ip}: not programmed there (hsb.bridge names {heard.ip}; start again "
                    f"with {a.ip})"
                )
            return None
        if a.data_plane != heard.data_plane:
            return None
        if theirs != ours:
            raise HsbError(
                f"bridge {heard.ip} came back as another board: MAC {heard.mac} -> {a.mac}, "
                f"serial {heard.serial} -> {a.serial}, UUID {heard.uuid} -> {a.uuid}; not "
                "programmed (check what is at that address, then start again)"
            )
        expected = heard.seconds + (self._clock() - self._heard_at)
        behind = (int(expected) - a.seconds) % 65536  # the field is 16 bits of seconds
        return _RESTART_MARGIN_S <= behind < 32768
