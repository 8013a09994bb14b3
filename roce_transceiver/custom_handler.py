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

For the cpu executor, :func:`build_host_handler` compiles the same source with the host's C++
compiler into a shared object whose generated ``extern "C"`` trampoline the engine calls
(``rt_custom_call``), cached on disk by a hash of everything that goes into it (:func:`cache_dir`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import importlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_ARCH",
    "DEFAULT_ENTRY",
    "ENGINE_KERNELS",
    "ENGINE_SETS",
    "SIGNATURE",
    "VERBS_SERVE_KERNELS",
    "CompiledHandler",
    "EngineKernels",
    "HandlerBuildFailure",
    "HandlerCacheError",
    "HandlerCompileError",
    "HostCompilerUnavailable",
    "HostHandler",
    "LinkStatus",
    "NvrtcStatus",
    "NvrtcUnavailable",
    "build_host_handler",
    "build_host_handler_file",
    "cache_dir",
    "check_source",
    "compile_engine",
    "compile_engine_file",
    "compile_handler",
    "compile_handler_file",
    "engine_set",
    "example_path",
    "include_dir",
    "link_status",
    "linkable_engine",
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


log = logging.getLogger(__name__)
T = TypeVar("T")


class HandlerBuildFailure(Exception):
    """The handler could not be built: ``str()`` is one line naming what failed (the source's
    file and line, the compiler, the cache's path); ``log`` is the compiler's whole output when
    one ran, else empty; ``file`` and ``line`` what the line names."""

    def __init__(
        self, message: str, log: str = "", file: str | None = None, line: int | None = None
    ):
        super().__init__(message)
        self.log = log
        self.file = file
        self.line = line


class NvrtcUnavailable(HandlerBuildFailure):
    """cuda-python or the NVRTC library is missing: the handler cannot be compiled here."""


class HandlerCompileError(HandlerBuildFailure):
    """The handler does not compile (or is not a handler's source: a NUL byte, not UTF-8).
    ``str()`` is one line naming the file and line; ``log`` is the compiler's whole log."""


class HandlerCacheError(HandlerBuildFailure):
    """Neither the handler cache nor a temporary folder could take the build (``file``: the
    cache's path)."""


def check_source(text: bytes, name: str) -> None:
    """A handler's source is UTF-8 text. A NUL byte (NVRTC stops reading at it and compiles what
    came before) or bytes that are not UTF-8 (the compilers' messages quote them) are a
    HandlerCompileError naming the file, its line and the byte offset, on every executor and in
    check-handler alike."""
    nul = text.find(b"\0")
    if nul >= 0:
        line = text.count(b"\n", 0, nul) + 1
        raise HandlerCompileError(
            f"{name}:{line}: error: a NUL byte at byte offset {nul}: a handler's source is "
            "text (the compiler would stop reading there)",
            "",
            name,
            line,
        )
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as e:
        line = text.count(b"\n", 0, e.start) + 1
        raise HandlerCompileError(
            f"{name}:{line}: error: byte 0x{text[e.start]:02x} at byte offset {e.start} is not "
            "UTF-8: a handler's source is UTF-8 text",
            "",
            name,
            line,
        ) from None


def _source_bytes(source: str | bytes) -> bytes:
    # A str with lone surrogates (a file name's undecodable bytes, say) still becomes bytes,
    # which check_source then reports with their offset.
    return source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source


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
    """Where the core's headers are (``rt/handlers/custom.h``, ``rt/cuda/engine_kernels.cuh``):
    installed with the package (``roce_transceiver/include``; NVRTC compiles them into the
    engine's kernels with a handler) or, from a source checkout, the core's include directory."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here / "core" / "include"):
        if (candidate / "rt" / "cuda" / "engine_kernels.cuh").is_file():
            return candidate
    raise NvrtcUnavailable(
        f"the core's headers (rt/cuda/engine_kernels.cuh) are neither in {here / 'include'} nor "
        f"in {here / 'core' / 'include'}: the package is installed without them (reinstall it)"
    )


def example_path(name: str) -> Path:
    """One of the example handlers (examples/handlers/NAME): installed with the package, or in
    the source checkout. FileNotFoundError when neither has it."""
    here = Path(__file__).resolve().parent
    for folder in (here / "examples" / "handlers", here.parent / "examples" / "handlers"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"no example handler {name!r} in {here / 'examples' / 'handlers'}")


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


@dataclass(frozen=True)
class LinkStatus:
    available: bool  # a handler can be linked into the engine's kernels here
    version: str | None  # nvJitLink's, "13.0", when it loads
    engines: tuple[str, ...]  # the engine's linkable files this build has
    reason: str | None  # why not, when not


def link_status() -> LinkStatus:
    """Whether a handler links into the engine's kernels here (the cuda executor's build), for
    ``roce-transceiver info``: nvJitLink loads and the package's CUDA build left its code."""
    engines = tuple(sorted(p.name for p in engine_dir().glob("engine_*.cubin")))
    try:
        major, minor = _load_nvjitlink().version()
    except NvrtcUnavailable as e:
        return LinkStatus(False, None, engines, str(e))
    if not engines:
        return LinkStatus(
            False,
            f"{major}.{minor}",
            engines,
            f"no linkable engine in {engine_dir()} (built without CUDA)",
        )
    return LinkStatus(True, f"{major}.{minor}", engines, None)


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
            undefined = re.search(rf'identifier "{re.escape(entry)}" is undefined', msg)
            if undefined or "has no member" in msg or "the global scope has no" in msg:
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


def _check_arch(nvrtc: ModuleType, version: str, arch: str) -> re.Match[str]:
    arch_m = _ARCH_RE.fullmatch(arch)
    if arch_m is None:
        raise ValueError(f"arch {arch!r} is not a GPU architecture such as sm_90 or compute_90")
    supported = _supported_archs(nvrtc)
    if int(arch_m[2]) not in supported:
        raise ValueError(
            f"NVRTC {version} does not compile for {arch} (it does sm_{supported[0]} .. "
            f"sm_{supported[-1]})"
        )
    return arch_m


def _nvrtc_compile(
    nvrtc: ModuleType,
    unit: bytes,
    options: list[bytes],
    *,
    name: str,
    entry: str,
    cubin: bool,
) -> tuple[bytes, str]:
    """One NVRTC program: its cubin (or PTX) and log; HandlerCompileError when it fails."""
    (prog,) = _ok(
        nvrtc, nvrtc.nvrtcCreateProgram(unit, b"custom_handler.cu", 0, [], []), "nvrtcCreateProgram"
    )
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        # NVRTC writes into the buffers it is given: each is a new bytearray, never a bytes
        # object (immutable, and shared: `b" " * 1` is CPython's one cached b" ", which the
        # empty log's NUL then overwrote for the whole process, scapy's dissection included).
        (size,) = _ok(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = bytearray(size)
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\0").decode(errors="replace").strip()
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            message, file, line = _one_line(log, name, entry)
            raise HandlerCompileError(message, log, file, line)
        if cubin:
            (n,) = _ok(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            code = bytearray(n)
            _ok(nvrtc, nvrtc.nvrtcGetCUBIN(prog, code), "nvrtcGetCUBIN")
        else:  # compute_XX: PTX, for the driver to finish
            (n,) = _ok(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            code = bytearray(n)
            _ok(nvrtc, nvrtc.nvrtcGetPTX(prog, code), "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(code), log


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
    text = _source_bytes(source)
    check_source(text, name)
    nvrtc, version = _load_nvrtc()
    arch_m = _check_arch(nvrtc, version, arch)
    options = [
        b"-std=c++17",
        f"-arch={arch}".encode(),
        f"-I{include_dir()}".encode(),
        *(f"-I{d}".encode() for d in include_dirs),
    ]
    code, log = _nvrtc_compile(
        nvrtc,
        _wrapper(text, name, entry),
        options,
        name=name,
        entry=entry,
        cubin=arch_m[1] == "sm",
    )
    return CompiledHandler(entry, arch, code, log, version)


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


# ------------------------------------------------------------------ the cache's entries
#
# An entry is its file (the shared object, the cubin) and beside it `<file>.sha256`: its size
# and SHA-256, written after it, each by a temporary file and a rename. An entry is used only
# when it matches its check: a truncated shared object would be a SIGBUS when the loader
# touches its missing pages, an empty or garbage one fail every later start.

_CHECK_SUFFIX = ".sha256"


def _check_path(path: Path) -> Path:
    return path.with_name(path.name + _CHECK_SUFFIX)


def _check_line(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: written to a temporary file beside it, then
    renamed over it (a reader, or a process that dies here, never sees part of it). OSError
    when the folder takes no file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".build-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _store_checked(path: Path, data: bytes) -> None:
    """A cache entry: ``data`` at ``path``, then its check beside it (the order matters: a
    check names a whole file). Read back and verified; OSError when the folder takes no file,
    or what it kept does not check."""
    _write_atomic(path, data)
    _write_atomic(_check_path(path), _check_line(data).encode())
    kept, why = _read_checked(path)
    if kept is None:
        raise OSError(f"{path}: written, but {why}")


def _read_checked(path: Path) -> tuple[bytes | None, str | None]:
    """A cache entry's bytes when the entry checks, else (None, why); (None, None) when there
    is no entry."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry, or no folder
        return None, None
    except IsADirectoryError:
        return None, "is a directory, not a file"
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    try:
        check = _check_path(path).read_bytes().decode("ascii")
    except FileNotFoundError:
        return None, f"has no check ({_check_path(path).name}) beside it"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"has a check that cannot be read ({getattr(e, 'strerror', None) or e})"
    if check == _check_line(data):
        return data, None
    want = check.split(" ", 1)[0]
    if want != str(len(data)):
        return None, f"does not check: {len(data)} bytes, its check says {want[:20]!r}"
    return None, "does not check: its SHA-256 differs from its check's"


# A temporary folder for the builds of a process whose cache folder takes none (a read-only
# home, a file where the folder goes): made once, private to this user (mkdtemp's 0700: a
# shared, predictable path would let another user put a library in the engine's way), removed
# at exit.
_fallback_folder: Path | None = None


def _fallback_dir() -> Path:
    global _fallback_folder
    if _fallback_folder is None:
        _fallback_folder = Path(tempfile.mkdtemp(prefix="roce-transceiver-handlers-"))
        atexit.register(shutil.rmtree, _fallback_folder, True)
    return _fallback_folder


def _os_error(e: OSError, where: Path) -> str:
    """An OSError of a cache's as `path: reason`, naming the destination of a rename."""
    return f"{e.filename2 or e.filename or where}: {e.strerror or e}"


def _places(folder: Path) -> list[Path]:
    """Where a cache entry may be: the cache folder, then where this process built before
    because the folder took no build."""
    return [folder] if _fallback_folder is None else [folder, _fallback_folder]


def _keep(folder: Path, what: str, store: Callable[[Path], T]) -> T:
    """``store(folder)``; where the folder takes no file (OSError), ``store`` into this
    process's temporary folder, saying so in the log. HandlerCacheError (naming the cache)
    when neither takes it."""
    try:
        return store(folder)
    except OSError as e:
        first = _os_error(e, folder)
    try:
        fallback = _fallback_dir()
        kept = store(fallback)
    except OSError as e:
        raise HandlerCacheError(
            f"handler cache {folder} takes no build ({first}), nor a temporary folder "
            f"({_os_error(e, Path(tempfile.gettempdir()))}): set XDG_CACHE_HOME to a writable "
            "folder",
            file=str(folder),
        ) from None
    log.warning(
        "handler cache %s takes no build (%s): %s is kept in %s, for this process only",
        folder,
        first,
        what,
        fallback,
    )
    return kept


def _loads(path: Path) -> str | None:
    """Why the shared object does not load (the loader's message), None when it does. Loaded
    here with the loader's RTLD_NOW, as the engine will: the engine's own dlopen of it then
    finds it loaded (by its inode)."""
    try:
        ctypes.CDLL(str(path))
    except OSError as e:
        return str(e)
    return None


# A cubin is an ELF image for the CUDA machine (EM_CUDA, 190, at e_machine: offset 18).
_ELF_MAGIC = b"\x7fELF"
_EM_CUDA = 190


def _is_cubin(image: bytes) -> bool:
    return image[:4] == _ELF_MAGIC and len(image) > 20 and image[18] | image[19] << 8 == _EM_CUDA


# ------------------------------------------------------------------ the cuda executor's build


@dataclass(frozen=True)
class EngineKernels:
    """The engine's kernels (rt/cuda/engine_kernels.cuh) with a handler linked in: the module
    the cuda executor loads with the driver API in place of its built-in kernels."""

    image: bytes  # the cubin
    arch: str
    cached: bool  # True: found in the cache, nothing was compiled
    log: str  # NVRTC's and the linker's warnings, empty when they had nothing to say
    seconds: float  # the compile and link's, or the cache read's
    compile_seconds: float = 0.0  # NVRTC on the handler alone (0 when cached)
    link_seconds: float = 0.0  # nvJitLink, the handler into the engine (0 when cached)


# The file name NVRTC's log gives the lines that bind the entry to the engine's name for it: an
# error there is about the entry (_one_line), as for check-handler's kernel.
_ENGINE_BINDING = _WRAPPER_NAME


def _handler_unit(source: bytes, name: str, entry: str) -> bytes:
    # The user's lines first, with their own file name and numbers; then the one function the
    # engine calls (rt/handlers/linked_entry.h's RT_DEFINE_LINKED_ENTRY), which checks the entry's
    # type and calls it: fully qualified, so that an entry named like one of the engine's own
    # functions (handle) is still the user's; the entry is inlined into it, and it is what the
    # linker joins to the engine's call.
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    head = f'#include "rt/handlers/linked_entry.h"\n#line 1 "{quoted}"\n'.encode()
    binding = f'\n#line 1 "{_ENGINE_BINDING}"\nRT_DEFINE_LINKED_ENTRY(::{entry})\n'.encode()
    return head + source + binding


def _engine_headers_digest() -> bytes:
    """Every header of the core as this package has them (a handler includes custom.h and what
    it needs): a changed header is another module."""
    root = include_dir() / "rt"
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix in (".h", ".cuh") and p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.digest()


#: The engine's kernels a module may hold, by the bit of each in RT_ENGINE_KERNEL_SET
#: (engine_kernels.cuh): (crew, scope) -> bit. A crew serves the frames handler's streams
#: (cuda.warps > 1); the scope is the wire's: device memory for a GPU far end, pinned otherwise.
ENGINE_KERNELS = {
    (False, "device"): 1,
    (False, "system"): 2,
    (True, "device"): 4,
    (True, "system"): 8,
}

#: Verbs mode's serve kernels (cuda/verbs_linkable.cu: one a NIC handler), as a set's bit.
VERBS_SERVE_KERNELS = 64

#: The sets the linkable code is built in (CMakeLists.txt, one file each): a module links one of
#: them, the engine's one-warp kernels, the crew's, or Verbs mode's serve kernels (a build with
#: GPUNetIO's headers only).
ENGINE_SETS = {"lone": 3, "crew": 12, "verbs": VERBS_SERVE_KERNELS}

# What the handler is compiled with besides -arch and the include paths: relocatable device
# code (its entry is the linker's to join), C++17, as nvcc built the engine.
_HANDLER_OPTIONS = ("-std=c++17", "-rdc=true")


def engine_set(kernels: int) -> str:
    """The linkable set that holds ``kernels`` (a mask of ENGINE_KERNELS' bits, or
    VERBS_SERVE_KERNELS); ValueError when no one set does."""
    every = 0
    for mask in ENGINE_SETS.values():
        every |= mask
    if kernels <= 0 or kernels & ~every:
        raise ValueError(
            f"kernels {kernels}: a mask of ENGINE_KERNELS' bits (1 to 15), or "
            f"VERBS_SERVE_KERNELS ({VERBS_SERVE_KERNELS})"
        )
    for name, mask in ENGINE_SETS.items():
        if kernels & ~mask == 0:
            return name
    raise ValueError(
        f"kernels {kernels}: the one-warp kernels (bits 1, 2), the crew's (4, 8) or the Verbs "
        f"serve kernels ({VERBS_SERVE_KERNELS}), not two of them: a module links one set of the "
        "engine's code"
    )


def engine_dir() -> Path:
    """Where the engine's linkable kernels are: beside the core's module, which the package's
    CUDA build installs them with (an editable install's too)."""
    from roce_transceiver import _core

    return Path(_core.__file__).resolve().parent / "engine"


def linkable_engine(kernels: int, arch: str) -> Path:
    """The engine's relocatable code for ``kernels``' set on ``arch``; NvrtcUnavailable when
    this build has none for it (built without CUDA, or for other architectures)."""
    name = engine_set(kernels)
    path = engine_dir() / f"engine_{name}.{arch}.cubin"
    if not path.is_file():
        have = sorted(p.name for p in engine_dir().glob("engine_*.cubin"))
        if name == "verbs" and have:
            raise NvrtcUnavailable(
                f"Verbs mode's linkable serve kernels for {arch} are not in {engine_dir()} "
                f"(this build has {', '.join(have)}): the package was built without GPUNetIO's "
                "headers (RT_GPUNETIO_INCLUDE; roce-transceiver info says where it looked)"
            )
        raise NvrtcUnavailable(
            f"the engine's linkable kernels for {arch} are not in {engine_dir()} (this build "
            f"has {', '.join(have) if have else 'none: it was built without CUDA'}); build the "
            "package with CUDA for this GPU (RT_CUDA=ON, CMAKE_CUDA_ARCHITECTURES)"
        )
    return path


def _load_nvjitlink() -> ModuleType:
    """cuda-python's nvJitLink bindings with the library loaded, or NvrtcUnavailable."""
    try:
        nvjitlink = importlib.import_module("cuda.bindings.nvjitlink")
        nvjitlink.version()
    except Exception as e:  # the bindings load libnvJitLink here; each loader has its own error
        raise NvrtcUnavailable(
            f"nvJitLink does not load ({type(e).__name__}: {e}): {INSTALL_HINT}, or pip install "
            "nvidia-nvjitlink"
        ) from None
    return nvjitlink


def _link(nvjitlink: ModuleType, arch: str, inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """The cubins linked into one module, and the linker's warnings; HandlerCompileError with
    its log when it fails (an entry the engine cannot call, say)."""

    def text(size: int, read: Callable[[Any, bytearray], None], h: Any) -> str:
        buf = bytearray(size)
        if size:
            read(h, buf)
        return bytes(buf).rstrip(b"\0").decode(errors="replace").strip()

    h = nvjitlink.create(1, [f"-arch={arch}"])
    try:
        try:
            for name, data in inputs:
                nvjitlink.add_data(h, nvjitlink.InputType.CUBIN, data, len(data), name)
            nvjitlink.complete(h)
        except nvjitlink.nvJitLinkError as e:
            error = text(nvjitlink.get_error_log_size(h), nvjitlink.get_error_log, h)
            raise HandlerCompileError(
                f"linking the handler into the engine's kernels failed ({e}): "
                + (error.splitlines() or ["no log"])[0],
                error,
            ) from None
        image = bytearray(nvjitlink.get_linked_cubin_size(h))
        nvjitlink.get_linked_cubin(h, image)
        return bytes(image), text(nvjitlink.get_info_log_size(h), nvjitlink.get_info_log, h)
    finally:
        nvjitlink.destroy(h)


def _check_linker(nvjitlink: ModuleType, nvrtc_version: str) -> None:
    """nvJitLink reads only what a compiler no newer than itself wrote (seen: nvJitLink 13.0
    refuses NVRTC 13.5's cubin as "bad input"): NVRTC, which compiles the handler, and the
    package's CUDA build, which compiled the engine, must be no newer. NvrtcUnavailable, naming
    the versions and what to install, when one is."""
    from roce_transceiver import _core

    major, minor = nvjitlink.version()
    linker = (int(major), int(minor))
    compilers = [("NVRTC", tuple(int(x) for x in nvrtc_version.split(".")[:2]))]
    built = int(_core.cuda_runtime_info()["runtime_version"])  # 1000 * major + 10 * minor
    if built:
        compilers.append(("the package's CUDA build", (built // 1000, built % 1000 // 10)))
    for what, (c_major, c_minor) in compilers:
        if (c_major, c_minor) > linker:
            raise NvrtcUnavailable(
                f"nvJitLink {linker[0]}.{linker[1]} cannot link what {what} {c_major}.{c_minor} "
                "compiled (a linker reads no newer compiler's code): install nvJitLink "
                f"{c_major}.{c_minor} or newer (pip install 'nvidia-nvjitlink>={c_major}.{c_minor},"
                f"<{c_major + 1}')"
            )


def compile_engine(
    source: str | bytes,
    *,
    name: str,
    entry: str = DEFAULT_ENTRY,
    arch: str = DEFAULT_ARCH,
    kernels: int = ENGINE_SETS["lone"],
    include_dirs: tuple[Path, ...] = (),
    cache: Path | None = None,
    on_compile: Callable[[], None] | None = None,
) -> EngineKernels:
    """The engine's kernels ``kernels`` (a mask of ENGINE_KERNELS, within one of ENGINE_SETS)
    with the handler linked in, for ``arch`` (a real architecture: sm_90): NVRTC compiles the
    handler alone and nvJitLink links it into the engine's code built with the package (a
    fraction of a second). From the cache when the same source, entry, options, architecture,
    NVRTC and engine code built them before (``on_compile`` is called before a build). Raises
    HandlerCompileError (one line naming ``name`` and the line; ``.log``: the whole log),
    NvrtcUnavailable, or ValueError (a bad entry name, architecture or kernel set)."""
    if not _ENTRY_RE.fullmatch(entry):
        raise ValueError(f"entry {entry!r} is not a C++ function name")
    engine_set(kernels)
    text = _source_bytes(source)
    check_source(text, name)
    nvrtc, version = _load_nvrtc()
    arch_m = _check_arch(nvrtc, version, arch)
    if arch_m[1] != "sm":
        raise ValueError(f"arch {arch!r}: the engine's kernels are linked for a real GPU (sm_XX)")
    engine_path = linkable_engine(kernels, arch)
    started = time.perf_counter()
    engine = engine_path.read_bytes()
    unit = _handler_unit(text, name, entry)
    options = [
        *(o.encode() for o in _HANDLER_OPTIONS),
        f"-arch={arch}".encode(),
        f"-I{include_dir()}".encode(),
        *(f"-I{d}".encode() for d in include_dirs),
    ]
    key = hashlib.sha256()
    for part in (unit, b"\0".join(options), version.encode(), engine, _engine_headers_digest()):
        key.update(hashlib.sha256(part).digest())
    folder = cache or cache_dir()
    file_name = f"engine-{key.hexdigest()[:32]}.cubin"
    for place in _places(folder):
        found = _lookup_engine(place / file_name)
        if found is not None:
            return EngineKernels(found, arch, True, "", time.perf_counter() - started)
    if on_compile is not None:  # the cache missed: say so before the build
        on_compile()
    nvjitlink = _load_nvjitlink()
    _check_linker(nvjitlink, version)
    handler, nvrtc_log = _nvrtc_compile(nvrtc, unit, options, name=name, entry=entry, cubin=True)
    compiled = time.perf_counter()
    image, link_log = _link(nvjitlink, arch, [(engine_path.name, engine), (name, handler)])
    linked = time.perf_counter()
    _store_engine(folder, file_name, image)
    return EngineKernels(
        image,
        arch,
        False,
        "\n".join(x for x in (nvrtc_log, link_log) if x),
        time.perf_counter() - started,
        compiled - started,
        linked - compiled,
    )


def _lookup_engine(path: Path) -> bytes | None:
    """The cached module at ``path`` when it checks and is a cubin; else None (said why in
    the log: it is compiled again and replaced)."""
    image, why = _read_checked(path)
    if image is not None and not _is_cubin(image):
        image, why = None, "is not a cubin (no CUDA ELF header)"
    if why is not None:
        log.warning("handler cache: %s %s: compiling it again", path, why)
    return image


def _store_engine(folder: Path, file_name: str, image: bytes) -> None:
    """The module kept in ``folder``, else in the process's temporary folder. The image is in
    hand either way: a cache that takes none costs the next start a compile, not this one its
    start (said in the log)."""

    def store(into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        _store_checked(into / file_name, image)

    try:
        _keep(folder, "the engine's module", store)
    except HandlerCacheError as e:
        log.warning("%s; the module is not kept: the next start compiles it again", e)


def compile_engine_file(
    path: str | Path,
    *,
    entry: str = DEFAULT_ENTRY,
    arch: str = DEFAULT_ARCH,
    kernels: int = ENGINE_SETS["lone"],
    cache: Path | None = None,
) -> EngineKernels:
    """compile_engine() on a file: errors name it as given; its folder is on the include path.
    A file that cannot be read raises OSError."""
    path = Path(path)
    return compile_engine(
        path.read_bytes(),
        name=str(path),
        entry=entry,
        arch=arch,
        kernels=kernels,
        include_dirs=(path.resolve().parent,),
        cache=cache,
    )


# ------------------------------------------------------------------ the cpu executor's build


class HostCompilerUnavailable(HandlerBuildFailure):
    """No host C++ compiler on PATH (``$CXX``, else c++ or g++): a handler cannot run on the cpu
    executor here."""


@dataclass(frozen=True)
class HostHandler:
    library: Path  # the shared object the engine loads
    cached: bool  # True: found in the cache, nothing was compiled
    log: str  # the compiler's warnings, empty when it had nothing to say (or it was cached)


# The file name the compiler's diagnostics give the generated trampoline's lines.
_TRAMPOLINE_NAME = "<custom handler trampoline>"
# One diagnostic of GCC's or Clang's: `file:line:col: error: message` (the column optional).
_GCC_DIAG_RE = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? (?P<kind>fatal error|error|warning): (?P<msg>.*)$"
)
# What the host build adds to the user's own options; in the cache key.
_HOST_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-x", "c++")


def cache_dir() -> Path:
    """Where compiled handlers are kept: ``$XDG_CACHE_HOME/roce-transceiver/handlers``, else
    ``~/.cache/roce-transceiver/handlers``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "roce-transceiver" / "handlers"


def host_compiler() -> str:
    """The host C++ compiler: ``$CXX`` when set (it must be there: no other is taken in its
    place), else c++ or g++ from PATH."""
    if cxx := os.environ.get("CXX"):
        if found := shutil.which(cxx):
            return found
        raise HostCompilerUnavailable(
            f"$CXX is {cxx!r}: no such compiler (not an executable file, nor one on PATH); "
            "the cpu executor compiles a custom handler with it (unset CXX to use c++ or g++)",
            file=cxx,
        )
    for candidate in ("c++", "g++"):
        if found := shutil.which(candidate):
            return found
    path = os.environ.get("PATH", "")
    raise HostCompilerUnavailable(
        f"no C++ compiler on PATH={path} (tried $CXX, c++, g++): the cpu executor compiles a "
        "custom handler with one (apt-get install g++)",
        file="c++",
    )


def _host_trampoline(entry: str) -> str:
    # The entry's address taken as a CustomEntry is the signature check (an overload set
    # resolves to the right one or fails). What the user's code throws must not cross into the
    # engine's loop (it would end the process): it is the message's handler error.
    return (
        f'\n#line 1 "{_TRAMPOLINE_NAME}"\n'
        'extern "C" __attribute__((visibility("default"))) unsigned rt_custom_abi_version() {\n'
        "  return ::rt::kCustomAbiVersion;\n"
        "}\n"
        'extern "C" __attribute__((visibility("default"))) int '
        "rt_custom_call(const ::rt::CustomCall* call) {\n"
        f"  const ::rt::CustomEntry entry = &{entry};\n"
        "  try {\n"
        "    return entry(*call);\n"
        "  } catch (...) {\n"
        "    return ::rt::kHandlerError;\n"
        "  }\n"
        "}\n"
    )


def _host_one_line(log: str, name: str, entry: str) -> tuple[str, str | None, int | None]:
    """The compiler's first error as one line naming the user's file and line, or for an error
    in the trampoline, what is wrong with the entry."""
    want = SIGNATURE.format(entry=entry)
    for raw in log.splitlines():
        m = _GCC_DIAG_RE.match(raw.strip())
        if m is None or m["kind"] == "warning":
            continue
        msg = m["msg"].strip()
        if m["file"] == _TRAMPOLINE_NAME:
            if "was not declared" in msg or "undeclared identifier" in msg:
                return f"{name}: no entry '{entry}' (want: {want})", name, None
            return (
                f"{name}: entry '{entry}' has the wrong signature: {msg} (want: {want})",
                name,
                None,
            )
        return f"{m['file']}:{m['line']}: {m['kind']}: {msg}", m["file"], int(m["line"])
    first = next((line.strip() for line in log.splitlines() if line.strip()), "no log")
    return f"{name}: does not compile: {first}", name, None


def _abi_headers() -> bytes:
    """The ABI's headers as this package has them: a changed header is another handler."""
    root = include_dir() / "rt"
    names = ("handlers/custom.h", "handlers/reply.h", "hd.h", "fixed_width.h")
    return b"".join((root / p).read_bytes() for p in names)


def build_host_handler(
    source: str | bytes,
    *,
    name: str,
    entry: str = DEFAULT_ENTRY,
    include_dirs: tuple[Path, ...] = (),
    cache: Path | None = None,
) -> HostHandler:
    """The handler compiled for the cpu executor: a shared object, from the cache when the same
    source, entry, options, ABI and compiler built it before and the entry checks and loads
    (else it is built again); in a temporary folder, for this process, when the cache folder
    takes no build (the log says so). Raises HandlerCompileError (one line naming ``name`` and
    the line; ``.log``: the compiler's whole output), HostCompilerUnavailable (naming the
    compiler), HandlerCacheError (no folder takes the build): HandlerBuildFailures all; or
    ValueError (a bad entry name)."""
    if not _ENTRY_RE.fullmatch(entry):
        raise ValueError(f"entry {entry!r} is not a C++ function name")
    text = _source_bytes(source)
    check_source(text, name)
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    unit = (
        f'#include "rt/handlers/custom.h"\n#line 1 "{quoted}"\n'.encode()
        + text
        + _host_trampoline(entry).encode()
    )
    cxx = host_compiler()
    includes = (include_dir(), *include_dirs)
    flags = [*_HOST_FLAGS, *(f"-I{d}" for d in includes)]
    try:
        version = subprocess.run(
            [cxx, "--version"], capture_output=True, timeout=30, check=False
        ).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostCompilerUnavailable(f"{cxx} --version: {e}", file=cxx) from None
    key = hashlib.sha256()
    for part in (unit, "\0".join(flags).encode(), _abi_headers(), cxx.encode(), version.encode()):
        key.update(hashlib.sha256(part).digest())
    folder = cache or cache_dir()
    file_name = f"{key.hexdigest()[:32]}.so"
    for place in _places(folder):
        if _lookup_host(place / file_name):
            return HostHandler(place / file_name, True, "")

    def build(into: Path) -> HostHandler:
        output = _build_host_into(into, file_name, unit, cxx, flags, name, entry)
        return HostHandler(into / file_name, False, output)

    return _keep(folder, name, build)


def _lookup_host(library: Path) -> bool:
    """Whether the cached shared object at ``library`` checks and loads; when it is there but
    does not, the log says why (it is built again and replaced)."""
    data, why = _read_checked(library)
    if data is not None and (error := _loads(library)) is not None:
        why = f"does not load ({error})"
    if why is not None:
        log.warning("handler cache: %s %s: building it again", library, why)
    return why is None and data is not None


def _build_host_into(
    folder: Path, file_name: str, unit: bytes, cxx: str, flags: list[str], name: str, entry: str
) -> str:
    """The shared object compiled, loaded once (a library that does not load is the build's
    error, not the engine's later) and kept in ``folder`` as ``file_name`` with its check; the
    compiler's output. OSError: the folder takes no file."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        src = Path(tmp) / "handler.cpp"
        src.write_bytes(unit)
        out = Path(tmp) / "handler.so"
        try:
            run = subprocess.run(
                [cxx, *flags, str(src), "-o", str(out)],
                capture_output=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HostCompilerUnavailable(f"{cxx}: {e}", file=cxx) from None
        # Leniently: the compiler quotes the source, and a header beside it may be any bytes.
        output = (run.stdout + run.stderr).decode(errors="replace").strip()
        if run.returncode != 0:
            message, file, line = _host_one_line(output, name, entry)
            raise HandlerCompileError(message, output, file, line)
        if (error := _loads(out)) is not None:
            raise HandlerCompileError(
                f"{name}: compiles, but the shared object does not load: {error}",
                output,
                name,
                None,
            )
        library = folder / file_name
        # The library by a rename (a concurrent start finds a whole one or none), then its
        # check: an entry without one is not used.
        data = out.read_bytes()
        os.replace(out, library)
        _write_atomic(_check_path(library), _check_line(data).encode())
    return output


def build_host_handler_file(path: str | Path, *, entry: str = DEFAULT_ENTRY) -> HostHandler:
    """build_host_handler() on a file: errors name it as given; its folder is on the include
    path. A file that cannot be read raises OSError."""
    path = Path(path)
    return build_host_handler(
        path.read_bytes(), name=str(path), entry=entry, include_dirs=(path.resolve().parent,)
    )
