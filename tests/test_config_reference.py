"""docs/configuration.md documents every configuration key, as the schema has it.

Goal: the reference cannot drift from the code. Oracle: the schemas themselves
(roce_transceiver.config.SCHEMA, roce_transceiver.operators.app_config.APP_SCHEMA), rendered
and compared with the file, and
each key of a default configuration appearing in the file.
"""

from __future__ import annotations

from pathlib import Path

from roce_transceiver.config import load_config
from roce_transceiver.operators.app_config import load_app_config, reference_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_configuration_reference_is_current() -> None:
    assert DOC.read_text() == reference_markdown(), (
        "docs/configuration.md is stale: run `python -m roce_transceiver.operators.app_config > "
        "docs/configuration.md`"
    )


def test_every_default_key_is_documented() -> None:
    text = DOC.read_text()

    def keys(d: dict, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            out += keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
        return out

    missing = [k for k in keys(load_config()) if f"| `{k}` |" not in text]
    app = load_app_config()
    del app["transceiver"]  # its keys are the ones above
    missing += [k for k in keys(app) if f"| `{k}` |" not in text]
    assert missing == []
