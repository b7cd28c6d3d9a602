"""F.cross_entropy and F.mse_loss: float32 results within the bound of their documented
composition (docs/numerics.md, "Losses") against exact or float64 references, the same bytes on
every setting, torch's ignore_index / weight / label_smoothing semantics, bad input refused."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import tgrad
import tgrad.nn.functional as F
from tgrad import errors

from every_setting import assert_same_bytes_everywhere

U = 2.0 ** -24  # float32's unit roundoff


def f32(a: Any) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.float32), dtype=tgrad.float32)


def i32(a: Any) -> tgrad.Tensor:
    return tgrad.tensor(np.asarray(a, np.int32), dtype=tgrad.int32)


def ce64(x: np.ndarray, t: np.ndarray, w: np.ndarray | None = None, ignore: int = -100, reduction: str = "mean",
         eps: float = 0.0) -> np.ndarray:
    """torch's cross_entropy in float64 (class axis 1, or 0 for a [C] input)."""
    cls = 0 if x.ndim == 1 else 1
    x = np.moveaxis(x.astype(np.float64), cls, -1)
    c = x.shape[-1]
    mx = x.max(-1, keepdims=True)
    logp = x - (mx + np.log(np.exp(x - mx).sum(-1, keepdims=True)))
    ww = np.ones(c) if w is None else w.astype(np.float64)
    valid = t != ignore
    tc = np.where(valid, t, 0)
    picked = np.take_along_axis(logp, tc[..., None], -1)[..., 0]
    wt = np.where(valid, ww[tc], 0.0)
    nll = -picked * wt
    smooth = np.where(valid, -(logp * ww).sum(-1), 0.0)
    den = wt.sum() if w is not None else valid.sum()

    def red(v: np.ndarray) -> np.ndarray:
        return v if reduction == "none" else v.sum() / den if reduction == "mean" else v.sum()

    return (1 - eps) * red(nll) + red(smooth) * (eps / c)


CASES = [{}, {"w": True}, {"eps": 0.1}, {"w": True, "eps": 0.25}, {"ignore": 2}]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_cross_entropy_within_its_bound(rng: np.random.Generator, case: int, reduction: str) -> None:
    kw = CASES[case]
    x = (rng.standard_normal((6, 5, 3)) * 4).astype(np.float32)
    t = rng.integers(0, 5, (6, 3)).astype(np.int32)
    t[0, 0] = -100
    t[1, :] = 2
    w = rng.random(5).astype(np.float32) + 0.1
    ignore = kw.get("ignore", -100)
    if ignore != -100:
        t[0, 0] = 1
    got = F.cross_entropy(f32(x), i32(t), weight=f32(w) if kw.get("w") else None, ignore_index=ignore,
                          reduction=reduction, label_smoothing=kw.get("eps", 0.0)).numpy()
    want = ce64(x, t, w if kw.get("w") else None, ignore, reduction, kw.get("eps", 0.0))
    assert got.dtype == np.float32 and got.shape == np.shape(want)
    # Every term is positive: each rounding adds at most U relatively; the composition has at
    # most 8 on any path (log_softmax, the weight's product, two sums, a quotient, smoothing).
    assert np.all(np.abs(got - want) <= 8 * U * np.abs(want) + 1e-30)


def test_cross_entropy_shapes_unbatched_and_bf16(rng: np.random.Generator) -> None:
    x = (rng.standard_normal(7) * 3).astype(np.float32)
    got = F.cross_entropy(f32(x), i32(3)).numpy()
    assert got.shape == () and abs(got - ce64(x, np.array(3))) <= 2 * U * abs(got)
    xb = f32(rng.standard_normal((4, 9))).to(tgrad.bfloat16)
    t = i32([0, 8, 3, 3])
    assert F.cross_entropy(xb, t).numpy().tobytes() == F.cross_entropy(xb.to(tgrad.float32), t).numpy().tobytes()


def test_cross_entropy_none_is_the_rounded_log_softmax(rng: np.random.Generator) -> None:
    x = f32(rng.standard_normal((5, 4)) * 2)
    t = np.array([0, 3, -100, 1, 2], np.int32)
    got = F.cross_entropy(x, i32(t), reduction="none").numpy()
    logp = tgrad.log_softmax(x, dim=1, dtype=tgrad.float32).numpy()
    want = np.array([-logp[i, c] if c >= 0 else 0.0 for i, c in enumerate(t)], np.float32)
    assert got.tobytes() == want.tobytes()  # an exact pick; +0 where ignored (torch's 0)


def test_cross_entropy_ignore_index_everywhere() -> None:
    x, t = f32(np.ones((3, 4))), i32([-100, -100, -100])
    assert np.isnan(F.cross_entropy(x, t).numpy())  # 0 / 0, as torch
    assert F.cross_entropy(x, t, reduction="sum").numpy() == 0.0
    assert F.cross_entropy(x, t, reduction="none").numpy().tolist() == [0.0, 0.0, 0.0]
    assert F.cross_entropy(x, i32([0, 0, 1]), ignore_index=0, reduction="sum").numpy() == \
        F.cross_entropy(x, i32([-100, -100, 1]), reduction="sum").numpy()


def test_cross_entropy_bad_input_is_refused() -> None:
    x = f32(np.zeros((2, 3)))
    bad: list[tuple[type[Exception], Any]] = [
        (errors.DtypeUnsupportedError, lambda: F.cross_entropy(x, f32([0, 1]))),
        (errors.ShapeMismatchError, lambda: F.cross_entropy(x, i32([0, 1, 2]))),
        (errors.IndexOutOfRangeError, lambda: F.cross_entropy(x, i32([0, 3]))),
        (errors.IndexOutOfRangeError, lambda: F.cross_entropy(x, i32([-1, 0]))),
        (errors.ShapeMismatchError, lambda: F.cross_entropy(x, i32([0, 1]), weight=f32([1, 2]))),
        (errors.InvalidArgumentError, lambda: F.cross_entropy(x, i32([0, 1]), reduction="avg")),
        (errors.InvalidArgumentError, lambda: F.cross_entropy(x, i32([0, 1]), label_smoothing=1.5)),
        (errors.InvalidArgumentError, lambda: F.cross_entropy(x, i32([0, 1]), ignore_index=1.5)),
        (errors.InvalidArgumentError, lambda: F.cross_entropy(np.zeros((2, 3)), i32([0, 1]))),
        (errors.RankMismatchError, lambda: F.cross_entropy(f32(1.0), i32(0))),
        (errors.DtypeUnsupportedError, lambda: F.cross_entropy(i32([[1, 2]]), i32([0]))),
    ]
    for cls, call in bad:
        with pytest.raises(cls):
            call()


def test_mse_loss_is_exact_per_element_and_correctly_rounded_reduced(rng: np.random.Generator) -> None:
    x = (rng.standard_normal(50) * 3).astype(np.float32)
    y = (rng.standard_normal(50)).astype(np.float32)
    sq = (x - y) * (x - y)  # numpy float32: each op rounded once
    assert F.mse_loss(f32(x), f32(y), reduction="none").numpy().tobytes() == sq.tobytes()
    exact = sum(Fraction(float(v)) for v in sq)
    for reduction, value in (("sum", exact), ("mean", exact / 50)):
        got = F.mse_loss(f32(x), f32(y), reduction=reduction).numpy()
        lo, hi = np.nextafter(got, np.float32(-np.inf)), np.nextafter(got, np.float32(np.inf))
        assert abs(Fraction(float(got)) - value) <= min(abs(Fraction(float(lo)) - value), abs(Fraction(float(hi)) - value))
    for call in (lambda: F.mse_loss(f32(x), f32(y[:3])), lambda: F.mse_loss(f32(x), f32(y), reduction="x"),
                 lambda: F.mse_loss(f32(x), i32(y.astype(np.int32)))):
        with pytest.raises((errors.ShapeMismatchError, errors.InvalidArgumentError, errors.DtypeUnsupportedError)):
            call()


def test_losses_are_the_same_bytes_everywhere(rng: np.random.Generator) -> None:
    x = (rng.standard_normal((33, 17)) * 3).astype(np.float32)
    t = rng.integers(0, 17, 33).astype(np.int32)
    w = rng.random(17).astype(np.float32)

    def run() -> list[bytes]:
        a = F.cross_entropy(f32(x), i32(t), weight=f32(w), label_smoothing=0.1)
        b = F.mse_loss(f32(x), f32(x[::-1].copy()))
        return [a.numpy().tobytes(), b.numpy().tobytes()]

    assert_same_bytes_everywhere(run, threads=(1, 2))
