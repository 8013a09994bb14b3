"""User handlers compile with NVRTC, no GPU needed (docs/handlers.md, "Your own handler").

``roce-transceiver check-handler``: the examples compile; a syntax error, a wrong signature, a
missing entry, a function not marked RT_HD each give one line naming the file (and line, where
the error is the user's); a missing file and a missing NVRTC are errors of their own (status 2).
The ABI header is installed with the package and compiles with the host compiler too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli

import roce_transceiver
from roce_transceiver import custom_handler

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "majority_vote": ROOT / "examples" / "handlers" / "majority_vote.cu",
    "threshold_count": ROOT / "examples" / "handlers" / "threshold_count.cu",
    "echo": ROOT / "examples" / "handlers" / "echo.cu",
}

# The GPU machine installs with --no-deps and may lack cuda-python: there the compiling tests
# skip, saying so. CI installs the test extra, which has it, and never skips them.
_NVRTC = custom_handler.nvrtc_status()
needs_nvrtc = pytest.mark.skipif(
    not _NVRTC.available and not os.environ.get("CI"),
    reason=f"NVRTC not available here ({_NVRTC.reason}); CI has it (the test extra)",
)

GOOD = """#include "rt/handlers/custom.h"

RT_HD int echo(const rt::CustomCall& call) {
  if (call.request_len > call.reply_capacity) return rt::kHandlerError;
  for (uint32_t i = call.lane; i < call.request_len; i += call.lanes)
    call.reply[i] = call.request[i];
  rt::custom_sync(call);
  return int(call.request_len);
}
"""


def write(tmp_path: Path, text: str, name: str = "h.cu") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "check-handler", *argv)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("roce-transceiver: error: "), err
    return lines[0].removeprefix("roce-transceiver: error: ")


# --- what compiles -------------------------------------------------------------------------


@needs_nvrtc
@pytest.mark.parametrize("entry", sorted(EXAMPLES))
def test_each_example_handler_compiles_for_the_h200(capsys, entry):
    status, out, err = check(capsys, str(EXAMPLES[entry]), "--entry", entry)
    assert (status, err) == (0, "")
    assert out.startswith(f"{EXAMPLES[entry]}: entry {entry} compiles for sm_90 (NVRTC 13.")
    assert "bytes of cubin" in out


@needs_nvrtc
def test_a_good_handler_compiles_to_a_cubin(tmp_path):
    compiled = custom_handler.compile_handler_file(write(tmp_path, GOOD), entry="echo")
    assert compiled.cubin[:4] == b"\x7fELF"  # a cubin is an ELF file
    assert (compiled.entry, compiled.arch) == ("echo", "sm_90")


def corrupted_one_byte_objects() -> list[int]:
    """The byte values whose one-byte bytes object (CPython keeps one per value, shared by the
    whole process) no longer holds its own value."""
    return [i for i in range(256) if bytes([i])[0] != i]


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_90", "compute_90"])
def test_a_compile_writes_into_no_python_object(tmp_path, arch):
    # An empty log is one byte (its NUL): NVRTC wrote it into b" " * 1, which is CPython's
    # cached b" ", and every b" " of the process read b"\0" after (scapy's dissection went
    # wrong in a later test module).
    assert corrupted_one_byte_objects() == []
    compiled = custom_handler.compile_handler_file(write(tmp_path, GOOD), entry="echo", arch=arch)
    assert compiled.log == "", "the case this checks: an empty log"
    assert corrupted_one_byte_objects() == []


@needs_nvrtc
def test_compute_arch_gives_ptx_naming_the_architecture(tmp_path):
    compiled = custom_handler.compile_handler_file(
        write(tmp_path, GOOD), entry="echo", arch="compute_90"
    )
    assert b".target sm_90" in compiled.cubin


@needs_nvrtc
def test_a_namespaced_entry_and_a_header_beside_the_source_compile(capsys, tmp_path):
    write(tmp_path, "RT_HD inline int answer() { return 0; }\n", "helper.h")
    src = write(
        tmp_path,
        '#include "helper.h"\nnamespace team {\n'
        "RT_HD int run(const rt::CustomCall&) { return answer(); }\n}\n",
    )
    status, out, _ = check(capsys, str(src), "--entry", "team::run")
    assert status == 0, out
    assert "entry team::run compiles" in out


# --- what does not -------------------------------------------------------------------------


@needs_nvrtc
def test_a_syntax_error_is_one_line_with_the_users_file_and_line(capsys, tmp_path):
    src = write(tmp_path, GOOD.replace("return int(call.request_len);", "return 0"))
    status, out, err = check(capsys, str(src), "--entry", "echo")
    assert (status, out) == (1, "")
    # Line 9 is the closing brace after line 8's return, the statement missing its ';'.
    assert one_line(err) == f'{src}:9: error: expected a ";"'


@needs_nvrtc
def test_verbose_adds_nvrtcs_whole_log(capsys, tmp_path):
    src = write(tmp_path, GOOD.replace("return int(call.request_len);", "return 0"))
    status, _, err = check(capsys, str(src), "--entry", "echo", "--verbose")
    assert status == 1
    first, *log = err.splitlines()
    assert first == f'roce-transceiver: error: {src}:9: error: expected a ";"'
    assert f'{src}(9): error: expected a ";"' in log
    assert any("1 error detected" in line for line in log), err


@needs_nvrtc
def test_a_wrong_signature_is_an_error_naming_the_entry(capsys, tmp_path):
    src = write(tmp_path, "RT_HD int decode(const uint8_t* req, uint32_t n) { return 0; }\n")
    status, _, err = check(capsys, str(src), "--entry", "decode")
    assert status == 1
    line = one_line(err)
    assert line.startswith(f"{src}: entry 'decode' has the wrong signature: "), line
    assert "int (*)(const uint8_t *, uint32_t)" in line
    assert line.endswith("(want: RT_HD int decode(const rt::CustomCall& call))")


@needs_nvrtc
def test_a_non_const_call_is_the_wrong_signature_too(capsys, tmp_path):
    src = write(tmp_path, "RT_HD int decode(rt::CustomCall& call) { return 0; }\n")
    status, _, err = check(capsys, str(src), "--entry", "decode")
    assert status == 1
    assert "entry 'decode' has the wrong signature" in one_line(err)


@needs_nvrtc
def test_a_missing_entry_is_an_error_naming_it(capsys, tmp_path):
    src = write(tmp_path, GOOD)  # defines echo, not handle (the default entry)
    status, _, err = check(capsys, str(src))
    assert status == 1
    assert (
        one_line(err)
        == f"{src}: no entry 'handle' (want: RT_HD int handle(const rt::CustomCall& call))"
    )


@needs_nvrtc
def test_a_function_not_marked_rt_hd_names_its_line(capsys, tmp_path):
    src = write(tmp_path, "\nint handle(const rt::CustomCall& call) { return 0; }\n")
    status, _, err = check(capsys, str(src))
    assert status == 1
    assert one_line(err) == (
        f"{src}:2: error: a function not marked RT_HD: a handler's functions run on host and device"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\0", "h.cu:1: error: a NUL byte at byte offset 0: a handler's source is text"),
        (
            GOOD.encode() + b"\0int garbage(;\n",
            f"h.cu:10: error: a NUL byte at byte offset {len(GOOD)}: a handler's source is text",
        ),
        (
            GOOD.encode().replace(b"\n\nRT_HD", b"\n// \xff\xfe\nRT_HD"),
            f"h.cu:2: error: byte 0xff at byte offset {GOOD.index(chr(10)) + 4} is not UTF-8",
        ),
    ],
    ids=["only-nul", "nul-after-the-handler", "not-utf8"],
)
def test_a_source_that_is_not_text_does_not_compile_naming_line_and_offset(
    capsys, tmp_path, content, message
):
    # NVRTC stops reading at a NUL: a lone NUL "compiled for sm_90" and exit 0. No NVRTC is
    # needed to say so.
    src = tmp_path / "h.cu"
    src.write_bytes(content)
    status, out, err = check(capsys, str(src), "--entry", "echo")
    assert (status, out) == (1, "")
    assert one_line(err).startswith(f"{tmp_path}/{message}"), err


# --- what cannot be checked ----------------------------------------------------------------


def test_a_missing_file_is_status_2_naming_it(capsys, tmp_path):
    status, _, err = check(capsys, str(tmp_path / "nope.cu"))
    assert status == 2
    assert one_line(err) == f"{tmp_path / 'nope.cu'}: no such file"


def test_a_directory_is_status_2_naming_it(capsys, tmp_path):
    status, _, err = check(capsys, str(tmp_path))
    assert status == 2
    assert one_line(err) == f"{tmp_path}: is a directory, not a handler's source"


@needs_nvrtc
@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--entry", "1abc"], "entry '1abc' is not a C++ function name"),
        (["--arch", "sm90"], "arch 'sm90' is not a GPU architecture such as sm_90"),
        (["--arch", "sm_20"], "does not compile for sm_20 (it does sm_"),
    ],
)
def test_a_bad_entry_or_arch_is_status_2_naming_it(capsys, tmp_path, argv, fragment):
    src = write(tmp_path, GOOD)
    status, _, err = check(capsys, str(src), *argv)
    assert status == 2
    line = one_line(err)
    assert line.startswith(f"cannot check {src}: "), line
    assert fragment in line


def test_without_cuda_python_check_handler_and_info_say_how_to_install_it(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)  # import raises ImportError
    status, _, err = check(capsys, str(write(tmp_path, GOOD)), "--entry", "echo")
    assert status == 2
    line = one_line(err)
    assert "cuda-python is not installed" in line
    assert "pip install 'roce-transceiver[handlers]'" in line

    status, out, _ = run_cli(capsys, "info")
    assert status == 0
    (nvrtc_line,) = [ln for ln in out.splitlines() if ln.strip().startswith("nvrtc")]
    assert "not available: cuda-python is not installed" in nvrtc_line
    status, out, _ = run_cli(capsys, "info", "--json")
    nvrtc = json.loads(out)["nvrtc"]
    assert nvrtc["available"] is False and nvrtc["version"] is None
    assert "cuda-python is not installed" in nvrtc["reason"]


class _NoLibrary:
    """cuda-python's module, with libnvrtc missing: its first call fails to load the library."""

    @staticmethod
    def nvrtcVersion():
        raise RuntimeError("libnvrtc.so.13: cannot open shared object file")


def test_a_missing_nvrtc_library_is_named_with_the_loaders_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(custom_handler.importlib, "import_module", lambda name: _NoLibrary)
    status, _, err = check(capsys, str(write(tmp_path, GOOD)), "--entry", "echo")
    assert status == 2
    line = one_line(err)
    assert "the NVRTC library does not load (RuntimeError: libnvrtc.so.13: cannot open" in line
    assert "pip install nvidia-cuda-nvrtc" in line


@needs_nvrtc
def test_info_reports_the_nvrtc_version(capsys):
    status, out, _ = run_cli(capsys, "info", "--json")
    assert status == 0
    nvrtc = json.loads(out)["nvrtc"]
    assert nvrtc["available"] is True, nvrtc
    assert nvrtc["version"].startswith("13.")
    status, out, _ = run_cli(capsys, "info")
    assert f"nvrtc       {nvrtc['version']}: user handlers compile" in out


def test_check_handler_help(capsys):
    status, out, _ = run_cli(capsys, "check-handler", "--help")
    assert status == 0
    assert out.startswith("usage: roce-transceiver check-handler")


# --- the headers ---------------------------------------------------------------------------


def test_the_core_headers_are_installed_with_the_package():
    # The wheel leaves the core's sources out but has its headers, the same ones as the source
    # tree: NVRTC compiles the engine's kernels from them with a user handler.
    installed = Path(roce_transceiver.__file__).resolve().parent / "include"
    assert custom_handler.include_dir() == installed
    source = ROOT / "roce_transceiver" / "core" / "include"
    if not source.is_dir():
        pytest.skip("no source tree beside the tests")

    def headers(root: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(root)): p.read_bytes()
            for p in root.rglob("*")
            if p.suffix in (".h", ".cuh")
        }

    have, want = headers(installed), headers(source)
    assert sorted(have) == sorted(want)
    assert have == want, "installed headers differ from the source tree's: make install"


@pytest.mark.skipif(shutil.which("c++") is None, reason="no host C++ compiler (c++) on PATH")
@pytest.mark.parametrize("entry", sorted(EXAMPLES))
def test_each_example_compiles_with_the_host_compiler_too(entry):
    # One source, both executors: the cpu executor will build the same file with g++.
    include = custom_handler.include_dir()
    flags = ["-std=c++17", "-Wall", "-Werror", "-fsyntax-only", f"-I{include}", "-x", "c++"]
    proc = subprocess.run(
        ["c++", *flags, str(EXAMPLES[entry])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_info_says_whether_a_handler_links_into_the_engine(capsys, tmp_path, monkeypatch):
    """nvJitLink's version and the engine's linkable files, or why a handler cannot be linked
    (the cuda executor's build): here, with the files taken away, that the build has none."""
    status, out, _ = run_cli(capsys, "info", "--json")
    assert status == 0
    link = json.loads(out)["handler_link"]
    assert link["available"] == (link["nvjitlink"] is not None and bool(link["engines"])), link
    monkeypatch.setattr(custom_handler, "engine_dir", lambda: tmp_path)
    status, out, _ = run_cli(capsys, "info")
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("nvjitlink")]
    assert "a handler cannot be linked into the engine here: " in line
    assert "no linkable engine" in line or "nvJitLink does not load" in line


_LINK = custom_handler.link_status()
needs_link = pytest.mark.skipif(
    not _LINK.available and not os.environ.get("CI"),
    reason=f"a handler cannot be linked into the engine here ({_LINK.reason}); CI's build can",
)


@needs_link
def test_link_builds_what_the_cuda_executor_starts_with_and_says_how_long(capsys, tmp_path):
    status, out, err = check(capsys, str(write(tmp_path, GOOD)), "--entry", "echo", "--link")
    assert (status, err) == (0, ""), err
    line = out.splitlines()[-1]
    assert line.startswith(f"{tmp_path / 'h.cu'}: linked into the engine's kernels for sm_90 ")
    assert " compiled in " in line and " s, linked in " in line and "bytes)" in line


@needs_nvrtc
def test_link_without_the_engines_linkable_code_is_status_2_saying_so(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(custom_handler, "engine_dir", lambda: tmp_path)
    status, out, err = check(capsys, str(write(tmp_path, GOOD)), "--entry", "echo", "--link")
    assert status == 2 and "compiles for sm_90" in out, out
    assert one_line(err).startswith(f"cannot link {tmp_path / 'h.cu'}: the engine's linkable")
