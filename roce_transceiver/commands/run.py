"""``roce-transceiver run FILE``: the Holoscan app a YAML file names (``app.name``), run with it.

The apps are found through the ``roce_transceiver.apps`` entry points (the ``apps`` package
registers them), so this layer names no app itself."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points

from roce_transceiver.commands import CommandError

__all__ = ["register", "run"]

GROUP = "roce_transceiver.apps"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run the Holoscan app a YAML file is for (configs/*.yaml)",
        description="Run the Holoscan application named by the file's app.name with that "
        "file; further options (--count, --executor, --scheduler, --output-dir, --set "
        "KEY=VALUE) go to the app.",
    )
    p.add_argument("config", help="the app's YAML file")
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="options for the app")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from roce_transceiver.schema import ConfigError, load_yaml_with_lines, quote

    try:
        data = load_yaml_with_lines(args.config)
    except ConfigError as e:
        raise CommandError(f"run: {e}") from None
    apps = {ep.name: ep for ep in entry_points(group=GROUP)}
    known = ", ".join(sorted(apps)) or "none installed"
    app = data.get("app")
    if not isinstance(app, dict):
        line = getattr(data, "lines", {}).get("app")
        what = "missing" if app is None else f"{quote(app)}, not a mapping"
        raise CommandError(
            f"run: {_where(args.config, line)}: app: {what}; it names the app (app.name: "
            f"one of {known})"
        )
    name = app.get("name")
    if not isinstance(name, str) or name not in apps:
        line = getattr(app, "lines", {}).get("name") or getattr(data, "lines", {}).get("app")
        raise CommandError(
            f"run: {_where(args.config, line)}: app.name: {quote(name)} is not an app "
            f"(known: {known})"
        )
    try:
        main = apps[name].load()
    except ImportError as e:
        raise CommandError(
            f"run: the {name} app needs Holoscan: {e} (pip install 'roce-transceiver[apps]')"
        ) from None
    return int(main(["--config", args.config, *args.app_args]))


def _where(path: str, line: int | None) -> str:
    return f"{path}:{line}" if line else path
