"""Under ``CI=true`` a skip for a tool CI installs fails the run (tests/conftest.py).

Goal: a CI machine that lost tshark, iproute2 or root, clang, libibverbs or (where nvcc is,
so that .ci/run fetched them) GPUNetIO's headers fails instead of silently running fewer
tests; outside CI the same tests skip, saying what is missing; GPU skips stay skips.

Oracles: pytest's own outcomes (its Skipped and Failed exceptions in process, and the exit
status and summary of a pytest run in a subprocess), and the test modules' source read as
Python syntax trees: no skip that names one of those tools bypasses the helper.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CI_PROVIDES, ci_requires, skip_missing, without

TESTS = Path(__file__).parent
KINDS = sorted(CI_PROVIDES)


@pytest.fixture
def ci(monkeypatch: pytest.MonkeyPatch):
    """Set (or, with None, remove) CI and RT_GPUNETIO_INCLUDE for one test."""

    def set_env(value: str | None, gpunetio: str | None = None) -> None:
        for name, v in (("CI", value), ("RT_GPUNETIO_INCLUDE", gpunetio)):
            if v is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, v)

    return set_env


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_outside_ci_a_missing_tool_skips(ci, kind, value):
    ci(value, gpunetio="/opt/gpunetio/include")
    assert not ci_requires(kind)
    with pytest.raises(pytest.skip.Exception, match=r"^the tool is gone$"):
        skip_missing(kind, "the tool is gone")
    without(kind, "the tool is gone")  # the test goes on


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "gpunetio"])
@pytest.mark.parametrize("value", ["true", "True", "TRUE "])
def test_under_ci_a_missing_tool_fails_naming_it_and_what_ci_provides(ci, kind, value):
    ci(value)
    assert ci_requires(kind)
    for call in (skip_missing, without):
        with pytest.raises(pytest.fail.Exception) as e:
            call(kind, "the tool is gone")
        message = str(e.value)
        assert message.startswith("the tool is gone: under CI=true this is a failure"), message
        assert CI_PROVIDES[kind] in message


def test_under_ci_gpunetio_headers_are_required_only_where_ci_fetched_them(ci):
    ci("true")  # no nvcc: .ci/run fetched no headers and exported no RT_GPUNETIO_INCLUDE
    with pytest.raises(pytest.skip.Exception):
        skip_missing("gpunetio", "no GPUNetIO headers")
    ci("true", gpunetio="/tmp/gpunetio/include")  # nvcc: .ci/run fetched them
    with pytest.raises(pytest.fail.Exception, match="RT_GPUNETIO_INCLUDE"):
        skip_missing("gpunetio", "no GPUNetIO headers")


def test_unknown_kind_is_an_error_naming_the_kinds():
    with pytest.raises(ValueError, match=r"ci_requires\('gpu'\): not one of \['clang'"):
        skip_missing("gpu", "no GPU")


def _pytest_run(tmp_path: Path, ci_value: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tool.py").write_text(
        "from conftest import skip_missing\n\n\n"
        "def test_needs_tshark():\n"
        '    skip_missing("tshark", "tshark not found on PATH")\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci_value is not None:
        env["CI"] = ci_value
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "test_tool.py"]
    return subprocess.run(
        [*cmd, "--rootdir", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_pytest_run_under_ci_fails_where_it_would_skip(tmp_path):
    done = _pytest_run(tmp_path, None)
    assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout + done.stderr
    assert "tshark not found on PATH" in done.stdout
    done = _pytest_run(tmp_path, "true")
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "tshark not found on PATH: under CI=true this is a failure" in done.stdout


# What a skip for one of those tools looks like in the source: the netns helper's verdict
# (why_not), or a message naming the tool.
TOOL_WORDS = re.compile(
    r"why_not|tshark|iproute|netns|namespace|\broot\b|pyroute2|clang|libfuzzer|ibverbs|gpunetio",
    re.IGNORECASE,
)
# Skips that name a tool and rightly stay skips: the tool is there, the test is for its absence.
TOOL_PRESENT = ("this build has GPUNetIO's headers",)


def _skip_calls(source: str) -> list[tuple[int, str]]:
    """(line, text) of every pytest.skip / importorskip / mark.skipif call; where the reason
    is a variable, the text includes what the enclosing function assigned to it."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    names = {"pytest.skip", "pytest.importorskip", "pytest.mark.skipif"}
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) in names):
            continue
        text = ast.get_source_segment(source, node) or ""
        scope: ast.AST = node
        while scope in parents and not isinstance(scope, ast.FunctionDef):
            scope = parents[scope]
        for arg in node.args:
            if isinstance(arg, ast.Name):
                text += "".join(
                    " <- " + ast.unparse(a.value)
                    for a in ast.walk(scope)
                    if isinstance(a, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == arg.id for t in a.targets)
                )
        out.append((node.lineno, text))
    return out


def test_every_tool_skip_goes_through_skip_missing():
    """No test module skips for tshark, a namespace, clang, libibverbs or GPUNetIO's headers
    with pytest's own skip: each such skip calls conftest.skip_missing (which fails it in CI)."""
    bypasses = []
    for path in sorted(TESTS.glob("*.py")):
        for line, text in _skip_calls(path.read_text()):
            if path.name == "conftest.py" and text == "pytest.skip(reason)":
                continue  # skip_missing's own skip
            if TOOL_WORDS.search(text) and not any(p in text for p in TOOL_PRESENT):
                bypasses.append(f"{path.name}:{line}: {text}")
    assert not bypasses, "skips that CI=true would not catch:\n" + "\n".join(bypasses)
