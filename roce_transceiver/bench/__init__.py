"""Benchmarks of the protocol core, run as commands (``roce-transceiver bench NAME``).

Each module has ``run(...) -> dict``: it prints a table ending in one summary line (figure, unit
and the baseline measured in the same run) and, when given a path, writes the figures and the
machine they came from as JSON. Benchmarks are never tests.

- ``icrc``: host CRC-32 and full ICRC throughput against libz's ``crc32``.
"""
