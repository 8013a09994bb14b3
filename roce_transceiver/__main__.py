"""``python -m roce_transceiver``: the same CLI as the ``roce-transceiver`` command."""

from roce_transceiver.cli import main

raise SystemExit(main())
