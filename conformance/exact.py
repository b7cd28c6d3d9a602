"""Exact values of bf16 and float32 bits, and correct rounding of exact rationals back to them.

The oracle of the correctly rounded reductions (docs/numerics.md, "Reductions: correctly rounded
sum and mean"): ``value_of`` turns bits into a `Fraction`, ``round_to`` rounds a `Fraction` once
to nearest even (gradual underflow, overflow to inf) and returns the bits, and ``sum_bits`` /
``mean_bits`` apply the contract's special-value rules around them. Everything is integer or
rational arithmetic; no float operation decides a result.

``exact_sum_units`` is the fast route for long arrays: the exact sum as an integer number of
2^-149 units (every bf16 and float32 value is an integer multiple of 2^-149), summed per exponent
with numpy int64 (exact: at most 2^24 * 2^31 per exponent group of up to 2^31 values) and
combined in Python integers. A test checks it against summing `value_of` Fractions.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import numpy as np

__all__ = [
    "BF16",
    "F32",
    "exact_sum_units",
    "extremum_index",
    "mean_bits",
    "round_to",
    "sum_bits",
    "sum_mean_bits",
    "value_of",
]

BF16 = 1  # tgrad.h's dtype codes (TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32)
F32 = 2

# (significand bits with the implicit one, sign bit, infinity's bits, canonical NaN)
_FMT = {BF16: (8, 0x8000, 0x7F80, 0x7FC0), F32: (24, 0x80000000, 0x7F800000, 0x7FC00000)}
UNIT = Fraction(1, 2**149)  # the smallest float32 subnormal; bf16's smallest is 2^-133


def _fields(bits: int, dtype: int) -> tuple[int, int, int]:
    """(sign, biased exponent, fraction) of the bits."""
    p = _FMT[dtype][0]
    sign = 1 if bits & _FMT[dtype][1] else 0
    return sign, (bits >> (p - 1)) & 0xFF, bits & ((1 << (p - 1)) - 1)


def is_nan(bits: int, dtype: int) -> bool:
    return (bits & ~_FMT[dtype][1]) > _FMT[dtype][2]


def value_of(bits: int, dtype: int) -> Fraction | str:
    """The exact value of finite bits as a Fraction; 'nan', '+inf' or '-inf' otherwise."""
    p = _FMT[dtype][0]
    sign, e, f = _fields(int(bits), dtype)
    if e == 0xFF:
        return "nan" if f else ("-inf" if sign else "+inf")
    m = f | (1 << (p - 1)) if e else f
    v = Fraction(m) * Fraction(2) ** ((e if e else 1) - 127 - (p - 1))
    return -v if sign else v


def round_to(q: Fraction, dtype: int) -> int:
    """The bits of q rounded to nearest, ties to even, in dtype (8 or 24 significant bits,
    exponents -126 .. 127, subnormals below 2^-126, +-inf past the largest finite value).
    A zero q gives +0.0 (the callers decide a zero's sign)."""
    p, sign_bit, inf, _ = _FMT[dtype]
    if q == 0:
        return 0
    sign = sign_bit if q < 0 else 0
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    qe = max(e, -126) - (p - 1)  # the exponent of the result's ulp
    scaled = a / Fraction(2) ** qe
    k = scaled.numerator // scaled.denominator
    rest = scaled - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2 == 1):
        k += 1
    if k == 1 << p:  # carried into the next binade
        k, qe = 1 << (p - 1), qe + 1
    if qe + p > 128:  # k 2^qe >= 2^128: past the largest finite value
        return sign | inf
    if k < 1 << (p - 1):  # subnormal (or rounded up to the smallest normal below)
        return sign | k
    biased = qe + (p - 1) + 127
    return sign | (biased << (p - 1)) | (k - (1 << (p - 1)))


def _specials(bits: np.ndarray, dtype: int) -> tuple[bool, bool, bool, bool]:
    """(any NaN, any +inf, any -inf, every value is -0.0 and there is one)"""
    _, sign_bit, inf, _ = _FMT[dtype]
    b = np.asarray(bits).astype(np.int64).ravel()
    mag = b & (sign_bit - 1)
    nan = bool(np.any(mag > inf))
    pinf = bool(np.any(b == inf))
    ninf = bool(np.any(b == (sign_bit | inf)))
    return nan, pinf, ninf, b.size > 0 and bool(np.all(b == sign_bit))


def _finish(total: Fraction, bits: np.ndarray, dtype: int, out_dtype: int) -> int:
    nan, pinf, ninf, all_negzero = _specials(bits, dtype)
    _, sign_bit, inf, qnan = _FMT[out_dtype]
    if nan or (pinf and ninf):
        return qnan
    if pinf:
        return inf
    if ninf:
        return sign_bit | inf
    if total == 0:
        return sign_bit if all_negzero else 0
    return round_to(total, out_dtype)


def exact_sum_units(bits: np.ndarray, dtype: int) -> int:
    """The exact sum of the finite values among `bits` (uint16 for bf16, uint32 for float32), in
    units of 2^-149, as a Python int."""
    b = np.asarray(bits).astype(np.int64).ravel()
    p = _FMT[dtype][0]
    e = (b >> (p - 1)) & 0xFF
    m = (b & ((1 << (p - 1)) - 1)) | np.where(e > 0, 1 << (p - 1), 0)
    m = np.where(b & _FMT[dtype][1], -m, m)
    shift = np.maximum(e, 1) - 1 + (24 - p)  # a value is m 2^(shift - 149)
    finite = e != 0xFF
    total = 0
    for s in np.unique(shift[finite]):
        group = m[finite & (shift == s)]
        for i in range(0, group.size, 1 << 31):
            total += int(group[i : i + (1 << 31)].sum()) << int(s)
    return total


def sum_bits(bits: np.ndarray, dtype: int, out_dtype: int) -> int:
    """The contract's sum: the exact sum rounded once; NaN if any NaN or both infinities, else
    +-inf if one occurs; a zero is -0.0 only when every value is -0.0 (the empty sum is +0.0)."""
    flat = np.asarray(bits).ravel()
    return _finish(Fraction(exact_sum_units(flat, dtype)) * UNIT, flat, dtype, out_dtype)


def mean_bits(bits: np.ndarray, dtype: int, out_dtype: int) -> int:
    """The contract's mean: the exact sum / n rounded once, with sum's special rules; NaN for n = 0."""
    flat = np.asarray(bits).ravel()
    if flat.size == 0:
        return _FMT[out_dtype][3]
    total = Fraction(exact_sum_units(flat, dtype)) * UNIT / flat.size
    return _finish(total, flat, dtype, out_dtype)


def sum_mean_bits(bits: np.ndarray, dtype: int) -> dict[tuple[bool, int], int]:
    """sum_bits and mean_bits for both output dtypes at once, keyed (mean, out_dtype): the exact
    sum is found once."""
    flat = np.asarray(bits).ravel()
    total = Fraction(exact_sum_units(flat, dtype)) * UNIT
    result = {}
    for out in (BF16, F32):
        result[(False, out)] = _finish(total, flat, dtype, out)
        result[(True, out)] = _FMT[out][3] if flat.size == 0 else _finish(total / flat.size, flat, dtype, out)
    return result


def extremum_index(bits: Iterable[int], dtype: int, want_max: bool) -> int:
    """The contract's argmax / argmin: the first NaN if any, else the first index of the extreme
    value, with -0.0 and +0.0 equal. Raises ValueError for no values."""
    best_i, best = -1, Fraction(0)
    for i, b in enumerate(bits):
        v = value_of(int(b), dtype)
        if v == "nan":
            return i
        x = Fraction(10**400) if v == "+inf" else Fraction(-(10**400)) if v == "-inf" else v
        assert isinstance(x, Fraction)
        if best_i < 0 or (x > best if want_max else x < best):
            best_i, best = i, x
    if best_i < 0:
        raise ValueError("the extremum of no values")
    return best_i
