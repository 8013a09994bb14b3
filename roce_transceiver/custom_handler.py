"""User handlers: compiling the user's CUDA C++ with NVRTC (docs/handlers.md, "Your own handler").

A user handler is one device function, ``RT_HD int ENTRY(const rt::CustomCall& call)``
(``rt/handlers/custom.h``). :func:`compile_handler` compiles the user's source together with a
small generated kernel that calls the entry with exactly that signature, so that a function of
another type is a compile error naming the entry rather than a fault at run time. NVRTC needs
no GPU and no driver: only cuda-python's bindings and the NVRTC library, both from PyPI
(``pip install 'roce-transceiver[handlers]'``).

Compile errors come back as :class:`HandlerCompileError`: a one-line message naming the user's
file and line (NVRTC's log names the file as we pass it, through a ``#line`` directive) and the
full log. A missing NVRTC is :class:`NvrtcUnavailable`, with the reason.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "DEFAULT_ARCH",
    "DEFAULT_ENTRY",
    "SIGNATURE",
    "CompiledHandler",
    "HandlerCompileError",
    "NvrtcStatus",
    "NvrtcUnavailable",
    "compile_handler",
    "compile_handler_file",
    "include_dir",
    "nvrtc_status",
]

DEFAULT_ENTRY = "handle"
DEFAULT_ARCH = "sm_90"  # the H200
#: What an entry must be, for messages.
SIGNATURE = "RT_HD int {entry}(const rt::CustomCall& call)"
INSTALL_HINT = "pip install 'roce-transceiver[handlers]'"

# The file name NVRTC's log gives the generated kernel's lines: an error there is about the entry.
_WRAPPER_NAME = "<check-handler entry>"
_ENTRY_RE = re.compile(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*")
_ARCH_RE = re.compile(r"(sm|compute)_(\d+)([a-z]?)")
# One diagnostic of NVRTC's log: `file(line): error: message`.
_DIAG_RE = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning): (?P<msg>.*)$"
)


class NvrtcUnavailable(Exception):
    """cuda-python or the NVRTC library is missing: the handler cannot be compiled here."""


class HandlerCompileError(Exception):
    """The handler does not compile. ``str()`` is one line naming the file and line; ``log`` is
    NVRTC's whole log."""

    def __init__(self, message: str, log: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.log = log
        self.file = file
        self.line = line


@dataclass(frozen=True)
class NvrtcStatus:
    available: bool
    version: str | None  # "13.5" when available
    reason: str | None  # why not, when not


@dataclass(frozen=True)
class CompiledHandler:
    entry: str
    arch: str
    cubin: bytes
    log: str  # NVRTC's log (warnings), empty when it had nothing to say
    nvrtc_version: str


def include_dir() -> Path:
    """Where ``rt/handlers/custom.h`` is: installed with the package (``roce_transceiver/include``,
    only the ABI's headers) or, from a source checkout, the core's own include directory."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here / "core" / "include"):
        if (candidate / "rt" / "handlers" / "custom.h").is_file():
            return candidate
    raise NvrtcUnavailable(
        f"rt/handlers/custom.h is neither in {here / 'include'} nor in {here / 'core' / 'include'}:"
        " the package is installed without its handler headers (reinstall it)"
    )


def _load_nvrtc() -> tuple[ModuleType, str]:
    """cuda-python's NVRTC bindings and the library's version, or NvrtcUnavailable saying why."""
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as e:
        raise NvrtcUnavailable(
            f"cuda-python is not installed ({e}): {INSTALL_HINT}, or pip install cuda-python"
        ) from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # the bindings load libnvrtc here; each loader has its own error
        raise NvrtcUnavailable(
            f"the NVRTC library does not load ({type(e).__name__}: {e}): {INSTALL_HINT}, "
            "or pip install nvidia-cuda-nvrtc"
        ) from None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcUnavailable(f"nvrtcVersion failed: {err.name}")
    return nvrtc, f"{major}.{minor}"


def nvrtc_status() -> NvrtcStatus:
    """Whether handlers can be compiled here, for ``roce-transceiver info``."""
    try:
        _, version = _load_nvrtc()
        include_dir()
    except NvrtcUnavailable as e:
        return NvrtcStatus(False, None, str(e))
    return NvrtcStatus(True, version, None)


def _ok(nvrtc: ModuleType, result: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcUnavailable(f"{what} failed: {err.name}")
    return tuple(rest)


def _supported_archs(nvrtc: ModuleType) -> list[int]:
    (archs,) = _ok(nvrtc, nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return sorted(int(a) for a in archs)


def _wrapper(source: bytes, name: str, entry: str) -> bytes:
    # The user's lines keep their own numbers and file name (#line); the kernel's name its
    # lines as the entry check, so an error there is reported as the entry's. The kernel both
    # takes the entry's address as a CustomEntry (the signature, exactly: an overload set
    # resolves to the right one or fails) and calls it from device code (RT_HD is needed).
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    head = f'#include "rt/handlers/custom.h"\n#line 1 "{quoted}"\n'.encode()
    tail = (
        f'\n#line 1 "{_WRAPPER_NAME}"\n'
        'extern "C" __global__ void rt_check_handler_entry(const ::rt::CustomCall* call, '
        "int* result) {\n"
        f"  const ::rt::CustomEntry entry = &{entry};\n"
        "  (void)entry;\n"
        f"  *result = {entry}(*call);\n"
        "}\n"
    ).encode()
    return head + source + tail


def _one_line(log: str, name: str, entry: str) -> tuple[str, str | None, int | None]:
    """The first error of NVRTC's log as one line: `file:line: error: message`, or for an error
    in the generated kernel, what is wrong with the entry."""
    for raw in log.splitlines():
        m = _DIAG_RE.match(raw.strip())
        if m is None or m["kind"] == "warning":
            continue
        msg = m["msg"].strip()
        want = SIGNATURE.format(entry=entry)
        if m["file"] == _WRAPPER_NAME:
            if re.search(rf'identifier "{re.escape(entry)}" is undefined', msg) or (
                "has no member" in msg
            ):
                return f"{name}: no entry '{entry}' (want: {want})", name, None
            return (
                f"{name}: entry '{entry}' has the wrong signature: {msg} (want: {want})",
                name,
                None,
            )
        if "without execution space annotations" in msg:
            # Not NVRTC's advice (-default-device): the engine compiles handlers without it, and
            # RT_HD is what says a function is meant for both executors.
            msg = "a function not marked RT_HD: a handler's functions run on host and device"
        return f"{m['file']}:{m['line']}: {m['kind']}: {msg}", m["file"], int(m["line"])
    first = next((line.strip() for line in log.splitlines() if line.strip()), "no log")
    return f"{name}: does not compile: {first}", name, None


def compile_handler(
    source: str | bytes,
    *,
    name: str,
    entry: str = DEFAULT_ENTRY,
    arch: str = DEFAULT_ARCH,
    include_dirs: tuple[Path, ...] = (),
) -> CompiledHandler:
    """Compile a handler's source (``name``: the file name the errors give) to a cubin for
    ``arch``. Raises HandlerCompileError (the handler's fault), NvrtcUnavailable (this
    machine's) or ValueError (a bad entry name or architecture)."""
    if not _ENTRY_RE.fullmatch(entry):
        raise ValueError(f"entry {entry!r} is not a C++ function name")
    arch_m = _ARCH_RE.fullmatch(arch)
    if arch_m is None:
        raise ValueError(f"arch {arch!r} is not a GPU architecture such as sm_90 or compute_90")
    nvrtc, version = _load_nvrtc()
    supported = _supported_archs(nvrtc)
    if int(arch_m[2]) not in supported:
        raise ValueError(
            f"NVRTC {version} does not compile for {arch} (it does sm_{supported[0]} .. "
            f"sm_{supported[-1]})"
        )
    text = source.encode() if isinstance(source, str) else source
    options = [
        b"-std=c++17",
        f"-arch={arch}".encode(),
        f"-I{include_dir()}".encode(),
        *(f"-I{d}".encode() for d in include_dirs),
    ]
    (prog,) = _ok(
        nvrtc,
        nvrtc.nvrtcCreateProgram(_wrapper(text, name, entry), b"check_handler.cu", 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        (size,) = _ok(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\0").decode(errors="replace").strip()
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            message, file, line = _one_line(log, name, entry)
            raise HandlerCompileError(message, log, file, line)
        if arch_m[1] == "sm":
            (n,) = _ok(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            code = b" " * n
            _ok(nvrtc, nvrtc.nvrtcGetCUBIN(prog, code), "nvrtcGetCUBIN")
        else:  # compute_XX: PTX, for the driver to finish
            (n,) = _ok(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            code = b" " * n
            _ok(nvrtc, nvrtc.nvrtcGetPTX(prog, code), "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CompiledHandler(entry, arch, bytes(code), log, version)


def compile_handler_file(
    path: str | Path, *, entry: str = DEFAULT_ENTRY, arch: str = DEFAULT_ARCH
) -> CompiledHandler:
    """compile_handler() on a file: errors name it as given; its folder is on the include path.
    A file that cannot be read raises OSError."""
    path = Path(path)
    source = path.read_bytes()
    return compile_handler(
        source, name=str(path), entry=entry, arch=arch, include_dirs=(path.resolve().parent,)
    )
