"""Self-checks of the elementwise oracle (conformance.elementwise), then the oracle against libtgrad.

Without libtgrad: the special cases docs/numerics.md states, written out by hand; the binary ops
against exact rationals (fractions) on random and extreme pairs; the table ops' float64 path
against mpmath-only evaluation on a stratified sample; which inputs need mpmath; broadcasting.
With libtgrad (through tgrad_debug_elementwise, the CPU kernels tensors use): every unary op on all
65,536 inputs, and each binary op on random pairs plus every pair of special values.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tgrad.conformance.elementwise import (
    ARITY,
    BINARY_OPS,
    TABLE_OPS,
    UNARY_OPS,
    binary_bits,
    elementwise_bits,
    midpoint_distance_ulps,
    mpmath_bits,
    mpmath_inputs,
    scalar_bits,
    unary_bits,
)
from tgrad.conformance.oracle import bf16_bits_to_f32

ALL_BITS = np.arange(65536, dtype=np.uint32).astype(np.uint16)
NAN, PINF, NINF, ONE, HALF = 0x7FC0, 0x7F80, 0xFF80, 0x3F80, 0x3F00
# zeros, subnormal and normal edges, ones, a bf16 tie partner, the largest finite, infinities,
# NaNs of both signs (quiet and signalling payloads)
SPECIALS = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x3F80,
                     0xBF80, 0x3F81, 0x3B80, 0x3F00, 0x4000, 0x4040, 0xC040, 0x7F7F, 0xFF7F,
                     0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFA5], dtype=np.uint16)


def u(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint16)


# ---- stated special cases (docs/numerics.md, the table) -----------------------------------------

STATED_UNARY = [
    ("relu", 0x8000, 0x8000), ("relu", NINF, 0x0000), ("relu", 0xC040, 0x0000), ("relu", 0x0001, 0x0001),
    ("gelu", NINF, 0x8000), ("gelu", PINF, PINF), ("gelu", 0x0000, 0x0000), ("gelu", 0x8000, 0x8000),
    ("gelu_tanh", NINF, 0x8000), ("gelu_tanh", PINF, PINF), ("gelu_tanh", 0x8000, 0x8000),
    ("silu", NINF, 0x8000), ("silu", PINF, PINF), ("silu", 0x8000, 0x8000),
    ("sigmoid", NINF, 0x0000), ("sigmoid", PINF, ONE), ("sigmoid", 0x0000, HALF), ("sigmoid", 0x8000, HALF),
    ("tanh", PINF, ONE), ("tanh", NINF, 0xBF80), ("tanh", 0x0000, 0x0000), ("tanh", 0x8000, 0x8000),
    ("exp", NINF, 0x0000), ("exp", PINF, PINF), ("exp", 0x0000, ONE), ("exp", 0x8000, ONE),
    ("neg", 0x7FC0, NAN), ("neg", 0xFFC0, NAN), ("neg", 0x0000, 0x8000),
    ("abs", 0x8000, 0x0000), ("square", 0x8000, 0x0000),
    ("rsqrt", 0x0000, PINF), ("rsqrt", 0x8000, NINF), ("rsqrt", 0xBF80, NAN), ("rsqrt", PINF, 0x0000),
    # a result that rounds to zero keeps the exact value's sign: gelu(-20) = -0, exp(-96) = +0
    ("gelu", 0xC1A0, 0x8000), ("exp", 0xC2C0, 0x0000),
    # near 0, x/2 is a midpoint and the exact value lies above it: 5 units -> 3, -5 units -> -2
    ("gelu", 0x0005, 0x0003), ("gelu", 0x8005, 0x8002), ("gelu_tanh", 0x0005, 0x0003),
    ("silu", 0x0005, 0x0003), ("silu", 0x8005, 0x8002), ("silu", 0x0001, 0x0001), ("silu", 0x8001, 0x8000),
]

STATED_BINARY = [
    ("add", 0x8000, 0x0000, 0x0000), ("add", 0x8000, 0x8000, 0x8000), ("add", PINF, NINF, NAN),
    ("add", 0x3F80, 0x3B80, 0x3F80),  # 1 + 2^-8 is a tie: to even
    ("add", 0x7F7F, 0x7F7F, PINF), ("add", 0x0001, 0x0001, 0x0002),
    ("sub", 0x8000, 0x0000, 0x8000), ("sub", PINF, PINF, NAN), ("sub", 0x3F80, 0x3F80, 0x0000),
    ("mul", 0x8000, ONE, 0x8000), ("mul", 0x8000, 0xBF80, 0x0000), ("mul", PINF, 0x0000, NAN),
    ("mul", 0x0001, HALF, 0x0000), ("mul", 0x0003, HALF, 0x0002),  # subnormal ties to even
    ("div", ONE, 0x8000, NINF), ("div", 0xBF80, 0x8000, PINF), ("div", 0x0000, 0x0000, NAN),
    ("div", PINF, PINF, NAN), ("div", 0x0003, 0x4000, 0x0002),
    ("maximum", 0x8000, 0x0000, 0x0000), ("maximum", 0x0000, 0x8000, 0x0000),
    ("minimum", 0x8000, 0x0000, 0x8000), ("minimum", 0x0000, 0x8000, 0x8000),
    ("maximum", 0xFFC1, ONE, NAN), ("maximum", ONE, 0x7F81, NAN), ("minimum", NINF, NAN, NAN),
    ("maximum", NINF, 0x0001, 0x0001), ("minimum", 0x8001, 0x0000, 0x8001),
]


@pytest.mark.parametrize(("op", "x", "want"), STATED_UNARY)
def test_stated_unary_cases(op: str, x: int, want: int) -> None:
    got = int(unary_bits(op, u(x))[0])
    assert got == want, f"{op}(0x{x:04x}) = 0x{got:04x}, docs/numerics.md says 0x{want:04x}"


@pytest.mark.parametrize(("op", "a", "b", "want"), STATED_BINARY)
def test_stated_binary_cases(op: str, a: int, b: int, want: int) -> None:
    got = int(binary_bits(op, u(a), u(b))[0])
    assert got == want, f"{op}(0x{a:04x}, 0x{b:04x}) = 0x{got:04x}, want 0x{want:04x}"


@pytest.mark.parametrize("op", list(ARITY))
def test_every_nan_payload_of_either_sign_gives_the_canonical_nan(op: str) -> None:
    nans = np.concatenate([np.arange(0x7F81, 0x8000), np.arange(0xFF81, 0x10000)]).astype(np.uint16)
    if ARITY[op] == 1:
        out = unary_bits(op, nans)
    else:
        out = np.concatenate([binary_bits(op, nans, np.full_like(nans, ONE)),
                              binary_bits(op, np.full_like(nans, 0x8000), nans)])
    assert (out == NAN).all()


# ---- binary ops against exact rationals -----------------------------------------------------------


def _value(bits: int) -> Fraction:
    return Fraction(float(bf16_bits_to_f32(u(bits))[0]))


def _round_fraction(x: Fraction, negative: bool) -> int:
    """The bf16 nearest a rational (ties to even), gradual underflow, overflow to inf; a zero
    result takes the sign `negative` says."""
    sign = 0x8000 if negative else 0
    mag = abs(x)
    if mag == 0:
        return sign
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 7)
    n = math.floor(mag / quantum)
    rest = mag / quantum - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    value = n * quantum
    if value >= Fraction(2) ** 128:
        return sign | PINF
    f32 = np.array([float(value)], np.float32)  # exact: a bf16 value
    return sign | int(f32.view(np.uint32)[0] >> 16)


def _rational(op: str, a: int, b: int) -> int:
    """op(a, b) for finite a, b (b != 0 for div) with exact rationals."""
    x, y = _value(a), _value(b)
    exact = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y if y else None}[op]
    assert exact is not None
    a_neg, b_neg = bool(a & 0x8000), bool(b & 0x8000)
    if exact != 0:
        return _round_fraction(exact, exact < 0)
    if op == "mul" or op == "div":
        return 0x8000 if a_neg != b_neg else 0
    # an exact zero sum is +0 under round to nearest, except (-0) + (-0) and (-0) - (+0)
    b_neg_effective = b_neg if op == "add" else not b_neg
    return 0x8000 if (x == 0 and y == 0 and a_neg and b_neg_effective) else 0


def _finite_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random finite pairs, half of them with extreme exponent gaps, plus division ties."""
    def finite(size: int) -> np.ndarray:
        x = rng.integers(0, 65536, size * 2, dtype=np.uint32).astype(np.uint16)
        return x[(x & 0x7F80) != 0x7F80][:size]

    a, b = finite(n), finite(n)
    # big next to tiny (gaps far beyond float64's 53 bits) and subnormals over small integers
    big = (rng.integers(0x7000, 0x7F7F, n // 4) | (rng.integers(0, 2, n // 4) << 15)).astype(np.uint16)
    tiny = rng.integers(0x0001, 0x0200, n // 4).astype(np.uint16)
    small_ints = f32_bits(rng.integers(1, 12, n // 4).astype(np.float32))
    return (np.concatenate([a, big, tiny, tiny]),
            np.concatenate([b, tiny, big, small_ints]))


def f32_bits(values: np.ndarray) -> np.ndarray:
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_arithmetic_matches_exact_rationals(op: str) -> None:
    a, b = _finite_pairs(np.random.default_rng(ARITY[op] * 31 + len(op)), 1600)
    if op == "div":
        keep = (b & 0x7FFF) != 0
        a, b = a[keep], b[keep]
    got = binary_bits(op, a, b)
    wrong = [(int(x), int(y), int(g)) for x, y, g in zip(a, b, got) if int(g) != _rational(op, int(x), int(y))]
    assert wrong == [], [f"{op}(0x{x:04x}, 0x{y:04x}) = 0x{g:04x}" for x, y, g in wrong[:5]]


def test_square_is_the_product_with_itself() -> None:
    finite = ALL_BITS[(ALL_BITS & 0x7F80) != 0x7F80]
    assert np.array_equal(unary_bits("square", finite), binary_bits("mul", finite, finite))


def test_maximum_and_minimum_pick_by_value_with_negative_zero_below_positive_zero() -> None:
    rng = np.random.default_rng(7)
    a, b = _finite_pairs(rng, 2000)
    va, vb = bf16_bits_to_f32(a), bf16_bits_to_f32(b)
    hi, lo = binary_bits("maximum", a, b), binary_bits("minimum", a, b)
    bigger = (va > vb) | ((va == vb) & (a <= b))  # equal values: +0 (0x0000) above -0 (0x8000)
    assert np.array_equal(hi, np.where(bigger, a, b)) and np.array_equal(lo, np.where(bigger, b, a))


# ---- the table ops: float64 with the guard against mpmath alone ------------------------------------


def _stratified(op: str) -> np.ndarray:
    """Finite nonzero inputs: the near-0 ties, the underflow and overflow edges, a spread. Inputs
    whose result overflows are left out (mpmath takes minutes on exp of 4e6 at 400 bits)."""
    x = ALL_BITS[((ALL_BITS & 0x7F80) != 0x7F80) & ((ALL_BITS & 0x7FFF) != 0)]
    if op in ("rsqrt", "sqrt", "log"):
        x = x[x < 0x8000]  # NaN below 0 (a complex number in mpmath)
    if op == "log1p":
        x = x[(x < 0x8000) | ((x & 0x7FFF) < 0x3F80)]  # NaN below -1
    if op == "log":
        x = x[x != 0x3F80]  # log(1) = 0 exactly: nothing to round
    x = x[(unary_bits(op, x) & 0x7FFF) != PINF]
    edges = np.flatnonzero(np.diff(unary_bits(op, x).astype(np.int32) & 0x7F80) != 0)
    pick = np.zeros(x.size, bool)
    pick[::397] = True
    pick[np.clip(np.concatenate([edges, edges + 1]), 0, x.size - 1)] = True
    pick[(x & 0x7F80) == 0] = np.arange(int(((x & 0x7F80) == 0).sum())) % 9 == 0
    return x[pick]


# sin and cos of large arguments cost mpmath ~40 s each: the slow tier runs them (the C suite checks
# all 65,536 inputs of every table against long double in the core tier).
@pytest.mark.parametrize("op", [pytest.param(op, marks=pytest.mark.slow) if op in ("sin", "cos") else op
                                for op in TABLE_OPS])
def test_table_ops_agree_with_mpmath_alone_on_a_sample(op: str) -> None:
    x = _stratified(op)
    got = unary_bits(op, x)
    want = np.array([mpmath_bits(op, int(v)) for v in x], np.uint16)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [f"{op}(0x{int(x[i]):04x}) = 0x{int(got[i]):04x}, mpmath "
                           f"0x{int(want[i]):04x}" for i in bad[:5]]


@pytest.mark.parametrize("op", TABLE_OPS)
def test_only_the_near_zero_ties_need_mpmath(op: str) -> None:
    # float64 decides every input but the subnormal x/2 ties of gelu, gelu_tanh and silu (x below
    # 2^-125 with an odd last bit: 128 magnitudes of each sign); the closest other result lies
    # 2^-20.6 ulp from a midpoint, 2^3 beyond the guard (docs/numerics.md lists the margins).
    picked = ALL_BITS[mpmath_inputs(op, ALL_BITS)]
    if op in ("gelu", "gelu_tanh", "silu"):
        magnitude = picked & 0x7FFF
        assert picked.size == 256 and (magnitude < 0x0100).all() and (magnitude & 1).all()
    else:
        assert picked.size == 0


def test_midpoint_distance_is_measured_on_the_bf16_grid() -> None:
    values = np.array([1.0, 1 + 2**-8, 1 + 2**-9, 2.0**-134, 2.0**-133, 3 * 2.0**-134,
                       (2 - 2**-8) * 2.0**127, np.inf, np.nan, 0.0])
    assert list(midpoint_distance_ulps(values)) == [0.5, 0.0, 0.25, 0.0, 0.5, 0.0, 0.0, np.inf, np.inf, 0.5]


# ---- entry points --------------------------------------------------------------------------------


def test_binary_ops_broadcast_like_numpy() -> None:
    a = f32_bits(np.arange(6, dtype=np.float32).reshape(3, 1, 2))
    b = f32_bits(np.array([1.0, 2.0], np.float32))
    out = binary_bits("mul", a, b)
    assert out.shape == (3, 1, 2)
    assert np.array_equal(bf16_bits_to_f32(out), bf16_bits_to_f32(a) * np.array([1, 2], np.float32))
    assert binary_bits("add", scalar_bits(1.0), scalar_bits(2.0)).shape == ()
    assert binary_bits("add", np.zeros((0, 3), np.uint16), scalar_bits(1.0)).shape == (0, 3)
    transposed = f32_bits(np.arange(12, dtype=np.float32).reshape(3, 4)).T  # any strides
    assert np.array_equal(unary_bits("neg", transposed), f32_bits(-np.arange(12, dtype=np.float32).reshape(3, 4)).T)


def test_scalars_round_once_from_float64() -> None:
    assert int(scalar_bits(1.0)) == ONE and int(scalar_bits(-0.0)) == 0x8000
    # 1 + 2^-8 + 2^-30 is above the tie: rounding through float32 first would tie to 1.0
    assert int(scalar_bits(1 + 2**-8 + 2**-30)) == 0x3F81
    assert int(scalar_bits(1e39)) == PINF


def test_wrong_ops_and_arities_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown elementwise op"):
        elementwise_bits("softmax", u(ONE))
    with pytest.raises(ValueError, match="takes 2"):
        elementwise_bits("add", u(ONE))
    with pytest.raises(ValueError, match="not a unary op"):
        unary_bits("add", u(ONE))
    with pytest.raises(ValueError, match="not a binary op"):
        binary_bits("exp", u(ONE), u(ONE))
    with pytest.raises(ValueError):
        binary_bits("add", np.zeros(3, np.uint16), np.zeros(4, np.uint16))  # numpy's broadcast error


# ---- against libtgrad's kernels ------------------------------------------------------------------


def _kernel(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """op over arrays of bits, by the CPU kernel tensors use (tgrad_debug_elementwise)."""
    import tgrad
    from tgrad._ffi import ffi, lib

    codes = {ffi.string(lib.tgrad_op_name(c)).decode(): c for c in range(1, lib.tgrad_op_count() + 1)}
    a = np.ascontiguousarray(a, np.uint16)
    out = np.zeros_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint16_t[]", np.ascontiguousarray(b, np.uint16))
    tgrad.errors._check(lib.tgrad_debug_elementwise(codes[op], ffi.from_buffer("uint16_t[]", a), pb,
                                                    ffi.from_buffer("uint16_t[]", out), a.size))
    return out


def _describe(op: str, operands: tuple[np.ndarray, ...], got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(got != want)
    rows = [f"{op}({', '.join(f'0x{int(x[i]):04x}' for x in operands)}) = 0x{int(got[i]):04x}, "
            f"oracle 0x{int(want[i]):04x}" for i in bad[:5]]
    return f"{bad.size} of {got.size} differ: " + "; ".join(rows)


def test_oracle_names_the_registry_ops() -> None:
    from tgrad._ffi import ffi, lib

    registry = {ffi.string(lib.tgrad_op_name(c)).decode(): int(lib.tgrad_op_arity(c))
                for c in range(1, lib.tgrad_op_count() + 1)}
    assert registry == ARITY


@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_kernel_equals_the_oracle_on_all_65536_inputs(op: str) -> None:
    got, want = _kernel(op, ALL_BITS), unary_bits(op, ALL_BITS)
    assert np.array_equal(got, want), _describe(op, (ALL_BITS,), got, want)


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_kernel_equals_the_oracle_on_random_and_special_pairs(op: str) -> None:
    rng = np.random.default_rng(len(op) * 1009)
    a = rng.integers(0, 65536, 1 << 18, dtype=np.uint32).astype(np.uint16)
    b = rng.integers(0, 65536, 1 << 18, dtype=np.uint32).astype(np.uint16)
    fa, fb = _finite_pairs(rng, 4000)
    sa, sb = (x.ravel() for x in np.meshgrid(SPECIALS, SPECIALS))
    a, b = np.concatenate([a, fa, fb, sa]), np.concatenate([b, fb, fa, sb])
    got, want = _kernel(op, a, b), binary_bits(op, a, b)
    assert np.array_equal(got, want), _describe(op, (a, b), got, want)
