"""Shared fixtures and skips.

The markers (gpu, netns, tshark) are registered in pyproject.toml; this file
only decides when they skip, and says what is missing when they do.

A skip for a tool that CI installs (.ci/run) goes through ``skip_missing``: under
``CI=true`` it fails the test instead, so a CI machine that lost a package fails
rather than silently running fewer tests. GPU skips stay skips (CI has no GPU).
"""

from __future__ import annotations

import os
import shutil
from functools import cache
from typing import NoReturn

import pytest
from net_helpers import veth_namespace  # noqa: F401  (a fixture for every test module)

TSHARK_MISSING = "tshark not found on PATH (apt-get install tshark)"

# What .ci/run provides for each kind of tool skip, as the failure under CI says it.
CI_PROVIDES = {
    "tshark": "tshark (apt-get install tshark)",
    "netns": "root and iproute2 (.ci/run runs as root; apt-get install iproute2)",
    "clang": "clang++ with libFuzzer (apt-get install clang)",
    "libibverbs": "libibverbs (apt-get install libibverbs1 ibverbs-providers)",
    "gpunetio": "GPUNetIO's headers (.ci/run fetches them and sets RT_GPUNETIO_INCLUDE "
    "where nvcc is found)",
}


def ci_requires(kind: str) -> bool:
    """Whether this run must have ``kind`` (a key of CI_PROVIDES): under ``CI=true``, every
    kind but GPUNetIO's headers, which CI fetches only where nvcc is (then it exports
    RT_GPUNETIO_INCLUDE: that variable set is the promise that they are there)."""
    if kind not in CI_PROVIDES:
        raise ValueError(f"ci_requires({kind!r}): not one of {sorted(CI_PROVIDES)}")
    if os.environ.get("CI", "").strip().lower() != "true":
        return False
    return kind != "gpunetio" or bool(os.environ.get("RT_GPUNETIO_INCLUDE"))


def _fail_in_ci(kind: str, reason: str) -> None:
    __tracebackhide__ = True  # reports name the test's line, not this one
    if ci_requires(kind):
        pytest.fail(
            f"{reason}: under CI=true this is a failure, not a skip "
            f"(.ci/run provides {CI_PROVIDES[kind]})",
            pytrace=False,
        )


def skip_missing(kind: str, reason: str) -> NoReturn:
    """Skip because a tool of ``kind`` is missing (``reason`` says which and how to get it);
    under CI, which installs it, fail instead."""
    __tracebackhide__ = True
    _fail_in_ci(kind, reason)
    pytest.skip(reason)


def without(kind: str, reason: str) -> None:
    """A test goes on without a check that needs a missing tool of ``kind``; under CI, fail."""
    __tracebackhide__ = True
    _fail_in_ci(kind, reason)


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
        skip_missing("tshark", TSHARK_MISSING)
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
