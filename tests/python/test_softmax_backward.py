"""softmax_backward(y, g, dim) = y_i (g_i - sum_j g_j y_j) and log_softmax_backward(z, g, dim) = g_i
- exp(z_i) sum_j g_j: every output the exact value rounded once (docs/numerics.md,
"softmax_backward, log_softmax_backward"), checked bit for bit against the references
(tgrad.conformance.softmax.reference_backward, reference_log_backward) on random and adversarial
rows, views and axes;
the same bytes on every thread count, CPU variant and fusion setting; typed refusals that change
nothing."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.softmax import bits_of, reference_backward, reference_log_backward
from every_setting import assert_same_bytes_everywhere  # noqa: E402

DTYPES = ("bfloat16", "float32")
OPS = ("softmax_backward", "log_softmax_backward")
FORWARD = {"softmax_backward": tgrad.softmax, "log_softmax_backward": tgrad.log_softmax}
REFERENCE = {"softmax_backward": reference_backward, "log_softmax_backward": reference_log_backward}


def _tensor(data: np.ndarray, dtype: str) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(np.asarray(data, np.float32), dtype=dtype)


def _want(op: str, y: tgrad.Tensor, g: tgrad.Tensor, dim: int, out_dtype: str) -> np.ndarray:
    yb, gb = bits_of(y.numpy()), bits_of(g.numpy())
    yb, gb = (yb.reshape(1), gb.reshape(1)) if yb.ndim == 0 else (yb, gb)
    d = dim % yb.ndim
    ym, gm = np.moveaxis(yb, d, -1), np.moveaxis(gb, d, -1)
    yr, gr = ym.reshape(-1, ym.shape[-1]), gm.reshape(-1, gm.shape[-1])
    got = [REFERENCE[op]([int(b) for b in a], [int(b) for b in c], str(y.dtype), str(g.dtype), out_dtype)
           for a, c in zip(yr, gr)]
    return np.moveaxis(np.array(got, np.int64).reshape(ym.shape), -1, d).reshape(y.numpy().shape)


def _check(y: tgrad.Tensor, g: tgrad.Tensor, dim: int = -1, out_dtype: str | None = None,
           op: str = "softmax_backward") -> None:
    out = getattr(tgrad, op)(y, g, dim, dtype=out_dtype)
    want_dtype = out_dtype or str(g.dtype)
    assert str(out.dtype) == want_dtype
    got = bits_of(out.numpy()).astype(np.int64)
    want = _want(op, y, g, dim, want_dtype)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (op, str(y.dtype), str(g.dtype), want_dtype, dim,
                           [(tuple(i), hex(got[tuple(i)]), hex(want[tuple(i)])) for i in bad[:4]])


@pytest.mark.parametrize("ydt", DTYPES)
@pytest.mark.parametrize("gdt", DTYPES)
@pytest.mark.parametrize("out", [None, "bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
def test_random_rows_are_the_exact_value_rounded_once(op: str, ydt: str, gdt: str, out: str | None) -> None:
    rng = np.random.default_rng(sum(map(ord, op + ydt + gdt + str(out))))
    for n in (1, 2, 7, 33, 130) if out is None else (1, 7, 33):
        x = _tensor(rng.standard_normal((2, n)) * 3, "float32")
        y = FORWARD[op](x, -1, dtype=ydt)  # a real forward output
        g = _tensor(rng.standard_normal((2, n)), gdt)
        _check(y, g, -1, out, op)
        _check(_tensor(rng.standard_normal((2, n)), ydt), g[:2], -1, out, op)  # any y (z > 0 too)


@pytest.mark.parametrize("dt", DTYPES)
def test_adversarial_rows(dt: str) -> None:
    rng = np.random.default_rng(7)
    tiny = np.float32(2.0**-130 if dt == "bfloat16" else 2.0**-147)
    n = 64
    y = tgrad.softmax(_tensor(rng.standard_normal((1, n)), "float32"), -1, dtype=dt)
    rows = [
        np.full(n, 0.75),                                   # g constant: g_i - S cancels to y's rounding error
        np.where(np.arange(n) % 2 == 0, 1.0, -1.0),         # ties
        np.zeros(n),                                        # all zeros: signed zeros
        -np.zeros(n),
        np.where(np.arange(n) % 3 == 0, tiny, -tiny),       # denormal gradients
        np.full(n, 3.0e38),                                 # huge: the products stay exact, results overflow
        rng.standard_normal(n) * 1e-30,
    ]
    for g in rows:
        _check(y, _tensor(g[None, :], dt))
    # y with zeros (softmax underflow), -0, denormals and huge values
    ys = np.array([0.0, -0.0, tiny, -tiny, 1.0, 0.5, 3.0e38, -2.0], np.float32)
    gs = np.array([1.0, -0.0, 0.0, 2.0, 1.0, -1.0, 1e-38, 3.0], np.float32)
    _check(_tensor(ys[None], dt), _tensor(gs[None], dt))
    _check(_tensor(ys[None], dt), _tensor(gs[None], "float32"), -1, "bfloat16")


def test_special_values_follow_ieee_with_the_rows_sum() -> None:
    y = _tensor(np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [np.nan, 0.5, 0.5], [np.inf, 1.0, -1.0]]), "float32")
    g = _tensor(np.array([[1.0, np.inf, 2.0], [1.0, np.inf, 2.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), "float32")
    _check(y, g)
    out = tgrad.softmax_backward(y, g).numpy()
    # row 0: S = inf; 0.5 (1 - inf), 0.5 (inf - inf), 0 (2 - inf)
    assert out[0][0] == -np.inf and np.isnan(out[0][1:]).all()
    assert np.isnan(out[1]).all()  # 0 * inf in the sum
    assert np.isnan(out[2]).all()
    assert out[3].tolist() == [-np.inf, -np.inf, np.inf]


@pytest.mark.parametrize("dt", DTYPES)
def test_log_softmax_backward_adversarial_rows(dt: str) -> None:
    op = "log_softmax_backward"
    mid = 1 + 2.0**-8  # a bf16 midpoint (float32 holds it): g_i - tiny rounds down, g_i + tiny up
    tiny = 2.0**-130 if dt == "bfloat16" else 2.0**-147
    zs = np.array([0.0, -0.0, -1.0, -100.0, -800.0, -1e30, 3.0, 150.0, 250.0, -2.0**-20, -0.6931, -5.5])
    rows = [
        (np.zeros(12), np.array([1.0, -1.0, 0.5, -0.5] * 3)),      # z = 0 everywhere, G = 0
        (zs, np.array([1.0, -1.0, 0.5, -0.5] * 3)),                # G = 0: g exactly
        (zs, np.array([0.0, 0.0, 0.0, 1.5] + [0.0] * 8)),          # G = g_3: z = 0 gives +0 there
        (zs, -np.zeros(12)),                                       # every g -0: signed zeros
        (zs, np.full(12, tiny)),                                   # subnormal gradients
        (zs, np.full(12, 3.0e38)),                                 # G past float32: overflow
        (zs, np.linspace(-2, 3, 12)),
        (np.full(12, -100.0), np.array([mid, -mid, 1.0] + [0.0] * 9)),    # anchors: G > 0
        (np.full(12, -100.0), np.array([mid, -mid, -1.0] + [0.0] * 9)),   # G < 0
    ]
    for z, g in rows:
        _check(_tensor(z[None], dt), _tensor(g[None], dt), -1, None, op)
        _check(_tensor(z[None], dt), _tensor(g[None], "float32"), -1, "bfloat16", op)
    _check(_tensor(zs[None], "float32"), _tensor(np.array([mid, -mid, 1.0] + [0.0] * 9)[None], "float32"), -1,
           "bfloat16", op)


def test_log_softmax_backward_special_values() -> None:
    op = "log_softmax_backward"
    z = _tensor(np.array([[-np.inf, np.inf, np.nan, -1.0], [-np.inf, np.inf, np.nan, -1.0],
                          [-np.inf, np.inf, 0.0, -1.0], [-np.inf, np.inf, -0.0, -1.0]]), "float32")
    g = _tensor(np.array([[1.0, 2.0, 3.0, -0.0], [1.0, -np.inf, 3.0, 0.0], [np.nan, 1.0, 1.0, 1.0],
                          [-0.0, 0.0, 2.0, -2.0]]), "float32")
    _check(z, g, -1, None, op)
    out = tgrad.log_softmax_backward(z, g).numpy()
    assert out[0][0] == 1.0 and out[0][1] == -np.inf and np.isnan(out[0][2])
    assert np.isnan(out[2]).all()
    assert np.isnan(out[3][1]) and out[3][2] == 2.0


def test_axes_views_and_shapes() -> None:
    rng = np.random.default_rng(3)
    x = _tensor(rng.standard_normal((3, 5, 4)), "float32")
    g = _tensor(rng.standard_normal((3, 5, 4)), "bfloat16")
    for dim in (0, 1, 2, -1):
        _check(tgrad.softmax(x, dim), g, dim)
    yt = tgrad.softmax(x, 1).permute(2, 0, 1)  # a strided view
    _check(yt, g.permute(2, 0, 1), 2)
    s = _tensor(np.array(0.25), "float32")
    assert tgrad.softmax_backward(s, _tensor(np.array(2.0), "float32")).numpy().tolist() == 0.25 * (2 - 0.5)
    e = _tensor(np.zeros((2, 0)), "float32")
    assert tgrad.softmax_backward(e, e).shape == (2, 0)


def test_bytes_do_not_depend_on_threads_variant_or_fusion() -> None:
    rng = np.random.default_rng(11)
    x = _tensor(rng.standard_normal((40, 700)), "float32")
    y = tgrad.softmax(x, -1).realize()
    z = tgrad.log_softmax(x, -1).realize()
    g = _tensor(rng.standard_normal((40, 700)), "bfloat16")
    gc = _tensor(np.full((40, 700), 0.5), "float32")

    def run() -> list[bytes]:
        return [tgrad.softmax_backward(y, g).numpy().tobytes(), tgrad.softmax_backward(y, gc, 0).numpy().tobytes(),
                (tgrad.softmax_backward(y, g * 2.0, dtype="bfloat16") * 3.0).numpy().tobytes(),
                tgrad.log_softmax_backward(z, g).numpy().tobytes(),
                tgrad.log_softmax_backward(z, gc, 0, dtype="bfloat16").numpy().tobytes()]

    assert_same_bytes_everywhere(run)


def test_a_fused_producer_and_consumer_give_the_ops_own_bytes() -> None:
    rng = np.random.default_rng(5)
    y = tgrad.softmax(_tensor(rng.standard_normal((9, 50)), "bfloat16"), -1).realize()
    g = _tensor(rng.standard_normal((9, 50)), "bfloat16")
    fusion = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        fused = tgrad.softmax_backward(y, g * 3.0) * 2.0
        plan = fused.explain()
        got = fused.numpy().tobytes()
    finally:
        tgrad.set_fusion(fusion)
    assert "softmax_backward" in plan, plan
    step = (tgrad.softmax_backward(y, (g * 3.0).realize()).realize() * 2.0).numpy().tobytes()
    assert got == step
    _check(y, (g * 3.0).realize())


def test_refusals_are_typed_and_allocate_nothing() -> None:
    y = _tensor(np.ones((2, 3)), "float32")
    i = tgrad.Tensor.from_numpy(np.ones((2, 3), np.int32), dtype=tgrad.int32)
    before = tgrad.live_tensors()
    cases = [(lambda: tgrad.softmax_backward(y, y, 2), errors.IndexOutOfRangeError),
             (lambda: tgrad.softmax_backward(y, y, -3), errors.IndexOutOfRangeError),
             (lambda: tgrad.softmax_backward(y, y[:1], -1), errors.ShapeMismatchError),
             (lambda: tgrad.softmax_backward(y, i), errors.DtypeUnsupportedError),
             (lambda: tgrad.softmax_backward(i, y), errors.DtypeUnsupportedError),
             (lambda: tgrad.softmax_backward(y, y, dtype="int32"), errors.DtypeUnsupportedError),
             (lambda: tgrad.softmax_backward(y, y, 0, axis=1), errors.InvalidArgumentError),
             (lambda: tgrad.softmax_backward(y, np.ones((2, 3))), errors.InvalidArgumentError),
             (lambda: tgrad.softmax_backward(y, y, 1.5), errors.InvalidArgumentError)]
    cases += [(lambda: tgrad.log_softmax_backward(y, y[:1]), errors.ShapeMismatchError),
              (lambda: tgrad.log_softmax_backward(y, i), errors.DtypeUnsupportedError)]
    for make, exc in cases:
        with pytest.raises(exc):
            make()
    assert tgrad.live_tensors() == before
    out = ffi.new("tgrad_tensor_t *")
    for op in (0, lib.TGRAD_SOFTMAX_LOGSUMEXP, 9):
        assert lib.tgrad_softmax_backward(op, y._h, y._h, 0, 0, out) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_softmax_backward(lib.TGRAD_SOFTMAX_SOFTMAX, y._h, y._h, 0, 0, ffi.NULL) == \
        lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_softmax_backward(lib.TGRAD_SOFTMAX_SOFTMAX, y._h, 0, 0, 0, out) != lib.TGRAD_OK
    assert out[0] == 0 and tgrad.live_tensors() == before


@pytest.mark.slow
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_sweep_long_rows_and_many_random_rows(op: str, dt: str) -> None:
    rng = np.random.default_rng(99)
    for n in (1000, 4099):
        x = _tensor(rng.standard_normal((2, n)) * 4, "float32")
        y = FORWARD[op](x, -1, dtype=dt)
        _check(y, _tensor(rng.standard_normal((2, n)), dt), -1, None, op)
        _check(y, _tensor(np.full((2, n), -1.5), dt), -1, None, op)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        y = _tensor(rng.standard_normal((1, n)) * float(rng.choice([1e-30, 1.0, 1e20])), dt)
        if op == "log_softmax_backward":
            y = _tensor(-np.abs(rng.standard_normal((1, n))) * float(rng.choice([1e-6, 1.0, 30.0])), dt)
        g = _tensor(rng.standard_normal((1, n)) * float(rng.choice([1e-30, 1.0, 1e15])), dt)
        _check(y, g, -1, str(rng.choice(DTYPES)), op)


def test_trace_records_and_validates_both_and_explain_names_them() -> None:
    rng = np.random.default_rng(8)
    x = _tensor(rng.standard_normal((3, 9)), "bfloat16")
    g = _tensor(rng.standard_normal((3, 9)), "float32")

    def fn(a: tgrad.Tensor, b: tgrad.Tensor) -> tuple[tgrad.Tensor, tgrad.Tensor]:
        return (tgrad.softmax_backward(a.softmax(-1), b, -1),
                tgrad.log_softmax_backward(a.log_softmax(0), b, 0, dtype="bfloat16"))

    tr = tgrad.trace(fn, x, g)
    assert set(OPS) <= {op.kind for op in tr.ops}
    report = tr.validate()
    assert report.state == "passed", [(r.kind, r.state, r.detail) for r in report.results if r.state == "failed"]
    judged = {r.kind: r.state for r in report.results}
    assert judged["softmax_backward"] == judged["log_softmax_backward"] == "passed"
    assert "log_softmax_backward" in tgrad.log_softmax_backward(x, g).explain()
