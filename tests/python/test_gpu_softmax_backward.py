"""softmax_backward and log_softmax_backward on the GPU routes (docs/kernels.md, "The softmax
route": its derivatives): one thread per row in double (render_softmax_backward.c), the CPU's sums
and bounds (ops/softmax_backward.c), the rows whose elements the bound leaves undecided rerun on
the host by the CPU's own row code.

- PoCL gives the CPU's bytes along the last, a middle and the first axis, in every dtype mix (y,
  g and the result each bf16 or float32), on masked rows (y = 0: the zero's sign decided by the
  bound), and on rows holding an infinite or NaN gradient (the host's);
- ordinary rows are decided on the device (no row rerun); a constant gradient row (the gradient
  of sum(softmax): every exact value 0) and a log_softmax row with z_i = 0 are flagged and rerun
  (TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS), with the CPU's bytes;
- every language renders them (MSL, OpenCL C, CUDA: one route, the same buffers); the MSL has no
  floating-point type, its doubles are kernels/gpu/softdouble.h's binary64 in integers;
- the CUDA emulator makes the same decisions (cuda tier), and a kernel that never flags a row is
  caught;
- the MSL emulator (slow tier) gives the CPU's bytes with exactly the CUDA emulator's flags (the
  same doubles, the same decisions), and catches a kernel that never flags a row and a software
  double whose rounding never rounds up.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from test_gpu_reduce import _cxx, _opencl_ready
from test_gpu_softmax import _device_rows

import tgrad
from tgrad import render as R
from emulators import msl  # noqa: F401,E402 (the MSL emulator fixture)

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")
OPS = ("softmax", "log_softmax")
B, F = "bfloat16", "float32"
MIXES = [(B, B, B), (F, F, F), (B, F, B), (F, B, F), (B, B, F)]
SHAPES = [((7, 33), -1), ((4, 10, 5), 1), ((3, 300), 1), ((2, 8), 0)]


def _inputs(op: str, shape: tuple[int, ...], seed: int, mask: bool = False,
            special: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if mask:
        x[..., ::3] = -np.inf  # softmax: y = 0 there; log_softmax: z = -inf (the host's)
    g = (rng.standard_normal(shape) * np.exp2(rng.integers(-10, 10, shape))).astype(np.float32)
    if special is not None:
        g.reshape(-1)[5] = special
    return x, g


def _boundary_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(op, x, g) with rows the bound leaves undecided: softmax with a constant gradient (d
    sum(softmax) / dx = 0 exactly: every element of its 4 rows), and log_softmax with z = -0 in
    one of its 3 rows (-5 exp(-200) rounds to it)."""
    x, _ = _inputs("softmax", (4, 50), 5)
    z = np.full((3, 6), -100.0, np.float32)
    z[1, 2] = 100.0
    return [("softmax", x, np.ones_like(x)),
            ("log_softmax", z, np.random.default_rng(6).standard_normal((3, 6)).astype(np.float32))]


def parts(op: str, x: np.ndarray, g: np.ndarray, axis: int, mix: tuple[str, str, str],
          device: str) -> tuple[tgrad.Tensor, tgrad.Tensor, tgrad.Tensor]:
    """(the backward node of op's output on x with gradient g, pending; that output, realized; g)."""
    ydt, gdt, odt = (getattr(tgrad, d) for d in mix)
    fwd = tgrad.softmax if op == "softmax" else tgrad.log_softmax
    y = fwd(tgrad.Tensor.from_numpy(x, dtype=ydt, device=device), axis).realize()
    gt = tgrad.Tensor.from_numpy(g, dtype=gdt, device=device)
    fn = tgrad.softmax_backward if op == "softmax" else tgrad.log_softmax_backward
    return fn(y, gt, axis, dtype=odt), y, gt


def backward(op: str, x: np.ndarray, g: np.ndarray, axis: int, mix: tuple[str, str, str], device: str) -> tgrad.Tensor:
    return parts(op, x, g, axis, mix, device)[0]


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _same(op: str, x: np.ndarray, g: np.ndarray, axis: int, mix: tuple[str, str, str]) -> None:
    want = _bytes(backward(op, x, g, axis, mix, "cpu"))
    got = backward(op, x, g, axis, mix, "opencl")
    assert got.device == "opencl"
    assert np.array_equal(_bytes(got), want), (op, x.shape, axis, mix)


# ---- PoCL ------------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_pocl_gives_the_cpu_bytes(op: str, mix: tuple[str, str, str]) -> None:
    for i, (shape, axis) in enumerate(SHAPES):
        for mask in (False, True):
            for special in (None, np.inf, np.nan):
                x, g = _inputs(op, shape, 10 * i + int(mask), mask, special)
                _same(op, x, g, axis, mix)


@needs_opencl
@pytest.mark.parametrize("op", OPS)
def test_ordinary_rows_are_decided_on_the_device(op: str) -> None:
    x, g = _inputs(op, (64, 100), 3)
    before = _device_rows()
    _same(op, x, g, -1, (F, F, B))
    assert _device_rows() == before


@needs_opencl
def test_rows_whose_values_are_near_zero_or_need_the_slow_path_are_rerun() -> None:
    for (op, x, g), rows in zip(_boundary_cases(), (4, 1)):
        before = _device_rows()
        _same(op, x, g, -1, (F, F, F))
        assert _device_rows() - before == rows, op


def _floating_words(source: str) -> list[str]:
    """The lines of source that name double or float outside a // comment."""
    return [line for line in source.splitlines() if re.search(r"\b(double|float)\b", line.split("//")[0])]


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_every_language_renders_the_backward_ops(lang: str) -> None:
    x, g = _inputs("softmax", (2, 8), 1)
    for op in OPS:
        k = R.render_tensor(backward(op, x, g, -1, (F, F, F), "cpu"), None, lang)
        assert k.route == "softmax" and list(k.buffer_names) == ["y", "g", "c", "f"]
        assert f"{op}_backward" in k.name
        if lang == "msl":  # no double in Metal: the software double's, in integers
            assert "typedef struct tg_f64" in k.source and _floating_words(k.source) == []


# ---- the CUDA emulator -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda() -> Any:
    from cuda_emu.driver import Emulator

    return Emulator()


def emulated(emu: Any, op: str, x: np.ndarray, g: np.ndarray, mix: tuple[str, str, str],
             mutate: tuple[str, str] | None = None,
             lang: str = "cuda") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the emulated bytes after the host's rerun of the flagged rows, the flags, the CPU's bytes),
    along the last axis, of the kernel in lang ("cuda" or "msl", emu that language's emulator). A
    rerun row takes the CPU's bytes: the host runs the CPU's row code."""
    t, y, gt = parts(op, x, g, -1, mix, "cpu")
    k = R.render_tensor(t, None, lang)
    source = k.source
    if mutate:
        assert mutate[0] in source, mutate[0]
        source = source.replace(mutate[0], mutate[1], 1)
    ins = [np.ascontiguousarray(v.numpy()).reshape(-1).view(np.uint16 if dt == B else np.uint32).copy()
           for v, dt in ((y, mix[0]), (gt, mix[1]))]
    wide = mix[2] == F
    out = np.full(k.buffer_elements[2], 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16)
    flags = np.full(k.buffer_elements[3], 7, np.uint32)
    bufs = [ins[0][: k.buffer_elements[0]], ins[1][: k.buffer_elements[1]], out, flags]
    bufs = emu.run(emu.compile(source), k.grid, k.threadgroup, bufs, [True, True, False, False])
    want = _bytes(t)
    row = x.shape[-1] * (4 if wide else 2)
    got, flags = bufs[2].view(np.uint8).copy().reshape(-1, row), bufs[3]
    cpu = want.reshape(-1, row)
    for r in np.flatnonzero(flags):
        got[r] = cpu[r]
    return got.reshape(-1), flags, want


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_generated_cuda_gives_the_cpu_bytes(cuda: Any, op: str, mix: tuple[str, str, str]) -> None:
    for mask, special in ((False, None), (True, None), (False, np.inf)):
        x, g = _inputs(op, (6, 37), 7, mask, special)
        got, flags, want = emulated(cuda, op, x, g, mix)
        assert set(np.unique(flags)) <= {0, 1}
        assert np.array_equal(got, want), (op, mix, mask, special)
        if special is not None:
            assert flags[0] == 1  # the infinite gradient's row: the host's
        elif not mask or op == "softmax":
            assert flags.sum() <= 1  # decided on the device (masked softmax rows too)


@needs_cxx
@pytest.mark.cuda
def test_a_kernel_that_never_flags_a_row_is_caught(cuda: Any) -> None:
    x, _ = _inputs("softmax", (4, 50), 5)
    got, _, want = emulated(cuda, "softmax", x, np.ones_like(x), (F, F, F), mutate=("f[r] = undecided;", "f[r] = 0u;"))
    assert not np.array_equal(got, want)


# ---- the MSL emulator ------------------------------------------------------------------------------


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m) for m in MIXES])
def test_generated_msl_gives_the_cpu_bytes_and_the_cuda_flags(msl: Any, cuda: Any, op: str,
                                                              mix: tuple[str, str, str]) -> None:
    """The software double computes the CUDA kernel's doubles: the same rows flagged, bit for bit
    the same decided rows (the CPU's), on the CUDA test's cases and the undecided rows."""
    cases = [(op, *_inputs(op, (6, 37), 7, mask, special))
             for mask, special in ((False, None), (True, None), (False, np.inf))]
    flagged = 0
    for case_op, x, g in cases + [c for c in _boundary_cases() if c[0] == op]:
        got, flags, want = emulated(msl, case_op, x, g, mix, lang="msl")
        assert np.array_equal(got, want), (case_op, mix, x.shape)
        assert np.array_equal(flags, emulated(cuda, case_op, x, g, mix)[1]), (case_op, mix, x.shape)
        flagged += int(flags.sum())
    assert flagged > 0  # the flags compared are not all 0


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_kernel_that_never_flags_a_row(msl: Any) -> None:
    op, x, g = _boundary_cases()[0]
    got, flags, want = emulated(msl, op, x, g, (F, F, F), lang="msl")
    assert flags.all() and np.array_equal(got, want)
    got, _, want = emulated(msl, op, x, g, (F, F, F), mutate=("f[r] = undecided;", "f[r] = 0u;"), lang="msl")
    assert not np.array_equal(got, want)


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_software_double_that_never_rounds_up(msl: Any) -> None:
    """softdouble.h's one rounding routine truncating: every result a double ulp low, and the
    float32 outputs (tg_f32_d, the same routine) truncated, off the CPU's bytes. (A tie or sticky
    bit lost moves a double by an ulp the row's bound absorbs: tests/c/test_gpu_softdouble.c
    catches those bit for bit.)"""
    x, g = _inputs("softmax", (6, 37), 7)
    got, _, want = emulated(msl, "softmax", x, g, (F, F, F), lang="msl")
    assert np.array_equal(got, want)
    got, _, want = emulated(msl, "softmax", x, g, (F, F, F), lang="msl",
                            mutate=("q = q + (tg_u64)1u;", "q = q + (tg_u64)0u;"))
    assert not np.array_equal(got, want)
