"""Verbs mode's serve loop in epochs, on the host.

Goal (issue 28): the GPU's serve kernel returns every epoch and is launched again, its
progress (counts, state, the tickets of the replies in flight) carried in device memory. Here
the same ``serve_pass`` runs under g++ (AddressSanitizer, UBSan) with every epoch ending at
once, so the carried progress is all that joins one request to the next.

Oracle: tests/cpp/serve_epochs.cpp's peer, which knows every request it landed; each reply
must be its request's echo, in order, and the loop must end as asked (done after
max_requests, or stopped with every reply completed).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CORE = TESTS.parent / "roce_transceiver" / "core"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found on PATH: the serve loop's driver is built with it")
    out = tmp_path_factory.mktemp("serve") / "serve_epochs"
    cmd = [compiler, "-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"]
    cmd += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{CORE / 'include'}"]
    cmd += [str(TESTS / "cpp" / "serve_epochs.cpp"), "-o", str(out)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-6000:]
    return out


def run(driver: Path, *args: str) -> tuple[int, int]:
    proc = subprocess.run([str(driver), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    word, served, epochs = proc.stdout.split()
    assert word == "ok", proc.stdout
    return int(served), int(epochs)


def test_every_reply_is_its_request_across_epochs(driver: Path) -> None:
    served, epochs = run(driver, "200")
    assert served == 200
    # Four slots: the peer lands at most four at a time, so it takes at least 50 epochs.
    assert epochs >= 50


def test_a_stop_across_epochs_completes_the_replies_in_flight(driver: Path) -> None:
    served, epochs = run(driver, "200", "stop")
    assert served == 100 and epochs >= 25
