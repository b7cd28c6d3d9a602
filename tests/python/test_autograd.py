"""Gradients (docs/autograd.md): each kind's rule against float64 references (finite differences
in float64 for the derivative definitions, numpy's analytic float64 for compositions), within the
bound the roundings imply; same bytes on every CPU variant, thread count and fusion setting;
refusals that change nothing; no leaks; the Python API (grad, value_and_grad, backward, no_grad)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tgrad
from every_setting import assert_same_bytes_everywhere

F32, BF16 = tgrad.float32, tgrad.bfloat16
RNG = np.random.default_rng(36)


def T(a: object, dtype: object = F32) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.float32), dtype=dtype)


def f32(t: tgrad.Tensor) -> np.ndarray:
    return t.numpy(np.float32)


# ---- elementwise: each op's derivative by float64 central differences ------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


UNARY = {  # op: (float64 definition, points away from kinks and poles)
    "relu": (lambda x: np.maximum(x, 0), (-2, 2)),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), (-4, 4)),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), (-4, 4)),
    "silu": (lambda x: x / (1 + np.exp(-x)), (-6, 6)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "tanh": (np.tanh, (-3, 3)),
    "exp": (np.exp, (-3, 3)),
    "neg": (np.negative, (-3, 3)),
    "abs": (np.abs, (-3, 3)),
    "square": (np.square, (-3, 3)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.2, 4)),
    "sqrt": (np.sqrt, (0.2, 4)),
    "log": (np.log, (0.2, 4)),
    "log1p": (np.log1p, (-0.5, 4)),
    "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-3, 3)),
}
BINARY = {
    "add": (np.add, (-3, 3), (-3, 3)),
    "sub": (np.subtract, (-3, 3), (-3, 3)),
    "mul": (np.multiply, (-3, 3), (-3, 3)),
    "div": (np.divide, (-3, 3), (0.5, 3)),
    "maximum": (np.maximum, (-3, 3), (-3, 3)),
    "minimum": (np.minimum, (-3, 3), (-3, 3)),
    "pow": (np.power, (0.3, 3), (-2, 2)),
}


def _op(name: str):
    """The registry op `name` through the C ABI (every code, whatever Python spells it)."""
    from tgrad._ffi import ffi, lib

    code = getattr(lib, f"TGRAD_OP_{name.upper()}")

    def call(*ts: tgrad.Tensor) -> tgrad.Tensor:
        out = ffi.new("tgrad_tensor_t *")
        fn = lib.tgrad_unary if len(ts) == 1 else lib.tgrad_binary
        tgrad.errors._check(fn(code, *[t._h for t in ts], out))
        return tgrad.Tensor._adopt(int(out[0]))

    return call


def _points(lo: float, hi: float, n: int = 64) -> np.ndarray:
    x = RNG.uniform(lo, hi, n).astype(np.float32)
    return x[np.abs(x) > 0.05].astype(np.float32)  # away from relu's and abs's kink


def _fd(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_rule_is_the_derivative(name: str) -> None:
    ref, (lo, hi) = UNARY[name]
    x = _points(lo, hi)
    g = RNG.uniform(-2, 2, x.shape).astype(np.float32)
    op = _op(name)
    got = f32(tgrad.grad(lambda t: (op(t) * T(g)).sum())(T(x)))
    want = g * _fd(ref, x.astype(np.float64))
    # composed in float32: a few float32 roundings (docs/autograd.md)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_rule_is_the_derivative(name: str) -> None:
    ref, ra, rb = BINARY[name]
    a, b = _points(*ra), _points(*rb)
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    if name in ("maximum", "minimum"):
        b = np.where(np.abs(a - b) < 0.05, b + 0.2, b).astype(np.float32)
    op = _op(name)
    ga, gb = tgrad.grad(lambda p, q: op(p, q).sum(), argnums=(0, 1))(T(a), T(b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(f32(ga), _fd(lambda t: ref(t, b64), a64), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(f32(gb), _fd(lambda t: ref(a64, t), b64), rtol=2e-5, atol=1e-6)


def test_maximum_tie_splits_the_cotangent_as_torch() -> None:
    ga, gb = tgrad.grad(lambda p, q: tgrad.maximum(p, q).sum(), argnums=(0, 1))(T([1.0, 2.0]), T([1.0, 0.0]))
    assert f32(ga).tolist() == [0.5, 1.0] and f32(gb).tolist() == [0.5, 0.0]


def test_bf16_chain_rounds_once_at_the_end() -> None:
    x = _points(-3, 3)
    xb = T(x, BF16)
    got = f32(tgrad.grad(lambda t: _op('silu')(t).sum())(xb))
    x64 = f32(xb).astype(np.float64)
    want = _fd(UNARY["silu"][0], x64)
    ulp = np.float64(2.0) ** (np.floor(np.log2(np.abs(want))) - 7)
    assert np.all(np.abs(got - want) <= ulp)  # within one bf16 ulp


# ---- matmul ------------------------------------------------------------------------------------
def test_matmul_2d_against_numpy() -> None:
    a, b = RNG.standard_normal((5, 7)), RNG.standard_normal((7, 3))
    A, B = T(a, BF16), T(b, BF16)
    g = RNG.standard_normal((5, 3))
    ga, gb = tgrad.grad(lambda p, q: ((p @ q) * T(g)).sum(), argnums=(0, 1), grad_dtype=F32)(A, B)
    a64, b64 = f32(A).astype(np.float64), f32(B).astype(np.float64)
    gq = f32(T(g, F32)).astype(np.float64)
    # the product's cotangent: the bf16 forward's g * 1 chain in float32, rounded to bf16 for the product
    gbf = f32(T(f32(T(g)), BF16)).astype(np.float64)
    np.testing.assert_allclose(f32(ga), gbf @ b64.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f32(gb), a64.T @ gbf, rtol=1e-5, atol=1e-5)
    assert np.abs(f32(ga) - gq @ b64.T).max() < 0.05  # g's rounding to bf16 only


def test_batched_matmul_sums_a_broadcast_batch() -> None:
    a, b = RNG.standard_normal((4, 2, 3)), RNG.standard_normal((3, 5))
    A, B = T(a, BF16), T(b, BF16)
    ga, gb = tgrad.grad(lambda p, q: (p @ q).sum(), argnums=(0, 1), grad_dtype=F32)(A, B)
    a64, b64 = f32(A).astype(np.float64), f32(B).astype(np.float64)
    ones = np.ones((4, 2, 5))
    np.testing.assert_allclose(f32(ga), ones @ b64.T, rtol=1e-6)
    np.testing.assert_allclose(f32(gb), np.einsum("bmk,bmn->kn", a64, ones), rtol=1e-6)


# ---- reductions, views, broadcast, where, concat, cast --------------------------------------------
def test_reductions() -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[1, 2] = x[1, 0] = 5.0  # a tie in row 1
    X = T(x)
    np.testing.assert_array_equal(f32(tgrad.grad(lambda t: t.sum(axis=1).sum())(X)), np.ones((3, 4)))
    np.testing.assert_array_equal(f32(tgrad.grad(lambda t: t.mean())(X)), np.full((3, 4), np.float32(1 / 12)))
    gm = f32(tgrad.grad(lambda t: t.max(axis=1).sum())(X))
    want = (x == x.max(axis=1, keepdims=True)).astype(np.float64)
    np.testing.assert_array_equal(gm, want / want.sum(axis=1, keepdims=True))
    gn = f32(tgrad.grad(lambda t: t.min(axis=0, keepdims=True).sum())(X))
    assert gn.sum() == 4.0


def test_views_and_broadcast() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    g = RNG.standard_normal((4, 3)).astype(np.float32)

    def f(t: tgrad.Tensor) -> tgrad.Tensor:
        v = t.permute(2, 1, 0)[:, :, 1]  # [4, 3]: a permuted, selected view
        return (v * T(g)).sum()

    want = np.zeros_like(x)
    want[1] = g.T
    np.testing.assert_array_equal(f32(tgrad.grad(f)(T(x))), want)
    # a strided slice, a reshape and a broadcast row: each sum over the broadcast axis correctly rounded
    y = RNG.standard_normal((6,)).astype(np.float32)
    gy = f32(tgrad.grad(lambda t: (t[::2].reshape(3, 1) * T(np.ones((3, 5)))).sum())(T(y)))
    np.testing.assert_array_equal(gy, [5, 0, 5, 0, 5, 0])
    r = RNG.standard_normal((5,)).astype(np.float32)
    m = RNG.standard_normal((7, 5)).astype(np.float32)
    gr = f32(tgrad.grad(lambda t: (T(m) * t).sum())(T(r)))
    np.testing.assert_array_equal(gr, np.float32(m.astype(np.float64).sum(0)))  # correctly rounded


def test_where_concat_cast() -> None:
    a = RNG.standard_normal((3, 2)).astype(np.float32)
    b = RNG.standard_normal((3, 2)).astype(np.float32)
    c = T(a) > T(b)
    ga, gb = tgrad.grad(lambda p, q: tgrad.where(c, p, q).sum(), argnums=(0, 1))(T(a), T(b))
    assert (f32(ga) == (a > b)).all() and (f32(gb) == (a <= b)).all()
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    ga, gb = tgrad.grad(lambda p, q: (tgrad.cat([p, q], dim=1) * T(np.hstack([w[:, :2], w[:, 2:]]))).sum(),
                        argnums=(0, 1))(T(a), T(a[:, :1]))
    np.testing.assert_array_equal(f32(ga), w[:, :2])
    np.testing.assert_array_equal(f32(gb), w[:, 2:])
    gx = tgrad.grad(lambda t: t.float().sum())(T(a, BF16))
    assert gx.dtype == BF16 and (f32(gx) == 1).all()


def test_gather_is_a_correctly_rounded_scatter_add() -> None:
    x = T(RNG.standard_normal((5, 3)), BF16)
    idx = tgrad.tensor(np.array([[4, 0], [4, -1], [2, 4]], np.int32), dtype=tgrad.int32)
    g = np.array([1.0, 2.0**-9, 2.0**-9, 3.0, 2.0**-9, 1.0], np.float32)  # bf16 values
    seed = T(np.repeat(g.reshape(3, 2, 1), 3, axis=2), BF16)
    gx = f32(tgrad.grad(lambda t: (tgrad.take(t, idx, axis=0) * seed).sum(), grad_dtype=BF16)(x))
    # row 4 gets 1 + 2^-9 + 2^-9 + 2^-9 + ... : the exact sum rounded once to bf16, not a chain of adds
    exact = np.zeros(5)
    for (p, q), k in np.ndenumerate(idx.numpy()):
        exact[k % 5] += g[p * 2 + q]
    want = f32(T(exact.astype(np.float32), BF16))
    np.testing.assert_array_equal(gx, np.repeat(want[:, None], 3, axis=1))
    emb = tgrad.nn.Embedding(6, 4)
    tok = tgrad.tensor(np.array([1, 1, 5], np.int32), dtype=tgrad.int32)
    emb(tok).sum().backward()
    assert f32(emb.weight.grad)[:, 0].tolist() == [0, 2, 0, 0, 0, 1]


def test_several_paths_are_summed_once() -> None:
    x = T([1.0, 2.0, 3.0])
    g = tgrad.grad(lambda t: (t * t + t * 3 + t.exp()).sum())(x)
    x64 = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f32(g), 2 * x64 + 3 + np.exp(x64), rtol=1e-6)


def test_grad_dtype_float32_for_bf16_parameters() -> None:
    w = T(RNG.standard_normal((4, 4)), BF16)
    g = tgrad.grad(lambda t: (t * t).sum(), grad_dtype=F32)(w)
    assert g.dtype == F32
    np.testing.assert_array_equal(f32(g), 2 * f32(w))


# ---- determinism, refusals, leaks ------------------------------------------------------------------
def test_gradients_are_the_same_bytes_everywhere() -> None:
    a = T(RNG.standard_normal((16, 24)), BF16)
    b = T(RNG.standard_normal((24, 8)), BF16)
    bias = T(RNG.standard_normal((8,)), BF16)

    def run() -> list[bytes]:
        f = lambda p, q, r: _op('gelu')(p @ q + r).sum(axis=0).max()  # noqa: E731
        grads = tgrad.grad(f, argnums=(0, 1, 2))(a, b, bias)
        return [g.to_bytes() for g in grads]

    assert_same_bytes_everywhere(run)


def test_refusals_change_nothing() -> None:
    x = T(np.ones((2, 3)))
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="one"):
        tgrad.grad(lambda t: t * 2)(x)  # a seed is needed for 6 elements
    with pytest.raises(tgrad.errors.NoGradientRuleError, match="softmax_backward"):
        tgrad.grad(lambda t: tgrad.softmax_backward(t, t, dim=1).sum())(x)
    y = x.requires_grad_()
    out = y * 2
    live = tgrad.live_tensors()
    with pytest.raises(tgrad.errors.ShapeMismatchError):
        tgrad.autograd.grads_of([out], [T(np.ones(3))], [y])
    with pytest.raises(tgrad.errors.DtypeUnsupportedError):
        tgrad.autograd.grads_of([out], [T(np.ones((2, 3)))], [y], grad_dtype=tgrad.int32)
    with pytest.raises(tgrad.errors.DtypeUnsupportedError):
        tgrad.tensor(np.ones(3, np.int32), dtype=tgrad.int32).requires_grad_()
    assert tgrad.live_tensors() == live


def test_no_leaks() -> None:
    import gc

    gc.collect()
    tensors, buffers = tgrad.live_tensors(), tgrad.live_buffers()
    for _ in range(3):
        a = T(RNG.standard_normal((3, 4)), BF16)
        b = T(RNG.standard_normal((4, 2)), BF16)
        ga, gb = tgrad.grad(lambda p, q: ((p @ q)[1:] * 2).relu().mean(), argnums=(0, 1))(a, b)
        ga.realize(), gb.realize()
        w = T(np.ones(3)).requires_grad_()
        loss = (w * w).sum()
        loss.realize()
        loss.backward()
        del a, b, ga, gb, w, loss
    gc.collect()
    assert (tgrad.live_tensors(), tgrad.live_buffers()) == (tensors, buffers)


# ---- the torch-style API -----------------------------------------------------------------------------
def test_backward_accumulates_and_item_first_works() -> None:
    w = T([1.0, -2.0, 3.0]).requires_grad_()
    assert w.requires_grad and w.grad is None
    loss = (w * w).sum()
    assert float(loss) == 14.0  # realized before backward: its history is kept
    loss.backward()
    assert f32(w.grad).tolist() == [2.0, -4.0, 6.0]
    (w * 3).sum().backward()
    assert f32(w.grad).tolist() == [5.0, -1.0, 9.0]
    seed = T([1.0, 0.0, 2.0])
    w.grad = None
    (w * w).backward(seed)
    assert f32(w.grad).tolist() == [2.0, 0.0, 12.0]


def test_no_grad_keeps_no_history() -> None:
    w = T([1.0, 2.0]).requires_grad_()
    with tgrad.no_grad():
        assert not tgrad.is_grad_enabled()
        y = w * 2
        with tgrad.enable_grad():
            z = w * 2
    assert not y.requires_grad and z.requires_grad and tgrad.is_grad_enabled()
    d = (w * 2).detach()
    assert not d.requires_grad and f32(d).tolist() == [2.0, 4.0]

    @tgrad.no_grad()
    def f(t: tgrad.Tensor) -> tgrad.Tensor:
        return t * 3

    assert not f(w).requires_grad
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="does not require"):
        f(w).sum().backward()


def test_value_and_grad_over_pytrees_and_modules() -> None:
    params = {"w": T(np.ones(3)), "b": [T(np.zeros(1))]}
    x = T(RNG.standard_normal((4, 3)))

    def loss(p: dict, x: tgrad.Tensor) -> tuple[tgrad.Tensor, str]:
        return (((x * p["w"]).sum(axis=1) + p["b"][0]) ** 2).mean(), "aux"

    (value, aux), g = tgrad.value_and_grad(loss, has_aux=True)(params, x)
    assert aux == "aux" and set(g) == {"w", "b"} and isinstance(g["b"], list)
    x64 = f32(x).astype(np.float64)
    out = x64.sum(axis=1)
    np.testing.assert_allclose(f32(g["w"]), (2 * out / 4) @ x64, rtol=1e-5)
    np.testing.assert_allclose(f32(g["b"][0]), [(2 * out / 4).sum()], rtol=1e-5, atol=1e-6)
    assert abs(float(value) - (out**2).mean()) < 1e-4
    lin = tgrad.nn.Linear(3, 2)
    xb = T(RNG.standard_normal((4, 3)), BF16)
    gm = tgrad.grad(lambda m: m(xb).sum())(lin)
    assert set(gm) == {name for name, _ in lin.named_parameters()}
    assert all(p.requires_grad for p in lin.parameters())  # drawn parameters are leaves, as torch's
    frozen = T(np.ones(3))
    tgrad.grad(lambda t: (t * 2).sum())(frozen)
    assert not frozen.requires_grad  # grad's marks are taken back
    lin(xb).sum().backward()
    assert all(p.grad is not None for p in lin.parameters())
    np.testing.assert_array_equal(f32(lin.weight.grad), f32(gm["weight"]))
    lin.zero_grad()
    assert all(p.grad is None for p in lin.parameters())


def _train(steps: int) -> list[bytes]:
    """A 2-layer MLP fit to a fixed target by plain SGD over float32 master weights (bf16 compute):
    the loss per step, as bytes."""
    rng = np.random.default_rng(7)
    x = T(rng.standard_normal((32, 8)), BF16)
    y = T(np.sin(rng.standard_normal((32, 1)) * 2), F32)
    params = {"w1": T(rng.standard_normal((8, 16)) * 0.3), "w2": T(rng.standard_normal((16, 1)) * 0.3)}

    def loss_fn(p: dict) -> tgrad.Tensor:
        h = (x @ p["w1"].bfloat16()).relu()
        out = (h @ p["w2"].bfloat16()).float()
        return ((out - y) ** 2).mean()

    step = tgrad.value_and_grad(loss_fn)
    losses = []
    for _ in range(steps):
        loss, g = step(params)
        losses.append(f32(loss).tobytes())
        with tgrad.no_grad():
            params = {k: (v - g[k] * 0.1).realize() for k, v in params.items()}
    return losses


def test_a_small_mlp_trains_with_a_bit_identical_trajectory() -> None:
    losses = [float(np.frombuffer(b, np.float32)[0]) for b in _train(40)]
    assert losses[-1] < 0.5 * losses[0]
    assert_same_bytes_everywhere(lambda: _train(5))
