"""An exact reference for the correctly rounded norms (docs/numerics.md, "Norms"): mpmath at 300
bits proposes each result, then exact rational comparisons with the neighbouring bf16 midpoints
(squares compared in Fractions) confirm or move it, so ties at exact midpoints are decided
exactly. Rounds with the conformance kit's ``round_to``; independent of libtgrad's method."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np

from tgrad.conformance.exact import BF16, round_to, value_of

TWO128 = Fraction(2) ** 128


def _key(b: int) -> int:
    return -(b & 0x7FFF) if b & 0x8000 else b


def _bits(k: int) -> int:
    return k if k >= 0 else 0x8000 | -k


def _kval(k: int) -> Fraction:
    m = abs(k)
    v = TWO128 if m >= 0x7F80 else value_of(m, BF16)
    assert isinstance(v, Fraction)
    return -v if k < 0 else v


def _mid(k: int) -> Fraction:
    return (_kval(k) + _kval(k + 1)) / 2


def round_exact(approx: mpmath.mpf, cmp: Callable[[Fraction], int], zero_negative: bool) -> int:
    """bf16 bits of the exact y, given an approximation and cmp(M) = sign(y - M) exactly."""
    man, exp = approx.man_exp
    q = Fraction(abs(int(man))) * Fraction(2) ** int(exp)  # man_exp's mantissa may be unsigned
    k = _key(round_to(-q if approx < 0 else q, BF16))
    while True:
        if k < 0x7F80:
            c = cmp(_mid(k))
            if c > 0 or (c == 0 and abs(k) % 2 == 1):
                k += 1
                continue
        if k > -0x7F80:
            c = cmp(_mid(k - 1))
            if c < 0 or (c == 0 and abs(k) % 2 == 1):
                k -= 1
                continue
        break
    if k == 0:
        c = cmp(Fraction(0))
        return 0x8000 if c < 0 or (c == 0 and zero_negative) else 0
    return _bits(k)


def _sign(q: Fraction) -> int:
    return (q > 0) - (q < 0)


def _f(b: int) -> Fraction:
    v = value_of(int(b), BF16)
    assert isinstance(v, Fraction)
    return v


def _bf(b: int) -> float:
    return float(np.array([b], np.uint16).astype(np.uint32).__lshift__(16).view(np.float32)[0])


def _ieee(y: float) -> int:
    """bf16 bits of a double (RNE; NaN canonical)."""
    if math.isnan(y):
        return 0x7FC0
    if math.isinf(y):
        return 0xFF80 if y < 0 else 0x7F80
    if y == 0:
        return 0x8000 if math.copysign(1, y) < 0 else 0
    return round_to(Fraction(y), BF16)


def rms_norm_row(x: list[int], w: list[int] | None, eps: float) -> list[int]:
    n = len(x)
    xf = [_bf(b) for b in x]
    wf = [1.0 if w is None else _bf(b) for b in (w or x)]
    if not all(math.isfinite(v) for v in xf) or (eps == 0 and all(v == 0 for v in xf)):
        r = sum(v * v for v in xf) / n + eps
        inv = 1 / math.sqrt(r) if r > 0 else (math.inf if r == 0 else math.nan)
        return [_ieee(a * b * inv) for a, b in zip(xf, wf)]
    r = sum((_f(b) ** 2 for b in x), Fraction(0)) / n + Fraction(eps)
    mpmath.mp.prec = 300
    sr = mpmath.sqrt(mpmath.mpf(r.numerator) / r.denominator)
    out = []
    for i in range(n):
        if w is not None and not math.isfinite(wf[i]):
            out.append(_ieee(xf[i] * wf[i] / math.sqrt(float(r))))
            continue
        num = _f(x[i]) * (_f(w[i]) if w is not None else 1)

        def cmp(m: Fraction, num: Fraction = num) -> int:
            sy, sm = _sign(num), _sign(m)
            if sy != sm or sy == 0:
                return (sy > sm) - (sy < sm)
            c = _sign(num * num - m * m * r)
            return c if sy > 0 else -c

        approx = mpmath.mpf(num.numerator) / num.denominator / sr
        out.append(round_exact(approx, cmp, math.copysign(1, xf[i] * wf[i]) < 0))
    return out


def layer_norm_row(x: list[int], w: list[int] | None, b: list[int] | None, eps: float) -> list[int]:
    n = len(x)
    xf = [_bf(v) for v in x]
    wf = [1.0 if w is None else _bf(v) for v in (w or x)]
    bf = [0.0 if b is None else _bf(v) for v in (b or x)]
    if not all(math.isfinite(v) for v in xf):
        return [0x7FC0] * n  # the mean is inf or NaN: every element is NaN
    xs = [_f(v) for v in x]
    mu = sum(xs, Fraction(0)) / n
    d = sum(((v - mu) ** 2 for v in xs), Fraction(0)) / n + Fraction(eps)
    if d == 0:
        return [0x7FC0] * n
    mpmath.mp.prec = 300
    sd = mpmath.sqrt(mpmath.mpf(d.numerator) / d.denominator)
    out = []
    for i in range(n):
        if not (math.isfinite(wf[i]) and math.isfinite(bf[i])):
            continue_value = wf[i] * (xf[i] - float(mu)) / math.sqrt(float(d)) + bf[i]
            out.append(_ieee(continue_value))
            continue
        wq = _f(w[i]) if w is not None else Fraction(1)
        bq = _f(b[i]) if b is not None else Fraction(0)
        p = wq * (xs[i] - mu)

        def cmp(m: Fraction, p: Fraction = p, bq: Fraction = bq) -> int:
            t = m - bq
            sz, st = _sign(p), _sign(t)
            if sz != st or sz == 0:
                return (sz > st) - (sz < st)
            c = _sign(p * p - t * t * d)
            return c if sz > 0 else -c

        approx = mpmath.mpf(p.numerator) / p.denominator / sd + mpmath.mpf(bq.numerator) / bq.denominator
        pneg = (math.copysign(1, wf[i]) < 0) != (xs[i] < mu)
        zero_neg = pneg and (b is None or b[i] == 0x8000)
        out.append(round_exact(approx, cmp, zero_neg))
    return out
