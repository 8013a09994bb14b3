"""Running the Holoscan apps from tests: as the user does (a subprocess), in a scratch
output directory, and reading back the summary JSON they write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("holoscan", reason="the apps need Holoscan (pip install '.[apps]')")


def run_app(
    name: str, out: Path, *args: str, timeout: float = 180
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``python apps/<name>.py --output-dir out ARGS``; its summary, if it wrote one."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apps" / f"{name}.py"), "--output-dir", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    summary = out / f"{name}_summary.json"
    return proc, json.loads(summary.read_text()) if summary.exists() else None


def checks(summary: dict[str, Any]) -> dict[str, bool]:
    return {c["name"]: c["ok"] for c in summary["checks"]}
