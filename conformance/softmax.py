"""The exact references of softmax, log_softmax and logsumexp (tests/python/test_softmax.py, the
softmax bench's check, tgrad.trace's replay): mpmath at a precision raised until each rounding is
certain, rounded once with round_to (RNE, gradual underflow, overflow to inf). The special rows
follow docs/numerics.md ("softmax, log_softmax, logsumexp")."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

from .exact import round_to, value_of

_CODE = {"bfloat16": 1, "float32": 2}
_NAN = {1: 0x7FC0, 2: 0x7FC00000}
_INF = {1: 0x7F80, 2: 0x7F800000}
_SIGN = {1: 0x8000, 2: 0x80000000}
_MAX_PREC = 1 << 14


def _frac(v: mpmath.mpf) -> Fraction:
    sign, man, exp, _ = mpmath.mpf(v)._mpf_
    q = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -q if sign else q


def _mp(v: Fraction) -> mpmath.mpf:
    return mpmath.mpf(v.numerator) / mpmath.mpf(v.denominator)


def _certain(y: mpmath.mpf, prec: int, out: int, scale: mpmath.mpf | None = None) -> int | None:
    """The rounding of every value within 2^-(prec - 24) of y relative (and 2^-(prec + 32) of scale,
    the size of the parts a sum cancelled), or None when they differ; y is computed at prec + 64
    bits, far more accurate than that."""
    e = abs(y) * mpmath.mpf(2) ** (-(prec - 24))
    if scale is not None:
        e = max(e, scale * mpmath.mpf(2) ** (-(prec + 32)))
    if e == 0:
        return 0
    lo, hi = round_to(_frac(y - e), out), round_to(_frac(y + e), out)
    return lo if lo == hi else None


def reference(op: str, row_bits: list[int], in_dtype: str, out_dtype: str) -> list[int]:
    """The output bits of op ("softmax", "log_softmax", "logsumexp") over one row of input bits:
    one per element, or one for logsumexp."""
    code, out = _CODE[in_dtype], _CODE[out_dtype]
    vals = [value_of(int(b), code) for b in row_bits]
    n = len(vals)
    if op == "logsumexp" and n == 0:
        return [_SIGN[out] | _INF[out]]
    finite = [v for v in vals if isinstance(v, Fraction)]
    if any(v == "nan" for v in vals) or (op != "logsumexp" and ("+inf" in vals or not finite)):
        return [_NAN[out]] * (1 if op == "logsumexp" else n)
    if op == "logsumexp":
        if "+inf" in vals:
            return [_INF[out]]
        if not finite:
            return [_SIGN[out] | _INF[out]]
        if len(finite) == 1:
            return [round_to(finite[0], out)]
    m = max(finite)
    res: list[int | None] = [None] * (1 if op == "logsumexp" else n)
    for i, v in enumerate(vals if op != "logsumexp" else []):
        if v == "-inf":
            res[i] = 0 if op == "softmax" else _SIGN[out] | _INF[out]
        elif len(finite) == 1:
            res[i] = round_to(Fraction(1), out) if op == "softmax" else 0
    prec = 160
    while any(r is None for r in res):
        if prec > _MAX_PREC:
            raise AssertionError("the reference could not decide a rounding")
        with mpmath.workprec(prec + 64):
            # terms below 2^-(prec + 100) are left out: their sum is under n 2^-(prec + 100) of S >= 1
            cut = -(prec + 100) * mpmath.log(2)
            terms = [mpmath.exp(_mp(v - m)) for v in finite if _mp(v - m) > cut]
            s = mpmath.fsum(terms)
            log_s = mpmath.log(s)
            for i in range(len(res)):
                if res[i] is not None:
                    continue
                if op == "logsumexp":
                    res[i] = _certain(_mp(m) + log_s, prec, out, abs(_mp(m)) + abs(log_s))
                    continue
                v = vals[i]
                assert isinstance(v, Fraction)
                if op == "softmax" and v - m < -1100:  # below 2^-1586: +0 in every output dtype
                    res[i] = 0
                elif op == "softmax":
                    res[i] = _certain(mpmath.exp(_mp(v - m)) / s, prec, out)
                else:
                    r = _certain(_mp(v - m) - log_s, prec, out)
                    res[i] = None if r is None else (r or _SIGN[out])  # a negative value too small: -0
        prec *= 2
    return [int(r) for r in res if r is not None]


def bits_of(a: np.ndarray) -> np.ndarray:
    """An array's values as their bit patterns (uint16 for bf16, uint32 for float32)."""
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def reference_backward(y_bits: list[int], g_bits: list[int], y_dtype: str, g_dtype: str, out_dtype: str) -> list[int]:
    """softmax_backward's output bits over one row: y_i (g_i - sum_j g_j y_j), the exact value (a
    Fraction) rounded once; a row holding a NaN or infinity gives IEEE's value of the expression
    with the row's sum (NaN canonical); an exact zero is -0 when IEEE's two operations make it so
    (g_i - S = -0 only for g_i = -0 and S = +0, S being -0 when every product is -0)."""
    yc, gc, out = _CODE[y_dtype], _CODE[g_dtype], _CODE[out_dtype]
    ys = [value_of(int(b), yc) for b in y_bits]
    gs = [value_of(int(b), gc) for b in g_bits]
    yneg = [bool(int(b) & _SIGN[yc]) for b in y_bits]
    gneg = [bool(int(b) & _SIGN[gc]) for b in g_bits]
    qy = [v for v in ys if isinstance(v, Fraction)]
    qg = [v for v in gs if isinstance(v, Fraction)]
    if len(qy) + len(qg) < len(ys) + len(gs):
        fy = [float(v) for v in ys]
        fg = [float(v) for v in gs]
        fs = sum(a * b for a, b in zip(fg, fy))
        res = []
        for fa, fb in zip(fy, fg):
            fv = fa * (fb - fs)
            res.append(_NAN[out] if fv != fv else (_INF[out] | (_SIGN[out] if fv < 0 else 0)))
        return res
    s = sum((b * a for a, b in zip(qy, qg)), Fraction(0))
    s_negzero = len(qy) > 0 and all((a == 0 or b == 0) and yn != gn for a, b, yn, gn in zip(qy, qg, yneg, gneg))
    res = []
    for a, b, yn, gn in zip(qy, qg, yneg, gneg):
        d = b - s
        v = a * d
        if v != 0:
            res.append(round_to(v, out))
            continue
        dneg = d < 0 if d != 0 else (b == 0 and gn and not s_negzero)
        res.append(_SIGN[out] if yn != dneg else 0)
    return res


def reference_log_backward(z_bits: list[int], g_bits: list[int], z_dtype: str, g_dtype: str,
                           out_dtype: str) -> list[int]:
    """log_softmax_backward's output bits over one row: g_i - exp(z_i) G with G = sum_j g_j, the
    exact value rounded once (mpmath at a precision raised until each rounding is certain; it is
    rational only when G = 0 or z_i = 0, computed with Fractions then). Specials: a NaN z_i gives
    NaN; a row whose g holds an infinity or NaN (G not finite) IEEE's value with exp(z_i) 0 for
    -inf, +inf for +inf and a positive real otherwise; z_i = -inf gives g_i, z_i = +inf NaN for
    G = 0 and -sign(G) inf otherwise. A zero is -0 only for g_i = -0 and exp(z_i) G = +0 (G = +0
    or positive; G is -0 when every g_j is -0)."""
    zc, gc, out = _CODE[z_dtype], _CODE[g_dtype], _CODE[out_dtype]
    zs = [value_of(int(b), zc) for b in z_bits]
    gs = [value_of(int(b), gc) for b in g_bits]
    gneg = [bool(int(b) & _SIGN[gc]) for b in g_bits]
    fin = all(isinstance(v, Fraction) for v in gs)
    big_g = sum((v for v in gs if isinstance(v, Fraction)), Fraction(0))
    gsign = (big_g > 0) - (big_g < 0)
    negzero = len(gs) > 0 and all(v == 0 and n for v, n in zip(gs, gneg))
    g_ieee = sum(float(v) for v in gs)

    def inf(neg: bool) -> int:
        return _INF[out] | (_SIGN[out] if neg else 0)

    def exactly_g(gv: Fraction, gn: bool) -> int:
        if gv != 0:
            return round_to(gv, out)
        pneg = gsign < 0 or (gsign == 0 and negzero)
        return _SIGN[out] if gn and not pneg else 0

    res: list[int] = []
    for z, gv, gn in zip(zs, gs, gneg):
        if z == "nan":
            res.append(_NAN[out])
        elif not fin:
            e = float("inf") if z == "+inf" else 0.0 if z == "-inf" else 1.0
            v = float(gv) - e * g_ieee
            res.append(_NAN[out] if v != v else inf(v < 0))
        elif z == "+inf":
            res.append(_NAN[out] if gsign == 0 else inf(gsign > 0))
        elif z == "-inf" or gsign == 0:
            assert isinstance(gv, Fraction)
            res.append(exactly_g(gv, gn))
        elif z == 0:
            assert isinstance(gv, Fraction)
            d = gv - big_g
            res.append(round_to(d, out) if d != 0 else 0)
        else:
            assert isinstance(gv, Fraction) and isinstance(z, Fraction)
            # below -2000, exp(z) |G| < 2^-2700: g_i (a multiple of 2^-149) minus any such positive
            # or negative amount is on the same side of every rounding boundary (multiples of
            # 2^-150), so z = -2000 rounds alike (and keeps mpmath's numbers of moderate size)
            z = max(z, Fraction(-2000))
            prec = 160
            while True:
                if prec > _MAX_PREC:
                    raise AssertionError("the reference could not decide a rounding")
                with mpmath.workprec(prec + 64):
                    p = mpmath.exp(_mp(z)) * _mp(big_g)
                    r = _certain(_mp(gv) - p, prec, out, abs(p) + abs(_mp(gv)))
                if r is not None:
                    res.append(r)
                    break
                prec *= 2
    return res
