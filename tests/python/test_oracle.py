"""Self-checks of the conformance oracle. None of these use libtgrad.

The oracle is judged three ways: exact-by-construction data against a float64 matmul, hand-computed
special cases of the contract (order, DAZ, FTZ, tininess after rounding, zero signs, NaN, inf), and
a slow scalar reference written with exact rationals (fractions) on random extreme exponents.
Conversions are compared with ml_dtypes and with exact rational rounding.

The products here are the pairwise order's (its rules, its rational reference); the block32 order,
the default since 0.2, is checked against its own scalar reference in test_matmul_order.py.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest

from tgrad.conformance import fills
from tgrad.conformance.rosters import CONTRACT_EXAMPLES
from tgrad.conformance import oracle
from tgrad.conformance.oracle import (
    bf16_bits_to_f32,
    daz_bits,
    f32_to_bf16_bits,
    f64_to_bf16_bits,
)

matmul_bits = functools.partial(oracle.matmul_bits, order="pairwise")
matmul_f32 = functools.partial(oracle.matmul_f32, order="pairwise")

import ml_dtypes  # noqa: E402
BF16 = ml_dtypes.bfloat16


def bf(values) -> np.ndarray:
    """bf16 bits of exactly representable values (asserts exactness)."""
    x = np.asarray(values, dtype=np.float64)
    bits = f64_to_bf16_bits(x)
    back = bf16_bits_to_f32(bits).astype(np.float64)
    assert np.array_equal(back, x, equal_nan=True) or np.isnan(x).any(), (values, back)
    return bits


def mm1(a_values, b_values) -> int:
    """One output: a row [K] times a column [K]."""
    a = bf(a_values).reshape(1, -1)
    b = bf(b_values).reshape(-1, 1)
    return int(matmul_bits(a, b)[0, 0])


# ---- a slow reference: exact rationals, one scalar step at a time -------------------------------


def _rne_unbounded_f32(x: Fraction) -> Fraction | float:
    """Round a nonzero rational to a 24-bit significand, unbounded exponent; inf on overflow."""
    mag = abs(x)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    quantum = Fraction(2) ** (e - 23)
    n = mag / quantum
    i = math.floor(n)
    rest = n - i
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and i % 2 == 1):
        i += 1
    r = i * quantum
    if r >= Fraction(2) ** 128:
        return math.copysign(math.inf, x)
    return r if x > 0 else -r


def _step_reference(acc: float, a: float, b: float) -> float:
    """acc (an f32 value as a Python float) + a*b under the contract, slowly and exactly."""
    if not (math.isfinite(acc) and math.isfinite(a) and math.isfinite(b)):
        r = acc + a * b  # IEEE inf/NaN semantics, identical in any precision
        return r
    p_sign_negative = (math.copysign(1.0, a) * math.copysign(1.0, b)) < 0
    exact = Fraction(acc) + Fraction(a) * Fraction(b)
    if exact == 0:
        both_negative_zero = acc == 0 and math.copysign(1.0, acc) < 0 and a * b == 0 and p_sign_negative
        return -0.0 if both_negative_zero else 0.0
    r = _rne_unbounded_f32(exact)
    if isinstance(r, float):
        return r
    if abs(r) < Fraction(2) ** -126:
        return 0.0 if exact > 0 else -0.0
    return float(r)


def _daz(v: float) -> float:
    return math.copysign(0.0, v) if (v != 0 and abs(v) < 2.0**-126) else v


def _block32_reference(col_a: list[float], col_b: list[float]) -> float:
    """The block32 order over one row and column (K padded with +0 to whole blocks)."""
    pad = -len(col_a) % 32
    col_a, col_b = col_a + [0.0] * pad, col_b + [0.0] * pad
    acc = 0.0
    for k0 in range(0, len(col_a), 32):
        even = odd = 0.0
        for j in range(16):
            even = _step_reference(even, col_a[k0 + 2 * j], col_b[k0 + 2 * j])
            odd = _step_reference(odd, col_a[k0 + 2 * j + 1], col_b[k0 + 2 * j + 1])
        acc = _step_reference(acc, _step_reference(even, odd, 1.0), 1.0)
    return acc


def matmul_reference(a_bits: np.ndarray, b_bits: np.ndarray, order: str = "pairwise") -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signalling NaN patterns widen to quiet NaN
        a = bf16_bits_to_f32(a_bits).astype(np.float64)
        b = bf16_bits_to_f32(b_bits).astype(np.float64)
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            col_a = [_daz(float(v)) for v in a[i]] + [0.0]
            col_b = [_daz(float(v)) for v in b[:, j]] + [0.0]
            if order == "block32":
                out[i, j] = _block32_reference(col_a[:-1], col_b[:-1])
                continue
            acc = 0.0
            for p in range(0, k, 2):
                acc = _step_reference(acc, col_a[p + 1], col_b[p + 1])
                acc = _step_reference(acc, col_a[p], col_b[p])
            out[i, j] = acc
    bits = f32_to_bf16_bits(out)
    return np.where(np.isnan(out), np.uint16(0x7FC0), bits).astype(np.uint16)


# ---- exact-by-construction --------------------------------------------------------------------


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (16, 64, 16), (33, 257, 17), (64, 1024, 8)])
def test_small_integers_match_float64_matmul(m, k, n):
    rng = np.random.default_rng([m, k, n])
    a = rng.integers(-8, 9, size=(m, k)).astype(np.float64)
    b = rng.integers(-8, 9, size=(k, n)).astype(np.float64)
    expected = f64_to_bf16_bits(a @ b)  # every partial sum is an integer < 2^24: exact in f32
    assert np.array_equal(matmul_bits(bf(a), bf(b)), expected)


def test_powers_of_two_products_sum_exactly():
    rng = np.random.default_rng(7)
    a = np.ldexp(1.0, rng.integers(-10, 10, size=(8, 12))) * rng.choice([-1, 1], size=(8, 12))
    b = np.ldexp(1.0, rng.integers(-5, 5, size=(12, 6)))
    expected = f64_to_bf16_bits(a @ b)  # exponent spread < 24 bits: every sum exact in f32
    assert np.array_equal(matmul_bits(bf(a), bf(b)), expected)


# ---- the contract's special cases, computed by hand --------------------------------------------


def test_odd_element_is_added_first():
    # products p0..p3 = 0, 1, -1, 2^-24 (b is all ones)
    # odd-first  (p1, p0, p3, p2): 1, 1, 1 + 2^-24 -> 1 (tie to even), 1 - 1 = 0
    # even-first (p0, p1, p2, p3), in order, or one rounding: 2^-24
    assert mm1([0.0, 1.0, -1.0, 2.0**-24], [1.0] * 4) == 0x0000
    assert mm1([1.0, 0.0, 2.0**-24, -1.0], [1.0] * 4) == f64_to_bf16_bits(2.0**-24)


def test_each_addition_is_rounded_to_f32():
    # odd-first order: 2^-24, 1 -> 1 (tie to even), then 2^-24 -> 1: rounded each time,
    # whereas a single rounding of the exact sum 1 + 2^-23 would give 1 + 2^-23 in f32.
    acc = matmul_f32(bf([[1.0, 2.0**-24, 0.0, 2.0**-24]]), bf([[1.0], [1.0], [1.0], [1.0]]))
    assert acc[0, 0] == np.float32(1.0)


def test_products_that_are_tiny_flush_to_signed_zero():
    assert mm1([2.0**-70], [2.0**-70]) == 0x0000  # 2^-140 flushes
    assert mm1([-(2.0**-70)], [2.0**-70]) == 0x8000  # pad step gives +0, then -2^-140 -> -0
    assert mm1([2.0**-70, 0.0], [-(2.0**-70), 0.0]) == 0x8000


def test_odd_k_pads_with_a_positive_zero_product():
    # K=3: pair (0,1) ends at -0 (flush), the pad product +0 makes it +0, then p2 = -0 keeps +0.
    # Skipping the pad step would give (-0) + (-0) = -0 = 0x8000.
    assert mm1([-(2.0**-70), 0.0, -0.0], [2.0**-70, 0.0, 1.0]) == 0x0000


def test_subnormal_inputs_are_zeros_of_the_same_sign():
    sub_neg = np.array([[0x8001, int(bf(-(2.0**-70)))]], dtype=np.uint16)  # -2^-133, -2^-70
    b = bf([[2.0**100], [2.0**-70]])
    # pair (0,1): odd p1 = -2^-140 -> -0; then p0 = (-0 after DAZ) * 2^100 = -0: (-0)+(-0) = -0
    # without DAZ p0 would be -2^-33.
    assert int(matmul_bits(sub_neg, b)[0, 0]) == 0x8000
    assert np.array_equal(daz_bits(np.array([0x0001, 0x807F, 0x0080, 0x8000], np.uint16)),
                          np.array([0x0000, 0x8000, 0x0080, 0x8000], np.uint16))


@pytest.mark.parametrize(
    "product, expected",
    [
        (-(2.0**-152), 0x0080),  # 2^-126 - 2^-152 rounds (unbounded exponent) to 2^-126: kept
        (-(2.0**-151), 0x0080),  # exactly the tie: to the even 2^-126, kept
        (-3 * 2.0**-152, 0x0000),  # rounds to 2^-126 - 2^-150: tiny after rounding, flushed to +0
        (-(2.0**-150), 0x0000),
    ],
)
def test_tininess_is_detected_after_rounding_with_unbounded_exponent(product, expected):
    # odd element first: acc = 2^-126 (= 2^-63 * 2^-63), then the even product.
    a1 = b1 = 2.0**-63
    a0, b0 = product / 2.0**-76, 2.0**-76
    assert mm1([a0, a1], [b0, b1]) == expected


def test_exact_cancellation_gives_positive_zero():
    assert mm1([1.0, -1.0], [1.0, 1.0]) == 0x0000
    assert mm1([-0.0, -0.0], [1.0, 1.0]) == 0x0000  # +0 start: (+0) + (-0) = +0


def test_nan_is_canonical_and_confined_to_its_row_and_column():
    a = bf([[1.0, 2.0], [np.nan, 1.0]])
    b = bf([[1.0, -np.nan], [1.0, 1.0]])
    c = matmul_bits(a, b)
    assert c[0, 0] == f64_to_bf16_bits(3.0)
    assert c[0, 1] == 0x7FC0 and c[1, 0] == 0x7FC0 and c[1, 1] == 0x7FC0


def test_inf_times_zero_and_inf_minus_inf_are_nan():
    assert mm1([np.inf, 0.0], [0.0, 1.0]) == 0x7FC0
    assert mm1([np.inf, np.inf], [1.0, -1.0]) == 0x7FC0
    assert mm1([np.inf, 1.0], [1.0, 1.0]) == 0x7F80
    assert mm1([-np.inf, 1.0], [1.0, 1.0]) == 0xFF80


def test_overflow_rounds_to_inf_and_big_products_can_cancel():
    big = float(np.float32(bf16_bits_to_f32(np.uint16(0x7F7F))))  # largest finite bf16
    assert mm1([big, big], [big, 0.0]) == 0x7F80  # p1 = 0, p0 = big^2 -> inf
    # p1 = -big (f32 finite), p0 = 2^128 exactly (overflows f32 on its own): exact sum is finite
    c = mm1([2.0**64, -big], [2.0**64, 1.0])
    assert c == f64_to_bf16_bits(2.0**128 - big)


@pytest.mark.parametrize("example", CONTRACT_EXAMPLES, ids=[e.id for e in CONTRACT_EXAMPLES])
def test_contract_examples(example):
    a, b = example.bits()
    got = int(oracle.matmul_bits(a, b, order=example.order)[0, 0])
    assert got == example.expected, f"{example.why}: got 0x{got:04x}"
    assert got == int(matmul_reference(a, b, example.order)[0, 0])


def test_k_zero_gives_positive_zeros_and_empty_dims_give_empty_results():
    assert np.array_equal(matmul_bits(np.zeros((3, 0), np.uint16), np.zeros((0, 2), np.uint16)),
                          np.zeros((3, 2), np.uint16))
    assert matmul_bits(np.zeros((0, 4), np.uint16), np.zeros((4, 2), np.uint16)).shape == (0, 2)
    assert matmul_bits(np.zeros((3, 4), np.uint16), np.zeros((4, 0), np.uint16)).shape == (3, 0)


def test_any_strides_are_accepted():
    rng = np.random.default_rng(3)
    a = fills.fill_bits("normal", (20, 30), rng)
    b = fills.fill_bits("normal", (30, 10), rng)
    expected = matmul_bits(a, b)
    at = np.ascontiguousarray(a.T).T
    b_rev = np.ascontiguousarray(b[::-1, ::-1])[::-1, ::-1]
    assert np.array_equal(matmul_bits(at, b_rev), expected)
    assert np.array_equal(matmul_bits(a.view(BF16), b.view(BF16)), expected)


def test_shape_errors_are_refused():
    with pytest.raises(ValueError):
        matmul_bits(np.zeros((2, 3), np.uint16), np.zeros((4, 2), np.uint16))
    with pytest.raises(ValueError):
        matmul_bits(np.zeros((2,), np.uint16), np.zeros((2, 2), np.uint16))
    with pytest.raises(TypeError):
        matmul_bits(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.uint16))


# ---- against the slow rational reference --------------------------------------------------------


@pytest.mark.parametrize("order", ["pairwise", "block32"])
@pytest.mark.parametrize("fill", ["exponents", "special", "ties", "tiny"])
def test_matches_the_rational_reference(fill, order):
    rng = np.random.default_rng(["exponents", "special", "ties", "tiny"].index(fill))
    for trial in range(12):
        m, k, n = (int(v) for v in rng.integers(1, 7, size=3))
        if order == "block32" and trial % 3 == 0:
            k = int(rng.integers(33, 80))  # across blocks: the fold into acc
        a = fills.fill_bits(fill, (m, k), rng)
        b = fills.fill_bits(fill, (k, n), rng)
        got = oracle.matmul_bits(a, b, order=order)
        want = matmul_reference(a, b, order)
        assert np.array_equal(got, want), (trial, a, b, got, want)


def test_float32_and_float64_paths_agree_on_ordinary_data():
    rng = np.random.default_rng(11)
    a = fills.fill_bits("normal", (40, 300), rng)
    b = fills.fill_bits("normal", (300, 24), rng)
    assert np.array_equal(matmul_bits(a, b, path="f32"), matmul_bits(a, b, path="f64"))
    with pytest.raises(ValueError):
        matmul_bits(bf([[2.0**-70]]), bf([[2.0**-70]]), path="f32")


def test_rational_reference_agrees_on_ordinary_data():
    rng = np.random.default_rng(12)
    a = fills.fill_bits("normal", (3, 9), rng)
    b = fills.fill_bits("normal", (9, 4), rng)
    assert np.array_equal(matmul_bits(a, b), matmul_reference(a, b))


# ---- conversions ------------------------------------------------------------------------------


def test_widening_matches_ml_dtypes_on_all_65536_patterns():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    mine = bf16_bits_to_f32(bits).view(np.uint32)
    theirs = bits.view(BF16).astype(np.float32).view(np.uint32)
    nan = np.isnan(bits.view(BF16).astype(np.float32))
    assert np.array_equal(mine[~nan], theirs[~nan])
    assert np.array_equal(mine, bits.astype(np.uint32) << 16)  # NaN payloads kept too


def _f32_edge_patterns() -> np.ndarray:
    edges = []
    for hi in [0x0000, 0x0001, 0x007F, 0x0080, 0x3F80, 0x3F81, 0x7F7F, 0x7F80, 0x7FC0, 0x7F81]:
        for lo in [0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF]:
            edges.append((hi << 16) | lo)
    edges = np.array(edges, dtype=np.uint32)
    return np.concatenate([edges, edges | np.uint32(0x80000000)])


def test_f32_to_bf16_matches_ml_dtypes_on_random_and_edge_patterns():
    rng = np.random.default_rng(5)
    u = np.concatenate([rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32),
                        _f32_edge_patterns()])
    x = u.view(np.float32)
    mine = f32_to_bf16_bits(x)
    with np.errstate(invalid="ignore"):
        theirs = x.astype(BF16).view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(mine[~nan], theirs[~nan])
    # NaN: stays NaN, quiet bit set, sign and top payload kept.
    assert np.array_equal(mine[nan], ((u[nan] >> 16) | 0x40).astype(np.uint16))
    assert np.all((mine[nan] & 0x7F80) == 0x7F80) and np.all(mine[nan] & 0x40)


def _f64_to_bf16_reference(x: float) -> int:
    """Exact rational RNE to bf16 (8-bit significand, exponent >= -126 with subnormals)."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        raise ValueError
    if math.isinf(x):
        return sign | 0x7F80
    mag = abs(Fraction(x))
    if mag == 0:
        return sign
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 7)
    n = mag / quantum
    i = math.floor(n)
    rest = n - i
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and i % 2 == 1):
        i += 1
    value = i * quantum
    if value >= Fraction(2) ** 128:
        return sign | 0x7F80
    return sign | int(np.float32(float(value)).view(np.uint32) >> 16)


def test_f64_to_bf16_rounds_once():
    # Just above the midpoint between 1 and 1 + 2^-7: through f32 it would become the tie
    # 1 + 2^-8 and then round to 1.0; one rounding gives 1 + 2^-7.
    assert f64_to_bf16_bits(1.0 + 2.0**-8 + 2.0**-30) == 0x3F81
    assert f64_to_bf16_bits(1.0 + 2.0**-8) == 0x3F80  # the tie itself: to even
    bf16_max = (2 - 2.0**-7) * 2.0**127
    assert f64_to_bf16_bits(bf16_max) == 0x7F7F
    assert f64_to_bf16_bits((2 - 2.0**-8) * 2.0**127) == 0x7F80  # tie above max: to inf
    assert f64_to_bf16_bits(np.nextafter((2 - 2.0**-8) * 2.0**127, 0)) == 0x7F7F
    assert f64_to_bf16_bits(2.0**-133) == 0x0001  # smallest bf16 subnormal
    assert f64_to_bf16_bits(2.0**-134) == 0x0000  # tie: to even (zero)
    assert f64_to_bf16_bits(np.nextafter(2.0**-134, 1)) == 0x0001
    assert f64_to_bf16_bits(-(2.0**-1074)) == 0x8000
    assert f64_to_bf16_bits(1e300) == 0x7F80 and f64_to_bf16_bits(-np.inf) == 0xFF80
    assert f64_to_bf16_bits(np.nan) == 0x7FC0 and f64_to_bf16_bits(-np.nan) == 0xFFC0


def test_f64_to_bf16_matches_rational_rounding_on_random_and_edge_values():
    rng = np.random.default_rng(9)
    mant = rng.random(4000) + 1.0
    exps = rng.integers(-140, 130, size=4000)
    signs = rng.choice([-1.0, 1.0], size=4000)
    xs = list(signs * np.ldexp(mant, exps))
    # Values at and around every kind of bf16 boundary: ties, near-ties, subnormals, overflow.
    for e in [-140, -134, -133, -127, -126, -125, -1, 0, 1, 126, 127]:
        for frac in [0, 1, 2**-8, 2**-8 + 2**-40, 2**-8 - 2**-40, 3 * 2**-8, 1 - 2**-9, 1 - 2**-40]:
            xs.append(math.ldexp(1 + frac, e))
    xs = np.array(xs, dtype=np.float64)
    xs = np.concatenate([xs, -xs, np.nextafter(xs, np.inf), np.nextafter(xs, -np.inf)])
    expected = np.array([_f64_to_bf16_reference(float(v)) for v in xs], dtype=np.uint16)
    assert np.array_equal(f64_to_bf16_bits(xs), expected)


def test_f64_to_bf16_agrees_with_ml_dtypes_when_exact_in_f32():
    rng = np.random.default_rng(10)
    u = rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
    x32 = u.view(np.float32)
    x32 = x32[~np.isnan(x32)]
    assert np.array_equal(f64_to_bf16_bits(x32.astype(np.float64)), x32.astype(BF16).view(np.uint16))
    assert np.array_equal(f64_to_bf16_bits(x32.astype(np.float64)), f32_to_bf16_bits(x32))


# ---- rosters and fills (no libtgrad needed) ------------------------------------------------------


@pytest.mark.parametrize("name", ["ci", "full"])
def test_roster_cases_have_unique_ids_and_views_of_the_right_shape(name):
    from tgrad.conformance.rosters import build_operands, roster

    cases = roster(name)
    assert len({c.id for c in cases}) == len(cases)
    for case in cases:
        if case.m * case.k + case.k * case.n > 1 << 22:
            continue  # full-size sentinels: shapes only, building them here would be slow
        a_base, b_base, view = build_operands(case)
        a, b = view(a_base, "a"), view(b_base, "b")
        assert a.shape == (case.m, case.k) and b.shape == (case.k, case.n), case.id
        if case.a_view not in ("plain", "reshape_split") and a.size:
            assert np.shares_memory(a, a_base), case.id  # a view, not a copy


def test_fills_are_reproducible_from_the_seed():
    from tgrad.conformance.fills import FILLS

    for kind in FILLS:
        one = fills.fill_bits(kind, (7, 9), np.random.default_rng(42))
        two = fills.fill_bits(kind, (7, 9), np.random.default_rng(42))
        assert one.dtype == np.uint16 and one.shape == (7, 9) and np.array_equal(one, two), kind


def test_special_fill_contains_every_category():
    x = fills.fill_bits("special", (256, 256), np.random.default_rng(0))
    exp = (x >> 7) & 0xFF
    mant = x & 0x7F
    assert np.any((exp == 0xFF) & (mant != 0))  # NaN
    assert np.any((exp == 0xFF) & (mant == 0))  # inf
    assert np.any((exp == 0) & (mant != 0))  # subnormal
    assert np.any(x == 0x8000) and np.any(x == 0x0000)
    assert np.any(exp > 200) and np.any((exp > 0) & (exp < 40))


def test_ci_roster_oracle_is_fast():
    import time

    from tgrad.conformance.rosters import build_operands, roster

    start = time.perf_counter()
    for case in roster("ci"):
        a_base, b_base, view = build_operands(case)
        matmul_bits(view(a_base, "a"), view(b_base, "b"))
    assert time.perf_counter() - start < 20
