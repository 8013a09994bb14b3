"""Shared fixtures and skips.

The markers (gpu, netns, tshark) are registered in pyproject.toml; this file
only decides when they skip, and says what is missing when they do.
"""

from __future__ import annotations

import shutil
from functools import cache

import pytest
from net_helpers import veth_namespace  # noqa: F401  (a fixture for every test module)

TSHARK_MISSING = "tshark not found on PATH (apt-get install tshark)"


@pytest.fixture(autouse=True)
def _outside_the_source_tree(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Every test runs in a scratch directory: a ``python -m roce_transceiver`` it starts
    must import the installed package, not the source tree of the directory CI runs in
    (which has no compiled ``_core``)."""
    monkeypatch.chdir(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def tshark_path() -> str:
    """Absolute path of tshark; skips the test when there is none."""
    path = shutil.which("tshark")
    if path is None:
        pytest.skip(TSHARK_MISSING)
    return path


@cache
def _gpu_missing() -> str | None:
    """Why CUDA tests cannot run here, or None when a GPU is visible."""
    try:
        from roce_transceiver import _core
    except ImportError as e:  # the extension failed to build or load
        return f"roce_transceiver._core does not import: {e}"
    info = _core.cuda_runtime_info()
    if info["gpus"]:
        return None
    return f"no CUDA GPU visible: {info['error'] or 'the runtime lists 0 devices'}"


def pytest_configure(config: pytest.Config) -> None:
    # pyproject turns warnings into errors. When a Hypothesis test fails,
    # Hypothesis imports libcst to print the failing example as a patch, and
    # libcst subclasses the deprecated mypy_extensions.TypedDict: that import
    # warning would replace the real failure report with an INTERNALERROR.
    config.addinivalue_line(
        "filterwarnings", "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = _gpu_missing()
    if reason is None:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))
