"""The softmax kind on the GPU routes (route softmax, gen/render_softmax.c; docs/kernels.md, "The
softmax route"): softmax, log_softmax and logsumexp rendered in OpenCL C and CUDA, one thread per
row in double, the CPU's loops and bounds (kernels/gpu/softmax.h); a row with an element that the
bound leaves undecided (or a special row) is flagged by the kernel and rerun on the host by the
CPU's own row code.

Promises checked here:
- PoCL gives the CPU's bytes for the three ops, bfloat16 and float32 in and out, along every axis,
  through views, on empty, one-element, masked, NaN, infinite, huge-spread and long rows;
- the rows near a rounding boundary are flagged and rerun on the host (TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS
  counts them), random rows are not (their bytes are the kernel's own);
- the generated CUDA runs on the CUDA emulator with the same decisions: its unflagged rows are the
  CPU's bytes, the flagged ones exactly the rows PoCL flags;
- the generated MSL (no double: kernels/gpu/softdouble.h's binary64 in integers, the same text
  otherwise) runs on the MSL emulator with the CPU's bytes and exactly the CUDA kernel's flags (the
  same doubles decide the same elements), and its text has no floating-point type at all;
- a softmax on a device is never fused (its rerun rows have no chains);
- planted defects are caught: a flag never set (the host fallback never taken), a dropped last
  element of the sum, a dropped last output.
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

OPS = ("softmax", "log_softmax", "logsumexp")
DTYPES = [("bfloat16", None), ("bfloat16", "float32"), ("float32", None), ("float32", "bfloat16")]
ADVERSARIAL = [
    [512.0, 1.0, 3.0, -2.0],                     # x - m = -511, a bf16 midpoint, minus a tiny log
    [610.0, 0.0, -0.5],                          # -610 - 1.5e-41: the double sits on the midpoint
    [-np.inf, 2.0, -np.inf, 1.0],                # masks
    [-np.inf, -np.inf, -np.inf],                 # every entry masked
    [np.nan, 1.0, 2.0], [1.0, -np.inf, np.nan],  # NaN anywhere
    [np.inf, 1.0, 2.0], [np.inf, -np.inf, 0.0],  # +inf
    [5.0] * 7, [-3.25] * 3, [0.0, -0.0, 0.0],    # all equal: 1/n
    [100.0, -100.0, 0.0, 50.0],                  # huge spread: subnormal and zero results
    [3.3e38, 3.3e38, -3.3e38, 1.0],              # near overflow
    [1e-40, -1e-40, 0.0, 2e-38],                 # subnormal inputs
    [88.0, -88.0, 87.5, -103.0],                 # results near the bottom of float32
    [7.0, -np.inf],                              # one finite element
]
# The rows that only binary128 decides (float32 in, bf16 out: -511 and -610 less a tiny log): the
# host must rerun them.
BOUNDARY = np.array([[512.0, 1.0, 3.0], [610.0, 0.0, -0.5]], np.float32)


def _opencl_ready() -> bool:
    try:
        tgrad.Tensor.from_numpy(np.zeros(1, np.float32), device="opencl").release()
        return True
    except errors.BackendUnavailableError:
        return False


needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")


def _counts() -> list[int]:
    c = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_SOFTMAX_COUNT))
    assert lib.tgrad_debug_softmax_slow_path(c, int(lib.TGRAD_DEBUG_SOFTMAX_COUNT)) == 0
    return list(c)


def _device_rows() -> int:
    return _counts()[int(lib.TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS)]


def _apply(op: str, x: tgrad.Tensor, dim: int, out_dtype: str | None) -> tgrad.Tensor:
    if op == "logsumexp":
        return tgrad.logsumexp(x, dim, dtype=out_dtype)
    return getattr(tgrad, op)(x, dim, dtype=out_dtype)


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


def _on(device: str, data: np.ndarray, dtype: str, view: Any, op: str, dim: int, out_dtype: str | None) -> np.ndarray:
    with tgrad.Tensor.from_numpy(np.asarray(data, np.float32), dtype=dtype, device=device) as base:
        x = view(base)
        y = _apply(op, x, dim, out_dtype)
        try:
            assert y.device == device
            return _bytes(y)
        finally:
            y.release()
            if x is not base:
                x.release()


def _same(data: np.ndarray, dtype: str, op: str, dim: int = -1, out_dtype: str | None = None,
          view: Any = lambda t: t, device: str = "opencl") -> None:
    want = _on("cpu", data, dtype, view, op, dim, out_dtype)
    got = _on(device, data, dtype, view, op, dim, out_dtype)
    assert got.shape == want.shape and np.array_equal(got, want), (op, dtype, out_dtype, dim, data.shape)


# ---- PoCL (core) ----------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype,out_dtype", DTYPES)
def test_pocl_gives_the_cpu_bytes_along_every_axis_and_through_views(op: str, dtype: str, out_dtype: str | None) -> None:
    rng = np.random.default_rng(hash((op, dtype, out_dtype)) % 2**32)
    x = rng.standard_normal((3, 5, 19)) * np.exp2(rng.integers(-3, 6, (3, 5, 1)))
    for dim in (0, 1, 2, -1):
        _same(x, dtype, op, dim, out_dtype)
    _same(x, dtype, op, 1, out_dtype, view=lambda t: t.transpose(0, 2))       # strided rows
    _same(x, dtype, op, -1, out_dtype, view=lambda t: t[:, 1:4, ::2])          # an offset, a step
    _same(x, dtype, op, 0, out_dtype, view=lambda t: t[1:, 2])


@needs_opencl
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype,out_dtype", DTYPES)
def test_pocl_gives_the_cpu_bytes_on_adversarial_rows(op: str, dtype: str, out_dtype: str | None) -> None:
    for row in ADVERSARIAL:
        _same(np.array([row]), dtype, op, -1, out_dtype)
    _same(np.array(ADVERSARIAL[5:8]), dtype, op, -1, out_dtype)  # special rows among others


@needs_opencl
@pytest.mark.parametrize("op", OPS)
def test_pocl_takes_empty_one_element_and_long_rows(op: str) -> None:
    rng = np.random.default_rng(5)
    _same(np.zeros((3, 0)), "bfloat16", op)                  # n = 0: nothing, or -inf per row
    _same(np.zeros((0, 4)), "float32", op)                   # no rows
    _same(np.array([[4.0], [-2.5]]), "float32", op)          # one element each
    _same(np.array(2.0), "bfloat16", op, 0)                  # a scalar
    _same(rng.standard_normal((2, 4099)) * 6, "bfloat16", op)
    _same(rng.standard_normal((2, 1000)) * 6, "float32", op, -1, "bfloat16")


@needs_opencl
def test_boundary_rows_are_rerun_on_the_host_and_random_rows_are_not() -> None:
    before = _counts()
    _same(BOUNDARY, "float32", "log_softmax", -1, "bfloat16")
    after = _counts()
    # the CPU run counts its own slow elements; the device run reran both rows on the host
    assert after[int(lib.TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS)] - before[int(lib.TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS)] == 2
    assert after[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)] > before[int(lib.TGRAD_DEBUG_SOFTMAX_SLOW)]
    rng = np.random.default_rng(8)  # random rows: the kernel decides every element itself
    d0 = _device_rows()
    for op in OPS:
        _same(rng.standard_normal((64, 300)) * 4, "bfloat16", op)
    assert _device_rows() - d0 <= 1
    d0 = _device_rows()
    _same(np.array(ADVERSARIAL[4:8]), "float32", "softmax")  # NaN and +inf rows: special, the host's
    assert _device_rows() - d0 == 4


@needs_opencl
def test_a_device_softmax_is_not_fused() -> None:
    data = np.random.default_rng(2).standard_normal((4, 33)).astype(np.float32)
    out = []
    for device in ("cpu", "opencl"):
        with tgrad.Tensor.from_numpy(data, dtype="bfloat16", device=device) as x:
            y = tgrad.exp(tgrad.softmax(tgrad.neg(x), -1))
            steps = y.explain(json=True)["steps"]
            assert len(steps) == (1 if device == "cpu" else 3), y.explain()
            if device == "opencl":
                assert "not fused (its flagged rows rerun on the host)" in y.explain()
            out.append(_bytes(y))
            y.release()
    assert np.array_equal(out[0], out[1])


def _code(source: str) -> str:
    """The kernel text without its // comments."""
    return "\n".join(line.split("//")[0] for line in source.splitlines())


def test_every_language_renders_the_kind_and_msl_without_floating_point() -> None:
    with tgrad.Tensor.from_numpy(np.ones((2, 8), np.float32)) as x:
        for op in OPS:
            y = _apply(op, x, -1, None)
            for lang in ("opencl", "cuda", "msl"):
                k = R.render_tensor(y, None, lang)
                assert k.route == "softmax" and list(k.buffer_names) == ["x", "c", "f"] and "tg_sm_decide" in k.source
            msl = R.render_tensor(y, None, "msl").source
            assert "typedef struct tg_f64" in msl and not re.search(r"\b(double|float)\b", _code(msl))
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



def _cpu_tensor(data: np.ndarray, dtype: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.asarray(data, np.float32), dtype=dtype)


def _emulated(emu: Any, data: np.ndarray, dtype: str, op: str, dim: int, out_dtype: str | None,
              mutate: tuple[str, str] | None = None, lang: str = "cuda") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the emulated bytes after the host's rerun of the flagged rows, the flags, the CPU's bytes).
    The rerun rows take the CPU's bytes: the host runs the CPU's own row code on them."""
    with _cpu_tensor(data, dtype) as x:
        y = _apply(op, x, dim, out_dtype)
        k = R.render_tensor(y, None, lang)
        want = _bytes(y)
        y.release()
        src = np.ascontiguousarray(x.numpy()).view(np.uint16 if dtype == "bfloat16" else np.uint32).ravel()
    source = k.source
    if mutate:
        assert mutate[0] in source, mutate[0]
        source = source.replace(mutate[0], mutate[1], 1)
    wide = re.search(r"\buint \*c\b", source) is not None
    out = np.full(k.buffer_elements[1], 0xFFFFFFFF if wide else 0xFFFF, np.uint32 if wide else np.uint16)
    flags = np.full(k.buffer_elements[2], 7, np.uint32)
    bufs = [src[: k.buffer_elements[0]], out, flags]
    if 0 not in k.grid:
        bufs = emu.run(emu.compile(source), k.grid, k.threadgroup, bufs, [True, False, False])
    got, flags = bufs[1].view(np.uint8).copy(), bufs[2]
    # each row's output elements (compact row-major; the row's axis moved last enumerates the rows)
    shape = np.asarray(data).shape or (1,)
    d = dim % len(shape)
    esize = 4 if wide else 2
    if op == "logsumexp":
        rows_of = np.arange(int(np.prod(shape[:d] + shape[d + 1:])))
    else:
        rows_of = np.moveaxis(np.arange(int(np.prod(shape))).reshape(shape), d, -1).reshape(-1, shape[d])
    fixed = got.reshape(-1, esize).copy()
    cpu = want.reshape(-1, esize)
    for r in np.flatnonzero(flags):
        fixed[rows_of[r]] = cpu[rows_of[r]]
    return fixed.reshape(-1), flags, want


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype,out_dtype", DTYPES)
def test_generated_cuda_gives_the_cpu_bytes(cuda: Any, op: str, dtype: str, out_dtype: str | None) -> None:
    rng = np.random.default_rng(hash((op, dtype)) % 2**32)
    x = rng.standard_normal((3, 4, 21)) * 5
    for dim in (-1, 1):
        got, flags, want = _emulated(cuda, x, dtype, op, dim, out_dtype)
        assert set(np.unique(flags)) <= {0, 1} and flags.sum() <= 1
        assert np.array_equal(got, want), (op, dim)
    rows = np.array([r + [-1.0] * (4 - len(r)) if len(r) < 4 else r[:4] for r in ADVERSARIAL])
    got, flags, want = _emulated(cuda, rows, dtype, op, -1, out_dtype)
    assert np.array_equal(got, want)
    assert flags[2] == 0 and flags[4] == 1 and flags[6] == 1  # a masked row the kernel's; NaN, +inf the host's


@needs_cxx
@pytest.mark.cuda
def test_the_cuda_emulator_flags_the_boundary_rows(cuda: Any) -> None:
    got, flags, want = _emulated(cuda, BOUNDARY, "float32", "log_softmax", -1, "bfloat16")
    assert flags.tolist() == [1, 1] and np.array_equal(got, want)


# ---- the MSL emulator: the software double --------------------------------------------------------------
def _cases() -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(5)
    rows = np.array([r + [-1.0] * (4 - len(r)) if len(r) < 4 else r[:4] for r in ADVERSARIAL])
    return [(rng.standard_normal((3, 4, 21)) * 5, 1), (rows, -1), (BOUNDARY, -1)]


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype,out_dtype", [("bfloat16", None), ("float32", "bfloat16")])
def test_generated_msl_gives_the_cpu_bytes_with_the_cuda_kernels_flags(cuda: Any, msl: Any, op: str, dtype: str,
                                                                       out_dtype: str | None) -> None:
    flagged = 0
    for x, dim in _cases():
        got, flags, want = _emulated(msl, x, dtype, op, dim, out_dtype, lang="msl")
        _, cuda_flags, _ = _emulated(cuda, x, dtype, op, dim, out_dtype)
        assert np.array_equal(got, want) and np.array_equal(flags, cuda_flags), (op, dim)
        flagged += int(flags.sum())
    assert flagged >= 2  # NaN and +inf rows at least: the comparison of flags is not vacuous


# ---- planted defects -----------------------------------------------------------------------------------
def _mutant_differs(emu: Any, data: np.ndarray, dtype: str, op: str, old: str, new: str,
                    out_dtype: str | None = None, lang: str = "cuda") -> bool:
    got, _, want = _emulated(emu, data, dtype, op, -1, out_dtype, mutate=(old, new), lang=lang)
    return not np.array_equal(got, want)


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_fallback_never_taken(msl: Any) -> None:
    got, flags, want = _emulated(msl, BOUNDARY, "float32", "log_softmax", -1, "bfloat16", lang="msl")
    assert flags.tolist() == [1, 1] and np.array_equal(got, want)
    assert _mutant_differs(msl, BOUNDARY, "float32", "log_softmax", "f[r] = undecided;", "f[r] = 0u;", "bfloat16",
                           lang="msl")


@needs_cxx
@pytest.mark.cuda
def test_planted_defects_are_caught(cuda: Any) -> None:
    # the Ziv fallback never taken: the flag never set, the kernel's undecided value kept
    assert _mutant_differs(cuda, BOUNDARY, "float32", "log_softmax", "f[r] = undecided;", "f[r] = 0u;",
                           "bfloat16")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 21)) * 3
    x[:, -1] = 4.0  # the last element is each row's maximum
    # a dropped last element of the sum (its tail loop one short: 21 = 16 + 5)
    tail = "    j = 16;\n    for (int l = 0; l < 5; l++) {\n"
    for op in OPS:
        k = R.render_tensor(_apply(op, _cpu_tensor(x, "float32"), -1, None), None, "cuda")
        assert k.source.count(tail) == 2  # the scan's, then the sum's
        at = k.source.rindex(tail)
        sum_part = k.source[at:]
        assert _mutant_differs(cuda, x, "float32", op, sum_part, sum_part.replace(tail, tail.replace("< 5", "< 4"), 1))
    # a dropped last output
    assert _mutant_differs(cuda, x, "float32", "softmax", "for (j = 0; j < 21; j++)", "for (j = 0; j < 20; j++)")
