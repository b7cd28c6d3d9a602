"""The training step's fast paths (docs/performance.md, "Issue 36: training steps", session 21)
against the paths they shortcut or an independent exact reference: the same bytes.

- a weight read as ``w.T`` gets its gradient in its own layout (grad/vjp_matmul.c), bit for bit
  the gradient through a compact copy of ``w.T`` (the product, then the copy's PLACE);
- add's cotangent skips the float32 round trip only where it changes no bit: a seed's NaN payload
  still comes out canonical (grad/vjp_elementwise.c);
- sums over a strided axis, by columns (few rows in double, else tg_exact_cols), against the
  conformance oracle's exact sums (ops/reduce.c);
- softmax_backward's masked zeros take the sign of y_i times the exact g_i - sum_j g_j y_j;
- scatter_add's empty and single rows: +0, and the value itself (NaN canonical).
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import autograd
from tgrad.conformance import exact
from tgrad.conformance.exact import BF16, F32
from tgrad.softmax_backward import softmax_backward


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy(np.float32).view(np.uint32) if t.dtype == tgrad.float32 else t.numpy().view(np.uint16)


def _raw_bf16(bits: np.ndarray) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.ascontiguousarray(bits, np.uint16).view(ml_dtypes.bfloat16))


def _leaf(rng: np.random.Generator, *shape: int) -> tgrad.Tensor:
    t = tgrad.tensor(rng.standard_normal(shape).astype(np.float32), dtype=tgrad.bfloat16)
    t.requires_grad_()
    return t


@pytest.mark.parametrize("order", ["block32", "pairwise"])
@pytest.mark.parametrize("shape", [((7, 5), (3, 5)), ((2, 6, 9), (4, 9)), ((16, 33), (40, 33))])
def test_weight_gradient_in_its_layout(order: str, shape: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    rng = np.random.default_rng(len(shape[0]) * 100 + shape[1][0])
    x, w = _leaf(rng, *shape[0]), _leaf(rng, *shape[1])
    seed = tgrad.tensor(rng.standard_normal((*shape[0][:-1], shape[1][0])).astype(np.float32), dtype=tgrad.bfloat16)
    with tgrad.matmul_order(order):
        fast = autograd.grads_of([x @ w.T], [seed], [x, w])
        wt = w.T.contiguous()  # the operand is now compact: the product, then the copy's PLACE
        slow = autograd.grads_of([x @ wt], [seed], [x, w])
        # the input side too: x read through a transposed view
        xt = _leaf(rng, shape[0][-1], shape[0][-2]) if len(shape[0]) == 2 else None
        if xt is not None:
            a = autograd.grads_of([xt.T @ w.T], [seed], [xt])[0]
            b = autograd.grads_of([xt.T.contiguous() @ w.T], [seed], [xt])[0]
            assert np.array_equal(_bits(a), _bits(b))
    for f, s in zip(fast, slow):
        assert np.array_equal(_bits(f), _bits(s))


def test_add_cotangent_keeps_canonical_nan() -> None:
    rng = np.random.default_rng(1)
    a, b = _leaf(rng, 2, 4), _leaf(rng, 4)
    bits = np.array([[0x7F81, 0xFFC1, 0x8000, 0x3F80], [0x0001, 0xFF80, 0x7FFF, 0xC000]], np.uint16)
    ga, gb = autograd.grads_of([a + b], [_raw_bf16(bits)], [a, b])
    want = np.where((bits & 0x7FFF) > 0x7F80, 0x7FC0, bits).astype(np.uint16)
    assert np.array_equal(_bits(ga), want)
    assert _bits(gb)[1] == 0x7FC0 and _bits(gb)[0] == 0x7FC0  # a NaN in the column: NaN


def _column_data(rng: np.random.Generator, rows: int, cols: int, kind: int) -> np.ndarray:
    x = (rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-40, 40, (rows, cols))).astype(np.float32)
    if kind == 1:
        x[rng.random(x.shape) < 0.05] = np.inf
        x[rng.random(x.shape) < 0.05] = np.nan
    if kind == 2:
        x[rng.random(x.shape) < 0.5] = -0.0
    if kind == 3:
        x = (x * np.float32(2.0**-100)).astype(np.float32)  # subnormal sums
    return x


@pytest.mark.parametrize("rows", [2, 3, 16, 17, 600])
@pytest.mark.parametrize("dtype", [tgrad.bfloat16, tgrad.float32])
def test_sums_by_columns_are_exact(rows: int, dtype: tgrad.DType) -> None:
    rng = np.random.default_rng(rows)
    for kind in range(4):
        t = tgrad.tensor(_column_data(rng, rows, 37, kind), dtype=dtype)
        bits = _bits(t)
        code = BF16 if dtype == tgrad.bfloat16 else F32
        for out, out_code in ((None, code), (tgrad.float32, F32)):
            got = _bits(t.sum(axis=0, dtype=out) if out else t.sum(axis=0))
            want = [exact.sum_bits(bits[:, c], code, out_code) for c in range(bits.shape[1])]
            assert got.tolist() == want, (kind, out)


def test_softmax_backward_masked_zero_signs() -> None:
    rng = np.random.default_rng(3)
    y = np.abs(rng.standard_normal((6, 24))).astype(np.float32)
    y[rng.random(y.shape) < 0.5] = 0.0
    y[rng.random(y.shape) < 0.2] = -0.0
    g = rng.standard_normal((6, 24)).astype(np.float32)
    g[2] = 0.25  # a constant row: g_i - S small against S
    Y, G = tgrad.tensor(y, dtype=tgrad.bfloat16), tgrad.tensor(g, dtype=tgrad.bfloat16)
    out = _bits(softmax_backward(Y, G, -1))
    yb, gb = _bits(Y), _bits(G)
    for r in range(y.shape[0]):
        vy = [exact.value_of(int(v), BF16) for v in yb[r]]
        vg = [exact.value_of(int(v), BF16) for v in gb[r]]
        s = sum((Fraction(a) * Fraction(b) for a, b in zip(vg, vy)), Fraction(0))
        for i in range(y.shape[1]):
            if yb[r, i] & 0x7FFF:
                continue
            d = Fraction(vg[i]) - s
            assert d != 0  # the data keep the exact rule's rarer case (D = 0) out
            neg = bool(yb[r, i] & 0x8000) != (d < 0)
            assert out[r, i] == (0x8000 if neg else 0), (r, i)


def test_scatter_add_empty_and_single_rows() -> None:
    rng = np.random.default_rng(4)
    w = _leaf(rng, 6, 3)
    idx = tgrad.tensor(np.array([1, 4, 4, -1], np.int32), dtype=tgrad.int32)
    bits = np.array([[0x7F81, 0x8000, 0x0001], [0x3F80, 0x4000, 0xBF80], [0x3F80, 0xC000, 0x3F80],
                     [0xFF80, 0x8000, 0xFFC3]], np.uint16)
    (g,) = autograd.grads_of([tgrad.take(w, idx, 0)], [_raw_bf16(bits)], [w])
    got = _bits(g)
    assert got[[0, 2, 3]].tolist() == [[0, 0, 0]] * 3  # no index: +0
    assert got[1].tolist() == [0x7FC0, 0x8000, 0x0001]  # one index: itself, the NaN canonical
    assert got[5].tolist() == [0xFF80, 0x8000, 0x7FC0]
    assert got[4].tolist() == [exact.sum_bits(bits[1:3, c], BF16, BF16) for c in range(3)]
