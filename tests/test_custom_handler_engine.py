"""The cuda executor's build of handler custom: NVRTC compiles the user's handler alone and
nvJitLink links it into the engine's kernels built with the package (cuda/engine_linkable.cu;
custom_handler.compile_engine). No GPU: neither needs one; the package's CUDA build does (CI's).

Goal: the module holds the kernels of the set asked for, by the names the executor looks up
(engine_kernels.cuh's kEngineKernelNames), with the user's entry linked in; a second start takes
it from the cache (NVRTC not called) and anything that changes the module (source, kernel set,
entry) is another entry; an entry named like one of the engine's own functions (handle, the
default) is still the user's; compile errors in the user's code and a wrong entry give the same
one-line errors as check-handler, and nothing is cached for them; a build without the engine's
linkable code says so.

Oracle: the cubin's section names (each function's code is a section ``.text.<name>``), the
cache's files, and whether NVRTC is called at all (replaced by a function that fails the test).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import skip_missing

from roce_transceiver import _core
from roce_transceiver import custom_handler as ch

_NVRTC = ch.nvrtc_status()
_LINKABLE = sorted(ch.engine_dir().glob("engine_*.cubin"))
pytestmark = pytest.mark.skipif(
    (not _NVRTC.available or not _LINKABLE) and not os.environ.get("CI"),
    reason=f"NVRTC not available here ({_NVRTC.reason})"
    if not _NVRTC.available
    else f"this build has no linkable engine in {ch.engine_dir()} (built without CUDA); CI's has",
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
    """One build of the warp's kernel with rings in pinned memory (the cpu far end's)."""
    return ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=2, cache=cache)


def sections(image: bytes, names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` have their code in the cubin (a section ``.text.<name>`` each)."""
    return {n for n in names if b".text." + n.encode() + b"\0" in image}


def test_the_module_holds_its_sets_kernels_and_the_users_entry(built, tmp_path):
    assert not built.cached and built.arch == ch.DEFAULT_ARCH
    assert built.image[:4] == b"\x7fELF", "a cubin is an ELF image"
    assert built.compile_seconds > 0 and built.link_seconds > 0
    # The one-warp set (bit 2's): both scopes' kernels, and the entry the linker joined to them.
    assert sections(built.image, NAMES) == {"rt_engine_kernel_device", "rt_engine_kernel_system"}
    assert sections(built.image, ("rt_custom_linked_entry",)) == {"rt_custom_linked_entry"}
    crew = ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=8, cache=tmp_path)
    assert sections(crew.image, NAMES) == {"rt_crew_kernel_device", "rt_crew_kernel_system"}


def test_kernels_of_two_sets_or_none_are_refused(tmp_path):
    for kernels in (15, 2 | ch.VERBS_SERVE_KERNELS):
        with pytest.raises(ValueError, match="not two of them: a module links one set"):
            ch.compile_engine(HANDLE_ECHO, name="x", kernels=kernels, cache=tmp_path)
    for kernels in (0, 16, 128):
        with pytest.raises(ValueError, match="a mask of ENGINE_KERNELS' bits"):
            ch.engine_set(kernels)
    assert ch.engine_set(1) == ch.engine_set(3) == "lone" and ch.engine_set(12) == "crew"
    assert ch.engine_set(ch.VERBS_SERVE_KERNELS) == "verbs"


SERVE_NAMES = (
    "rt_serve_kernel_cpu_proxy",
    "rt_serve_kernel_gpu_sm_db",
    "rt_serve_kernel_gpu_sm_bf",
)


def test_the_verbs_serve_kernels_link_with_the_users_entry(tmp_path):
    # Built where GPUNetIO's headers are (CI fetches them): the serve kernels by the names the
    # host loads them by (verbs_serve.cuh's kServeKernelNames), one a doorbell mode.
    info = _core.gpunetio_info()
    if not info["built"]:
        skip_missing("gpunetio", f"no GPUNetIO device API in this build ({info['source']})")
    built = ch.compile_engine(
        HANDLE_ECHO, name="echo.cu", kernels=ch.VERBS_SERVE_KERNELS, cache=tmp_path
    )
    assert sections(built.image, SERVE_NAMES) == set(SERVE_NAMES)
    assert sections(built.image, ("rt_custom_linked_entry",)) == {"rt_custom_linked_entry"}
    assert not sections(built.image, NAMES), "the engine's kernels are another set"


def test_a_build_without_the_serve_kernels_says_which_headers_it_lacked(tmp_path, monkeypatch):
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / f"engine_lone.{ch.DEFAULT_ARCH}.cubin").write_bytes(b"")
    monkeypatch.setattr(ch, "engine_dir", lambda: engine)
    with pytest.raises(ch.NvrtcUnavailable, match="built without GPUNetIO's headers"):
        ch.compile_engine(HANDLE_ECHO, name="x", kernels=ch.VERBS_SERVE_KERNELS, cache=tmp_path)


def test_a_build_without_the_engines_linkable_code_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(ch, "engine_dir", lambda: tmp_path)
    with pytest.raises(ch.NvrtcUnavailable, match="has none: it was built without CUDA"):
        ch.compile_engine(HANDLE_ECHO, name="x", cache=tmp_path)


def test_a_second_start_takes_the_module_from_the_cache(built, cache, monkeypatch):
    files = sorted(cache.glob("engine-*.cubin"))
    assert len(files) == 1 and files[0].read_bytes() == built.image

    def no_compile(*args, **kwargs):
        raise AssertionError("NVRTC ran for a module the cache has")

    def no_link(*args, **kwargs):
        raise AssertionError("nvJitLink ran for a module the cache has")

    monkeypatch.setattr(ch, "_link", no_link)

    monkeypatch.setattr(ch, "_nvrtc_compile", no_compile)
    again = ch.compile_engine(HANDLE_ECHO, name="echo.cu", kernels=2, cache=cache)
    assert again.cached and again.image == built.image


def test_what_changes_the_module_changes_its_cache_entry(built, cache, monkeypatch):
    # Not compiled: the key is computed before NVRTC runs, so a miss shows as the compile being
    # asked for.
    asked = []

    def no_compile(*args, **kwargs):
        asked.append(True)
        raise ch.HandlerCompileError("stopped before NVRTC", "")

    monkeypatch.setattr(ch, "_nvrtc_compile", no_compile)
    for change in (
        {"source": HANDLE_ECHO + b"\n"},
        {"kernels": 8},  # the crew's set: other code linked
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
