"""The norm kind on the GPU routes (route norm, gen/render_norm.c; docs/kernels.md, "The norm
route"): rms_norm and layer_norm rendered in OpenCL C and CUDA, one thread per row in double, the
CPU's loops and bounds (kernels/gpu/norm.h); a row with an element the bound leaves undecided (or
a row outside the bound's domain: a NaN, an infinity, a zero variance) is flagged by the kernel and
rerun on the host by the CPU's own row code.

Promises checked here:
- PoCL gives the CPU's bytes on the norm tests' rows (random, huge spread, overflow, equal values,
  one element, subnormals, zeros, midpoints, NaN, inf), with and without weight and bias, several
  eps, over one and two axes, through views;
- the midpoint rows are flagged and rerun (TGRAD_DEBUG_NORM_DEVICE_ROWS), random rows are not;
- the generated CUDA runs on the CUDA emulator with the CPU's bytes and the same flags;
- the generated MSL (kernels/gpu/softdouble.h's binary64 in integers: MSL has no double) runs on
  the MSL emulator with the CPU's bytes and exactly the CUDA kernel's flags, its text without a
  floating-point type;
- planted defects are caught: a flag never set, a dropped last term of a sum, a dropped output.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import ffi, lib
from emulators import msl  # noqa: F401,E402 (the MSL emulator fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_norms import _rows  # noqa: E402  (the CPU tests' rows)

CONFIGS = [("rms_norm", 0.0, False, False), ("rms_norm", 1e-6, True, False), ("rms_norm", 2.0 ** -7, False, False),
           ("layer_norm", 0.0, False, False), ("layer_norm", 1e-5, True, True), ("layer_norm", 1e-5, False, True)]


def _opencl_ready() -> bool:
    try:
        tgrad.Tensor.from_numpy(np.zeros(1, np.float32), device="opencl").release()
        return True
    except errors.BackendUnavailableError:
        return False


needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")


def _device_rows() -> int:
    c = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_NORM_COUNT))
    assert lib.tgrad_debug_norm_slow_path(c, int(lib.TGRAD_DEBUG_NORM_COUNT)) == 0
    return c[int(lib.TGRAD_DEBUG_NORM_DEVICE_ROWS)]


def _operands(name: str, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The CPU tests' weight and bias for a row (bf16 bits)."""
    n = x.shape[-1]
    w = np.full(n, 255 / 128) if name == "midpoint" else rng.standard_normal(n) * 2
    b = np.full(n, 2.0 ** -8) if name == "pm_one" else rng.standard_normal(n)
    return w.astype(np.float32), b.astype(np.float32)


def _make(op: str, x: tgrad.Tensor, shape: Any, w: tgrad.Tensor | None, b: tgrad.Tensor | None,
          eps: float) -> tgrad.Tensor:
    return tgrad.rms_norm(x, shape, w, eps=eps) if op == "rms_norm" else tgrad.layer_norm(x, shape, w, b, eps=eps)


def _run(device: str, op: str, x: np.ndarray, shape: Any, w: np.ndarray | None, b: np.ndarray | None, eps: float,
         view: Any = lambda t: t) -> np.ndarray:
    def T(a: np.ndarray) -> tgrad.Tensor:
        return tgrad.Tensor.from_numpy(np.asarray(a, np.float32), dtype="bfloat16", device=device)

    xt = view(T(x))
    y = _make(op, xt, shape, None if w is None else T(w), None if b is None else T(b), eps)
    assert y.device == device
    return np.ascontiguousarray(y.numpy()).view(np.uint16).copy()


def _same(op: str, x: np.ndarray, shape: Any, w: Any, b: Any, eps: float, view: Any = lambda t: t,
          device: str = "opencl") -> None:
    want = _run("cpu", op, x, shape, w, b, eps, view)
    got = _run(device, op, x, shape, w, b, eps, view)
    assert np.array_equal(got, want), (op, x.shape, eps, [hex(v) for v in got.ravel()[:8]],
                                       [hex(v) for v in want.ravel()[:8]])


def _bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)


# ---- PoCL (core) ----------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("op,eps,weighted,biased", CONFIGS)
def test_pocl_gives_the_cpu_bytes_on_the_norm_rows(op: str, eps: float, weighted: bool, biased: bool) -> None:
    rng = np.random.default_rng(1)
    for name, bits in _rows(rng).items():
        x = _bits_to_f32(bits)[None, :].repeat(3, 0)  # three rows of it
        w, b = _operands(name, x, rng)
        _same(op, x, x.shape[-1], w if weighted else None, b if biased else None, eps)


@needs_opencl
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_pocl_gives_the_cpu_bytes_over_two_axes_and_through_views(op: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 40)).astype(np.float32) * 4
    w = rng.standard_normal((3, 40)).astype(np.float32)
    b = rng.standard_normal((3, 40)).astype(np.float32)
    _same(op, x, (3, 40), w, b if op == "layer_norm" else None, 1e-6)
    _same(op, x, 40, w[0], None, 1e-5, view=lambda t: t.transpose(0, 1))       # strided rows
    _same(op, x, 17, None, None, 1e-5, view=lambda t: t[:, 1:, 3:37:2])        # an offset, a step
    _same(op, rng.standard_normal((3, 5000)).astype(np.float32), 5000, None, None, 1e-5)  # long rows


@needs_opencl
def test_midpoint_rows_are_rerun_on_the_host_and_random_rows_are_not() -> None:
    x = np.array([[3.0, 1.0, 1.0, 5.0]] * 2, np.float32)  # y_3 = 425/128: a bf16 midpoint (test_norms.py)
    w = np.full(4, 255 / 128, np.float32)
    d0 = _device_rows()
    _same("rms_norm", x, 4, w, None, 0.0)
    assert _device_rows() - d0 == 2
    d0 = _device_rows()
    rng = np.random.default_rng(9)
    for op in ("rms_norm", "layer_norm"):
        _same(op, rng.standard_normal((64, 300)).astype(np.float32) * 3, 300, None, None, 1e-5)
    assert _device_rows() - d0 <= 1


def test_every_language_renders_the_kind_and_msl_without_floating_point() -> None:
    with tgrad.Tensor.from_numpy(np.ones((2, 8), np.float32)) as x:
        for y in (tgrad.rms_norm(x, 8), tgrad.layer_norm(x, 8)):
            for lang in ("opencl", "cuda", "msl"):
                k = R.render_tensor(y, None, lang)
                assert k.route == "norm" and list(k.buffer_names) == ["x", "c", "f"] and "tg_nm_fast" in k.source
            msl = "\n".join(line.split("//")[0] for line in R.render_tensor(y, None, "msl").source.splitlines())
            assert "typedef struct tg_f64" in msl and not re.search(r"\b(double|float)\b", msl)
            y.release()


# ---- the CUDA emulator -------------------------------------------------------------------------------
def _cxx() -> bool:
    from cuda_emu.driver import find_cxx

    return find_cxx() is not None


needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulator")


@pytest.fixture(scope="module")
def cuda() -> Any:
    from cuda_emu.driver import Emulator

    return Emulator()



def _emulated(emu: Any, op: str, x: np.ndarray, w: Any, b: Any, eps: float,
              mutate: tuple[str, str] | None = None, lang: str = "cuda") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the emulated bytes after the host's rerun of the flagged rows, the flags, the CPU's bytes);
    rows along the last axis. The rerun rows take the CPU's bytes: the host runs the CPU's row code."""
    def T(a: np.ndarray) -> tgrad.Tensor:
        return tgrad.Tensor.from_numpy(np.asarray(a, np.float32), dtype="bfloat16")

    ins = [T(x)] + [T(a) for a in (w, b) if a is not None]
    y = _make(op, ins[0], x.shape[-1], None if w is None else ins[1], None if b is None else ins[-1], eps)
    k = R.render_tensor(y, None, lang)
    want = np.ascontiguousarray(y.numpy()).view(np.uint16).ravel().copy()
    source = k.source
    if mutate:
        assert mutate[0] in source, mutate[0]
        source = source.replace(mutate[0], mutate[1], 1)
    bufs = [np.ascontiguousarray(t.numpy()).view(np.uint16).ravel() for t in ins]
    bufs.append(np.full(k.buffer_elements[-2], 0xFFFF, np.uint16))
    bufs.append(np.full(k.buffer_elements[-1], 7, np.uint32))
    bufs = emu.run(emu.compile(source), k.grid, k.threadgroup, bufs, [True] * len(ins) + [False, False])
    got, flags = bufs[-2].reshape(-1, x.shape[-1]).copy(), bufs[-1]
    got[flags != 0] = want.reshape(-1, x.shape[-1])[flags != 0]
    return got.ravel(), flags, want


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("op,eps,weighted,biased", CONFIGS)
def test_generated_cuda_gives_the_cpu_bytes(cuda: Any, op: str, eps: float, weighted: bool, biased: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 21)).astype(np.float32) * 3
    w, b = rng.standard_normal(21).astype(np.float32), rng.standard_normal(21).astype(np.float32)
    got, flags, want = _emulated(cuda, op, x, w if weighted else None, b if biased else None, eps)
    assert set(np.unique(flags)) <= {0, 1} and np.array_equal(got, want)
    specials = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, -np.inf, 2.0, 0.5], [3.0, 1.0, 1.0, 5.0]], np.float32)
    got, flags, want = _emulated(cuda, op, specials, None, None, eps)
    assert np.array_equal(got, want) and flags[0] == 1 and flags[1] == 1


# ---- the MSL emulator: the software double -----------------------------------------------------------
NEAR = np.array([[7.0, 3.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0]], np.float32)  # see test_planted_defects_are_caught
NEAR_W = np.full(8, 183 / 128, np.float32)


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("op,eps,weighted,biased", CONFIGS)
def test_generated_msl_gives_the_cpu_bytes_with_the_cuda_kernels_flags(cuda: Any, msl: Any, op: str, eps: float,
                                                                       weighted: bool, biased: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 21)).astype(np.float32) * 3
    w, b = rng.standard_normal(21).astype(np.float32), rng.standard_normal(21).astype(np.float32)
    specials = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, -np.inf, 2.0, 0.5], [3.0, 1.0, 1.0, 5.0]], np.float32)
    for args in ((x, w if weighted else None, b if biased else None), (specials, None, None)):
        got, flags, want = _emulated(msl, op, *args, eps, lang="msl")
        _, cuda_flags, _ = _emulated(cuda, op, *args, eps)
        assert np.array_equal(got, want) and np.array_equal(flags, cuda_flags)
    assert flags[0] == 1 and flags[1] == 1  # the NaN and -inf rows: the comparison is not vacuous


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_decides_the_midpoint_row_as_cuda_and_catches_a_fallback_never_taken(msl: Any) -> None:
    got, flags, want = _emulated(msl, "rms_norm", NEAR, NEAR_W, None, 2.0 ** -256, lang="msl")
    assert flags.tolist() == [1] and np.array_equal(got, want)
    got, _, want = _emulated(msl, "rms_norm", NEAR, NEAR_W, None, 2.0 ** -256,
                             mutate=("f[r] = undecided;", "f[r] = 0u;"), lang="msl")
    assert not np.array_equal(got, want)


# ---- planted defects -----------------------------------------------------------------------------------
@needs_cxx
@pytest.mark.cuda
def test_planted_defects_are_caught(cuda: Any) -> None:
    # rms_norm([7, 3, 3, 2, 1, 0, 0, 0], w = 183/128, eps = 2^-256): y_0 = 427/128 less a tiny part,
    # just below a bf16 midpoint whose even neighbour is above: the double lands on the midpoint
    near = np.array([[7.0, 3.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0]], np.float32)
    w = np.full(8, 183 / 128, np.float32)
    got, flags, want = _emulated(cuda, "rms_norm", near, w, None, 2.0 ** -256)
    assert flags.tolist() == [1] and np.array_equal(got, want) and want[0] == 0x4055  # 426/128
    # the exact fallback never taken: the flag never set, the kernel's undecided value kept
    got, _, want = _emulated(cuda, "rms_norm", near, w, None, 2.0 ** -256, mutate=("f[r] = undecided;", "f[r] = 0u;"))
    assert not np.array_equal(got, want)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 21)).astype(np.float32)
    x[:, -1] = 6.0  # the last element weighs in every sum
    tail = "    j = 16;\n    for (int l = 0; l < 5; l++) {\n"
    for op in ("rms_norm", "layer_norm"):  # a dropped last term of a sum (the tail one short)
        got, _, want = _emulated(cuda, op, x, None, None, 1e-5, mutate=(tail, tail.replace("< 5", "< 4")))
        assert not np.array_equal(got, want), op
    got, _, want = _emulated(cuda, "layer_norm", x, None, None, 1e-5,
                             mutate=("i < 21; i++", "i < 20; i++"))  # a dropped last output
    assert not np.array_equal(got, want)
