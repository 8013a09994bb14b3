"""The handler cache (custom_handler): what it finds is checked before it is used.

Goal: a cached shared object or engine module that is truncated, empty, garbage, without its
check, or that does not load is built again, never loaded (a truncated shared object was a
SIGBUS at the next start, an empty one "invalid ELF header" at every start); a cache folder
that takes no build (a file where it goes, read-only, a directory where the library goes) is
replaced by a temporary folder for the process, saying so; when nothing takes the build, and
when there is no compiler, the error is a HandlerBuildError naming the path.

Oracles: the entry's SHA-256 against hashlib's, whether the compiler runs (a build that is not
``cached``, or NVRTC replaced by a counter), the log's warning naming the path, and a round
trip through the library the build returned (every echo its request).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import skip_missing
from engine_helpers import running

from roce_transceiver import custom_handler as ch
from roce_transceiver.transceiver import HandlerBuildError, Transceiver

ECHO = """
RT_HD int echo(const rt::CustomCall& call) {
  if (call.request_len > call.reply_capacity) return rt::kHandlerError;
  for (uint32_t i = 0; i < call.request_len; ++i) call.reply[i] = call.request[i];
  return int(call.request_len);
}
"""
CUSTOM = {"source": ECHO, "entry": "echo"}

_NVRTC = ch.nvrtc_status()
needs_nvrtc = pytest.mark.skipif(
    not _NVRTC.available and not os.environ.get("CI"),
    reason=f"NVRTC not available here ({_NVRTC.reason}); CI has it (the test extra)",
)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test has its own cache folder and its own fallback folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(ch, "_fallback_folder", None, raising=False)


def replace(path: Path, data: bytes) -> None:
    """``path``'s bytes become ``data`` in a new file: damage that came while nothing had it.
    Writing in place would change a shared object this process has mapped (the load check
    after a build keeps it), and touching those pages at exit is a SIGBUS (rc 135)."""
    path.unlink()
    path.write_bytes(data)


def build() -> ch.HostHandler:
    return ch.build_host_handler(ECHO, name="custom.source", entry="echo")


def checks(path: Path) -> bool:
    data = path.read_bytes()
    size, digest = Path(str(path) + ".sha256").read_text().split()
    return int(size) == len(data) and digest == hashlib.sha256(data).hexdigest()


def echoes(custom: dict[str, object] = CUSTOM) -> None:
    with running("cpu", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(count=20, size=40)
        assert (r.status, r.received, r.wrong) == ("done", 20, 0)


# --- the shared object (cpu executor) ---------------------------------------------------


def test_a_built_library_has_its_check_beside_it():
    first = build()
    assert not first.cached and checks(first.library)
    assert not list(first.library.parent.glob(".build-*")), "no temporary file left behind"


def fake_linking(monkeypatch, tmp_path: Path) -> None:
    """The engine's linkable code and the linker as stand-ins (what they do is
    test_custom_handler_engine's): these tests are about the cache. The link gives back the
    handler's image, NVRTC's stand-in's."""
    engine = tmp_path / "linkable" / "engine_lone.sm_90.cubin"
    engine.parent.mkdir()
    engine.write_bytes(b"the engine's relocatable code")
    monkeypatch.setattr(ch, "linkable_engine", lambda kernels, arch: engine)
    monkeypatch.setattr(ch, "_load_nvjitlink", lambda: None)
    monkeypatch.setattr(ch, "_check_linker", lambda nvjitlink, version: None)
    monkeypatch.setattr(ch, "_link", lambda nvjitlink, arch, inputs: (inputs[1][1], ""))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: replace(p, p.read_bytes()[: p.stat().st_size // 2]),
        lambda p: replace(p, b""),
        lambda p: replace(p, os.urandom(p.stat().st_size)),
        lambda p: Path(str(p) + ".sha256").unlink(),
        lambda p: Path(str(p) + ".sha256").write_text("garbage"),
    ],
    ids=["truncated", "empty", "garbage", "no-check", "garbage-check"],
)
def test_a_damaged_library_is_built_again_and_runs(damage, caplog):
    first = build()
    good = first.library.read_bytes()
    damage(first.library)
    with caplog.at_level(logging.WARNING, logger="roce_transceiver.custom_handler"):
        again = build()
    assert not again.cached, "a damaged entry was used"
    assert again.library == first.library and checks(again.library)
    assert len(again.library.read_bytes()) == len(good)
    assert str(first.library) in caplog.text and "building it again" in caplog.text
    assert build().cached, "the rebuilt entry is used again"
    echoes()


def test_a_library_that_checks_but_does_not_load_is_built_again(caplog):
    first = build()
    # Garbage with a matching check: what a cache copied from another machine could be.
    junk = b"\x7fELF" + bytes(200)
    replace(first.library, junk)
    Path(str(first.library) + ".sha256").write_text(
        f"{len(junk)} {hashlib.sha256(junk).hexdigest()}\n"
    )
    with caplog.at_level(logging.WARNING, logger="roce_transceiver.custom_handler"):
        again = build()
    assert not again.cached and checks(again.library)
    assert "does not load" in caplog.text and str(first.library) in caplog.text
    echoes()


def test_a_handler_that_compiles_but_does_not_load_is_a_build_error_naming_the_symbol():
    source = "int missing(int);\nRT_HD int handle(const rt::CustomCall&) { return missing(1); }\n"
    with pytest.raises(HandlerBuildError) as e:
        Transceiver({"executor": "cpu", "handler": "custom", "custom": {"source": source}})
    assert str(e.value).startswith("custom.source: compiles, but the shared object does not load")
    assert "undefined symbol" in str(e.value) and "missing" in str(e.value)
    assert not list(ch.cache_dir().glob("*.so")), "nothing cached for it"


def test_a_directory_where_the_library_goes_builds_in_a_temporary_folder(caplog):
    first = build()
    first.library.unlink()
    first.library.mkdir()
    with caplog.at_level(logging.WARNING, logger="roce_transceiver.custom_handler"):
        again = build()
    assert not again.cached and again.library.parent != ch.cache_dir()
    assert again.library.parent == Path(tempfile.gettempdir()) / again.library.parent.name
    assert checks(again.library)
    assert f"handler cache {ch.cache_dir()} takes no build" in caplog.text
    assert str(first.library) in caplog.text, "the path in the way is named"
    assert build().cached, "the process finds its temporary folder's build"
    echoes()


def test_a_file_where_the_cache_folder_goes_builds_in_a_temporary_folder(
    tmp_path, monkeypatch, caplog
):
    (tmp_path / "home-cache").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    with caplog.at_level(logging.WARNING, logger="roce_transceiver.custom_handler"):
        built = build()
    assert not built.cached and checks(built.library)
    assert "Not a directory" in caplog.text and str(tmp_path / "home-cache") in caplog.text
    echoes()


READ_ONLY_CHILD = """
import sys
from pathlib import Path
from roce_transceiver import custom_handler as ch
built = ch.build_host_handler({source!r}, name="custom.source", entry="echo",
                              cache=Path(sys.argv[1]) / "handlers")
print("BUILT", built.library, built.cached)
"""


def test_a_read_only_cache_folder_builds_in_a_temporary_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    script = READ_ONLY_CHILD.format(source=ECHO)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        argv = [sys.executable, "-c", script, str(folder)]
    else:  # root writes through permissions: a read-only mount, in a namespace of its own
        if shutil.which("unshare") is None:
            skip_missing("netns", "running as root without unshare(1): no read-only folder")
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
        if probe.returncode != 0:
            skip_missing("netns", f"unshare -m is not allowed: {probe.stderr.decode().strip()}")
        mount = 'mount -t tmpfs -o ro,size=1m tmpfs "$0" && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", mount, str(folder), sys.executable, "-c", script]
        argv.append(str(folder))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("BUILT ")]
    _, library, cached = line.split()
    assert cached == "False" and not library.startswith(str(folder)), out
    assert f"handler cache {folder / 'handlers'} takes no build" in out
    assert "Read-only file system" in out or "Permission denied" in out, out


def test_nothing_to_build_in_is_a_build_error_naming_the_cache(tmp_path, monkeypatch):
    (tmp_path / "home-cache").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))

    def no_temporary_folder(*args, **kwargs):
        raise PermissionError(13, "Permission denied", tempfile.gettempdir())

    monkeypatch.setattr(ch.tempfile, "mkdtemp", no_temporary_folder)
    with pytest.raises(HandlerBuildError) as e:
        Transceiver({"executor": "cpu", "handler": "custom", "custom": CUSTOM})
    message = str(e.value)
    assert message.startswith(f"handler cache {tmp_path / 'home-cache'}"), message
    assert "Not a directory" in message and "Permission denied" in message
    assert e.value.file == str(tmp_path / "home-cache" / "roce-transceiver" / "handlers")


def test_a_missing_compiler_is_a_build_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
    with pytest.raises(HandlerBuildError, match=rf"\$CXX is '{tmp_path}/no-such-g\+\+': no such"):
        Transceiver({"executor": "cpu", "handler": "custom", "custom": CUSTOM})
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HandlerBuildError, match=rf"no C\+\+ compiler on PATH={tmp_path} "):
        Transceiver({"executor": "cpu", "handler": "custom", "custom": CUSTOM})


# --- the engine's module (cuda executor) ------------------------------------------------

# What a cubin's header looks like to the check (ELF, e_machine EM_CUDA): NVRTC is replaced
# by a function that returns it, so these tests take no compile and need no GPU.
FAKE_CUBIN = b"\x7fELF\x02\x01\x01" + bytes(11) + (190).to_bytes(2, "little") + bytes(300)


def test_an_entry_written_is_read_back_and_any_damage_is_caught(tmp_path):
    path = tmp_path / "engine-x.cubin"
    ch._store_checked(path, FAKE_CUBIN)
    assert ch._read_checked(path) == (FAKE_CUBIN, None)
    check = Path(str(path) + ".sha256")
    for data, why in (
        (FAKE_CUBIN[:100], "does not check: 100 bytes, its check says '320'"),
        (b"", "does not check: 0 bytes"),
        (FAKE_CUBIN[:-1] + b"!", "its SHA-256 differs"),
    ):
        path.write_bytes(data)
        image, reason = ch._read_checked(path)
        assert image is None and reason is not None and why in reason, reason
    check.unlink()
    assert ch._read_checked(path)[1] == f"has no check ({check.name}) beside it"
    path.unlink()
    assert ch._read_checked(path) == (None, None), "no entry is no complaint"
    assert not list(tmp_path.glob(".build-*")), "no temporary file left behind"


@needs_nvrtc
@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:50]),
        lambda p: p.write_bytes(b""),
        lambda p: p.write_bytes(os.urandom(320)),
        lambda p: Path(str(p) + ".sha256").unlink(),
    ],
    ids=["truncated", "empty", "garbage", "no-check"],
)
def test_a_damaged_engine_module_is_compiled_again(tmp_path, monkeypatch, damage):
    compiles = []

    def fake_nvrtc(*args, **kwargs):
        compiles.append(1)
        return FAKE_CUBIN, ""

    fake_linking(monkeypatch, tmp_path)
    monkeypatch.setattr(ch, "_nvrtc_compile", fake_nvrtc)
    first = ch.compile_engine(ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path)
    (path,) = tmp_path.glob("engine-*.cubin")
    assert not first.cached and checks(path)
    assert ch.compile_engine(ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path).cached
    damage(path)
    again = ch.compile_engine(ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path)
    assert not again.cached and again.image == FAKE_CUBIN and len(compiles) == 2
    assert checks(path), "the entry is whole again"


@needs_nvrtc
def test_a_checked_entry_that_is_no_cubin_is_compiled_again(tmp_path, monkeypatch):
    fake_linking(monkeypatch, tmp_path)
    monkeypatch.setattr(ch, "_nvrtc_compile", lambda *a, **k: (FAKE_CUBIN, ""))
    ch.compile_engine(ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path)
    (path,) = tmp_path.glob("engine-*.cubin")
    ch._store_checked(path, b"not an ELF image at all")
    again = ch.compile_engine(ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path)
    assert not again.cached and path.read_bytes() == FAKE_CUBIN


@needs_nvrtc
def test_an_engine_cache_that_takes_no_file_costs_no_start(tmp_path, monkeypatch, caplog):
    fake_linking(monkeypatch, tmp_path)
    monkeypatch.setattr(ch, "_nvrtc_compile", lambda *a, **k: (FAKE_CUBIN, ""))
    (tmp_path / "file").write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="roce_transceiver.custom_handler"):
        built = ch.compile_engine(
            ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path / "file"
        )
    assert built.image == FAKE_CUBIN
    assert f"handler cache {tmp_path / 'file'} takes no build" in caplog.text
    again = ch.compile_engine(
        ECHO, name="echo.cu", entry="echo", kernels=2, cache=tmp_path / "file"
    )
    assert again.cached, "kept in the process's temporary folder"


@pytest.mark.gpu
def test_a_truncated_engine_module_on_the_gpu_is_compiled_again_and_runs():
    # The real module, built (compiled and linked), truncated, then started from.
    custom = {"source": ECHO, "entry": "echo"}
    with running("cuda", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(count=20, size=40)
        assert (r.status, r.received, r.wrong) == ("done", 20, 0)
    (path,) = ch.cache_dir().glob("engine-*.cubin")
    path.write_bytes(path.read_bytes()[:4096])
    with running("cuda", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(count=20, size=40)
        assert (r.status, r.received, r.wrong) == ("done", 20, 0)
    assert checks(path)


def test_a_linker_older_than_a_compiler_is_refused_naming_what_to_install():
    """nvJitLink 13.0 refuses NVRTC 13.5's cubin as "bad input" (seen): the check says so
    before anything is compiled, with the versions and the pip line."""

    class Linker:  # nvJitLink 13.0's bindings, as far as the check asks
        @staticmethod
        def version() -> tuple[int, int]:
            return (13, 0)

    with pytest.raises(ch.NvrtcUnavailable) as e:
        ch._check_linker(Linker, "13.5")
    assert str(e.value).startswith("nvJitLink 13.0 cannot link what NVRTC 13.5 compiled")
    assert "pip install 'nvidia-nvjitlink>=13.5,<14'" in str(e.value)
    ch._check_linker(Linker, "13.0")  # as new as NVRTC, and as the package's build (13.0 here)
