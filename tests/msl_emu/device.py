"""The MSL emulator as tgrad's Metal device, and the CUDA emulator as its CUDA device, for tests on a
machine without either.

`use_as_metal(emu)` hands libtgrad a stand-in driver (tgrad_debug_use_backend) whose memory is host
memory, whose compile is the emulator's (the generated MSL translated and built as C++) and whose
launch runs the kernel on the emulator. Everything else is libtgrad's own device path, as on a Mac:
route choice, the rendered kernels, the program cache, the host's rerun of the rows a kernel flags.
So `tgrad.models.from_pretrained(path, device="metal")` runs the whole model through the generated
MSL. `use_as_cuda()` does the same with tests/cuda_emu for device="cuda" (warp-level mma included,
as an sm_80 GPU has). Either must be called before anything uses that device in the process (a
fresh process: tests/python/test_emulated_devices.py runs one).

The buffers keep no state between launches but their bytes: each launch copies them into the
emulator's guarded memory and back, as a unified-memory GPU sees the same bytes.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .driver import Emulator, EmuError


class EmulatedDevice:
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
            has_matrix_route=cb("int(void)", lambda: 1),  # an Apple7 GPU's simdgroup matrices, sm_80's mma
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


def _use(device: str, emu: Emulator) -> EmulatedDevice:
    from tgrad._ffi import ffi, lib

    stand_in = EmulatedDevice(emu, ffi, lib)
    index = ffi.new("int32_t *")
    assert lib.tgrad_device_by_name(device.encode(), index) == 0
    status = lib.tgrad_debug_use_backend(index[0], stand_in.table)
    if status != 0:
        raise RuntimeError(ffi.string(lib.tgrad_last_error()).decode())
    return stand_in


def use_as_metal(emu: Emulator | None = None) -> EmulatedDevice:
    """Make the MSL emulator this process's Metal device (before any use of it); keep the result
    alive as long as the device is used."""
    return _use("metal", emu or Emulator())


def use_as_cuda() -> EmulatedDevice:
    """Make the CUDA emulator this process's CUDA device (before any use of it), as use_as_metal."""
    from cuda_emu.driver import Emulator as CudaEmulator

    return _use("cuda", CudaEmulator())
