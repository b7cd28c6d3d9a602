"""An exact reference for rms_norm_backward and layer_norm_backward (docs/numerics.md,
"rms_norm_backward, layer_norm_backward"): with r = mean((x - mu)^2) + eps exactly (a Fraction; mu
the row's mean for layer_norm, 0 for rms_norm), every dx_i is A_i / sqrt(r) with A_i rational:
  rms_norm:   A_i = gw_i - x_i sum(gw x) / (N r)
  layer_norm: A_i = gw_i - mean(gw) - (x_i - mu) mean(gw (x - mu)) / r
mpmath at 400 bits proposes each value, the conformance kit's ``round_to`` rounds it, and exact
comparisons of A_i^2 with m^2 r at the neighbouring midpoints m confirm or move it (ties go to the
even neighbour). An exact zero is +0. Independent of libtgrad's method (its big integers, its
bisection, its double bound)."""

from __future__ import annotations

from fractions import Fraction

import mpmath

from tgrad.conformance.exact import BF16, F32, round_to, value_of

_FMT = {BF16: (0x8000, 0x7F80), F32: (0x80000000, 0x7F800000)}


def _key(b: int, dt: int) -> int:
    sign, _ = _FMT[dt]
    return -(b & (sign - 1)) if b & sign else b


def _bits(k: int, dt: int) -> int:
    return k if k >= 0 else _FMT[dt][0] | -k


def _kval(k: int, dt: int) -> Fraction:
    m = abs(k)
    v = Fraction(2) ** 128 if m >= _FMT[dt][1] else value_of(m, dt)
    assert isinstance(v, Fraction)
    return -v if k < 0 else v


def _cmp(a: Fraction, r: Fraction, m: Fraction) -> int:
    """sign(a / sqrt(r) - m), exactly"""
    sa, sm = (a > 0) - (a < 0), (m > 0) - (m < 0)
    if sa != sm or sa == 0:
        return (sa > sm) - (sa < sm)
    c = (a * a > m * m * r) - (a * a < m * m * r)
    return c if sa > 0 else -c


def round_quotient(a: Fraction, r: Fraction, dt: int) -> int:
    """The bits of a / sqrt(r) (r > 0) rounded once to dt (BF16 or F32)."""
    if a == 0:
        return 0
    with mpmath.workprec(400):
        v = mpmath.mpf(a.numerator) / a.denominator / mpmath.sqrt(mpmath.mpf(r.numerator) / r.denominator)
        man, exp = v.man_exp
    q = Fraction(abs(int(man))) * Fraction(2) ** int(exp)
    k = _key(round_to(-q if v < 0 else q, dt), dt)
    top = _FMT[dt][1]
    while True:
        if k < top and ((c := _cmp(a, r, (_kval(k, dt) + _kval(k + 1, dt)) / 2)) > 0 or (c == 0 and k % 2)):
            k += 1
        elif k > -top and ((c := _cmp(a, r, (_kval(k - 1, dt) + _kval(k, dt)) / 2)) < 0 or (c == 0 and k % 2)):
            k -= 1
        else:
            break
    if k == 0:
        return _FMT[dt][0] if a < 0 else 0
    return _bits(k, dt)


def reference_row(x: list[float], g: list[float], w: list[float] | None, eps: float, layer: bool, dt: int) -> list[int]:
    """dx of one row as dt bits (x, g, w: exact bf16/float32 values as Python floats; finite)."""
    n = len(x)
    X = [Fraction(v) for v in x]
    GW = [Fraction(a) * (Fraction(b) if w is not None else 1) for a, b in zip(g, w if w is not None else g)]
    mu = sum(X, Fraction(0)) / n if layer else Fraction(0)
    D = [v - mu for v in X]
    r = sum((d * d for d in D), Fraction(0)) / n + Fraction(eps)
    if r == 0:
        return [0x7FC0 if dt == BF16 else 0x7FC00000] * n
    a = sum(GW, Fraction(0)) / n if layer else Fraction(0)
    m2 = sum((p * d for p, d in zip(GW, D)), Fraction(0)) / n
    return [round_quotient(GW[i] - a - D[i] * m2 / r, r, dt) for i in range(n)]
