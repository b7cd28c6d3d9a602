"""The bit-exact oracle for tgrad's elementwise ops: docs/numerics.md "Elementwise ops" as numpy.

Like conformance.oracle (the matmul's), this module is independent of libtgrad (numpy, the Python
math module and, for a handful of inputs, mpmath) so that it can judge it. Slow is fine; simple
is the point.

``elementwise_bits(op, *operands)``: operands are numpy arrays of bf16 bit patterns (uint16, or
ml_dtypes.bfloat16), broadcast as numpy does; the result is uint16 of the broadcast shape, each
element the correctly rounded bf16 of the exact result (round to nearest even, gradual
underflow, overflow to inf, every NaN out the canonical 0x7FC0, the stated special cases).

How each op is computed, and why that is exact:

- relu, neg, abs, maximum, minimum pick an input's bits (or flip a sign bit): nothing rounds.
- mul, square: the product of two 8-bit significands has 16 bits and an exponent in
  [-266, 256]: exact in float64. Rounding it once to bf16 is the definition.
- add, sub: with |a| >= |b| and quantum q of b (its last bit's weight), a + b is an integer
  multiple of q below 2^(ea - eb + 9) of them, exact in float64 when ea - eb <= 44. Otherwise
  |b| < 2^-43 |a|: the exact sum lies within 2^-43 |a| of a, a bf16 value on the grid of the
  sum's binade (also when a is a power of two and the sum falls to the binade below), so it
  and its float64 rounding (within 2^-53 of it) lie strictly inside the interval that rounds
  to a, nearer to a than any midpoint (2^-10 |a| away at least): both round to a.
- div: a/b = (ma/mb) 2^k with integer significands ma, mb < 2^8. Either the quotient is a
  bf16 midpoint (then it has 9 significant bits and float64 holds it exactly, so the tie is
  seen as a tie), or its distance to every midpoint is a nonzero integer over mb 2^j, at least
  2^-17 of the value relative (2^-8 on the subnormal grid); float64 rounds within 2^-53, so it
  never crosses a midpoint. Quotients span 2^-261 .. 2^261: normal in float64.
- the derivative ops (gelu_backward ... sqrt_backward): conformance.derivatives (float64 with an
  error bound, Fractions or mpmath where it does not decide).
- gelu, gelu_tanh, silu, sigmoid, tanh, exp, rsqrt: float64 in cancellation-free forms, error
  at most 2^-42 of the value wherever the result is at least 2^-140 (the inputs are exact; the
  worst amplification is erfc's 2u^2 ~ 2^7.6 at gelu's underflow edge, u = -x/sqrt 2 ~ 9.3,
  and exp(2|z|) with 2|z| ~ 92 at gelu_tanh's: a few hundred float64 ulps). Smaller results lie
  far below the first midpoint 2^-134, whatever their relative error. A result rounds as the
  exact value does unless a midpoint lies between them, so an input whose float64 result is
  within 2^-24 bf16 ulp of a midpoint (relative 2^-32: 2^10 times the error) is recomputed
  with mpmath at 400 bits. That catches the near-0 ties of gelu, gelu_tanh and silu: for a
  subnormal x with an odd last bit, float64 gives exactly x/2, a midpoint, while the exact
  value is x/2 + c x^2 (c > 0), above it, and mpmath sees the c x^2 (docs/numerics.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .derivatives import GRAD_OPS, grad_bits
from .oracle import CANONICAL_NAN_BITS, _as_bits, bf16_bits_to_f32, f64_to_bf16_bits

__all__ = ["ARITY", "BINARY_OPS", "TABLE_OPS", "UNARY_OPS", "binary_bits", "elementwise_bits",
           "midpoint_distance_ulps", "mpmath_bits", "mpmath_inputs", "scalar_bits", "unary_bits"]

#: The ops the contract defines, with their arity (the oracle's own list: a test checks it
#: against libtgrad's registry, TGRAD_OP_LIST in tgrad.h).
ARITY: dict[str, int] = {
    "relu": 1, "gelu": 1, "gelu_tanh": 1, "silu": 1, "sigmoid": 1, "tanh": 1, "exp": 1,
    "neg": 1, "abs": 1, "square": 1, "rsqrt": 1,
    "add": 2, "sub": 2, "mul": 2, "div": 2, "maximum": 2, "minimum": 2,
    "sqrt": 1, "log": 1, "log1p": 1, "sin": 1, "cos": 1, "pow": 2,
    # the derivative ops (conformance.derivatives): forward input (or output) first, cotangent second
    "gelu_backward": 2, "gelu_tanh_backward": 2, "silu_backward": 2, "sigmoid_backward": 2,
    "tanh_backward": 2, "relu_backward": 2, "rsqrt_backward": 2, "sqrt_backward": 2,
}
UNARY_OPS = tuple(op for op, n in ARITY.items() if n == 1)
BINARY_OPS = tuple(op for op, n in ARITY.items() if n == 2)

#: Recompute with mpmath when float64 lands within this many bf16 ulps of a midpoint.
GUARD_ULPS = 2.0**-24
#: mpmath's working precision for those inputs (bits).
MP_PRECISION = 400

_SIGN = np.uint16(0x8000)
_NAN = np.uint16(CANONICAL_NAN_BITS)


# ---- helpers --------------------------------------------------------------------------------------


def _f64(bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signalling NaN patterns widen to quiet NaN
        return bf16_bits_to_f32(bits).astype(np.float64)


def _is_nan(bits: np.ndarray) -> np.ndarray:
    return (bits & 0x7FFF) > 0x7F80


def _round(values: np.ndarray) -> np.ndarray:
    """float64 -> bf16 bits, one rounding to nearest even; every NaN becomes 0x7FC0."""
    return np.where(np.isnan(values), _NAN, f64_to_bf16_bits(values)).astype(np.uint16)


def scalar_bits(value: float) -> np.ndarray:
    """A Python number as a 0-d bf16 (one rounding to nearest even from float64)."""
    return f64_to_bf16_bits(np.float64(value)).reshape(())


# ---- ops on the bits ------------------------------------------------------------------------------


def _relu(x: np.ndarray) -> np.ndarray:
    # max(x, 0), but relu(-0) = -0 as torch: only a negative nonzero (or -inf) becomes +0
    negative = ((x & _SIGN) != 0) & ((x & 0x7FFF) != 0)
    return np.where(negative, np.uint16(0), x)


def _neg(x: np.ndarray) -> np.ndarray:
    return x ^ _SIGN


def _abs(x: np.ndarray) -> np.ndarray:
    return x & np.uint16(0x7FFF)


def _order_key(bits: np.ndarray) -> np.ndarray:
    """An integer that orders bf16 values totally with -0 < +0 (NaN excluded by the caller)."""
    magnitude = (bits & 0x7FFF).astype(np.int32)
    return np.where((bits & _SIGN) != 0, -magnitude - 1, magnitude)


def _maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(_order_key(a) >= _order_key(b), a, b)


def _minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(_order_key(a) <= _order_key(b), a, b)


_BIT_OPS: dict[str, Callable[..., np.ndarray]] = {
    "relu": _relu, "neg": _neg, "abs": _abs, "maximum": _maximum, "minimum": _minimum,
}

# Exact (or harmlessly inexact, see the module docstring) in float64, then rounded once.
_ARITHMETIC: dict[str, Callable[..., np.ndarray]] = {
    "square": lambda x: x * x,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
}


# ---- the transcendental ops ----------------------------------------------------------------------

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _gelu_tanh_z(x: np.ndarray) -> np.ndarray:
    return _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))  # x^3 is exact (24 bits)


# float64 forms without cancellation: 1 + erf(t) as erfc(-t), 1 + tanh(z) as 2 / (1 + e^-2z).
_F64_FORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu": lambda x: x / 2 * _erfc(-x * _SQRT_HALF).astype(np.float64),
    "gelu_tanh": lambda x: x / (1 + np.exp(-2 * _gelu_tanh_z(x))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sqrt": np.sqrt,
    "log": np.log,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
}

#: The ops computed in float64 with the mpmath guard (the ones libtgrad reads from tables).
TABLE_OPS = tuple(_F64_FORMS)

# Stated limits where the forms above give 0 * inf or inf / inf (docs/numerics.md).
_AT_MINUS_INF = {"gelu": 0x8000, "gelu_tanh": 0x8000, "silu": 0x8000}


def _mpmath():
    """mpmath (a dependency of tgrad): only inputs whose float64 result is near a midpoint need it."""
    try:
        import mpmath
    except ImportError as exc:
        raise ModuleNotFoundError(
            "conformance.elementwise decides an input whose float64 result lies within "
            "2^-24 bf16 ulp of a rounding midpoint with mpmath, which is not importable "
            f"({exc}); pip install mpmath (tgrad depends on it)", name="mpmath") from exc
    return mpmath


def _mp_forms() -> dict[str, Callable[[object], object]]:
    mpmath = _mpmath()

    def z(x: object) -> object:
        return mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3)

    return {
        "gelu": lambda x: x / 2 * mpmath.erfc(-x / mpmath.sqrt(2)),
        "gelu_tanh": lambda x: x / (1 + mpmath.exp(-2 * z(x))),
        "silu": lambda x: x / (1 + mpmath.exp(-x)),
        "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
        "tanh": mpmath.tanh,
        "exp": mpmath.exp,
        "rsqrt": lambda x: 1 / mpmath.sqrt(x),
        "sqrt": mpmath.sqrt,
        "log": mpmath.log,
        "log1p": mpmath.log1p,
        "sin": mpmath.sin,
        "cos": mpmath.cos,
    }


def midpoint_distance_ulps(values: np.ndarray) -> np.ndarray:
    """Distance of each float64 to the nearest bf16 midpoint, in bf16 ulps (inf for inf/NaN).

    The grid: 2^(e-7) in the binade [2^e, 2^(e+1)), 2^-133 below 2^-126 (subnormals); the
    overflow edge (2 - 2^-8) 2^127 is the midpoint above the largest finite value.
    """
    a = np.abs(np.asarray(values, dtype=np.float64))
    finite = np.isfinite(a)
    a = np.where(finite, a, 0.0)
    _, exponent = np.frexp(a)  # a = m 2^exponent, m in [0.5, 1)
    quantum_exp = np.clip(exponent - 1, -126, 127) - 7
    q = np.ldexp(a, -quantum_exp)  # exact: a power-of-two scale, no underflow
    distance = np.abs(q - np.floor(q) - 0.5)
    return np.where(finite, distance, np.inf)


def mpmath_bits(name: str, x_bits: int) -> int:
    """One input of a table op, in mpmath at MP_PRECISION bits, rounded to bf16 bits."""
    mpmath = _mpmath()

    with mpmath.workprec(MP_PRECISION):
        x = mpmath.mpf(float(_f64(np.array([x_bits], np.uint16))[0]))
        v = _mp_forms()[name](x)
        if v == 0:  # only special inputs give 0, and they never come here
            raise AssertionError(f"{name}(0x{x_bits:04x}) is 0 in mpmath")
        _, e = mpmath.frexp(abs(v))  # |v| = m 2^e, m in [0.5, 1)
        quantum = mpmath.ldexp(1, min(max(int(e) - 1, -126), 127) - 7)
        q = abs(v) / quantum
        n = int(mpmath.floor(q))
        frac = q - n
        if abs(frac - mpmath.mpf(0.5)) < mpmath.ldexp(1, 40 - MP_PRECISION):
            raise ArithmeticError(f"{name}(0x{x_bits:04x}) is within 2^-{MP_PRECISION - 40} "
                                  "ulp of a bf16 midpoint: more precision needed")
        if frac > 0.5:
            n += 1
        magnitude = float(n * quantum)  # a bf16 value (or 2^128, which rounds to inf below)
    return int(f64_to_bf16_bits(np.float64(-magnitude if v < 0 else magnitude)))


def _float64_form(name: str, x_bits: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # inf / inf, 0 * inf at -inf: replaced by the caller
        return np.asarray(_F64_FORMS[name](_f64(x_bits)), dtype=np.float64)


def _near_midpoint(y: np.ndarray, x_bits: np.ndarray) -> np.ndarray:
    return (midpoint_distance_ulps(y) < GUARD_ULPS) & ~_is_nan(x_bits)


def mpmath_inputs(name: str, x) -> np.ndarray:
    """Which inputs of a table op the oracle decides with mpmath (a bool mask like x)."""
    x_bits = _as_bits(x)
    return _near_midpoint(_float64_form(name, x_bits), x_bits)


def _transcendental(name: str, x_bits: np.ndarray) -> np.ndarray:
    y = _float64_form(name, x_bits)
    out = _round(y)
    if name in _AT_MINUS_INF:
        out = np.where(x_bits == 0xFF80, np.uint16(_AT_MINUS_INF[name]), out)
    for i in np.flatnonzero(_near_midpoint(y, x_bits)):
        out.flat[i] = mpmath_bits(name, int(x_bits.flat[i]))
    return out


# ---- pow ------------------------------------------------------------------------------------------


def _iroot(n: int, k: int) -> int | None:
    """The integer k-th root of n >= 0 when n is a perfect k-th power, else None."""
    if n < 2:
        return n
    r = 1 << -(-n.bit_length() // k)  # above the root: Newton's iteration descends from here
    while True:
        s = ((k - 1) * r + n // r ** (k - 1)) // k
        if s >= r:
            break
        r = s
    return r if r**k == n else None


def pow_exact_bits(x: float, y: float, dtype: int = 1) -> int:
    """|x|^y for finite non-zero x and y (x > 0, or y an integer), signed, correctly rounded to
    dtype (1: bf16, 2: float32) without floating point: exactly with Fractions when the result
    is rational (y = p / 2^k and |x| a perfect 2^k-th power; |p| small enough to expand), else
    mpmath at MP_PRECISION bits, which must lie clear of every midpoint (ArithmeticError)."""
    from fractions import Fraction

    from .exact import round_to

    fx, fy = Fraction(x), Fraction(y)
    negative = fx < 0 and fy.denominator == 1 and fy.numerator % 2 == 1
    base, p, q = abs(fx), fy.numerator, fy.denominator
    if q <= 256:
        num, den = _iroot(base.numerator, q), _iroot(base.denominator, q)
    else:  # only a power of two (with an exponent divisible by q) has a root this deep
        e2 = base.numerator.bit_length() - base.denominator.bit_length()
        two = base == Fraction(2) ** e2
        num, den = (2 ** (e2 // q), 1) if two and e2 >= 0 and e2 % q == 0 else (None, None)
        if two and e2 < 0 and -e2 % q == 0:
            num, den = 1, 2 ** (-e2 // q)
    if num is not None and den is not None and abs(p) * max(num.bit_length(), den.bit_length()) < 1 << 16:
        value = Fraction(num, den) ** p
        return round_to(-value if negative else value, dtype)
    mpmath = _mpmath()
    pbits = 8 if dtype == 1 else 24
    with mpmath.workprec(MP_PRECISION):
        v = mpmath.power(mpmath.mpf(abs(x)), mpmath.mpf(y))
        _, e = mpmath.frexp(v)
        qe = min(max(int(e) - 1, -126), 127) - (pbits - 1)  # the exponent of the result's ulp
        scaled = mpmath.ldexp(v, -qe)
        n = int(mpmath.floor(scaled))
        if abs(scaled - n - mpmath.mpf(0.5)) < mpmath.ldexp(1, 40 - MP_PRECISION):
            raise ArithmeticError(f"pow({x!r}, {y!r}) is within 2^-{MP_PRECISION - 40} ulp of a midpoint")
        above = scaled - n > mpmath.mpf(0.5)
    # a rational on the same side of the midpoint, inside the same quantum: it rounds as v does
    value = (Fraction(n) + Fraction(3 if above else 1, 4)) * Fraction(2) ** qe
    return round_to(-value if negative else value, dtype)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """pow over bf16 bits: numpy's float64 power (C99 pow's special cases), and the exact or mpmath
    decision for every finite result within GUARD_ULPS of a midpoint."""
    x, y = _f64(a), _f64(b)
    with np.errstate(all="ignore"):
        v = np.power(x, y)
    out = _round(v)
    near = np.isfinite(v) & (v != 0) & (midpoint_distance_ulps(v) < GUARD_ULPS)
    for i in np.flatnonzero(near):
        out.flat[i] = pow_exact_bits(float(x.flat[i]), float(y.flat[i]))
    # pow(x, 0) = 1 and pow(1, y) = 1 even for a NaN: the NaN rule of binary_bits must not apply
    return out


# ---- entry points ---------------------------------------------------------------------------------


def unary_bits(name: str, x) -> np.ndarray:
    """op(x) for a unary op of ARITY, elementwise over bf16 bits of any shape."""
    if ARITY.get(name) != 1:
        raise ValueError(f"{name!r} is not a unary op (unary: {', '.join(UNARY_OPS)})")
    x = _as_bits(x)
    if name in _BIT_OPS:
        out = _BIT_OPS[name](x)
    elif name in _ARITHMETIC:
        with np.errstate(all="ignore"):
            out = _round(_ARITHMETIC[name](_f64(x)))
    else:
        out = _transcendental(name, x)
    return np.where(_is_nan(x), _NAN, out).astype(np.uint16)


def binary_bits(name: str, a, b) -> np.ndarray:
    """op(a, b) for a binary op of ARITY, with numpy broadcasting of the two operands."""
    if ARITY.get(name) != 2:
        raise ValueError(f"{name!r} is not a binary op (binary: {', '.join(BINARY_OPS)})")
    a, b = np.broadcast_arrays(_as_bits(a), _as_bits(b))
    if name in GRAD_OPS:
        return grad_bits(name, a, b)
    if name == "pow":
        one = ((b & 0x7FFF) == 0) | (a == 0x3F80)  # C99: pow(x, ±0) = 1 and pow(1, y) = 1, NaN or not
        out = np.where(_is_nan(a) | _is_nan(b), _NAN, _pow(a, b))
        return np.where(one, np.uint16(0x3F80), out).astype(np.uint16)
    if name in _BIT_OPS:
        out = _BIT_OPS[name](a, b)
    else:
        with np.errstate(all="ignore"):  # x/0, inf - inf, overflow: IEEE float64 is the rule
            out = _round(_ARITHMETIC[name](_f64(a), _f64(b)))
    return np.where(_is_nan(a) | _is_nan(b), _NAN, out).astype(np.uint16)


def elementwise_bits(name: str, *operands) -> np.ndarray:
    """op(*operands) for any op of ARITY: one operand for a unary op, two for a binary one."""
    arity = ARITY.get(name)
    if arity is None:
        raise ValueError(f"unknown elementwise op {name!r} (known: {', '.join(ARITY)})")
    if len(operands) != arity:
        raise ValueError(f"{name} takes {arity} operand(s), got {len(operands)}")
    return unary_bits(name, *operands) if arity == 1 else binary_bits(name, *operands)
