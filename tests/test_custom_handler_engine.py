"""The cuda executor's build of handler custom: the engine's kernel compiled by NVRTC with the
user's handler in it (custom_handler.compile_engine). No GPU: NVRTC needs none.

Goal: the module holds exactly the kernels asked for, by the name the executor looks up
(engine_kernels.cuh's kEngineKernelNames); a second start takes it from the cache (NVRTC not called)
and anything that changes the module (source, kernel set) is another entry; an
entry named like one of the engine's own functions (handle, the default) is still the user's;
compile errors in the user's code and a wrong entry give the same one-line errors as
check-handler, and nothing is cached for them.

Oracle: the cubin's section names (each kernel's code is a section ``.text.<name>``), the cache's
files, and whether NVRTC is called at all (replaced by a function that fails the test).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roce_transceiver import custom_handler as ch

_NVRTC = ch.nvrtc_status()
pytestmark = pytest.mark.skipif(
    not _NVRTC.available and not os.environ.get("CI"),
    reason=f"NVRTC not available here ({_NVRTC.reason}); CI has it (the test extra)",
)

# Named like the engine's own rt::handle (and the default entry): the engine's dispatch must
# call the user's function, not find its own.
HANDLE_ECHO = b"""
#include "rt/handlers/custom.h"
RT_HD int handle(const rt::CustomCall& call) {
  if (call.request_len > call.reply_capacity) return rt::kHandlerError;
  for (uint32_t i = call.lane; i < call.request_len; i += call.lanes)
    call.reply[i] = call.request[i];
  rt::custom_sync(call);
  return int(call.request_len);
}
"""
NAMES = (
    "rt_engine_kernel_device",
    "rt_engine_kernel_system",
    "rt_crew_kernel_device",
    "rt_crew_kernel_system",
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("engine-cache")


@pytest.fixture(scope="module")
def built(cache) -> ch.EngineKernels:
    """One compile of the warp's kernel with rings in pinned memory (the cpu far end's)."""
    # The warp's kernel alone: a quarter of the compile (a transceiver's module has all four).
    return ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=2, cache=cache)


def test_the_module_holds_the_kernel_asked_for_by_its_name(built):
    assert not built.cached and built.arch == ch.DEFAULT_ARCH
    assert built.image[:4] == b"\x7fELF", "a cubin is an ELF image"
    # Each kernel's code is its own section, named after it.
    present = {n for n in NAMES if b".text." + n.encode() + b"\0" in built.image}
    assert present == {"rt_engine_kernel_system"}


def test_a_second_start_takes_the_module_from_the_cache(built, cache, monkeypatch):
    files = sorted(cache.glob("engine-*.cubin"))
    assert len(files) == 1 and files[0].read_bytes() == built.image

    def no_compile(*args, **kwargs):
        raise AssertionError("NVRTC ran for a module the cache has")

    monkeypatch.setattr(ch, "_nvrtc_compile", no_compile)
    again = ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=2, cache=cache)
    assert again.cached and again.image == built.image


def test_what_changes_the_module_changes_its_cache_entry(built, cache, monkeypatch):
    # Not compiled (that is the first test's tens of seconds): the key is computed before
    # NVRTC runs, so a miss shows as the compile being asked for.
    asked = []

    def no_compile(*args, **kwargs):
        asked.append(True)
        raise ch.HandlerCompileError("stopped before NVRTC", "")

    monkeypatch.setattr(ch, "_nvrtc_compile", no_compile)
    for change in (
        {"source": HANDLE_ECHO + b"\n"},
        {"kernels": ch.ALL_ENGINE_KERNELS},
        {"entry": "other"},
    ):
        args = {"source": HANDLE_ECHO, "name": "echo.cu", "kernels": 2, "cache": cache, **change}
        with pytest.raises(ch.HandlerCompileError, match="stopped before NVRTC"):
            ch.compile_engine(**args)
    assert len(asked) == 3
    assert ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=2, cache=cache).cached


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            b'#include "rt/handlers/custom.h"\nRT_HD int handle(const rt::CustomCall& c) {\n'
            b"  return c.no_such_member;\n}\n",
            "bad.cu:3: error: ",
        ),
        (b"RT_HD int handle(int x) { return x; }\n", "bad.cu: entry 'handle' has the wrong sig"),
        (b"RT_HD int other(const rt::CustomCall&) { return 0; }\n", "bad.cu: no entry 'handle'"),
        (b"int handle(const rt::CustomCall&) { return 0; }\n", "a function not marked RT_HD"),
    ],
    ids=["compile-error", "wrong-signature", "no-entry", "not-rt-hd"],
)
def test_errors_are_the_users_in_one_line(tmp_path, source, message):
    with pytest.raises(ch.HandlerCompileError) as e:
        ch.compile_engine(source, name="bad.cu", cache=tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert e.value.log, "NVRTC's whole log comes with it"
    assert not list(tmp_path.glob("*.cubin")), "nothing cached for a failed build"


def test_bad_arguments_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="real GPU"):
        ch.compile_engine(HANDLE_ECHO, name="x", arch="compute_90", cache=tmp_path)
    with pytest.raises(ValueError, match="kernels 0"):
        ch.compile_engine(HANDLE_ECHO, name="x", kernels=0, cache=tmp_path)
    with pytest.raises(ValueError, match="not a C\\+\\+ function name"):
        ch.compile_engine(HANDLE_ECHO, name="x", entry="a b", cache=tmp_path)


def test_every_header_the_engine_needs_is_where_nvrtc_looks():
    # The wheel installs the core's headers (CMakeLists.txt); a source checkout has them in
    # place. Either way the kernels' header and everything it includes is there.
    root = ch.include_dir() / "rt"
    assert (root / "cuda" / "engine_kernels.cuh").is_file()
    assert (root / "engine" / "batch.h").is_file() and (root / "fixed_width.h").is_file()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            HANDLE_ECHO + b"\0rest",
            f"bad.cu:10: error: a NUL byte at byte offset {len(HANDLE_ECHO)}",
        ),
        (b"// \xc3(\n" + HANDLE_ECHO, "bad.cu:1: error: byte 0xc3 at byte offset 3 is not UTF-8"),
    ],
    ids=["nul", "not-utf8"],
)
def test_a_source_that_is_not_text_is_refused_before_nvrtc(tmp_path, monkeypatch, source, message):
    def no_compile(*args, **kwargs):
        raise AssertionError("NVRTC ran for a source that is not text")

    monkeypatch.setattr(ch, "_nvrtc_compile", no_compile)
    with pytest.raises(ch.HandlerCompileError) as e:
        ch.compile_engine(source, name="bad.cu", cache=tmp_path)
    assert str(e.value).startswith(message), str(e.value)
    assert (e.value.file, e.value.line) == ("bad.cu", int(message.split(":")[1]))
    assert not list(tmp_path.glob("*.cubin"))
