"""Gradient rules of the row kinds and the derivative-op wiring (docs/autograd.md, hwire): the
elementwise rules are exactly the one-rounding derivative ops' bytes; softmax and log_softmax
exactly tgrad.softmax_backward's; rope exactly tgrad.rope_backward's; logsumexp and the norms
(dx: the one-rounding rms_norm_backward / layer_norm_backward, checked bit for bit in
test_norm_backward.py; dweight, dbias: float32 compositions) within their bounds of float64
references; slice_scatter
exact; the backward nodes themselves refused (second order); same bytes on every setting."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from every_setting import assert_same_bytes_everywhere

F32, BF16 = tgrad.float32, tgrad.bfloat16
RNG = np.random.default_rng(3636)


def T(a: object, dtype: object = F32) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.float32), dtype=dtype)


def f32(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy(np.float32)


def f64(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy(np.float32).astype(np.float64)


def B(t: tgrad.Tensor) -> bytes:
    """A tensor's values (bf16 or float32, exactly) as bytes."""
    return t.numpy(np.float32).tobytes()


def _fd(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f at every element of x (float64)."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


# ---- elementwise: the rule is the derivative op, byte for byte ---------------------------------------
READS_Y = {"sigmoid", "tanh", "rsqrt", "sqrt"}
OPS = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "rsqrt", "sqrt"]


def _fwd(name: str, t: tgrad.Tensor) -> tgrad.Tensor:
    from tgrad._ffi import ffi, lib

    out = ffi.new("tgrad_tensor_t *")
    tgrad.errors._check(lib.tgrad_unary(getattr(lib, f"TGRAD_OP_{name.upper()}"), t._h, out))
    return tgrad.Tensor._adopt(int(out[0]))


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "f32"])
@pytest.mark.parametrize("name", OPS)
def test_elementwise_rule_is_the_derivative_op(name: str, dtype: object) -> None:
    lo = 0.1 if name in ("rsqrt", "sqrt") else -4.0
    x = T(RNG.uniform(lo, 4.0, 96), dtype)
    g = T(RNG.uniform(-2, 2, 96), dtype)
    # (f(x) * g).sum(): f(x)'s cotangent is g * 1 = g exactly (mul's rule), then the derivative op
    got = tgrad.grad(lambda t: (_fwd(name, t) * g).sum())(x)
    v = _fwd(name, x) if name in READS_Y else x
    want = getattr(tgrad.derivatives, f"{name}_backward")(v, g)
    assert got.dtype == dtype and B(got) == B(want)


@pytest.mark.parametrize("name", OPS)
def test_float32_chain_over_bf16_is_the_float32_op(name: str) -> None:
    lo = 0.1 if name in ("rsqrt", "sqrt") else -4.0
    x = T(RNG.uniform(lo, 4.0, 64), BF16)
    g = T(RNG.uniform(-2, 2, 64), F32)
    got = tgrad.grad(lambda t: (_fwd(name, t).float() * g).sum(), grad_dtype=F32)(x)
    v = _fwd(name, x) if name in READS_Y else x
    want = getattr(tgrad.derivatives, f"{name}_backward")(v.float(), g)  # x cast exactly: one rounding
    assert got.dtype == F32 and B(got) == B(want)


# ---- softmax kind ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "f32"])
def test_softmax_and_log_softmax_rules_are_the_backward_op(dtype: object) -> None:
    x = T(RNG.standard_normal((3, 7)) * 2, dtype)
    g = T(RNG.standard_normal((3, 7)), dtype)
    for fwd, bwd in ((tgrad.softmax, tgrad.softmax_backward), (tgrad.log_softmax, tgrad.log_softmax_backward)):
        got = tgrad.grad(lambda t: (fwd(t, dim=1) * g).sum())(x)
        want = bwd(fwd(x, dim=1), g, dim=1)
        assert B(got) == B(want)
        # and the mathematics, in float64: within one rounding of the dtype (plus y's own rounding)
        x64, g64 = f64(x), f64(g)
        s = np.exp(x64 - x64.max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
        ref = s * (g64 - (g64 * s).sum(1, keepdims=True)) if fwd is tgrad.softmax else g64 - s * g64.sum(1, keepdims=True)
        tol = 2.0**-7 if dtype is BF16 else 2.0**-20
        np.testing.assert_allclose(f64(got), ref, rtol=4 * tol, atol=4 * tol * np.abs(g64).max())


def test_logsumexp_rule_is_g_times_softmax() -> None:
    x64 = RNG.standard_normal((4, 6))
    g64 = RNG.standard_normal(4)
    x, g = T(x64), T(g64)
    got = tgrad.grad(lambda t: (tgrad.logsumexp(t, dim=1) * g).sum())(x)
    xr = f64(x)
    # the definition, by float64 central differences of the loss
    want = _fd(lambda a: float((np.log(np.exp(a).sum(1)) * f64(g)).sum()), xr)
    # softmax rounded to float32, the product rounded in float32: two float32 roundings
    np.testing.assert_allclose(f64(got), want, rtol=1e-6, atol=1e-7)


def test_second_order_is_refused_naming_the_backward_node() -> None:
    x = T(np.ones((2, 3)))
    with pytest.raises(tgrad.errors.NoGradientRuleError, match="softmax_backward"):
        tgrad.grad(lambda t: tgrad.softmax_backward(t, t, dim=1).sum())(x)
    xb = T(np.ones((1, 2, 4)), BF16)
    with pytest.raises(tgrad.errors.NoGradientRuleError, match="rope_backward"):
        tgrad.grad(lambda t: tgrad.rope_backward(t, np.arange(2, dtype=np.int32)).sum())(xb)


# ---- rope --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_rule_is_rope_backward(interleaved: bool) -> None:
    x = T(RNG.standard_normal((2, 5, 8)), BF16)
    g = T(RNG.standard_normal((2, 5, 8)), BF16)
    pos = np.arange(3, 8, dtype=np.int32)
    got = tgrad.grad(lambda t: (tgrad.rope(t, pos, 100.0, rotary_dim=6, interleaved=interleaved) * g).sum())(x)
    want = tgrad.rope_backward(g, pos, 100.0, rotary_dim=6, interleaved=interleaved)
    assert B(got) == B(want)


# ---- norms: dx (one rounding) and dweight, dbias (float32 compositions) against float64 finite differences
def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _ln(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_norm_rules_against_float64(kind: str) -> None:
    shape = (3, 8)
    x, w, b = T(RNG.standard_normal(shape), BF16), T(RNG.uniform(0.5, 1.5, 8), BF16), T(RNG.standard_normal(8), BF16)
    g = RNG.standard_normal(shape)
    G = T(g, F32)
    eps = 1e-5
    if kind == "rms":
        def f(a, c):
            return (tgrad.rms_norm(a, 8, c, eps=eps).float() * G).sum()
        args = (x, w)
        ref = lambda a, c: float((_rms(a, c, eps) * g).sum())  # noqa: E731
    else:
        def f(a, c, d):
            return (tgrad.layer_norm(a, 8, c, d, eps=eps).float() * G).sum()
        args = (x, w, b)
        ref = lambda a, c, d=f64(b): float((_ln(a, c, d, eps) * g).sum())  # noqa: E731
    grads = tgrad.grad(f, argnums=tuple(range(len(args))), grad_dtype=F32)(*args)
    vals = [f64(a) for a in args]
    for k, got in enumerate(grads):
        def fk(v, k=k):
            vs = list(vals)
            vs[k] = v
            return ref(*vs)
        want = _fd(fk, vals[k])
        # a dozen float32 roundings on values of size ~ |g| |w| rinv (docs/autograd.md): 2^-18 of the scale
        scale = np.abs(g).max() * 2 * max(1.0, np.abs(want).max())
        assert np.all(np.abs(f64(got) - want) <= 2.0**-18 * scale + 1e-7), (k, f64(got) - want)


def test_norm_bf16_chain_rounds_once_at_the_end() -> None:
    x, w = T(RNG.standard_normal((2, 16)), BF16), T(RNG.uniform(0.5, 1.5, 16), BF16)
    gx32, gw32 = tgrad.grad(lambda a, c: tgrad.rms_norm(a, 16, c).float().square().sum(), argnums=(0, 1),
                            grad_dtype=F32)(x, w)
    # bf16 chain: the same composition with a bf16 seed, rounded to bf16 once at the end
    gx, gw = tgrad.grad(lambda a, c: tgrad.rms_norm(a, 16, c).float().square().sum(), argnums=(0, 1))(x, w)
    assert gx.dtype == BF16 and gw.dtype == BF16
    # within one bf16 ulp (+ the forward's own square rounding path differs only in dtype of chain)
    for lo, hi in ((gx, gx32), (gw, gw32)):
        h = f64(hi)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(h), 2.0**-20))) - 7)
        assert np.all(np.abs(f64(lo) - h) <= 2 * ulp)


# ---- slice_scatter -------------------------------------------------------------------------------
def test_slice_scatter_rule_is_exact() -> None:
    dst, src = T(RNG.standard_normal((3, 6))), T(RNG.standard_normal((3, 2)))
    g = RNG.standard_normal((3, 6)).astype(np.float32)
    gd, gs = tgrad.grad(lambda d, s: (tgrad.slice_scatter(d, s, 1, 3) * T(g)).sum(), argnums=(0, 1))(dst, src)
    want_d = g.copy()
    want_d[:, 3:5] = 0
    assert f32(gd).tobytes() == want_d.tobytes()
    assert f32(gs).tobytes() == np.ascontiguousarray(g[:, 3:5]).tobytes()


# ---- same bytes everywhere -----------------------------------------------------------------------
def test_row_kind_gradients_same_bytes_everywhere() -> None:
    x = T(RNG.standard_normal((2, 4, 8)), BF16)
    w = T(RNG.uniform(0.5, 1.5, 8), BF16)
    pos = np.arange(4, dtype=np.int32)

    def run() -> list[bytes]:
        def f(a, c):
            h = tgrad.rope(tgrad.rms_norm(a, 8, c), pos)
            h = tgrad.layer_norm(_fwd("silu", h), 8)
            return (tgrad.log_softmax(h, dim=-1) + tgrad.softmax(h, dim=-1)).sum() + tgrad.logsumexp(h, dim=-1).sum()

        for gd in (None, F32):
            grads = tgrad.grad(f, argnums=(0, 1), grad_dtype=gd)(x, w)
        return [B(g) for g in grads]

    assert_same_bytes_everywhere(run)
