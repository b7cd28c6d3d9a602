"""The compare and where kinds on the GPU routes (docs/kernels.md, "The where and compare
routes"): rendered in MSL, OpenCL C and CUDA (render_compare.c), run on PoCL (core tier) and on
both emulators (MSL: slow; CUDA: cuda) with the CPU's bytes. Comparisons of every dtype pair
(bfloat16, float32, int32, bool) over values chosen to break a float compare: NaNs, both zeros,
infinities, float32 and bf16 subnormals (which a device may flush), int32 values that float32
cannot hold next to their float32 neighbours, INT32_MIN, 2^31; through transposed, reversed and
broadcast views. where of every dtype, its operands' bits copied (NaN payloads, -0).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_gpu_reduce import _cuda, _cxx, _opencl_ready
from test_gpu_select import UINT, _Msl

import tgrad
from tgrad import render as R

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")

DTYPES = ("bfloat16", "float32", "int32", "bool")
OPS = ("eq", "ne", "lt", "le", "gt", "ge")
F32_SPECIAL = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
                        0x00000001, 0x80000001, 0x007FFFFF, 0x00010000, 0x80010000, 0x4B800000, 0x4B800001,
                        0x4F000000, 0xCF000000, 0xCF000001, 0x3F800000, 0xBF800000, 0x40000000], np.uint32)
I32_SPECIAL = np.array([0, 1, -1, 2, 16777216, 16777217, -16777217, 2**31 - 1, -2**31, -2**31 + 1, 2**30,
                        255, 256, 7, -7, 3, 12345678, 123456789, 2**24 + 3, -(2**24) - 3], np.int64).astype(np.int32)


def _values(dtype: str, n: int, seed: int) -> np.ndarray:
    """n values of the dtype: the special ones first, then random bits (or small numbers, so that
    equal values across dtypes occur)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype == "int32":
        v = np.concatenate([I32_SPECIAL, rng.integers(-4, 5, n // 2), rng.integers(-2**31, 2**31, n)]).astype(np.int32)
    elif dtype == "float32":
        small = np.float32(rng.integers(-4, 5, n // 2)).view(np.uint32)
        v = np.concatenate([F32_SPECIAL, small, rng.integers(0, 1 << 32, n, dtype=np.uint32)]).view(np.float32)
    else:
        bits = np.concatenate([F32_SPECIAL >> 16, np.float32(rng.integers(-4, 5, n // 2)).view(np.uint32) >> 16,
                               rng.integers(0, 1 << 16, n)]).astype(np.uint16)
        v = bits.view(ml_dtypes.bfloat16)
    return rng.permutation(v[:n]) if seed % 2 else v[:n]


def _tensor(arr: np.ndarray, dtype: str, device: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(arr, dtype=getattr(tgrad, dtype), device=device)


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


# (name, the operands' (dtype, shape), build(op, *tensors)); shapes hold 24 elements or broadcast
def _cmp_cases() -> list[tuple[str, list[tuple[str, tuple[int, ...]]], Any]]:
    cases = []
    for da in DTYPES:
        for db in DTYPES:
            cases.append((f"{da}_{db}_plain", [(da, (4, 6)), (db, (4, 6))], lambda op, a, b: getattr(a, f"__{op}__")(b)))
    for da, db in (("int32", "float32"), ("bfloat16", "float32"), ("bool", "bfloat16")):
        cases.append((f"{da}_{db}_views", [(da, (6, 4)), (db, (6,))],
                      lambda op, a, b: getattr(a.T[::-1], f"__{op}__")(b[::-1])))
        cases.append((f"{da}_{db}_broadcast", [(da, (4, 1)), (db, (1, 6))], lambda op, a, b: getattr(a, f"__{op}__")(b)))
    return cases


CMP_CASES = {name: (specs, build) for name, specs, build in _cmp_cases()}


def _cmp_result(name: str, op: str, device: str) -> np.ndarray:
    specs, build = CMP_CASES[name]
    ts = [_tensor(_values(dt, int(np.prod(sh)), 10 * j + len(name)).reshape(sh), dt, device)
          for j, (dt, sh) in enumerate(specs)]
    try:
        with build(op, *ts) as y:
            assert y.device == device and y.dtype is tgrad.bool
            return _bytes(y)
    finally:
        for t in ts:
            t.release()


WHERE_CASES = {
    "plain": lambda c, a, b: tgrad.where(c, a, b),
    "views": lambda c, a, b: tgrad.where(c.T, a[::-1].T, b.T[:, ::-1]),
    "broadcast": lambda c, a, b: tgrad.where(c[:, :1], a[:1], b),
}


def _where_result(name: str, dtype: str, device: str) -> np.ndarray:
    c = _tensor(_values("bool", 24, 3).reshape(4, 6), "bool", device)
    a = _tensor(_values(dtype, 24, 4).reshape(4, 6), dtype, device)
    b = _tensor(_values(dtype, 24, 5).reshape(4, 6), dtype, device)
    try:
        with WHERE_CASES[name](c, a, b) as y:
            assert y.device == device
            return _bytes(y)
    finally:
        for t in (c, a, b):
            t.release()


# ---- rendering (core) ------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_compare_and_where_render_in_every_language(lang: str) -> None:
    names = set()
    for name, (specs, build) in CMP_CASES.items():
        ts = [_tensor(_values(dt, int(np.prod(sh)), 0).reshape(sh), dt, "cpu") for dt, sh in specs]
        for op in OPS:
            with build(op, *ts) as y:
                k = R.render_tensor(y, None, lang)
                assert k.route == "compare" and k.name.startswith(f"tgrad_compare_{op}_") and k.buffer_names == ("a", "b", "c")
                assert not re.search(r"\bfloat\b", k.source), "no float arithmetic in a compare kernel"
                names.add((k.name, k.source_hash))
        for t in ts:
            t.release()
    for dtype in DTYPES:
        c, a = _tensor(_values("bool", 24, 0).reshape(4, 6), "bool", "cpu"), _tensor(_values(dtype, 24, 0).reshape(4, 6), dtype, "cpu")
        with tgrad.where(c, a, a.T.T) as y:
            k = R.render_tensor(y, None, lang)
            assert k.route == "where" and k.buffer_names == ("cond", "a", "b", "c")
        c.release()
        a.release()
    assert len({n for n, _ in names}) == len(names)


# ---- PoCL (core) -----------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("name", list(CMP_CASES))
def test_pocl_compares_with_the_cpu_bytes(name: str) -> None:
    for op in OPS:
        assert np.array_equal(_cmp_result(name, op, "opencl"), _cmp_result(name, op, "cpu")), (name, op)


@needs_opencl
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(WHERE_CASES))
def test_pocl_selects_with_the_cpu_bytes(name: str, dtype: str) -> None:
    assert np.array_equal(_where_result(name, dtype, "opencl"), _where_result(name, dtype, "cpu"))


# ---- the emulators -----------------------------------------------------------------------------------
def _emulate(harness: Any, make: Any) -> np.ndarray:
    """Run the schedule of make(device="cpu") -> (result, inputs) on the emulator."""
    y, inputs = make()
    memory = {t.buffer_id: np.ascontiguousarray(t.numpy()).reshape(-1).view(UINT[t.dtype.itemsize]).copy()
              for t in inputs}
    try:
        steps = y.explain(json=True)["steps"]
        kernels = [R.render_tensor(y, None, harness.lang, step=i) for i in range(len(steps))]
        for k in kernels:
            out_at = len(k.buffer_names) - 1
            esize = 1 if k.route == "compare" else inputs[1].dtype.itemsize
            bufs = [memory[bid][:n] for bid, n in zip(k.buffer_ids[:out_at], k.buffer_elements[:out_at])]
            bufs.append(np.full(k.buffer_elements[out_at], np.iinfo(UINT[esize]).max, UINT[esize]))
            if 0 not in k.grid:
                bufs = harness.emu.run(harness.emu.compile(k.source), k.grid, k.threadgroup, bufs,
                                       [i != out_at for i in range(len(bufs))])
            memory[k.buffer_ids[out_at]] = bufs[out_at]
        return memory[y.buffer_id].view(np.uint8).copy()
    finally:
        y.release()
        for t in inputs:
            t.release()


def _cmp_maker(name: str, op: str) -> Any:
    def make() -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
        specs, build = CMP_CASES[name]
        ts = [_tensor(_values(dt, int(np.prod(sh)), 10 * j + len(name)).reshape(sh), dt, "cpu")
              for j, (dt, sh) in enumerate(specs)]
        return build(op, *ts), ts
    return make


def _where_maker(name: str, dtype: str) -> Any:
    def make() -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
        ts = [_tensor(_values("bool", 24, 3).reshape(4, 6), "bool", "cpu"),
              _tensor(_values(dtype, 24, 4).reshape(4, 6), dtype, "cpu"),
              _tensor(_values(dtype, 24, 5).reshape(4, 6), dtype, "cpu")]
        return WHERE_CASES[name](*ts), ts
    return make


@pytest.fixture(scope="module")
def msl() -> Any:
    return _Msl()


@pytest.fixture(scope="module")
def cuda() -> Any:
    return _cuda()


EMU_CMP = [n for n in CMP_CASES if "plain" not in n or n.startswith(("int32", "float32"))]


def _check_emulated(harness: Any) -> None:
    for name in EMU_CMP:
        for op in OPS:
            assert np.array_equal(_emulate(harness, _cmp_maker(name, op)), _cmp_result(name, op, "cpu")), (name, op)
    for name in WHERE_CASES:
        for dtype in DTYPES:
            assert np.array_equal(_emulate(harness, _where_maker(name, dtype)), _where_result(name, dtype, "cpu"))


@needs_cxx
@pytest.mark.slow
def test_generated_msl_compares_and_selects_with_the_cpu_bytes(msl: Any) -> None:
    _check_emulated(msl)


@needs_cxx
@pytest.mark.cuda
def test_generated_cuda_compares_and_selects_with_the_cpu_bytes(cuda: Any) -> None:
    _check_emulated(cuda)


@needs_cxx
@pytest.mark.slow
def test_the_emulator_catches_a_compare_that_forgets_nan(msl: Any) -> None:
    """A planted defect (NaN's key not special-cased: eq of two NaNs holds) changes the bytes."""
    original = R.render_tensor

    def broken(*args: Any, **kwargs: Any) -> R.Kernel:
        k = original(*args, **kwargs)
        src = k.source.replace("(ka == (tg_u64)0u || kb == (tg_u64)0u)", "(false)")
        assert src != k.source
        return dataclasses.replace(k, source=src)

    R.render_tensor = broken
    try:
        got = _emulate(msl, _cmp_maker("float32_float32_plain", "eq"))
    finally:
        R.render_tensor = original
    assert not np.array_equal(got, _cmp_result("float32_float32_plain", "eq", "cpu"))
