"""The exact reference of the derivative ops (codes 24-31; docs/numerics.md "Derivative ops").

``grad_bits(name, a, b, dtype=1)``: a is the forward op's input x (or output y), b the cotangent g,
both bit patterns of dtype 1 (bf16, uint16) or 2 (float32, uint32), broadcast; the result is each
element's correctly rounded ``g * h(a)``:

- gelu_backward: h = gelu'(x) = Phi(x) + x phi(x); gelu_tanh_backward: the derivative of
  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with exact constants; silu_backward:
  h = s (1 + x (1 - s)), s = sigmoid(x); limits h(+inf) = 1, h(-inf) = -0;
- sigmoid_backward: h = y (1 - y); tanh_backward: 1 - y^2; rsqrt_backward: -y^3 / 2;
  sqrt_backward: 1 / (2 y) (g / (2 y));
- relu_backward: g where x > 0, else +0 (a select).

Zeros, infinities and NaN follow IEEE multiplication of g and h (h's sign for a finite non-zero
h: gelu', gelu_tanh' and silu' are never 0 for a finite x, only tiny). Every NaN out is canonical.

How: float64 with an error bound (the formulas' few roundings, 2^-50 of the value, for the
rational ops; 2^-40 of the terms' magnitudes for the transcendental ones, in cancellation-free
forms); where the bound's interval holds a rounding boundary, the exact value: Fractions for the
rational ops, mpmath at 400 bits for the others (x = 0: h = 1/2 exactly).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["GRAD_OPS", "grad_bits"]

GRAD_OPS = ("gelu_backward", "gelu_tanh_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
            "relu_backward", "rsqrt_backward", "sqrt_backward")
_SMOOTH = GRAD_OPS[:3]
_NAN = {1: 0x7FC0, 2: 0x7FC00000}
_K = 0.044715
_C = math.sqrt(2 / math.pi)


def _values(bits: np.ndarray, dtype: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        if dtype == 1:
            return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def _round64(v: float, dtype: int) -> int:
    """float64 -> bits, one rounding (nearest even)."""
    from .oracle import f64_to_bf16_bits

    if v != v:
        return _NAN[dtype]
    if dtype == 1:
        return int(f64_to_bf16_bits(np.float64(v)))
    with np.errstate(over="ignore"):
        return int(np.array([v]).astype(np.float32).view(np.uint32)[0])


def _smooth64(name: str, x: float) -> tuple[float, float]:
    """(f'(x), the scale of its float64 error) for finite x."""
    if name == "gelu_backward":
        Phi = math.erfc(-x / math.sqrt(2)) / 2
        b = x * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        return Phi + b, Phi + abs(b)
    if name == "gelu_tanh_backward":
        z = _C * (x + _K * x**3)
        e = math.exp(-2 * abs(z))
        p, q = (1 / (1 + e), e / (1 + e)) if z >= 0 else (e / (1 + e), 1 / (1 + e))
        b = 2 * x * _C * (1 + 3 * _K * x * x) * p * q
        return p + b, p + abs(b) + (2 * p * q + abs(b)) * 2 * abs(z)  # z's rounding, through p q
    e = math.exp(-abs(x))
    s, r = (1 / (1 + e), e / (1 + e)) if x >= 0 else (e / (1 + e), 1 / (1 + e))
    b = x * s * r
    return s + b, s + abs(b)


def _smooth_mp(name: str, x: float):
    import mpmath

    X = mpmath.mpf(x)
    if name == "gelu_backward":
        return mpmath.ncdf(X) + X * mpmath.npdf(X)
    if name == "gelu_tanh_backward":
        c, k = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(44715) / 10**6
        z = c * (X + k * X**3)
        return (1 + mpmath.tanh(z)) / 2 + X / 2 * mpmath.sech(z) ** 2 * c * (1 + 3 * k * X**2)
    s = 1 / (1 + mpmath.exp(-X))
    return s * (1 + X * (1 - s))


def _mp_bits(v, dtype: int) -> int:
    """An mpmath value (400 bits, not within 2^-360 of a rounding boundary) rounded to dtype."""
    import mpmath

    from .exact import round_to

    if v == 0:
        raise AssertionError("a derivative op's exact value is 0 only for the special cases")
    p = 8 if dtype == 1 else 24
    _, e = mpmath.frexp(abs(v))
    qe = min(max(int(e) - 1, -126), 127) - (p - 1)
    scaled = mpmath.ldexp(abs(v), -qe)
    n = int(mpmath.floor(scaled))
    frac = scaled - n
    if abs(frac - mpmath.mpf(0.5)) < mpmath.ldexp(1, -360):
        raise ArithmeticError("within 2^-360 ulp of a midpoint: more precision needed")
    value = (Fraction(n) + Fraction(3 if frac > 0.5 else 1, 4)) * Fraction(2) ** qe
    return round_to(-value if v < 0 else value, dtype)


def _h_sign_class(name: str, a: float) -> float | None:
    """h(a) when it is 0, inf or NaN (its IEEE value), None for a finite non-zero h."""
    if a != a:
        return math.nan
    if name in _SMOOTH:
        return (1.0 if a > 0 else -0.0) if math.isinf(a) else None
    if name == "sigmoid_backward":
        return -math.inf if math.isinf(a) else (a if a == 0 else (0.0 if a == 1 else None))
    if name == "tanh_backward":
        return -math.inf if math.isinf(a) else (0.0 if abs(a) == 1 else None)
    if name == "rsqrt_backward":
        return -math.copysign(math.inf, a) if math.isinf(a) else (-a if a == 0 else None)
    # sqrt_backward: 1 / (2 y)
    return math.copysign(0.0, a) if math.isinf(a) else (math.copysign(math.inf, a) if a == 0 else None)


def _one(name: str, a: float, g: float, gbits: int, dtype: int) -> int:
    if name == "relu_backward":
        if a != a or g != g:
            return _NAN[dtype]
        return gbits if a > 0 else 0
    special = _h_sign_class(name, a)
    if special is not None or g != g or g == 0 or math.isinf(g):
        if special is None:  # finite non-zero h: its sign
            if name in _SMOOTH:
                d, mag = _smooth64(name, a)
                sign = (-1.0 if a < -2 else math.copysign(1.0, d) if a >= 0 or abs(d) > mag * 2.0**-30
                        else float(_smooth_mp_sign(name, a)))
            else:
                sign = math.copysign(1.0, _exact(name, Fraction(a), Fraction(1)))
            special = sign
        with np.errstate(invalid="ignore"):
            v = float(np.float64(g) * np.float64(special))
        return _round64(v, dtype)
    if name in _SMOOTH:
        if a == 0:
            from .exact import round_to

            return round_to(Fraction(g) / 2, dtype)  # exact: h(0) = 1/2
        d, mag = _smooth64(name, a)
        v, err = g * d, abs(g) * (mag * 2.0**-40 + abs(d) * 2.0**-52)
        if abs(v) + err < 2.0**-160:  # far below half the smallest subnormal: a zero of g f'(x)'s sign
            sign = -1.0 if a < -2 else math.copysign(1.0, d) if abs(d) > mag * 2.0**-30 else float(_smooth_mp_sign(name, a))
            return _round64(math.copysign(0.0, g) * sign, dtype)
        lo, hi = _round64(v - err, dtype), _round64(v + err, dtype)
        if lo == hi and (v - err) * (v + err) > 0:
            return lo
        import mpmath

        with mpmath.workprec(400):
            return _mp_bits(mpmath.mpf(g) * _smooth_mp(name, a), dtype)
    v = float(g * _h64(name, a))
    err = abs(v) * 2.0**-50
    lo, hi = _round64(v - err, dtype), _round64(v + err, dtype)
    if lo == hi and math.isfinite(v):
        return lo
    from .exact import round_to

    return round_to(_exact(name, Fraction(a), Fraction(g)), dtype)


def _smooth_mp_sign(name: str, a: float) -> int:
    import mpmath

    with mpmath.workprec(400):
        return 1 if _smooth_mp(name, a) > 0 else -1


def _h64(name: str, y: float) -> float:
    if name == "sigmoid_backward":
        return y * (1 - y)
    if name == "tanh_backward":
        return 1 - y * y
    if name == "rsqrt_backward":
        return -(y * y * y) / 2
    return 1 / (2 * y)


def _exact(name: str, y: Fraction, g: Fraction) -> Fraction:
    if name == "sigmoid_backward":
        return g * y * (1 - y)
    if name == "tanh_backward":
        return g * (1 - y * y)
    if name == "rsqrt_backward":
        return -g * y**3 / 2
    return g / (2 * y)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _smooth64_arrays(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_smooth64 over an array of finite x (numpy; the same forms)."""
    if name == "gelu_backward":
        Phi = _erfc(-x / math.sqrt(2)).astype(np.float64) / 2
        b = x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        return Phi + b, Phi + np.abs(b)
    if name == "gelu_tanh_backward":
        z = _C * (x + _K * x**3)
        e = np.exp(-2 * np.abs(z))
        p, q = np.where(z >= 0, 1 / (1 + e), e / (1 + e)), np.where(z >= 0, e / (1 + e), 1 / (1 + e))
        b = 2 * x * _C * (1 + 3 * _K * x * x) * p * q
        return p + b, p + np.abs(b) + (2 * p * q + np.abs(b)) * 2 * np.abs(z)
    e = np.exp(-np.abs(x))
    s, r = np.where(x >= 0, 1 / (1 + e), e / (1 + e)), np.where(x >= 0, e / (1 + e), 1 / (1 + e))
    b = x * s * r
    return s + b, s + np.abs(b)


def _round_arrays(v: np.ndarray, dtype: int) -> np.ndarray:
    from .oracle import f64_to_bf16_bits

    if dtype == 1:
        return f64_to_bf16_bits(v).astype(np.uint32)
    return v.astype(np.float32).view(np.uint32)


def grad_bits(name: str, a, b, dtype: int = 1) -> np.ndarray:
    """name(a, b) over bit patterns of dtype (1: bf16 uint16, 2: float32 uint32), broadcast.

    The bulk in numpy (float64 and its error bound: accepted where the bound's interval rounds to
    one value); the rest, and the special cases, element by element."""
    if name not in GRAD_OPS:
        raise ValueError(f"{name!r} is not a derivative op ({', '.join(GRAD_OPS)})")
    utype = np.uint16 if dtype == 1 else np.uint32
    a, b = (np.asarray(v) for v in (a, b))
    a, b = np.broadcast_arrays(a if a.dtype == utype else a.view(utype), b if b.dtype == utype else b.view(utype))
    av, gv = _values(a, dtype), _values(b, dtype)
    out = np.zeros(a.shape, dtype=np.uint32)
    with np.errstate(all="ignore"):
        if name == "relu_backward":
            nan = np.isnan(av) | np.isnan(gv)
            return np.where(nan, _NAN[dtype], np.where(av > 0, b, 0)).astype(utype)
        regular = np.isfinite(av) & np.isfinite(gv) & (gv != 0)
        if name in _SMOOTH:
            d, mag = _smooth64_arrays(name, np.where(regular, av, 0.0))
            v = gv * d
            err = np.abs(gv) * (mag * 2.0**-40 + np.abs(d) * 2.0**-52)
            # a result far below half the smallest subnormal is a zero of g f'(x)'s sign: f' < 0
            # below -2 (below each root: -0.75, -0.75, -1.28), else d's sign where d is clear of 0
            tiny = regular & (np.abs(v) + err < 2.0**-160) & ((av < -2) | (np.abs(d) > mag * 2.0**-30))
            sign = np.where(av < -2, -1.0, np.sign(d))
            out[tiny] = _round_arrays(np.copysign(0.0, gv) * sign, dtype)[tiny]
            regular &= (av != 0) & (np.abs(v) > err) & (np.abs(v) + err >= 2.0**-160)
        else:
            v = gv * _h64_arrays(name, av)
            err = np.abs(v) * 2.0**-50
            regular &= np.isfinite(v) & (v != 0)
        lo, hi = _round_arrays(v - err, dtype), _round_arrays(v + err, dtype)
        done = regular & (lo == hi)
        out[done] = lo[done]
        if name in _SMOOTH:
            done |= tiny
        for i in zip(*np.nonzero(~done)) if a.ndim else ([()] if not done else []):
            out[i] = _one(name, float(av[i]), float(gv[i]), int(b[i]), dtype)
    return out.astype(utype)


def _h64_arrays(name: str, y: np.ndarray) -> np.ndarray:
    if name == "sigmoid_backward":
        return y * (1 - y)
    if name == "tanh_backward":
        return 1 - y * y
    if name == "rsqrt_backward":
        return -(y * y * y) / 2
    return 1 / (2 * y)
