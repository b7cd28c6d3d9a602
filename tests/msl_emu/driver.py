"""Compile generated MSL as C++17 against the emulator and run it on the CPU (DESIGN.md §5).

``Emulator()`` builds the runtime (runtime.cpp) once and loads it; ``compile(source)`` turns one
MSL kernel into a shared object and ``run(kernel, grid, threadgroup, buffers)`` launches it.
Compiled objects are cached by a hash of everything that shapes them (the translated source, the
emulator's own files, the compiler and its flags) in ``$MSL_EMU_CACHE`` or a per-user temporary
directory, so a second run of the tier compiles nothing.

What the driver does to the source (the rest is the header's work, see metal_emu.h):
- reads the one ``kernel void name(...)`` signature: every parameter carries ``[[buffer(n)]]`` or
  a thread-position builtin attribute; an entry stub passes buffers and builtins in that order;
- rewrites ``threadgroup T name[N]...;`` at kernel scope to ``MSL_EMU_THREADGROUP(T, name, [N]...)``;
- puts ``#line 1 "<name>.metal"`` first, so barrier and collective sites, and compiler errors,
  carry the line numbers of the MSL text.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ORDERS = {"forward": 0, "reverse": 1, "shuffle": 2}
# "truncate" models NVIDIA's tensor cores (tests/cuda_emu/cuda_emu.h); the MSL header refuses it.
MMA_ORDERS = {"fma": 0, "fma_reverse": 1, "exact": 2, "truncate": 3}

# -Werror: the renderer's kernels must compile without a warning under -Wall -Wextra (a buffer
# a kernel does not read, as a and b when K = 0, is fine). -fstack-clash-protection probes every
# page of a large frame, so a thread overflowing its fiber stack hits the guard page below it
# instead of the next fiber's stack.
# The checks of the threads model (metal_emu.h) need three more: frame pointers and no sibling
# calls (a barrier's or collective's call site is walked up the kernel's frames); -fsanitize=thread
# at compile time only (every load and store calls a __tsan_* hook, which runtime.cpp defines: no
# TSan runtime is linked, so the object is linked in a second step without the flag); and UBSan's
# signed-overflow check as a trap (SIGILL, reported by the runtime: an index past 2^31 computed
# in int), since a UBSan runtime's report-and-abort would take the test process down with it.
KERNEL_FLAGS = ["-std=c++17", "-O1", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
                "-fstack-clash-protection", "-Wall", "-Wextra", "-Werror", "-Wno-attributes",
                "-Wno-unused-parameter", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls",
                "-fsanitize=thread", "-fsanitize=signed-integer-overflow",
                "-fno-sanitize-recover=signed-integer-overflow", "-fsanitize-undefined-trap-on-error"]
GCC_KERNEL_FLAGS = ["--param=tsan-instrument-func-entry-exit=0"]  # the hooks would be no-ops anyway
LINK_FLAGS = ["-shared", "-fPIC"]
RUNTIME_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-Wall", "-Wextra",
                 "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0"]

BUILTINS = {
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
    "thread_index_in_threadgroup", "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup", "simdgroups_per_threadgroup",
}


class CompileError(RuntimeError):
    """The C++ compiler refused a translated kernel (the message holds its diagnostics)."""


class SubsetError(ValueError):
    """The source is outside the MSL subset the emulator accepts (docs/msl-subset.md)."""


class EmuError(RuntimeError):
    """A launch failed a check: divergent barrier, deadlock, non-uniform collective argument,
    out-of-bounds access, write to an input, stack overflow."""


def find_cxx() -> str | None:
    for candidate in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    return None


@dataclass(frozen=True)
class Param:
    type: str
    name: str
    attr: str
    index: int | None


_SIGNATURE = re.compile(r"\bkernel\s+void\s+(\w+)\s*\((.*?)\)\s*\{", re.S)
_PARAM = re.compile(r"^(.*?)\b(\w+)\s*\[\[\s*(\w+)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]$", re.S)
_THREADGROUP = re.compile(r"^(\s*)threadgroup\s+(\w+)\s+(\w+)\s*((?:\[\s*\d+\s*\])+)\s*;", re.M)


def parse_signature(source: str) -> tuple[str, list[Param]]:
    found = _SIGNATURE.findall(source)
    if len(found) != 1:
        raise SubsetError(f"expected exactly one `kernel void name(...)`, found {len(found)}")
    name, params_text = found[0]
    params = []
    for raw in params_text.split(","):
        text = " ".join(raw.split())
        m = _PARAM.match(text)
        if not m:
            raise SubsetError(f"kernel parameter {text!r} has no [[buffer(n)]] or builtin attribute")
        type_, pname, attr, index = m.group(1).strip(), m.group(2), m.group(3), m.group(4)
        if attr == "buffer":
            if index is None:
                raise SubsetError(f"parameter {pname}: [[buffer]] needs an index")
        elif attr not in BUILTINS:
            raise SubsetError(f"parameter {pname}: attribute [[{attr}]] is not supported")
        params.append(Param(type_, pname, attr, int(index) if index is not None else None))
    return name, params


def translate(source: str) -> tuple[str, str]:
    """(C++ translation unit, kernel name)."""
    name, params = parse_signature(source)
    body = _THREADGROUP.sub(lambda m: f"{m.group(1)}MSL_EMU_THREADGROUP({m.group(2)}, {m.group(3)}, {m.group(4)});",
                            source)
    args = []
    for p in params:
        if p.attr == "buffer":
            if p.type.endswith("&"):
                args.append(f"*({p.type[:-1].strip()} *)msl_emu_buffers[{p.index}]")
            else:
                args.append(f"({p.type})msl_emu_buffers[{p.index}]")
        else:
            args.append(f"msl_emu_t.{p.attr}")
    stub = (
        '#line 1 "msl_emu_entry"\n'
        'extern "C" void msl_emu_entry(void *const *msl_emu_buffers) {\n'
        "    msl_emu_set_entry_frame(__builtin_frame_address(0));\n"
        "    const ::msl_emu::thread_ids &msl_emu_t = *msl_emu_ids();\n"
        f"    {name}({', '.join(args)});\n"
        "}\n"
    )
    return f'#line 1 "{name}.metal"\n{body}\n{stub}', name


def _cache_dir() -> Path:
    env = os.environ.get("MSL_EMU_CACHE")
    path = Path(env) if env else Path(tempfile.gettempdir()) / f"msl-emu-cache-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Kernel:
    name: str
    path: Path
    entry: ctypes._CFuncPtr  # type: ignore[name-defined]


class Emulator:
    """The MSL emulator. A subclass for another kernel language (tests/cuda_emu) overrides
    HEADER_DIR, HEADERS and translate(); the runtime and its checks are shared: its object is
    keyed by the runtime's own files only, so every emulator in a process loads the same one."""

    HEADER_DIR = HERE  # the language's headers, first on the include path
    HEADERS = ("metal_emu.h", "metal_stdlib")
    RUNTIME_FILES = ("emu_runtime.h", "runtime.cpp")

    def translate(self, source: str) -> tuple[str, str]:
        return translate(source)

    def __init__(self, cache_dir: Path | None = None, cxx: str | None = None) -> None:
        self.cxx = cxx or find_cxx()
        if not self.cxx:
            raise RuntimeError("no C++ compiler (g++, c++, clang++): the MSL emulator needs one")
        self.cache = cache_dir or _cache_dir()
        version = subprocess.run([*self.cxx.split(), "--version"], capture_output=True, text=True,
                                 check=False).stdout
        runtime_text = "".join((HERE / f).read_text() for f in self.RUNTIME_FILES)
        own = runtime_text + "".join((self.HEADER_DIR / f).read_text() for f in self.HEADERS)
        self._salt = hashlib.sha256((version + runtime_text + self.cxx).encode()).hexdigest()
        self._loaded: dict[Path, Kernel] = {}
        self.compiled = 0  # objects actually compiled (not found in the cache) by this instance
        self.kernel_flags = KERNEL_FLAGS + (GCC_KERNEL_FLAGS if "Free Software Foundation" in version else [])
        runtime = self._build(runtime_text, "runtime", HERE / "runtime.cpp", RUNTIME_FLAGS)
        self._salt = hashlib.sha256((self._salt + own).encode()).hexdigest()  # kernels: the headers too
        self.runtime = ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
        rt = self.runtime
        rt.msl_emu_alloc.restype = ctypes.c_void_p
        rt.msl_emu_alloc.argtypes = [ctypes.c_size_t]
        rt.msl_emu_protect_readonly.argtypes = [ctypes.c_void_p]
        rt.msl_emu_free.argtypes = [ctypes.c_void_p]
        rt.msl_emu_launch.restype = ctypes.c_int
        rt.msl_emu_launch.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
            ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
        ]

    def _build(self, text: str, stem: str, source: Path, flags: list[str], link: list[str] | None = None) -> Path:
        """Compile `source` into a shared object; with `link`, compile to an object first and link
        it with those flags alone (so compile-time-only flags such as -fsanitize=thread add no
        runtime library)."""
        key = hashlib.sha256((self._salt + " ".join(flags) + " ".join(link or []) + text).encode()).hexdigest()[:24]
        out = self.cache / f"{stem}-{key}.so"
        if out.exists():
            return out
        tmp = out.with_suffix(f".{os.getpid()}.{id(text)}.tmp")
        obj = out.with_suffix(f".{os.getpid()}.{id(text)}.o")
        include = ["-I", str(self.HEADER_DIR), "-I", str(HERE)]
        steps = [[*self.cxx.split(), *flags, *include, "-o", str(tmp), str(source)]]
        if link is not None:
            steps = [[*self.cxx.split(), *flags, "-c", *include, "-o", str(obj), str(source)],
                     [*self.cxx.split(), *link, "-o", str(tmp), str(obj)]]
        try:
            for cmd in steps:
                result = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if result.returncode != 0:
                    tmp.unlink(missing_ok=True)
                    raise CompileError(f"{' '.join(cmd)}\n{result.stderr}")
        finally:
            obj.unlink(missing_ok=True)
        os.replace(tmp, out)
        self.compiled += 1
        return out

    def compile(self, source: str) -> Kernel:
        tu, name = self.translate(source)
        key = hashlib.sha256((self._salt + tu).encode()).hexdigest()[:24]
        cpp = self.cache / f"{name}-{key}.cpp"
        if not cpp.exists():
            tmp = cpp.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(tu)
            os.replace(tmp, cpp)
        path = self._build(tu, name, cpp, self.kernel_flags, LINK_FLAGS)
        if path not in self._loaded:
            lib = ctypes.CDLL(str(path))
            self._loaded[path] = Kernel(name, path, lib.msl_emu_entry)
        return self._loaded[path]

    def compile_many(self, sources: Sequence[str], jobs: int | None = None) -> list[Kernel]:
        """Compile in parallel (cached ones cost nothing); results in the order of `sources`."""
        jobs = jobs or max(1, len(os.sched_getaffinity(0)))
        unique = list(dict.fromkeys(sources))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            built = dict(zip(unique, pool.map(self.compile, unique)))
        return [built[s] for s in sources]

    def run(self, kernel: Kernel, grid: Sequence[int], threadgroup: Sequence[int],
            buffers: Sequence[np.ndarray], readonly: Sequence[bool], *, order: str = "forward",
            seed: int = 0, workers: int | None = None, ftz: bool = False, mma: str = "fma") -> list[np.ndarray]:
        """Launch `kernel`; returns every buffer's contents afterwards (copies).

        Each buffer is placed so that it ends at a guard page; read-only ones are mapped
        read-only. Raises EmuError when a check fails.
        """
        rt = self.runtime
        ptrs: list[int] = []
        try:
            for arr, ro in zip(buffers, readonly):
                arr = np.ascontiguousarray(arr)
                ptr = rt.msl_emu_alloc(arr.nbytes)
                if not ptr:
                    raise MemoryError("msl_emu_alloc failed")
                ptrs.append(ptr)
                if arr.nbytes:
                    ctypes.memmove(ptr, arr.ctypes.data, arr.nbytes)
                if ro and rt.msl_emu_protect_readonly(ptr) != 0:
                    raise RuntimeError("msl_emu_protect_readonly failed")
            bufs = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
            g = (ctypes.c_uint32 * 3)(*grid)
            t = (ctypes.c_uint32 * 3)(*threadgroup)
            err = ctypes.create_string_buffer(2048)
            nworkers = workers if workers is not None else max(1, len(os.sched_getaffinity(0)))
            rc = rt.msl_emu_launch(ctypes.cast(kernel.entry, ctypes.c_void_p), g, t, bufs, ORDERS[order],
                                   seed, nworkers, int(ftz), MMA_ORDERS[mma], err, len(err))
            if rc != 0:
                raise EmuError(f"{kernel.name}: {err.value.decode(errors='replace')}")
            out = []
            for arr, ptr in zip(buffers, ptrs):
                raw = ctypes.string_at(ptr, arr.nbytes) if arr.nbytes else b""
                out.append(np.frombuffer(raw, dtype=arr.dtype).copy().reshape(arr.shape))
            return out
        finally:
            for ptr in ptrs:
                rt.msl_emu_free(ptr)
