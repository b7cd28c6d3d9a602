"""The exact references of softmax, log_softmax and logsumexp (tests/python/test_softmax.py, the
softmax bench's check): mpmath at a precision raised until the rounding is certain, rounded once
with round_to (RNE, gradual underflow, overflow to inf). Specials follow docs/numerics.md."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

from .exact import round_to, value_of

_CODE = {"bfloat16": 1, "float32": 2}
_NAN = {1: 0x7FC0, 2: 0x7FC00000}
_INF = {1: 0x7F80, 2: 0x7F800000}
_SIGN = {1: 0x8000, 2: 0x80000000}


def _frac(v: mpmath.mpf) -> Fraction:
    sign, man, exp, _ = mpmath.mpf(v)._mpf_
    q = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -q if sign else q


def _round_certain(f, out: int) -> int:
    """f(prec) -> mpf value; the rounding of the exact value, at a precision where value -+ 2^-(prec-24)
    relative round alike (precision doubled up to 2^14 bits; an exact boundary would fail)."""
    prec = 160
    while prec <= 1 << 14:
        with mpmath.workprec(prec):
            y = f()
            if y == 0:
                return 0
            e = abs(y) * mpmath.mpf(2) ** (-(prec - 24))
            lo, hi = round_to(_frac(y - e), out), round_to(_frac(y + e), out)
        if lo == hi:
            return lo
        prec *= 2
    raise AssertionError("the reference could not decide a rounding")


def reference(op: str, row_bits: list[int], in_dtype: str, out_dtype: str) -> list[int]:
    """The output bits of op over one row (list of input bits): n values, or one for logsumexp."""
    code, out = _CODE[in_dtype], _CODE[out_dtype]
    vals = [value_of(b, code) for b in row_bits]
    n = len(vals)
    if op == "logsumexp" and n == 0:
        return [_SIGN[out] | _INF[out]]
    nan = any(v == "nan" for v in vals)
    pinf = any(v == "+inf" for v in vals)
    finite = [v for v in vals if isinstance(v, Fraction)]
    if nan or (op != "logsumexp" and (pinf or not finite)):
        return [_NAN[out]] * (1 if op == "logsumexp" else n)
    if op == "logsumexp" and pinf:
        return [_INF[out]]
    if not finite:  # logsumexp of -inf only
        return [_SIGN[out] | _INF[out]]
    m = max(finite)

    def mp(v: Fraction) -> mpmath.mpf:
        return mpmath.mpf(v.numerator) / mpmath.mpf(v.denominator)

    def log_s() -> mpmath.mpf:  # log(sum exp(x_j - m)), exact enough at the working precision
        return mpmath.log(mpmath.fsum(mpmath.exp(mp(v - m)) for v in finite))

    if op == "logsumexp":
        if len(finite) == 1:
            return [round_to(m, out)]
        return [_round_certain(lambda: mp(m) + log_s(), out)]
    res = []
    for v in vals:
        if v == "-inf":
            res.append(0 if op == "softmax" else _SIGN[out] | _INF[out])
        elif len(finite) == 1:
            res.append(round_to(Fraction(1), out) if op == "softmax" else 0)
        elif op == "softmax":
            res.append(_round_certain(lambda v=v: mpmath.exp(mp(v - m)) / mpmath.fsum(
                mpmath.exp(mp(w - m)) for w in finite), out))
        else:
            r = _round_certain(lambda v=v: mp(v - m) - log_s(), out)
            res.append(r if r != 0 else _SIGN[out])  # a negative value below the smallest: -0
    return res


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)
