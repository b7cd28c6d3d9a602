"""tgrad.optim (SGD, AdamW) and tgrad.nn.utils' clipping: the documented float32 arithmetic
(docs/numerics.md, "Optimizers"), checked op by op against exact rational arithmetic, against a
float64 reference within stated bounds, the same bytes on every setting, and bad input refused
with nothing changed. tests/python/test_optim_interop.py compares with torch."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.nn.utils import clip_grads_by_norm, clip_grads_by_value, grad_norm
from tgrad.optim import SGD, AdamW
from tgrad.optim import functional as OF
from tgrad.optim._arith import mul_add
from tgrad.optim._rebind import rebind_all

from every_setting import assert_same_bytes_everywhere


class Param(tgrad.Tensor):
    """A Tensor with a .grad slot, as the gradient engine sets it."""

    __slots__ = ("grad",)


def f32(a: Any) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.float32), dtype=tgrad.float32)


def param(a: np.ndarray, dtype: Any = None) -> Param:
    p = Param.from_numpy(np.asarray(a, np.float32), dtype=dtype or tgrad.float32)
    assert isinstance(p, Param)
    p.grad = None
    return p


def raw(t: tgrad.Tensor) -> bytes:
    return bytes(t.numpy().tobytes())


def rn32(x: Fraction) -> np.float32:
    """The float32 nearest to x, ties to even (no double rounding)."""
    guess = np.float32(float(x))
    best = None
    for c in (np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(c):
            continue
        key = (abs(Fraction(float(c)) - x), int(np.array(c).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, c)
    assert best is not None
    return best[1]


def test_mul_add_rounds_once(rng: np.random.Generator) -> None:
    n = 400
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    c = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)).astype(np.float32)
    s = float(np.float32(-0.1234567))
    by_scalar = mul_add(f32(c), f32(a), s).numpy()
    by_tensor = mul_add(f32(c), f32(a), f32(b)).numpy()
    for i in range(n):
        assert by_scalar[i] == rn32(Fraction(float(c[i])) + Fraction(float(a[i])) * Fraction(s)), i
        assert by_tensor[i] == rn32(Fraction(float(c[i])) + Fraction(float(a[i])) * Fraction(float(b[i]))), i


def test_mul_add_keeps_inf_and_nan() -> None:
    out = mul_add(f32([1.0, 1.0, np.inf, 1.0]), f32([np.inf, np.nan, 1.0, 3e38]), 2.0).numpy()
    assert np.isinf(out[0]) and np.isnan(out[1]) and np.isinf(out[2]) and np.isinf(out[3])


def test_sgd_step_is_one_rounding_per_documented_op(rng: np.random.Generator) -> None:
    P = rng.standard_normal(64).astype(np.float32)
    G = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    lr, mom, wd = 0.1, 0.9, 0.01
    p, state = param(P), [{}]
    want = [Fraction(float(x)) for x in P]
    buf: list[Fraction] | None = None
    for g in G:
        OF.sgd_step([p], [f32(g)], state, lr=lr, momentum=mom, weight_decay=wd, nesterov=True)
        fl = [Fraction(float(np.float32(v))) for v in (lr, mom, wd)]
        gg = [Fraction(float(rn32(Fraction(float(x)) + w * fl[2]))) for x, w in zip(g, want)]
        buf = gg if buf is None else [Fraction(float(rn32(Fraction(float(rn32(b * fl[1]))) + x)))
                                      for b, x in zip(buf, gg)]
        step = [Fraction(float(rn32(x + b * fl[1]))) for x, b in zip(gg, buf)]
        want = [Fraction(float(rn32(w - x * fl[0]))) for w, x in zip(want, step)]
        assert [Fraction(float(x)) for x in p.numpy()] == want


def _adamw_f64(P: np.ndarray, G: list[np.ndarray], lr: float, b1: float, b2: float, eps: float,
               wd: float) -> np.ndarray:
    p, m, v = P.astype(np.float64), np.zeros(P.shape), np.zeros(P.shape)
    for t, g in enumerate(G, 1):
        g = g.astype(np.float64)
        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    return p


def test_adamw_within_bound_of_float64(rng: np.random.Generator) -> None:
    P = rng.standard_normal((8, 16)).astype(np.float32)
    G = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(4)]
    p, state = param(P), [{}]
    for g in G:
        OF.adamw_step([p], [f32(g)], state, lr=1e-2, weight_decay=0.1)
    want = _adamw_f64(P, G, 1e-2, 0.9, 0.999, 1e-8, 0.1)
    # Each step moves p by at most lr * ~1 with ~10 roundings of 2^-24 each: 4 steps give far
    # less than 2^-17 relative to |p| + lr * steps.
    bound = 2.0 ** -17 * (np.abs(want) + 4 * 1e-2)
    assert np.all(np.abs(p.numpy().astype(np.float64) - want) <= bound)
    assert state[0]["step"] == 4 and state[0]["exp_avg"].dtype is tgrad.float32


def test_bf16_param_is_its_float32_master_rounded_once(rng: np.random.Generator) -> None:
    P = rng.standard_normal(32).astype(np.float32)
    G = [rng.standard_normal(32).astype(np.float32) for _ in range(3)]
    p16, s16 = param(P, tgrad.bfloat16), [{}]
    p32, s32 = param(p16.numpy(np.float32)), [{}]
    for g in G:
        OF.adamw_step([p16], [f32(g).to(tgrad.bfloat16)], s16, lr=1e-2)
        OF.adamw_step([p32], [f32(g).to(tgrad.bfloat16).to(tgrad.float32)], s32, lr=1e-2)
        master = s16[0]["master"]
        assert master.dtype is tgrad.float32 and p16.dtype is tgrad.bfloat16
        assert raw(master) == raw(p32)
        assert raw(p16) == raw(p32.to(tgrad.bfloat16))


def test_updates_are_the_same_bytes_everywhere(rng: np.random.Generator) -> None:
    P = rng.standard_normal((5, 37)).astype(np.float32)
    G = rng.standard_normal((5, 37)).astype(np.float32)

    def run() -> list[bytes]:
        a, b = param(P), param(P, tgrad.bfloat16)
        sa, sb = [{}], [{}]
        for _ in range(2):
            OF.adamw_step([a], [f32(G)], sa, lr=1e-2, amsgrad=True)
            OF.sgd_step([b], [f32(G)], sb, lr=0.1, momentum=0.9, weight_decay=1e-3)
        total = grad_norm([f32(G), f32(P)])
        return [raw(a), raw(b), raw(sa[0]["exp_avg_sq"]), raw(total)]

    assert_same_bytes_everywhere(run, threads=(1, 2))


def test_step_rebinds_the_same_object_and_skips_params_without_grad(rng: np.random.Generator) -> None:
    P = rng.standard_normal(8).astype(np.float32)
    a, b = param(P), param(P)
    opt = SGD([a, b], lr=0.5)
    a.grad = f32(np.ones(8))
    ident = id(a)
    opt.step()
    assert id(a) == ident and a.numpy().tolist() == (P - np.float32(0.5)).tolist()
    assert b.numpy().tolist() == P.tolist()  # grad None: skipped
    opt.zero_grad()
    assert a.grad is None


def test_param_groups_and_state_dict_round_trip(rng: np.random.Generator) -> None:
    P = rng.standard_normal((2, 3, 4)).astype(np.float32)
    G = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(4)]

    def make() -> tuple[list[Param], AdamW]:
        ps = [param(P[0]), param(P[1], tgrad.bfloat16)]
        return ps, AdamW([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 1e-2}], lr=1e-3, amsgrad=True)

    ps, opt = make()
    for g in G[:2]:
        for p, gi in zip(ps, g):
            p.grad = f32(gi)
        opt.step()
    saved = opt.state_dict()
    assert saved["param_groups"][1]["lr"] == 1e-2 and saved["param_groups"][1]["params"] == [1]
    qs, other = make()
    for q, p in zip(qs, ps):  # the saved run's parameter values (a bf16 one from its master)
        rebind_all([(q, p * 1.0 if p.dtype is tgrad.float32 else p.to(tgrad.float32).to(tgrad.bfloat16))], "t")
    other.load_state_dict(saved)
    for g in G[2:]:
        for opt_, params in ((opt, ps), (other, qs)):
            for p, gi in zip(params, g):
                p.grad = f32(gi)
            opt_.step()
    assert [raw(q) for q in qs] == [raw(p) for p in ps]


def test_bad_hyperparameters_are_refused() -> None:
    p = param(np.ones(3))
    for make in (lambda: SGD([p], lr=-1.0), lambda: SGD([p], lr=0.1, momentum=-0.5),
                 lambda: SGD([p], lr=0.1, nesterov=True), lambda: AdamW([p], betas=(1.0, 0.9)),
                 lambda: AdamW([p], eps=-1.0), lambda: AdamW([p], weight_decay=float("nan")),
                 lambda: SGD([], lr=0.1), lambda: SGD([p, p], lr=0.1), lambda: SGD(p, lr=0.1),
                 lambda: SGD([p], lr="0.1")):
        with pytest.raises(errors.InvalidArgumentError):
            make()


def test_bad_grads_change_nothing(rng: np.random.Generator) -> None:
    P = rng.standard_normal(6).astype(np.float32)
    a, b = param(P), param(P)
    state: list[dict[str, Any]] = [{}, {}]
    before = raw(a)
    with pytest.raises(errors.ShapeMismatchError):
        OF.sgd_step([a, b], [f32(np.ones(6)), f32(np.ones(5))], state, lr=0.1, momentum=0.9)
    with pytest.raises(errors.DtypeUnsupportedError):
        OF.adamw_step([a], [tgrad.tensor(np.ones(6, np.int32), dtype=tgrad.int32)], state[:1])
    with pytest.raises(errors.InvalidArgumentError):
        OF.adamw_step([a], [f32(np.ones(6))], [{"step": -1}])
    with pytest.raises(errors.InvalidArgumentError):
        OF.sgd_step([a], [f32(np.ones(6))], state, lr=0.1)
    assert raw(a) == before and state == [{}, {}]
    opt = SGD([a], lr=0.1)
    with pytest.raises(errors.InvalidArgumentError):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(errors.ShapeMismatchError):
        opt.load_state_dict({"state": {0: {"momentum_buffer": f32(np.ones(2))}},
                             "param_groups": [{**opt.param_groups[0], "params": [0]}]})
    assert opt.state == {}


def test_clip_grad_norm_total_is_the_rounded_exact_norm(rng: np.random.Generator) -> None:
    G = [(rng.standard_normal(s) * 3).astype(np.float32) for s in ((3, 5), (7,), (11, 13))]
    total = grad_norm([f32(g) for g in G]).numpy()
    exact_sq = sum(Fraction(float(x)) ** 2 for g in G for x in g.ravel())
    sq = rn32(exact_sq)
    assert total == np.float32(np.sqrt(np.float32(sq)))  # sqrt of RN(sum of exact squares), rounded once
    assert grad_norm([f32(g) for g in G], float("inf")).numpy() == max(np.abs(g).max() for g in G)
    assert grad_norm([f32(g) for g in G], 1).numpy() == rn32(sum(abs(Fraction(float(x))) for g in G for x in g.ravel()))
    clipped, t2 = clip_grads_by_norm([f32(g) for g in G], 1.0)
    coef = np.minimum(np.float32(1.0) / (total + np.float32(1e-6)), np.float32(1.0))
    for c, g in zip(clipped, G):
        assert c.numpy().tobytes() == (g * coef).tobytes()
    big = clip_grads_by_norm([f32(g) for g in G], 1e9)[0]
    assert [raw(c) for c in big] == [raw(f32(g)) for g in G]


def test_clip_in_place_and_by_value(rng: np.random.Generator) -> None:
    g = rng.standard_normal(10).astype(np.float32) * 4
    p = param(np.zeros(10))
    p.grad = grad = f32(g)
    tgrad.nn.utils.clip_grad_value_([p], 1.5)
    assert p.grad is grad and grad.numpy().tolist() == np.clip(g, -1.5, 1.5).tolist()
    total = tgrad.nn.utils.clip_grad_norm_([p], 0.5)
    assert p.grad is grad and float(total) > 0.5
    assert abs(float(grad_norm([grad])) - 0.5) < 1e-6
    assert clip_grads_by_value([f32(g)], 0)[0].numpy().tolist() == [0.0] * 10


def test_clip_bad_input() -> None:
    g = f32(np.ones(3))
    for bad in (lambda: grad_norm([g], 0), lambda: grad_norm([g], -1), lambda: grad_norm([3.0]),
                lambda: clip_grads_by_norm([g], float("nan")), lambda: clip_grads_by_value([g], "1")):
        with pytest.raises(errors.InvalidArgumentError):
            bad()
    p = param(np.ones(3))
    p.grad = f32([np.inf, 1, 1])
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert p.grad.numpy()[1] == 1.0


def test_zero_grad_to_zeros_and_the_package_attribute() -> None:
    p = param(np.ones((2, 3)))
    p.grad = f32(np.full((2, 3), 7.0))
    opt = tgrad.optim.SGD([p], lr=0.1)
    opt.zero_grad(set_to_none=False)
    assert p.grad.numpy().tolist() == [[0.0] * 3] * 2 and p.grad.dtype is tgrad.float32
    opt.step()  # a zero gradient: nothing moves
    assert p.numpy().tolist() == [[1.0] * 3] * 2
    assert "Parameter Group 0" in repr(opt) and tgrad.optim.AdamW is AdamW


def test_torchs_implementation_switches() -> None:
    p = param(np.ones(2))
    SGD([p], lr=0.1, foreach=False, fused=True)
    AdamW([p], foreach=True)
    for make in (lambda: SGD([p], lr=0.1, differentiable=True), lambda: AdamW([p], capturable=True)):
        with pytest.raises(errors.InvalidArgumentError):
            make()
