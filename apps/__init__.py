"""The YAML-configured Holoscan applications: ``python apps/X.py`` or ``roce-transceiver run``."""
