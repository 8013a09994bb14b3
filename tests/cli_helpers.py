"""Running the ``roce-transceiver`` command from tests: the module, and a long-running
command in the background that a test waits for by its banner (its first stderr line), not
by a sleep."""

from __future__ import annotations

import selectors
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from child_helpers import default_sigint

__all__ = ["CLI", "started"]

CLI = [sys.executable, "-m", "roce_transceiver"]


@contextmanager
def started(args: list[str], banner: str, timeout: float = 30.0) -> Iterator[subprocess.Popen]:
    """``args`` running, once its first stderr line holds ``banner``; killed on the way out
    if it is still running then. Its SIGINT is at the default (child_helpers.default_sigint),
    wherever the test was started from."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        assert sel.select(timeout=timeout), f"{args[3:5]} printed nothing within {timeout} s"
        line = proc.stderr.readline()
        assert banner in line, line + proc.stderr.read() if proc.poll() is not None else line
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The CLI in this process: its exit status, stdout and stderr."""
    from roce_transceiver import cli

    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err
