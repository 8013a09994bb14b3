"""``python -m roce_transceiver``: the same CLI as the ``roce-transceiver`` command."""

import sys

try:
    from roce_transceiver.cli import main
except KeyboardInterrupt:  # a Ctrl-C while Python finds and loads the CLI (cli.py's own comment)
    print("roce-transceiver: interrupted (SIGINT)", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
