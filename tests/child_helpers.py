"""Children of the tests. A transceiver in a child process, asked over its stdin for its
counters (the socket NIC's drop tests stop it with SIGSTOP while they flood it, so it must be
a process of its own): the child prints one JSON line per request, ``stats`` for the counters
so far, ``stop`` for the final ones. And :func:`default_sigint`, for every child a test stops
with SIGINT.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time


def ask(proc: subprocess.Popen, what: str) -> dict:
    """The child's answer to ``what``; its stderr when it answers nothing."""
    proc.stdin.write(what + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def accounted(s: dict) -> int:
    """The frames the NIC has read, or counted as dropped or filtered."""
    return s["nic_rx_frames"] + s["nic_rx_ring_full"] + s["nic_filtered"] + s["nic_kernel_drops"]


def final_once_accounted(proc: subprocess.Popen, sent: int, timeout: float) -> dict:
    """The child's final counters, once every one of the ``sent`` frames is accounted for
    (or ``timeout`` seconds have passed: the caller's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout
    stats = ask(proc, "stats")
    while accounted(stats) < sent and time.monotonic() < deadline:
        time.sleep(0.05)  # a poll interval of a counter that must reach `sent`
        stats = ask(proc, "stats")
    final = ask(proc, "stop")
    proc.wait(timeout=timeout)
    return final


def default_sigint() -> None:
    """In the child, before exec: SIGINT at its default, which Python makes KeyboardInterrupt.
    A test run from a background job (``pytest &``, some CI runners) has SIGINT ignored, the
    child inherits that, and Python leaves an ignored SIGINT ignored: a test that stops its
    child with SIGINT would then wait for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
