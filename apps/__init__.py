"""The YAML-configured Holoscan applications (``roce_transceiver.apps``, built from the
repository's ``apps/``): ``python apps/X.py``, ``python -m roce_transceiver.apps.X`` or
``roce-transceiver run``."""
