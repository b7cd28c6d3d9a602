"""tgrad.rope: each output the exact value of x1 cos(theta) - x2 sin(theta) (resp. x2 cos + x1
sin), theta = p * base^(-2i/rotary_dim) or p * inv_freq[i], rounded once to bf16
(docs/numerics.md, "Rotary position embedding"), against mpmath at 300 bits rounded with the
conformance kit's round_to; layouts, partial rotary dims, batched positions, threads."""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad.conformance.exact import BF16, round_to, value_of
from every_setting import assert_same_bytes_everywhere  # noqa: E402


def _q(v: mpmath.mpf) -> Fraction:
    man, exp = v.man_exp
    q = Fraction(abs(int(man))) * Fraction(2) ** int(exp)
    return -q if v < 0 else q


def reference(xb: np.ndarray, pos: np.ndarray, base: float, rd: int, interleaved: bool,
              inv_freq: np.ndarray | None) -> np.ndarray:
    """bf16 bits of rope over xb [R, L, d] (bits), positions [L] or [R, L]."""
    mpmath.mp.prec = 300
    out = xb.copy()
    R, L, d = xb.shape
    half = rd // 2
    for i in range(half):
        f = (mpmath.mpf(Fraction(float(inv_freq[i])).numerator) / Fraction(float(inv_freq[i])).denominator
             if inv_freq is not None else mpmath.power(mpmath.mpf(base), mpmath.mpf(-2 * i) / rd))
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        for r, l in itertools.product(range(R), range(L)):
            p = int(pos[l] if pos.ndim == 1 else pos[r, l])
            a, b = int(xb[r, l, ia]), int(xb[r, l, ib])
            if p == 0 or f == 0:
                continue  # theta = 0: y = x, bits kept
            va, vb = value_of(a, BF16), value_of(b, BF16)
            th = p * f
            c, s = mpmath.cos(th), mpmath.sin(th)
            xa = mpmath.mpf(va.numerator) / va.denominator
            xb_ = mpmath.mpf(vb.numerator) / vb.denominator
            y1, y2 = xa * c - xb_ * s, xb_ * c + xa * s
            out[r, l, ia] = round_to(_q(y1), BF16) if y1 != 0 else (0x8000 if a & 0x8000 else 0)
            out[r, l, ib] = round_to(_q(y2), BF16) if y2 != 0 else (0x8000 if b & 0x8000 else 0)
    return out


def _x(rng: np.random.Generator, shape: tuple[int, ...]) -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy((rng.standard_normal(shape) * np.exp2(rng.integers(-4, 4, shape))).astype(np.float32))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rope_is_the_exact_value_rounded_once(interleaved: bool, rotary_dim: int | None) -> None:
    rng = np.random.default_rng(1)
    x = _x(rng, (2, 3, 5, 8))
    pos = np.array([0, 1, 7, 4095, 100_000], np.int32)
    y = tgrad.rope(x, pos, 10000.0, rotary_dim=rotary_dim, interleaved=interleaved)
    xb = x.numpy().view(np.uint16).reshape(6, 5, 8)
    want = reference(xb, pos, 10000.0, rotary_dim or 8, interleaved, None)
    assert np.array_equal(y.numpy().view(np.uint16).reshape(6, 5, 8), want)


def test_batched_positions_and_inv_freq() -> None:
    rng = np.random.default_rng(2)
    x = _x(rng, (2, 2, 3, 6))
    pos = np.array([[3, 9, 500_000], [-5, 0, 2]], np.int32)
    inv = np.array([1.0, 0.125, 3.0e-5], np.float32)  # Llama-3 style: a float32 table taken as exact
    y = tgrad.rope(x, tgrad.Tensor.from_numpy(pos, dtype=tgrad.int32), inv_freq=inv)
    xb = x.numpy().view(np.uint16).reshape(4, 3, 6)
    want = reference(xb, np.repeat(pos, 2, axis=0), 0.0, 6, False, inv)
    assert np.array_equal(y.numpy().view(np.uint16).reshape(4, 3, 6), want)


def test_position_zero_and_pass_through_keep_bits() -> None:
    x = tgrad.Tensor.from_numpy(np.array([[[1.5, -0.0, 3.0, 7.0, 2.0, -1.0]]], np.float32))
    y = tgrad.rope(x, [0], rotary_dim=4).numpy().view(np.uint16)
    assert np.array_equal(y, x.numpy().view(np.uint16))
    z = tgrad.rope(x, [5], rotary_dim=4).numpy().view(np.uint16)
    assert np.array_equal(z[..., 4:], x.numpy().view(np.uint16)[..., 4:])


@pytest.mark.every_variant
def test_bytes_do_not_depend_on_threads_or_variant() -> None:
    rng = np.random.default_rng(3)
    x = _x(rng, (2, 4, 64, 32))
    pos = np.arange(64, dtype=np.int32) * 37

    def run() -> bytes:
        return tgrad.rope(x * 1.0, pos).numpy().tobytes() + tgrad.rope(x, pos, interleaved=True).numpy().tobytes()

    assert_same_bytes_everywhere(run)
    evaluated, slow, undecided = tgrad.norms.rope_slow_path_counts()
    assert evaluated > 0 and undecided == 0 and slow < evaluated // 100


@pytest.mark.every_variant
def test_any_bits_give_the_same_bytes_on_the_vector_path_and_the_scalar_one() -> None:
    """The AVX-512 fast path (kernels/cpu/rope_avx512f.c, 8 pairs a vector) decides what pair()
    decides, with the same bits, and leaves it the rest: every bf16 pattern (NaN, infinities,
    subnormals, zeros), positions 0 and extreme, f_i = 0 lanes, partial vectors and the 256-pair
    chunks (d = 6, 34, 130, 520), rope and rope_backward, on every variant and thread count."""
    rng = np.random.default_rng(4)
    cases = []
    for d in (6, 34, 130, 520):
        bits = rng.integers(0, 1 << 16, size=(3, 9, d), dtype=np.uint16)
        pos = np.array([0, 1, 2, 77, 4095, 100_000, -9, 2**31 - 1, 12345], np.int32)
        inv = rng.random(d // 2).astype(np.float32)
        inv[1] = 0.0
        cases.append((tgrad.Tensor.from_bf16_bits(bits), pos, inv))

    def run() -> list[bytes]:
        out = []
        for x, pos, inv in cases:
            out.append(tgrad.rope(x, pos, 10000.0).numpy().tobytes())
            out.append(tgrad.rope(x, pos, inv_freq=inv).numpy().tobytes())
            out.append(tgrad.rope_backward(x, pos, 500.0).numpy().tobytes())
        return out

    assert_same_bytes_everywhere(run, threads=(1, 2))
    # the same decisions, not only the same bytes: as many binary128 (slow) decisions on every
    # variant (a looser bound on the vector path would decide some of them itself)
    isa = tgrad._cpu_isa_setting()
    slow = {}
    try:
        for variant, ok in tgrad.cpu_isas().items():
            if ok:
                tgrad.set_cpu_isa(variant)
                before = tgrad.norms.rope_slow_path_counts()[1]
                run()
                slow[variant] = tgrad.norms.rope_slow_path_counts()[1] - before
    finally:
        tgrad.set_cpu_isa(isa)
    assert len(set(slow.values())) == 1 and slow["portable"] > 0, slow
    x, pos, _ = cases[0]  # and the reference itself, on the finite values of the smallest case
    xb = x.numpy().view(np.uint16).reshape(3, 9, 6)
    finite = (xb & 0x7F80) != 0x7F80
    got = tgrad.rope(x, pos, 10000.0).numpy().view(np.uint16)
    want = reference(np.where(finite, xb, 0).astype(np.uint16), pos, 10000.0, 6, False, None)
    rows = finite.all(axis=2)
    assert np.array_equal(got[rows], want[rows])


def test_refusals_are_typed_and_allocate_nothing() -> None:
    x = tgrad.Tensor.from_numpy(np.ones((2, 3, 8), np.float32))
    before = tgrad.live_tensors()
    cases = [(lambda: tgrad.rope(x, [0, 1]), errors.ShapeMismatchError),
             (lambda: tgrad.rope(x, [[0, 1, 2]]), errors.ShapeMismatchError),
             (lambda: tgrad.rope(x, [0, 1, 2], rotary_dim=3), errors.InvalidArgumentError),
             (lambda: tgrad.rope(x, [0, 1, 2], rotary_dim=10), errors.InvalidArgumentError),
             (lambda: tgrad.rope(x, [0, 1, 2], base=-1.0), errors.InvalidArgumentError),
             (lambda: tgrad.rope(x, [0.5, 1, 2]), errors.InvalidArgumentError),
             (lambda: tgrad.rope(x, [0, 1, 2], inv_freq=[1.0, 2.0]), errors.ShapeMismatchError),
             (lambda: tgrad.rope(x, [0, 1, 2], scaling={"rope_type": "llama3"}), errors.InvalidArgumentError),
             (lambda: tgrad.rope(x.float(), [0, 1, 2]), errors.DtypeUnsupportedError),
             (lambda: tgrad.rope(x[0, 0], [0]), errors.RankMismatchError)]
    for make, exc in cases:
        with pytest.raises(exc):
            make()
    assert tgrad.live_tensors() == before


def test_extreme_positions_and_values() -> None:
    vals = np.array([[[3.3e38, -3.3e38, 1e-40, 2.0 ** -126, 1.0, -1.0, 65504.0, 3.0e-39]]], np.float32)
    x = tgrad.Tensor.from_numpy(np.repeat(vals, 3, axis=1))
    pos = np.array([2**31 - 1, -(2**31), 12345], np.int32)
    for interleaved in (False, True):
        y = tgrad.rope(x, pos, 500000.0, interleaved=interleaved)
        xb = x.numpy().view(np.uint16).reshape(1, 3, 8)
        assert np.array_equal(y.numpy().view(np.uint16).reshape(1, 3, 8),
                              reference(xb, pos, 500000.0, 8, interleaved, None))


def test_trace_records_rope() -> None:
    x = tgrad.Tensor.from_numpy(np.ones((1, 2, 4), np.float32))
    tr = tgrad.trace(lambda t: tgrad.rope(t, [0, 1]), x)
    states = {r.kind: r.state for r in tr.validate().results}
    assert states["rope"] == "skipped"
    assert "rope" in tgrad.explain(tgrad.rope(x, [0, 1]))


def test_a_value_just_off_a_midpoint_is_decided_in_binary128_not_through_double() -> None:
    # theta = 2^-30: y1 = cos - 2^21 sin = 1 - 2^-9 - 2^-61 + ..., just below the bf16 midpoint
    # 1 - 2^-9: 0x3F7F. The binary128 interval's ends, rounded to double on the way, used to land
    # on the midpoint itself (undecided, rounded to even: 0x3F80).
    before = tgrad.norms.rope_slow_path_counts()
    x = tgrad.Tensor.from_numpy(np.array([[[1.0, 2.0 ** 21]]], np.float32), dtype="bfloat16")
    y = tgrad.rope(x, np.array([1], np.int32), inv_freq=np.array([2.0 ** -30], np.float32))
    assert np.ascontiguousarray(y.numpy()).view(np.uint16).ravel().tolist() == [0x3F7F, 0x4A00]
    after = tgrad.norms.rope_slow_path_counts()
    assert after[1] == before[1] + 1 and after[2] == before[2]  # one binary128 decision, none undecided
