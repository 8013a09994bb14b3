"""What the wheel installs: one top-level name, the project's, whatever the repository's folders
are called (docs/ARCHITECTURE.md, "Packaging").

Goal: a user's own ``apps/`` or ``operators/`` package never meets ours in site-packages. Oracles:
the wheel's own file list (its zip directory and RECORD), built from this tree by pip as a user
builds it, and the RECORD of the distribution installed in this environment; the entry points
the wheel declares must name modules that are inside it.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from importlib.metadata import distribution
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The Holoscan layer inside the package, each built from a top-level folder of the repository.
PLACED = {
    "roce_transceiver/operators": "operators",
    "roce_transceiver/apps": "apps",
}

#: A CPU-only build from scratch takes ~40 s on a 2-core machine; this bounds a stuck one.
WHEEL_BUILD_LIMIT_S = 600


def top_level_names(paths: list[str]) -> set[str]:
    """The names a set of installed files puts at the top of site-packages."""
    return {PurePosixPath(p).parts[0] for p in paths if not p.startswith("../")}


def only_ours(names: set[str]) -> set[str]:
    return {n for n in names if n != "roce_transceiver" and not n.endswith(".dist-info")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from this tree: CPU only (RT_CUDA=OFF, the packaging is the same),
    in a build directory of its own, so the tree's build/ (maybe a CUDA one) is left alone."""
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "RT_CUDA": "OFF"}
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--quiet",
                "--wheel-dir",
                str(out / "dist"),
                "--config-settings",
                f"build-dir={out / 'build'}",
                str(ROOT),
            ],
            capture_output=True,
            text=True,
            timeout=WHEEL_BUILD_LIMIT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip wheel did not finish within {WHEEL_BUILD_LIMIT_S} s", pytrace=False)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = sorted((out / "dist").glob("roce_transceiver-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, found {wheels}"
    return wheels[0]


@pytest.mark.slow
def test_the_wheel_installs_only_the_projects_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        recorded = [line.split(",")[0] for line in z.read(record).decode().splitlines()]
    assert only_ours(top_level_names(names)) == set(), sorted(top_level_names(names))
    assert only_ours(top_level_names(recorded)) == set(), sorted(top_level_names(recorded))
    # Each placed folder is there, whole: every .py file of the source folder.
    for target, source in PLACED.items():
        want = {f"{target}/{p.relative_to(ROOT / source)}" for p in (ROOT / source).rglob("*.py")}
        assert want and want <= set(names), sorted(want - set(names))
    assert any(n.startswith("roce_transceiver/_core") for n in names), "no compiled _core"
    assert not [n for n in names if n.startswith("roce_transceiver/core/")], "C++ sources"
    # ... but the user-handler ABI's headers go in, for NVRTC (docs/handlers.md).
    for header in ("rt/hd.h", "rt/handlers/reply.h", "rt/handlers/custom.h"):
        assert f"roce_transceiver/include/{header}" in names, header


@pytest.mark.slow
def test_the_wheels_entry_points_name_modules_inside_it(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        ep = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        parser = configparser.ConfigParser()
        parser.read_string(z.read(ep).decode())
    targets = {
        f"{group}:{name}": value.split(":")[0]
        for group in parser.sections()
        for name, value in parser[group].items()
    }
    assert "roce_transceiver.apps:roundtrip_latency" in targets, sorted(targets)
    for entry, module in targets.items():
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, f"{entry} -> {module}"


def test_the_installed_distribution_has_only_the_projects_name() -> None:
    """What ``make install`` put here: the same rule, on the RECORD of this environment."""
    files = distribution("roce-transceiver").files or []
    names = top_level_names([str(f) for f in files])
    assert "roce_transceiver" in names
    assert only_ours(names) == set(), sorted(names)
