"""rms_norm_backward(x, g, shape, w, eps) and layer_norm_backward(x, g, shape, w, eps), the norms' dx
(issue 36): every output the exact value rounded once (docs/numerics.md, "rms_norm_backward,
layer_norm_backward"), checked bit for bit against norm_backward_reference.py (Fractions and
mpmath, independent of libtgrad's method) on random rows and on constructed rows whose values are
rounding midpoints (so the exact fallback runs, and is counted); the same bytes on every thread
count and CPU variant; the gradient engine's dx is this op's; typed refusals that change nothing."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.softmax import bits_of
from every_setting import assert_same_bytes_everywhere  # noqa: E402
from norm_backward_reference import reference_row  # noqa: E402

DTYPES = ("bfloat16", "float32")
OPS = {"rms": tgrad.rms_norm_backward, "layer": tgrad.layer_norm_backward}
CODE = {"bfloat16": 1, "float32": 2}


def T(a, dtype: str = "float32") -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.asarray(a, np.float32), dtype=dtype)


def _check(op: str, x, g, w=None, eps: float = 1e-5, naxes: int = 1, dtype: str | None = None) -> np.ndarray:
    out = OPS[op](x, g, list(x.shape[x.ndim - naxes:]), w, eps, dtype=dtype)
    want_dt = dtype or str(g.dtype)
    assert str(out.dtype) == want_dt and tuple(out.shape) == tuple(x.shape)
    n = int(np.prod(x.shape[x.ndim - naxes:]))
    got = bits_of(out.numpy()).astype(np.int64).reshape(-1, n)
    xs = x.numpy().astype(np.float64).reshape(-1, n)
    gs = g.numpy().astype(np.float64).reshape(-1, n)
    ws = None if w is None else w.numpy().astype(np.float64).reshape(n).tolist()
    for r in range(xs.shape[0]):
        want = reference_row(xs[r].tolist(), gs[r].tolist(), ws, eps, op == "layer", CODE[want_dt])
        bad = [(i, hex(a), hex(b)) for i, (a, b) in enumerate(zip(got[r], want)) if a != b]
        assert not bad, (op, str(x.dtype), str(g.dtype), want_dt, r, bad[:4])
    return got


@pytest.mark.parametrize("xdt", DTYPES)
@pytest.mark.parametrize("gdt", DTYPES)
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_random_rows_are_the_exact_value_rounded_once(op: str, xdt: str, gdt: str, weight: bool) -> None:
    rng = np.random.default_rng(sum(map(ord, op + xdt + gdt + str(weight))))
    for n, out in ((1, None), (2, "float32"), (7, None), (33, "bfloat16")):
        x = T(rng.standard_normal((2, n)) * 3, xdt)
        g = T(rng.standard_normal((2, n)), gdt)
        w = T(rng.uniform(-2, 2, n), "bfloat16") if weight else None
        _check(op, x, g, w, dtype=out)


@pytest.mark.parametrize("op", OPS)
def test_scales_eps_and_axes(op: str) -> None:
    rng = np.random.default_rng(3)
    for sx, sg, eps in ((2.0**-60, 2.0**40, 0.0), (2.0**50, 2.0**-90, 1e-6), (1e30, 1e8, 2.0**-7),
                        (2.0**-120, 1.0, 2.0**-256), (1.0, 2.0**-140, 1e-5)):
        x = T(rng.standard_normal((2, 9)) * sx, "float32")
        _check(op, x, T(rng.standard_normal((2, 9)) * sg, "float32"), eps=eps)
        _check(op, x, T(rng.standard_normal((2, 9)) * sg, "bfloat16"), eps=eps, dtype="bfloat16")
    x = T(rng.standard_normal((2, 3, 4)), "bfloat16")  # two normalized axes, and a strided view
    _check(op, x, T(rng.standard_normal((2, 3, 4)), "bfloat16"), T(rng.uniform(0.5, 2, (3, 4)), "bfloat16"), naxes=2)
    xt = T(rng.standard_normal((5, 3)), "bfloat16").transpose(0, 1)
    _check(op, xt, T(rng.standard_normal((3, 5)), "float32"), T(rng.standard_normal(5), "float32"))


def _midpoint_rows() -> list[tuple[str, tgrad.Tensor, tgrad.Tensor, tgrad.Tensor | None, float, int]]:
    """Rows whose first value is exactly a rounding midpoint (rinv rational: eps makes r a square):
    rms over x = [3, 4], eps 3.5 (r = 16) with S = sum(gw x) = 0, so dx_0 = gw_0 / 4; layer over
    x = [0, 0, 8, 8], eps 0 (r = 16), where dx_0 = (gw_0 - gw_1) / 8."""
    w32 = T([673 / 512] * 2, "float32")
    return [
        ("rms", T([[3, 4]]), T([[4.015625, -3.01171875]]), None, 3.5, 0x3F80),  # 1 + 2^-8 -> 1 (bf16)
        ("rms", T([[3, 4]]), T([[24929 / 8192, -74787 / 32768]]), w32, 3.5, 0x3F800000),  # 1 + 2^-24 (f32)
        ("layer", T([[0, 0, 8, 8]]), T([[8.0625, 0.03125, 1, 2]]), None, 0.0, 0x3F80),  # 1 + 2^-8 (bf16)
        ("rms", T([[3, 4]]), T([[4.046875, -3.03515625]]), None, 3.5, 0x3F82),  # 1 + 3 2^-8 -> 1 + 2^-6
    ]


def test_midpoints_take_the_exact_fallback_and_go_to_even() -> None:
    before = tgrad.norms.slow_path_counts()[1]
    for op, x, g, w, eps, first in _midpoint_rows():
        dt = "float32" if first > 0xFFFF else "bfloat16"
        got = _check(op, x, g, w, eps, dtype=dt)
        assert got[0, 0] == first, (op, hex(int(got[0, 0])))
    assert tgrad.norms.slow_path_counts()[1] >= before + 4  # each midpoint was decided exactly


def test_zeros_nan_and_overflow() -> None:
    # layer over two elements: dx is exactly 0 (+0); eps 0 and a constant row: 0 / 0 is NaN
    assert bits_of(tgrad.layer_norm_backward(T([[1, 5]]), T([[-2, 3]]), 2, eps=0.0).numpy()).tolist() == [[0, 0]]
    _check("layer", T([[1, 5], [2, 3]]), T([[-2, 3], [0, 0]]), eps=0.0)
    out = tgrad.rms_norm_backward(T([[0, 0], [1, 2]]), T([[1, 2], [1, 2]]), 2, eps=0.0).numpy()
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    out = tgrad.rms_norm_backward(T([[1, np.nan], [1, 2]]), T([[1, 2], [1, 2]]), 2).numpy()
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    _check("rms", T([[2.0**-20, 3e-7]]), T([[3e38, -3e38]]))  # results past float32's range: inf
    _check("rms", T([[1.0, 2.0, 3.0]]), T([[2.0**-149, 0, -(2.0**-149)]]), eps=0.0)  # subnormal results


def test_same_bytes_on_every_thread_count_and_variant() -> None:
    rng = np.random.default_rng(11)
    x, g = T(rng.standard_normal((64, 48)), "bfloat16"), T(rng.standard_normal((64, 48)), "float32")
    w = T(rng.uniform(0.5, 1.5, 48), "bfloat16")
    mids = _midpoint_rows()

    def run() -> list[bytes]:
        outs = [OPS[op](x, g, 48, w, dtype=dt).numpy().tobytes() for op in OPS for dt in DTYPES]
        return outs + [OPS[op](a, b, a.shape[-1], c, e).numpy().tobytes() for op, a, b, c, e, _ in mids]
    assert_same_bytes_everywhere(run)


@pytest.mark.parametrize("op", OPS)
def test_the_gradient_engine_uses_the_op(op: str) -> None:
    rng = np.random.default_rng(5)
    x, w, b = T(rng.standard_normal((3, 8)), "bfloat16"), T(rng.uniform(0.5, 1.5, 8), "bfloat16"), \
        T(rng.standard_normal(8), "bfloat16")
    G = T(rng.standard_normal((3, 8)), "float32")
    for chain in ("float32", "bfloat16"):
        if op == "rms":
            f = lambda a: (tgrad.rms_norm(a, 8, w, eps=1e-5).float() * G).sum()  # noqa: E731
        else:
            f = lambda a: (tgrad.layer_norm(a, 8, w, b, eps=1e-5).float() * G).sum()  # noqa: E731
        dx = tgrad.grad(f, grad_dtype=chain)(x)
        want = OPS[op](x, G.to(chain) if chain == "bfloat16" else G, 8, w, 1e-5, dtype=chain)
        assert dx.numpy().tobytes() == want.numpy().tobytes(), chain


def test_refusals_are_typed_and_allocate_nothing() -> None:
    x = T(np.ones((2, 3)))
    i = tgrad.Tensor.from_numpy(np.ones((2, 3), np.int32), dtype=tgrad.int32)
    before = tgrad.live_tensors()
    for f in OPS.values():
        cases = [(lambda: f(x, x[:1], 3), errors.ShapeMismatchError),        # g's shape is not x's
                 (lambda: f(x, x, 3, T(np.ones(4))), errors.ShapeMismatchError),  # weight of the wrong length
                 (lambda: f(x, x, 2), errors.ShapeMismatchError),            # not x's trailing shape
                 (lambda: f(x, i, 3), errors.DtypeUnsupportedError),
                 (lambda: f(x, x, 3, dtype="int32"), errors.DtypeUnsupportedError),
                 (lambda: f(x, x, 3, eps=-1.0), errors.InvalidArgumentError),
                 (lambda: f(x, np.ones((2, 3)), 3), errors.InvalidArgumentError)]
        for make, exc in cases:
            with pytest.raises(exc):
                make()
    assert tgrad.live_tensors() == before
    out = ffi.new("tgrad_tensor_t *")
    for make in (lib.tgrad_rms_norm_backward, lib.tgrad_layer_norm_backward):
        assert make(x._h, x._h, 0, 3, 1e-5, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT  # naxes past ndim
        assert make(x._h, x._h, 0, 0, 1e-5, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT
        assert make(x._h, x._h, 0, 1, 1e-5, 0, ffi.NULL) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert out[0] == 0 and tgrad.live_tensors() == before
    with pytest.raises(errors.NoGradientRuleError):
        tgrad.grad(lambda a: tgrad.rms_norm_backward(a, x, 3).float().sum())(x)


def _cancelling_row(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """x and g built for cancellation: x offset by 1000, +-3, or spread over 2^+-40; g = x / 2 plus
    tiny noise (rms: gw_i - x_i c cancels), nearly constant (layer: gw_i - mean(gw) cancels), or
    2 (x - mu) + 1 (layer: both terms cancel)."""
    x = [rng.standard_normal(n), 1000 + rng.standard_normal(n) * 0.01, np.where(rng.random(n) < 0.5, 3.0, -3.0),
         rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))][int(rng.integers(0, 4))]
    g = [rng.standard_normal(n), x * 0.5 + rng.standard_normal(n) * 1e-6, 0.75 + rng.standard_normal(n) * 1e-7,
         (x - x.mean()) * 2 + 1.0][int(rng.integers(0, 4))]
    return x, g


def _cancelling_rows(seed: int, count: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.choice([2, 3, 5, 8, 17, 64]))
        x, g = _cancelling_row(rng, n)
        xdt, gdt, odt = (str(rng.choice(DTYPES)) for _ in range(3))
        w = T(rng.uniform(0.5, 1.5, n), "bfloat16") if rng.integers(0, 2) else None
        _check(str(rng.choice(list(OPS))), T(x[None], xdt), T(g[None], gdt), w,
               float(rng.choice([0.0, 1e-6, 1e-5, 2.0**-7])), dtype=odt)


def test_cancelling_rows() -> None:
    _cancelling_rows(17, 60)


@pytest.mark.slow
def test_sweep_cancelling_rows() -> None:
    _cancelling_rows(18, 3000)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_sweep_long_rows(op: str) -> None:
    rng = np.random.default_rng(99)
    for n in (1000, 4099):
        x = T(rng.standard_normal((2, n)) * 4, "bfloat16")
        _check(op, x, T(rng.standard_normal((2, n)), "bfloat16"), T(rng.uniform(0.5, 1.5, n), "bfloat16"))
        _check(op, x, T(np.full((2, n), -1.5), "float32"))
