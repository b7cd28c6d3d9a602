"""float32 results on the GPU routes (issue 37): `tgrad.matmul(a, b, out_dtype=tgrad.float32)` on a
device stores each output's fp32 accumulator in the documented order (any NaN as 0x7fc00000), as
the CPU's tgrad_matmul_ex does, on the naive and tiled routes in MSL, OpenCL C and CUDA
(gen/render.c, tg_emit_store); tc stores bf16 only, so a float32 product takes tiled there.

- PoCL (device="opencl"): 2-D products with special values (NaN, infinities, subnormals, values
  whose sums flush) and the core batched roster (views, broadcasts), naive and tiled, both
  orders: the CPU's float32 bits.
- The emulators (MSL: slow tier; CUDA: cuda tier): the rendered float32 kernels under forward,
  reverse and shuffled fiber orders, against the CPU.
- A kernel that rounds its float32 result to bf16 precision, or lets a NaN's payload through, is
  caught.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import lib

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batched_cases import CASES, BatchedCase, operands  # noqa: E402
from emulators import emulator  # noqa: E402

ORDERS = ["pairwise", "block32"]
ROUTES = {"naive": lib.TGRAD_ROUTE_NAIVE, "tiled": lib.TGRAD_ROUTE_TILED}
SHAPES = [(5, 7, 3), (33, 300, 65), (1, 1057, 40), (64, 33, 1)]


def _special_bits(shape: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(ml_dtypes.bfloat16).view(np.uint16)
    picks = np.array([0x7FC1, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x8000, 0x1F80, 0x9F80], dtype=np.uint16)
    mask = rng.random(shape) < 0.03
    return np.where(mask, picks[rng.integers(0, len(picks), shape)], x).astype(np.uint16)


def _f32_bits(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).view(np.uint32)


def _product(a: tgrad.Tensor, b: tgrad.Tensor, order: str) -> tgrad.Tensor:
    return tgrad.matmul(a, b, out_dtype=tgrad.float32, order=order)


def _on_device(make: Any, route: str, device: str = "opencl") -> np.ndarray:
    assert lib.tgrad_set_device_route(ROUTES[route]) == 0
    try:
        c = make()
        assert c.device == device and c.dtype == tgrad.float32
        assert f"{device}.{route}" in c.explain()
        return _f32_bits(c)
    finally:
        lib.tgrad_set_device_route(0)


# ---- PoCL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pocl_stores_the_cpu_float32_accumulators(shape: tuple[int, int, int], route: str, order: str,
                                                   opencl_device: str) -> None:
    m, k, n = shape
    a_bits, b_bits = _special_bits((m, k), m + k), _special_bits((n, k), n + 7 * k)
    want = _f32_bits(_product(tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits).T, order))
    a = tgrad.Tensor.from_bf16_bits(a_bits).to("opencl")
    b = tgrad.Tensor.from_bf16_bits(b_bits).to("opencl")
    got = _on_device(lambda: _product(a, b.T, order), route)
    assert np.array_equal(got, want), f"{shape} {route} {order}: {int((got != want).sum())} of {want.size} differ"


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", [c for c in CASES if c.core], ids=lambda c: c.id)
def test_pocl_stores_float32_batched_products(case: BatchedCase, route: str, order: str, opencl_device: str) -> None:
    a, b, bases = operands(case)
    try:
        want = _f32_bits(_product(a, b, order))
    finally:
        for t in bases:
            t.release()
    a, b, bases = operands(case, "opencl")
    try:
        got = _on_device(lambda: _product(a, b, order), route)
    finally:
        for t in bases:
            t.release()
    assert np.array_equal(got, want), f"{case.id} {route} {order}"


def test_a_float32_product_cast_to_bf16_is_the_bf16_product(opencl_device: str) -> None:
    """The accumulators rounded once by the cast route are the bf16 product's bytes (both on the
    device), as on the CPU."""
    a_bits, b_bits = _special_bits((17, 40), 1), _special_bits((40, 23), 2)
    a, b = tgrad.Tensor.from_bf16_bits(a_bits).to("opencl"), tgrad.Tensor.from_bf16_bits(b_bits).to("opencl")
    y = tgrad.matmul(a, b, out_dtype=tgrad.float32).bfloat16()
    assert "opencl.cast" in y.explain()
    want = tgrad.matmul(a, b)
    assert np.array_equal(np.ascontiguousarray(y.numpy()).view(np.uint16), np.ascontiguousarray(want.numpy()).view(np.uint16))


def test_tc_stores_bf16_only_so_a_float32_product_renders_on_tiled() -> None:
    a = tgrad.Tensor.from_numpy(np.ones((32, 32), np.float32))
    for lang in ("msl", "cuda"):
        k = R.render_tensor(tgrad.matmul(a, a, out_dtype=tgrad.float32), "tiled", lang)
        assert "uint *c" in k.source and "0x7fc00000u" in k.source
        with pytest.raises(errors.RouteNotEligibleError, match="float32 result"):
            R.render_tensor(tgrad.matmul(a, a, out_dtype=tgrad.float32), "tc", lang)


# ---- the emulators -----------------------------------------------------------------------------------
def _emulated(emu: Any, lang: str, shape: tuple[int, int, int], route: str, order: str,
              mutate: Any = None) -> tuple[np.ndarray, np.ndarray]:
    m, k, n = shape
    a_bits, b_bits = _special_bits((m, k), 3 * m + k), _special_bits((k, n), n + k)
    a, b = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    c = _product(a, b, order)
    kern = R.render_tensor(c, route, lang)
    memory = {a.buffer_id: a_bits.ravel(), b.buffer_id: b_bits.ravel()}
    out_at = kern.buffer_names.index("c")
    bufs = [np.full(cnt, 0xFFFFFFFF, np.uint32) if i == out_at else memory[bid][:cnt]
            for i, (bid, cnt) in enumerate(zip(kern.buffer_ids, kern.buffer_elements))]
    source = mutate(kern.source) if mutate else kern.source
    got = emu.run(emu.compile(source), kern.grid, kern.threadgroup, bufs, [i != out_at for i in range(len(bufs))],
                  order="shuffle", seed=1)[out_at][:m * n].reshape(m, n)
    return got, _f32_bits(c)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow),  # the MSL emulator: slow tier
                                  pytest.param("cuda", marks=pytest.mark.cuda)])  # the CUDA emulator: cuda tier
def test_the_generated_kernels_store_the_cpu_float32_accumulators(lang: str, route: str, order: str) -> None:
    emu = emulator(lang)
    for shape in SHAPES:
        got, want = _emulated(emu, lang, shape, route, order)
        assert np.array_equal(got, want), f"{lang} {shape} {route} {order}"


@pytest.mark.slow
def test_the_emulator_catches_a_float32_store_that_drops_precision_or_keeps_a_payload() -> None:
    emu = emulator("msl")
    drop = lambda src: src.replace("0x7fc00000u : as_type<uint>(acc)", "0x7fc00000u : (as_type<uint>(acc) & 0xffff0000u)")
    payload = lambda src: src.replace("acc != acc ? 0x7fc00000u : ", "")
    for mutate in (drop, payload):
        got, want = _emulated(emu, "msl", (33, 300, 65), "naive", "block32", mutate)
        assert not np.array_equal(got, want)
