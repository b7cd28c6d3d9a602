"""The MSL emulator as tgrad's Metal device, for tests on a machine without Metal.

`use_as_metal(emu)` hands libtgrad a stand-in driver (tgrad_debug_use_backend) whose memory is host
memory, whose compile is the emulator's (the generated MSL translated and built as C++) and whose
launch runs the kernel on the emulator. Everything else is libtgrad's own device path, as on a Mac:
route choice, the rendered kernels, the program cache, the host's rerun of the rows a kernel flags.
So `tgrad.models.from_pretrained(path, device="metal")` runs the whole model through the generated
MSL. It must be called before anything uses the Metal device in the process (a fresh process:
tests/python/test_metal_emulated.py runs one).

The buffers keep no state between launches but their bytes: each launch copies them into the
emulator's guarded memory and back, as a unified-memory GPU sees the same bytes.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .driver import Emulator, EmuError


class EmulatedMetal:
    """The stand-in's calls and the memory and programs they hold."""

    def __init__(self, emu: Emulator, ffi: Any, lib: Any) -> None:
        self.emu, self.ffi, self.lib = emu, ffi, lib
        self.memory: dict[int, np.ndarray] = {}  # address -> the buffer's bytes
        self.programs: dict[int, Any] = {}       # handle -> compiled kernel
        self.launches = 0
        self.compiles = 0
        self.errors: list[str] = []
        fail = int(lib.TGRAD_ERR_INTERNAL)
        cb = ffi.callback
        self._calls = dict(
            alloc=cb("tgrad_status(size_t, void **)", self._alloc, error=fail),
            free=cb("void(void *)", self._free),
            copy_in=cb("tgrad_status(void *, size_t, const void *, size_t)", self._copy_in, error=fail),
            copy_out=cb("tgrad_status(const void *, size_t, void *, size_t)", self._copy_out, error=fail),
            compile=cb("tgrad_status(const char *, size_t, const char *, void **)", self._compile, error=fail),
            release_program=cb("void(void *)", self._release),
            launch=cb("tgrad_status(void *, const struct tgrad_launch *, void *const *, uint32_t)", self._launch,
                      error=fail),
            has_matrix_route=cb("int(void)", lambda: 1),  # an Apple7 GPU's simdgroup matrices
        )
        self.table = ffi.new("tgrad_debug_backend *", self._calls)

    def _alloc(self, size: int, mem: Any) -> int:
        buf = np.zeros(max(1, size), np.uint8)
        address = buf.ctypes.data
        self.memory[address] = buf
        mem[0] = self.ffi.cast("void *", address)
        return 0

    def _free(self, mem: Any) -> None:
        self.memory.pop(int(self.ffi.cast("uintptr_t", mem)), None)

    def _buffer(self, mem: Any) -> np.ndarray:
        return self.memory[int(self.ffi.cast("uintptr_t", mem))]

    def _copy_in(self, mem: Any, offset: int, src: Any, size: int) -> int:
        buf = self._buffer(mem)
        if offset + size > buf.nbytes:
            return int(self.lib.TGRAD_ERR_INTERNAL)
        ctypes.memmove(buf.ctypes.data + offset, int(self.ffi.cast("uintptr_t", src)), size)
        return 0

    def _copy_out(self, mem: Any, offset: int, dst: Any, size: int) -> int:
        buf = self._buffer(mem)
        if offset + size > buf.nbytes:
            return int(self.lib.TGRAD_ERR_INTERNAL)
        ctypes.memmove(int(self.ffi.cast("uintptr_t", dst)), buf.ctypes.data + offset, size)
        return 0

    def _compile(self, source: Any, length: int, name: Any, program: Any) -> int:
        text = self.ffi.unpack(source, length).decode()
        kernel = self.emu.compile(text)
        handle = len(self.programs) + 1
        self.programs[handle] = kernel
        program[0] = self.ffi.cast("void *", handle)
        self.compiles += 1
        return 0

    def _release(self, program: Any) -> None:
        self.programs.pop(int(self.ffi.cast("uintptr_t", program)), None)

    def _launch(self, program: Any, launch: Any, buffers: Any, count: int) -> int:
        kernel = self.programs[int(self.ffi.cast("uintptr_t", program))]
        bufs = [self._buffer(buffers[i]) for i in range(count)]
        try:
            out = self.emu.run(kernel, tuple(launch.grid), tuple(launch.threadgroup), bufs, [False] * count)
        except EmuError as exc:  # a race, a fault, a check: the launch fails with the emulator's words
            self.errors.append(str(exc))
            return int(self.lib.TGRAD_ERR_INTERNAL)
        for buf, new in zip(bufs, out):
            np.copyto(buf, np.asarray(new).reshape(-1).view(np.uint8))
        self.launches += 1
        return 0


def use_as_metal(emu: Emulator | None = None) -> EmulatedMetal:
    """Make the MSL emulator this process's Metal device (before any use of it); keep the result
    alive as long as the device is used."""
    from tgrad._ffi import ffi, lib

    device = EmulatedMetal(emu or Emulator(), ffi, lib)
    status = lib.tgrad_debug_use_backend(lib.TGRAD_DEVICE_METAL, device.table)
    if status != 0:
        raise RuntimeError(ffi.string(lib.tgrad_last_error()).decode())
    return device
