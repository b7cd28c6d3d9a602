"""Batched products on the GPU routes (docs/kernels.md, "Batched products"): torch.matmul's batch
rule, one product per threadgroup z, each operand moved to the product's first elements by its
batch strides (0 for a broadcast axis), in MSL, OpenCL C and CUDA, on the naive, tiled and tc
routes, with the CPU's bytes in both documented orders.

- PoCL (device="opencl"): the roster of tests/python/batched_cases.py (several batch axes,
  broadcasts, permuted, sliced, reversed and expanded batches, transposed matrices, 1-D operands,
  K = 0, empty batches) by naive, tiled and the automatic choice, in the pairwise and block32
  orders, and with a fused epilogue, bit for bit against the CPU.
- The emulators (MSL: slow tier; CUDA: cuda tier): the rendered kernels under every fiber order,
  against the CPU; tc (bounded, the hardware's order) batched gives each product the bytes of the
  2-D tc kernel of that product's matrices.
- A kernel whose batch stride is wrong (dropped, or off by one element) is caught.
"""

from __future__ import annotations

import re
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batched_cases import CASES, BatchedCase, operand_bits, operands  # noqa: E402
from emulators import emulator  # noqa: E402

ORDERS = ["pairwise", "block32"]
ROUTES = {"auto": 0, "naive": lib.TGRAD_ROUTE_NAIVE, "tiled": lib.TGRAD_ROUTE_TILED}
CORE = [c for c in CASES if c.core]
SLOW = [c for c in CASES if not c.core]


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).view(np.uint16)


def _describe(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    bad = np.argwhere(got != want)
    return f"{len(bad)} of {want.size} outputs differ" + (
        f"; first at {list(bad[0])}: got 0x{int(got[tuple(bad[0])]):04x}, want 0x{int(want[tuple(bad[0])]):04x}"
        if len(bad) else "")


def cpu_bytes(case: BatchedCase, order: str, epilogue: bool = False) -> np.ndarray:
    a, b, bases = operands(case)
    try:
        return _bits(_product(a, b, order, epilogue, "cpu"))
    finally:
        for t in bases:
            t.release()


def _product(a: tgrad.Tensor, b: tgrad.Tensor, order: str, epilogue: bool, device: str) -> tgrad.Tensor:
    with tgrad.matmul_order(order):
        c = a @ b
    if not epilogue:
        return c
    # a value per output element (each product its own) and one row for every product
    shape = c.shape
    other = tgrad.Tensor.from_numpy(operand_bits(shape, 5), device=device)
    bias = tgrad.Tensor.from_numpy(operand_bits(shape[-1:], 6), device=device)
    return tgrad.relu(c + other) * bias


def device_bytes(case: BatchedCase, order: str, route: str, epilogue: bool = False,
                 device: str = "opencl") -> np.ndarray:
    a, b, bases = operands(case, device)
    assert lib.tgrad_set_device_route(ROUTES[route]) == 0
    try:
        c = _product(a, b, order, epilogue, device)
        assert c.device == device
        if route != "auto":
            assert f"{device}.{route}" in c.explain()
        return _bits(c)
    finally:
        lib.tgrad_set_device_route(0)
        for t in bases:
            t.release()


# ---- PoCL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["tiled", "naive"])
@pytest.mark.parametrize("case", CORE, ids=lambda c: c.id)
def test_pocl_gives_each_batch_the_cpu_bytes(case: BatchedCase, route: str, order: str, opencl_device: str) -> None:
    want = cpu_bytes(case, order)
    got = device_bytes(case, order, route)
    assert np.array_equal(got, want), f"{case.id} {route} {order}: " + _describe(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["auto", "tiled", "naive"])
@pytest.mark.parametrize("case", SLOW, ids=lambda c: c.id)
def test_pocl_gives_each_batch_the_cpu_bytes_on_the_slow_roster(case: BatchedCase, route: str, order: str,
                                                                opencl_device: str) -> None:
    want = cpu_bytes(case, order)
    got = device_bytes(case, order, route)
    assert np.array_equal(got, want), f"{case.id} {route} {order}: " + _describe(got, want)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", [c for c in CORE if c.name in ("two_batch_axes", "expanded", "reversed")],
                         ids=lambda c: c.id)
def test_pocl_fuses_an_epilogue_into_a_batched_product(case: BatchedCase, order: str, opencl_device: str) -> None:
    saved = tgrad.fusion_enabled()
    try:
        for fused in (True, False):
            tgrad.set_fusion(fused)
            want = cpu_bytes(case, order, epilogue=True)
            a, b, bases = operands(case, "opencl")
            try:
                c = _product(a, b, order, True, "opencl")
                if fused:
                    assert "matmul+add+relu+mul" in c.explain()
                got = _bits(c)
            finally:
                for t in bases:
                    t.release()
            assert np.array_equal(got, want), f"{case.id} {order} fusion={fused}: " + _describe(got, want)
    finally:
        tgrad.set_fusion(saved)


def test_a_batch_past_the_grid_limit_is_refused_on_a_device_before_anything_is_made(opencl_device: str) -> None:
    with tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32), device="opencl") as m:
        a = m.reshape(1, 2, 3).expand(65536, 2, 3)
        start = tgrad.live_tensors()
        with pytest.raises(errors.RouteNotEligibleError, match="65536 products"):
            a @ m.T
        assert tgrad.live_tensors() == start
        with a[:65535] @ m.T as ok:  # at the limit: runs
            assert ok.shape == (65535, 2, 2)
            assert np.array_equal(ok.numpy()[-1], np.full((2, 2), 3.0, ml_dtypes.bfloat16))


# ---- rendering ---------------------------------------------------------------------------------------
def _render(case: BatchedCase, route: str, lang: str, order: str = "pairwise", epilogue: bool = False) \
        -> tuple[R.Kernel, dict[int, np.ndarray], tuple[int, ...]]:
    """The batched step's kernel, the memory of its inputs by buffer id, and the result's shape."""
    a, b, bases = operands(case)
    memory = {t.buffer_id: np.ascontiguousarray(t.numpy()).view(np.uint16).ravel() for t in bases}
    try:
        c = _product(a, b, order, False, "cpu")
        if epilogue:
            other = tgrad.Tensor.from_numpy(operand_bits(c.shape, 5))
            bias = tgrad.Tensor.from_numpy(operand_bits(c.shape[-1:], 6))
            for t in (other, bias):
                memory[t.buffer_id] = np.ascontiguousarray(t.numpy()).view(np.uint16).ravel()
            c = tgrad.relu(c + other) * bias
        return R.render_tensor(c, route, lang), memory, c.shape
    finally:
        for t in bases:
            t.release()


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
@pytest.mark.parametrize("route", ["naive", "tiled", "tc"])
def test_a_batched_kernel_runs_one_product_per_threadgroup_z(route: str, lang: str) -> None:
    case = next(c for c in CASES if c.name == "two_batch_axes")
    if route == "tc" and lang == "opencl":
        with pytest.raises(errors.RouteNotEligibleError):
            _render(case, route, lang)
        return
    k, _, shape = _render(case, route, lang)
    assert k.grid[2] == 6 and re.match(rf"tgrad_{route}_batch6_17x33x20_[0-9a-f]{{8}}$", k.name), k.name
    assert "Batched (torch.matmul's rule): 6 products" in k.source
    # a's and b's product offsets from their batch strides (33 * 17 * 3 ... per axis), c's compact
    assert re.search(r"\ba \+= bz0 \* 1683 \+ bz1 \* 561;", k.source), k.source
    assert re.search(r"\bc \+= bz0 \* 1020 \+ bz1 \* 340;", k.source), k.source
    unbatched = R.render_matmul(*[tgrad.Tensor.from_numpy(np.zeros(s, np.float32)) for s in ((17, 33), (33, 20))],
                                route=route, lang=lang)
    assert unbatched.grid[2] == 1 and "bz0" not in unbatched.source and "Batched" not in unbatched.source


def test_a_broadcast_operand_is_not_moved() -> None:
    k, _, _ = _render(next(c for c in CASES if c.name == "broadcast_right"), "tiled", "opencl")
    assert re.search(r"\ba \+= bz0 \* 480;", k.source) and "b += " not in k.source
    assert "get_group_id(2)" in k.source


# ---- the emulators -----------------------------------------------------------------------------------
def _run(emu: Any, k: R.Kernel, memory: dict[int, np.ndarray], shape: tuple[int, ...], source: str | None = None,
         **options: Any) -> np.ndarray:
    out_at = k.buffer_names.index("c")
    bufs = []
    for i, (bid, n) in enumerate(zip(k.buffer_ids, k.buffer_elements)):
        bufs.append(np.full(n, 0xFFFF, np.uint16) if i == out_at else memory[bid][:n])
    if 0 in k.grid:
        return bufs[out_at][:0].reshape(shape) if 0 in shape else bufs[out_at].reshape(shape)
    got = emu.run(emu.compile(source or k.source), k.grid, k.threadgroup, bufs,
                  [i != out_at for i in range(len(bufs))], **options)[out_at]
    return got[:int(np.prod(shape))].reshape(shape)


EMU_CASES = [c for c in CASES if c.name in ("plain", "two_batch_axes", "broadcast_ones", "expanded", "sliced",
                                            "reversed", "vector_left", "long_k")]


def _emulated(lang: str, case: BatchedCase, route: str, order: str) -> None:
    emu = emulator(lang)
    # a 1-D operand's product is read through a view without the promoted axis: not fused
    for epilogue in (False,) if case.name.startswith("vector") else (False, True):
        k, memory, shape = _render(case, route, lang, order, epilogue)
        want = cpu_bytes(case, order, epilogue)
        for i, fibers in enumerate(("forward", "reverse", "shuffle")):
            got = _run(emu, k, memory, shape, order=fibers, seed=i)
            assert np.array_equal(got, want), f"[{lang} {route} {order} {fibers} epilogue={epilogue}] " + \
                _describe(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", EMU_CASES, ids=lambda c: c.id)
def test_generated_msl_gives_each_batch_the_cpu_bytes(case: BatchedCase, route: str, order: str) -> None:
    _emulated("msl", case, route, order)


@pytest.mark.cuda
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", EMU_CASES, ids=lambda c: c.id)
def test_generated_cuda_gives_each_batch_the_cpu_bytes(case: BatchedCase, route: str, order: str) -> None:
    _emulated("cuda", case, route, order)


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["msl", "cuda"])
def test_batched_tc_gives_each_product_its_2d_kernels_bytes(lang: str) -> None:
    """tc is the hardware's order (bounded): a batched tc kernel must give product i exactly what
    the 2-D tc kernel of product i's matrices gives on the same emulated hardware."""
    emu = emulator(lang)
    case = BatchedCase("tc", (3, 24, 40), (40, 32), lambda t: t, lambda t: t)
    k, memory, shape = _render(case, "tc", lang)
    mma = "fma" if lang == "msl" else "truncate"
    got = _run(emu, k, memory, shape, mma=mma)
    a_np, b_np = operand_bits(case.a_shape, sum(map(ord, "tc"))), operand_bits(case.b_shape, sum(map(ord, "tc")) + 1)
    for i in range(3):
        with tgrad.Tensor.from_numpy(a_np[i]) as a, tgrad.Tensor.from_numpy(b_np) as b:
            k2 = R.render_matmul(a, b, "tc", lang)
            bufs = [a_np[i].view(np.uint16).ravel(), b_np.view(np.uint16).ravel(), np.full(24 * 32, 0xFFFF, np.uint16)]
            want = emu.run(emu.compile(k2.source), k2.grid, k2.threadgroup, bufs, [True, True, False],
                           mma=mma)[2].reshape(24, 32)
        assert np.array_equal(got[i], want), f"product {i}: " + _describe(got[i], want)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["naive", "tiled"])
def test_a_kernel_with_a_wrong_batch_stride_is_caught(route: str) -> None:
    emu = emulator("msl")
    case = next(c for c in CASES if c.name == "plain")
    k, memory, shape = _render(case, route, "msl")
    want = cpu_bytes(case, "pairwise")
    assert np.array_equal(_run(emu, k, memory, shape), want)
    moved = re.search(r"\n    b \+= bz0 \* (\d+);", k.source)
    assert moved, k.source
    dropped = k.source.replace(moved.group(0), "\n")  # b's batch stride 0: every product reads b[0]
    off_by_one = k.source.replace(moved.group(0), f"\n    b += bz0 * {int(moved.group(1)) - 1};")
    for mutant in (dropped, off_by_one):
        try:
            got = _run(emu, k, memory, shape, source=mutant)
        except Exception as exc:  # an out-of-bounds read is caught too
            assert "bound" in str(exc).lower() or "guard" in str(exc).lower(), exc
            continue
        assert not np.array_equal(got, want), "the mutant gave the CPU's bytes"
