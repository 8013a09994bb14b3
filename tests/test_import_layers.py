"""Each layer imports only the layers below it (docs/ARCHITECTURE.md, Layers): the benches and
the library never reach back up into the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import roce_transceiver.bench

BENCHES = sorted(
    f"roce_transceiver.bench.{p.stem}"
    for p in Path(roce_transceiver.bench.__file__).parent.glob("*.py")
    if p.stem != "__init__"
)


@pytest.mark.parametrize("module", BENCHES)
def test_a_bench_imports_nothing_of_the_command_line(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "up = sorted(m for m in sys.modules if m.startswith('roce_transceiver.commands'))\n"
        "print(','.join(up))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"
