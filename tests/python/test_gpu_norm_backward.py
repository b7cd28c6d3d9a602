"""rms_norm_backward and layer_norm_backward on the GPU routes (docs/kernels.md, "The norm route":
its derivatives): one thread per row in double (render_norm_backward.c), the CPU's sums, constants
and bounds (ops/norm_backward.c), the rows the bound leaves open rerun on the host by the CPU's own
row code.

- PoCL gives the CPU's bytes over one and two trailing axes, with and without a weight, in every
  dtype mix (x, g, the weight and the result each bf16 or float32), on rows holding an infinite
  gradient and on constant rows (layer_norm: zero variance; the host's);
- ordinary rows are decided on the device (no row rerun); the special and constant ones are rerun
  (TGRAD_DEBUG_NORM_DEVICE_ROWS);
- every language renders them (MSL, OpenCL C, CUDA: one route, the same buffers); the MSL has no
  floating-point type, its doubles are kernels/gpu/softdouble.h's binary64 in integers;
- the CUDA emulator makes the same decisions (cuda tier), and a kernel that never flags a row is
  caught;
- the MSL emulator (slow tier) gives the CPU's bytes with exactly the CUDA emulator's flags (the
  same doubles, the same decisions), and catches a kernel that never flags a row and a software
  double with a wrong square root.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from test_gpu_reduce import _cxx, _opencl_ready

import tgrad
from tgrad import render as R
from tgrad._ffi import ffi, lib
from emulators import msl  # noqa: F401,E402 (the MSL emulator fixture)

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")
OPS = ("rms", "layer")
B, F = "bfloat16", "float32"
MIXES = [(B, B, B, B), (F, F, F, F), (B, F, B, F), (F, B, F, B)]
SHAPES = [((5, 64), 1), ((3, 4, 10), 2), ((2, 300), 1), ((4, 3), 1)]


def _device_rows() -> int:
    c = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_NORM_COUNT))
    assert lib.tgrad_debug_norm_slow_path(c, int(lib.TGRAD_DEBUG_NORM_COUNT)) == 0
    return int(c[int(lib.TGRAD_DEBUG_NORM_DEVICE_ROWS)])


def _inputs(shape: tuple[int, ...], naxes: int, seed: int, special: float | None = None,
            constant: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    if constant:
        x[...] = 1.5
    g = rng.standard_normal(shape).astype(np.float32)
    if special is not None:
        g.reshape(-1)[3] = special
    return x, g, rng.standard_normal(shape[-naxes:]).astype(np.float32)


def parts(op: str, x: np.ndarray, g: np.ndarray, w: np.ndarray | None, naxes: int, mix: tuple[str, str, str, str],
          device: str) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    """(the pending backward node, its inputs x, g[, w])."""
    xdt, gdt, wdt, odt = (getattr(tgrad, d) for d in mix)
    ins = [tgrad.Tensor.from_numpy(x, dtype=xdt, device=device), tgrad.Tensor.from_numpy(g, dtype=gdt, device=device)]
    if w is not None:
        ins.append(tgrad.Tensor.from_numpy(w, dtype=wdt, device=device))
    fn = tgrad.rms_norm_backward if op == "rms" else tgrad.layer_norm_backward
    return fn(ins[0], ins[1], x.shape[-naxes:], ins[2] if w is not None else None, eps=1e-5, dtype=odt), ins


def backward(op: str, x: np.ndarray, g: np.ndarray, w: np.ndarray | None, naxes: int,
             mix: tuple[str, str, str, str], device: str) -> tgrad.Tensor:
    return parts(op, x, g, w, naxes, mix, device)[0]


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _same(op: str, x: np.ndarray, g: np.ndarray, w: np.ndarray | None, naxes: int,
          mix: tuple[str, str, str, str]) -> None:
    want = _bytes(backward(op, x, g, w, naxes, mix, "cpu"))
    got = backward(op, x, g, w, naxes, mix, "opencl")
    assert got.device == "opencl"
    assert np.array_equal(_bytes(got), want), (op, x.shape, naxes, mix, w is not None)


# ---- PoCL ------------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_pocl_gives_the_cpu_bytes(op: str, mix: tuple[str, str, str, str]) -> None:
    for i, (shape, naxes) in enumerate(SHAPES):
        for weight in (False, True):
            for special, constant in ((None, False), (np.inf, False), (None, True)):
                x, g, w = _inputs(shape, naxes, i, special, constant)
                _same(op, x, g, w if weight else None, naxes, mix)


@needs_opencl
@pytest.mark.parametrize("op", OPS)
def test_ordinary_rows_are_decided_on_the_device_and_special_ones_rerun(op: str) -> None:
    x, g, w = _inputs((64, 100), 1, 3)
    before = _device_rows()
    _same(op, x, g, w, 1, (B, B, B, B))
    assert _device_rows() == before
    x, g, w = _inputs((4, 100), 1, 3, special=np.nan)
    before = _device_rows()
    _same(op, x, g, w, 1, (F, F, F, F))
    assert _device_rows() - before == 1  # the NaN's row, the host's


def _floating_words(source: str) -> list[str]:
    """The lines of source that name double or float outside a // comment."""
    return [line for line in source.splitlines() if re.search(r"\b(double|float)\b", line.split("//")[0])]


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_every_language_renders_the_backward_ops(lang: str) -> None:
    x, g, w = _inputs((2, 8), 1, 1)
    for op in OPS:
        k = R.render_tensor(backward(op, x, g, w, 1, (F, F, F, F), "cpu"), None, lang)
        assert k.route == "norm" and list(k.buffer_names) == ["x", "g", "w", "c", "f"]
        assert f"norm_{op}_backward" in k.name
        if lang == "msl":  # no double in Metal: the software double's, in integers
            assert "typedef struct tg_f64" in k.source and _floating_words(k.source) == []


# ---- the CUDA emulator -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda() -> Any:
    from cuda_emu.driver import Emulator

    return Emulator()


def emulated(emu: Any, op: str, x: np.ndarray, g: np.ndarray, w: np.ndarray, mix: tuple[str, str, str, str],
             mutate: tuple[str, str] | None = None,
             lang: str = "cuda") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the emulated bytes after the host's rerun of the flagged rows, the flags, the CPU's bytes),
    over the last axis, of the kernel in lang ("cuda" or "msl", emu that language's emulator). A
    rerun row takes the CPU's bytes: the host runs the CPU's row code."""
    t, ins = parts(op, x, g, w, 1, mix, "cpu")
    k = R.render_tensor(t, None, lang)
    source = k.source
    if mutate:
        assert mutate[0] in source, mutate[0]
        source = source.replace(mutate[0], mutate[1], 1)
    bufs = [np.ascontiguousarray(v.numpy()).reshape(-1).view(np.uint16 if dt == B else np.uint32).copy()[:n]
            for v, dt, n in zip(ins, mix, k.buffer_elements)]
    wide = mix[3] == F
    at = len(ins)
    bufs.append(np.full(k.buffer_elements[at], 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16))
    bufs.append(np.full(k.buffer_elements[at + 1], 7, np.uint32))
    bufs = emu.run(emu.compile(source), k.grid, k.threadgroup, bufs, [True] * at + [False, False])
    want = _bytes(t)
    row = x.shape[-1] * (4 if wide else 2)
    got, flags = bufs[at].view(np.uint8).copy().reshape(-1, row), bufs[at + 1]
    cpu = want.reshape(-1, row)
    for r in np.flatnonzero(flags):
        got[r] = cpu[r]
    return got.reshape(-1), flags, want


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_generated_cuda_gives_the_cpu_bytes(cuda: Any, op: str, mix: tuple[str, str, str, str]) -> None:
    for special, constant in ((None, False), (np.inf, False), (None, True)):
        x, g, w = _inputs((6, 37), 1, 7, special, constant)
        got, flags, want = emulated(cuda, op, x, g, w, mix)
        assert set(np.unique(flags)) <= {0, 1}
        assert np.array_equal(got, want), (op, mix, special, constant)
        if special is not None:
            assert flags[0] == 1  # the infinite gradient's row: the host's
        elif not constant:
            assert flags.sum() == 0


@needs_cxx
@pytest.mark.cuda
def test_a_kernel_that_never_flags_a_row_is_caught(cuda: Any) -> None:
    x, g, w = _inputs((4, 50), 1, 5, special=np.inf)
    got, _, want = emulated(cuda, "rms", x, g, w, (F, F, F, F), mutate=("        f[r] = 1u;\n", "        f[r] = 0u;\n"))
    assert not np.array_equal(got, want)


# ---- the MSL emulator ------------------------------------------------------------------------------


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_generated_msl_gives_the_cpu_bytes_and_the_cuda_flags(msl: Any, cuda: Any, op: str,
                                                              mix: tuple[str, str, str, str]) -> None:
    """The software double computes the CUDA kernel's doubles: the same rows flagged (an infinite
    gradient's, a constant row's), bit for bit the same decided rows (the CPU's)."""
    flagged = 0
    for special, constant in ((None, False), (np.inf, False), (None, True)):
        x, g, w = _inputs((6, 37), 1, 7, special, constant)
        got, flags, want = emulated(msl, op, x, g, w, mix, lang="msl")
        assert np.array_equal(got, want), (op, mix, special, constant)
        assert np.array_equal(flags, emulated(cuda, op, x, g, w, mix)[1]), (op, mix, special, constant)
        flagged += int(flags.sum())
    assert flagged > 0  # the flags compared are not all 0


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_kernel_that_never_flags_a_row(msl: Any) -> None:
    x, g, w = _inputs((4, 50), 1, 5, special=np.inf)
    got, flags, want = emulated(msl, "rms", x, g, w, (F, F, F, F), lang="msl")
    assert flags[0] == 1 and np.array_equal(got, want)
    got, _, want = emulated(msl, "rms", x, g, w, (F, F, F, F), mutate=("        f[r] = 1u;\n", "        f[r] = 0u;\n"),
                            lang="msl")
    assert not np.array_equal(got, want)


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_software_double_with_a_wrong_square_root(msl: Any) -> None:
    """softdouble.h's tg_dsqrt without its odd exponent made even: sqrt(a) off by about sqrt(2)
    for half the binades, and rinv = 1 / sqrt(d / n) with it, off the CPU's bytes. (A lost sticky
    bit in the square root or the division, or a tie rounded away, moves a double by an ulp the
    row's bound absorbs: tests/c/test_gpu_softdouble.c catches those bit for bit.)"""
    x, g, w = _inputs((6, 37), 1, 7)
    got, _, want = emulated(msl, "rms", x, g, w, (F, F, F, F), lang="msl")
    assert np.array_equal(got, want)
    got, _, want = emulated(msl, "rms", x, g, w, (F, F, F, F), lang="msl",
                            mutate=("if ((n.x & 1) != 0) {", "if (false) {"))
    assert not np.array_equal(got, want)
