"""The derivative ops (tgrad.derivatives, codes 24-31) against the exact reference.

bf16 is proven on all 2^32 pairs in C (tests/c/test_elementwise.c with tests/c/grad_reference.h,
`nox -s exhaustive`; sampled in the core tier); here the bf16 kernels meet the conformance oracle
(tgrad.conformance.derivatives: float64 with an error bound, Fractions or mpmath at 400 bits where
that does not decide), and float32 (no exhaustive sweep) meets the same oracle, which shares no code
with libtgrad, on random bit patterns, values near 0, near each derivative's minimum, at the range
edges, and the special values pairwise. The Python API: operand order, broadcasting, promotion,
the generic path, and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.derivatives import GRAD_OPS, grad_bits

CODES = {"gelu_backward": 24, "gelu_tanh_backward": 25, "silu_backward": 26, "sigmoid_backward": 27,
         "tanh_backward": 28, "relu_backward": 29, "rsqrt_backward": 30, "sqrt_backward": 31}


def kernel(name: str, a: np.ndarray, b: np.ndarray, dtype: int) -> np.ndarray:
    t, fn = ("uint16_t[]", lib.tgrad_debug_elementwise) if dtype == 1 else ("uint32_t[]", lib.tgrad_debug_elementwise_f32)
    u = np.uint16 if dtype == 1 else np.uint32
    a, b = (np.ascontiguousarray(v, dtype=u) for v in np.broadcast_arrays(a, b))
    out = np.zeros_like(a)
    assert fn(CODES[name], ffi.from_buffer(t, a), ffi.from_buffer(t, b), ffi.from_buffer(t, out), a.size) == 0
    return out


def describe(name: str, a: np.ndarray, b: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(got != want)
    rows = [f"{name}(0x{int(a.flat[i]):x}, 0x{int(b.flat[i]):x}) = 0x{int(got.flat[i]):x}, want 0x{int(want.flat[i]):x}"
            for i in bad[:6]]
    return f"{bad.size} of {got.size} differ: " + "; ".join(rows)


def f32_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


SPECIAL32 = f32_bits([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38,
                      3.4e38, -3.4e38, -0.7517915, -1.2784645, 1e-20, -1e-20, 100.0, -100.0, 1e19])
SPECIAL16 = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x3F00, 0xBF00, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8001,
                      0x0003, 0x0080, 0x7F7F, 0xFF7F, 0xBF40, 0xBFA4, 0x4040, 0xC2C8, 0x5F30, 0x1F80], np.uint16)


def inputs32(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bits, moderate values, tiny and near-root x, each against random and moderate g."""
    k = n // 4
    x = np.concatenate([
        rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32),
        f32_bits(rng.uniform(-12, 12, k)),
        f32_bits(rng.choice([-1, 1], k) * 2.0 ** rng.uniform(-149, -40, k)),
        f32_bits(rng.choice([-0.7517915, -1.2784645, 0.0], k) + rng.uniform(-2**-12, 2**-12, k))])
    g = np.concatenate([
        rng.integers(0, 1 << 32, 2 * k, dtype=np.uint64).astype(np.uint32),
        f32_bits(rng.choice([-1, 1], 2 * k) * 2.0 ** rng.uniform(-149, 127.9, 2 * k))])
    return x, g[rng.permutation(g.size)]


@pytest.mark.parametrize("name", GRAD_OPS)
def test_bf16_matches_the_oracle_on_random_and_special_pairs(name: str) -> None:
    rng = np.random.default_rng(36)
    a = rng.integers(0, 1 << 16, 3000, dtype=np.uint32).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 3000, dtype=np.uint32).astype(np.uint16)
    sa, sb = (v.ravel() for v in np.meshgrid(SPECIAL16, SPECIAL16))
    a, b = np.concatenate([a, sa]), np.concatenate([b, sb])
    got, want = kernel(name, a, b, 1), grad_bits(name, a, b, 1)
    assert np.array_equal(got, want), describe(name, a, b, got, want)


@pytest.mark.parametrize("name", GRAD_OPS)
def test_float32_matches_the_oracle(name: str) -> None:
    x, g = inputs32(np.random.default_rng(3600 + CODES[name]), 4000)
    sa, sb = (v.ravel() for v in np.meshgrid(SPECIAL32, SPECIAL32))
    a, b = np.concatenate([x, sa]), np.concatenate([g, sb])
    got, want = kernel(name, a, b, 2), grad_bits(name, a, b, 2)
    assert np.array_equal(got, want), describe(name, a, b, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", GRAD_OPS)
def test_float32_matches_the_oracle_on_many_pairs(name: str) -> None:
    x, g = inputs32(np.random.default_rng(36000 + CODES[name]), 200_000)
    got, want = kernel(name, x, g, 2), grad_bits(name, x, g, 2)
    assert np.array_equal(got, want), describe(name, x, g, got, want)


def test_float32_slow_path_is_taken_and_always_decides() -> None:
    def counts(name: str) -> np.ndarray:
        c = np.zeros(3, np.int64)
        assert lib.tgrad_debug_f32_slow_path(CODES[name], ffi.from_buffer("int64_t[]", c), 3) == 0
        return c

    before = counts("gelu_backward")
    # x tiny: g/2 a subnormal midpoint (3 * 2^-149 / 2), decided by the sign of g x
    got = kernel("gelu_backward", f32_bits([1e-30, -1e-30]), np.array([3, 3], np.uint32), 2)
    assert [int(v) for v in got] == [2, 1]  # 1.5 units + tiny: 2; 1.5 units - tiny: 1
    after = counts("gelu_backward")
    assert after[1] - before[1] == 2 and after[2] == before[2]


def test_the_python_functions_are_the_registry_ops_with_x_first() -> None:
    x = tgrad.Tensor.from_numpy(np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32))
    g = tgrad.Tensor.from_numpy(np.array([1.0, 2.0, 3.0, -1.0, 0.5], np.float32))
    for name in GRAD_OPS:
        fn = getattr(tgrad, name)
        assert fn is getattr(tgrad.derivatives, name)
        got = fn(x, g).numpy(np.float32)
        assert np.array_equal(got, tgrad.ops.apply(name, x, g).numpy(np.float32), equal_nan=True)
        assert tgrad.ops.REGISTRY[name].code == CODES[name]
    # operand order: the forward value first, the cotangent second
    assert tgrad.sigmoid_backward(tgrad.Tensor.from_numpy(np.array([0.5], np.float32)),
                                  tgrad.Tensor.from_numpy(np.array([4.0], np.float32))).numpy(np.float32)[0] == 1.0
    assert tgrad.relu_backward(x, g).numpy(np.float32).tolist() == [0.0, 0.0, 0.0, -1.0, 0.5]
    assert tgrad.sqrt_backward(tgrad.Tensor.from_numpy(np.array([2.0], np.float32)), 1.0).numpy(np.float32)[0] == 0.25


def test_broadcasting_and_float32_promotion() -> None:
    x = tgrad.Tensor.from_numpy(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
    g = tgrad.Tensor.from_numpy(np.array([1.0, -2.0, 0.1, 4.0], np.float32), dtype=tgrad.float32)
    out = tgrad.gelu_backward(x, g)
    assert out.shape == (3, 4) and out.dtype == tgrad.float32
    xb, gb = np.broadcast_arrays(x.numpy(np.float32), g.numpy(np.float32))
    want = grad_bits("gelu_backward", f32_bits(xb), f32_bits(gb), 2).view(np.float32)
    assert np.array_equal(out.numpy(np.float32), want)


def test_bad_operands_raise_typed_errors() -> None:
    x = tgrad.Tensor.from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(errors.TgradError):
        tgrad.gelu_backward(x, tgrad.Tensor.from_numpy(np.zeros((4,), np.float32)))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.ops.apply("gelu_backward", x)
