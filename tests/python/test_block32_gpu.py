"""The block32 order on the GPU routes (docs/numerics.md, "The block32 order"): the naive and
tiled kernels render it in MSL, OpenCL C and CUDA C and give the oracle's bytes.

- On PoCL (a real OpenCL driver; CI sets TGRAD_REQUIRE_OPENCL=1): block32 products of device
  tensors, naive, tiled and the automatic choice, views and a fused epilogue, bit for bit.
- Through the MSL and CUDA emulators (slow tier): the rendered kernels under every fiber order.
- The fills include one built so that the two orders' bf16 results differ in many outputs (each
  test checks it does), so a kernel computing the pairwise order fails; a mutant that folds the
  chains in the wrong order is caught by the emulator.
- tc computes the hardware's order: it is refused for block32 (the automatic choice takes tiled).
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import lib
from tgrad.conformance.oracle import matmul_bits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulators import emulator  # noqa: E402


def cancel_bits(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose exact products cancel pair by pair, in a different order in the odd
    elements (reversed within each block of 16 pairs): every output is all rounding error, which
    the two orders make differently."""
    rng = np.random.default_rng(seed)
    h = (k + 1) // 2
    x = rng.standard_normal((m, h)).astype(ml_dtypes.bfloat16).view(np.uint16)
    y = rng.standard_normal((h, n)).astype(ml_dtypes.bfloat16).view(np.uint16)
    perm = np.arange(h)
    for s in range(0, h, 16):
        perm[s:s + 16] = perm[s:s + 16][::-1]
    a = np.empty((m, 2 * h), np.uint16)
    b = np.empty((2 * h, n), np.uint16)
    a[:, 0::2], a[:, 1::2] = x, x[:, perm]
    b[0::2], b[1::2] = y, y[perm] ^ np.uint16(0x8000)
    return np.ascontiguousarray(a[:, :k]), np.ascontiguousarray(b[:k])


def special_bits(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    picks = np.array([0x7FC0, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x8000], dtype=np.uint16)
    out = []
    for shape in ((m, k), (k, n)):
        x = rng.standard_normal(shape).astype(ml_dtypes.bfloat16).view(np.uint16)
        mask = rng.random(shape) < 0.02
        out.append(np.where(mask, picks[rng.integers(0, len(picks), shape)], x).astype(np.uint16))
    return out[0], out[1]


# (m, k, n, fill): K across the block (32) and the tiled route's 16-deep stages, odd and prime
CASES = [(32, 100, 32, "cancel"), (16, 64, 16, "cancel"), (8, 300, 8, "cancel"), (5, 7, 9, "special"),
         (33, 33, 17, "special"), (40, 1057, 70, "cancel"), (1, 31, 3, "special"), (17, 32, 1, "cancel")]
IDS = [f"{m}x{k}x{n}-{fill}" for m, k, n, fill in CASES]


def operands(m: int, k: int, n: int, fill: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b = (cancel_bits if fill == "cancel" else special_bits)(m, k, n, m * 1000 + k + n)
    want = matmul_bits(a, b, order="block32")
    if fill == "cancel" and m * n >= 64:
        assert np.count_nonzero(want != matmul_bits(a, b, order="pairwise")) > 0, "the fill must tell the orders apart"
    return a, b, want


def _describe(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.argwhere(got != want)
    return f"{len(bad)} of {want.size} outputs differ" + (
        f"; first C{list(bad[0])}: got 0x{int(got[tuple(bad[0])]):04x}, want 0x{int(want[tuple(bad[0])]):04x}"
        if len(bad) else "")


# ---- PoCL ------------------------------------------------------------------------------------------
def _on_opencl(bits: np.ndarray) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(bits.view(ml_dtypes.bfloat16), device="opencl")


@pytest.mark.parametrize("route", [0, lib.TGRAD_ROUTE_NAIVE, lib.TGRAD_ROUTE_TILED], ids=["auto", "naive", "tiled"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_block32_on_opencl_is_the_oracle(case, route, opencl_device: str) -> None:
    a, b, want = operands(*case)
    assert lib.tgrad_set_device_route(route) == 0
    try:
        with _on_opencl(a) as ta, \
                _on_opencl(b) as tb:
            with tgrad.matmul(ta, tb, order="block32") as c:
                naive = route == lib.TGRAD_ROUTE_NAIVE or (route == 0 and ta.shape[0] <= 4)  # a few rows: naive
                assert c.route == ("opencl.naive" if naive else "opencl.tiled")
                got = c.numpy().view(np.uint16)
    finally:
        lib.tgrad_set_device_route(0)
    assert np.array_equal(got, want), _describe(got, want)


def test_block32_on_opencl_through_views_and_a_fused_epilogue(opencl_device: str) -> None:
    a, b, want = operands(40, 100, 48, "cancel")
    relu = np.where((want & 0x8000) != 0, np.uint16(0), want)
    relu = np.where((want & 0x7FFF) > 0x7F80, want, relu).astype(np.uint16)
    with _on_opencl(np.ascontiguousarray(a.T)) as at, \
            _on_opencl(np.ascontiguousarray(b.T)) as bt:
        with tgrad.matmul_order("block32"):
            c = at.T @ bt.T  # both operands column-major views, read in place
            r = tgrad.relu(at.T @ bt.T)
        assert np.array_equal(c.numpy().view(np.uint16), want)
        assert np.array_equal(r.numpy().view(np.uint16), relu)
        c.release()
        r.release()


def test_tc_accumulates_in_the_hardware_order_whatever_the_product_order() -> None:
    """tc (bounded precision only) renders the same kernel in both orders; naive and tiled render
    the product's order."""
    a = tgrad.Tensor.from_numpy(np.ones((64, 64), np.float32))
    with tgrad.matmul_order("block32"):
        tc_block32 = R.render_matmul(a, a, "tc", "msl")
        assert "block32 order" in R.render_matmul(a, a, "tiled", "cuda").source
    with tgrad.matmul_order("pairwise"):
        tc_pairwise = R.render_matmul(a, a, "tc", "msl")
        assert "block32" not in R.render_matmul(a, a, "tiled", "cuda").source
    assert tc_block32.source == tc_pairwise.source and "hardware's order" in tc_block32.source


# ---- the emulators (slow tier) -------------------------------------------------------------------
def _render(a: np.ndarray, b: np.ndarray, route: str, lang: str) -> R.Kernel:
    with tgrad.Tensor.from_bf16_bits(a) as ta, tgrad.Tensor.from_bf16_bits(b) as tb, \
            tgrad.matmul_order("block32"):
        return R.render_matmul(ta, tb, route, lang)


def _run(emu, source: str, k: R.Kernel, a: np.ndarray, b: np.ndarray, m: int, n: int, **options) -> np.ndarray:
    out = np.full(m * n, 0xFFFF, np.uint16)
    args = [a.ravel()[: k.buffer_elements[0]], b.ravel()[: k.buffer_elements[1]], out]
    return emu.run(emu.compile(source), k.grid, k.threadgroup, args, [True, True, False], **options)[2].reshape(m, n)


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["msl", "cuda"])
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", CASES[:6], ids=IDS[:6])
def test_block32_through_the_emulators_is_the_oracle(case, route: str, lang: str) -> None:
    emu = emulator(lang)
    m, k, n, fill = case
    a, b, want = operands(*case)
    kern = _render(a, b, route, lang)
    for i, order in enumerate(("forward", "reverse", "shuffle")):
        got = _run(emu, kern.source, kern, a, b, m, n, order=order, seed=i, ftz=fill == "special")
        assert np.array_equal(got, want), f"[{lang} {route} {order}] " + _describe(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["naive", "tiled"])
def test_a_kernel_folding_the_chains_wrongly_is_caught(route: str) -> None:
    emu = emulator("msl")
    m, k, n = 32, 100, 32
    a, b, want = operands(m, k, n, "cancel")
    kern = _render(a, b, route, "msl")
    fold = "tg_step(even, odd, 1.0f)" if route == "naive" else "tg_step(even[i][j], odd[i][j], 1.0f)"
    wrong = "tg_step(odd, even, 0.5f)" if route == "naive" else "tg_step(odd[i][j], even[i][j], 0.5f)"
    assert kern.source.count(fold) >= 1
    got = _run(emu, kern.source.replace(fold, wrong), kern, a, b, m, n)
    assert not np.array_equal(got, want)
    assert np.array_equal(_run(emu, kern.source, kern, a, b, m, n), want)
