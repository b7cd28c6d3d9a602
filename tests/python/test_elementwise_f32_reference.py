"""The float32 elementwise ops against exact references: every output must be the correctly rounded
float32 of the exact result (docs/numerics.md, "float32 elementwise ops").

The references share no code with libtgrad or libm: the binary ops and square are exact rationals
(fractions.Fraction), the transcendental ops mpmath at 256 bits, and both are rounded to float32
here by integer arithmetic (round to nearest even, subnormals, overflow to inf). The slow tier's
10^6 pairs per binary op use numpy's float64 rounded to float32, which equals the rational
reference by a theorem (expected_binary_many) and is checked against it on a sample. An mpmath value
that lies within 2^-200 of a float32 midpoint (relative to the quantum) would not decide the
rounding: the test fails rather than guess (none is known).

The inputs: specials (zeros, infinities, NaNs of both signs and several payloads, the subnormal and
normal edges, the largest float), the underflow and overflow thresholds of each op and the edges of
the library's own cut-offs (every float within a few of them), random bit patterns over the whole
range, random values where the ops bend, and the *hard* inputs: those whose double evaluation lies
closest to a float32 midpoint among a large random sample (found with numpy's float64 functions),
which are the ones the library's slow path decides (its counter must move, and never its
"undecided" one). The core tier runs a sample of each kind; the slow tier the large sweeps.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from fractions import Fraction

import mpmath  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pytest

from tgrad._ffi import ffi, lib
from tgrad.ops import REGISTRY

mp = mpmath.mp
PRECISION = 256
NAN32 = 0x7FC00000

UNARY_TRANSCENDENTAL = ["gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "exp", "rsqrt"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]


def op_code(name: str) -> int:
    return REGISTRY[name].code  # the registry tgrad.ops reads from libtgrad at import


def run(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The library's float32 loops (tgrad_debug_elementwise_f32) on bit patterns."""
    a = np.ascontiguousarray(a, dtype=np.uint32)
    out = np.zeros_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint32_t[]", np.ascontiguousarray(b, dtype=np.uint32))
    status = lib.tgrad_debug_elementwise_f32(op_code(name), ffi.from_buffer("uint32_t[]", a), pb,
                                             ffi.from_buffer("uint32_t[]", out), a.size)
    assert status == 0
    return out


def slow_counts(name: str) -> tuple[int, int, int]:
    counts = np.zeros(3, np.int64)
    assert lib.tgrad_debug_f32_slow_path(op_code(name), ffi.from_buffer("int64_t[]", counts), 3) == 0
    return int(counts[0]), int(counts[1]), int(counts[2])


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bits_of(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


# ---- rounding an exact value to float32 --------------------------------------------------------
def round_rational(value: Fraction, negative_zero: bool = False, tolerance: int = 0) -> int:
    """Round to nearest even float32 (bits): gradual underflow, overflow to inf. A zero keeps the
    sign given. tolerance > 0: fail if the value lies within 2^-tolerance quanta of a midpoint."""
    if value == 0:
        return 0x80000000 if negative_zero else 0
    sign = 0x80000000 if value < 0 else 0
    mag = -value if value < 0 else value
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # floor(log2) is e or e - 1
    if Fraction(2) ** e > mag:
        e -= 1
    q = max(e, -126) - 23  # the quantum's exponent
    scaled = mag / Fraction(2) ** q
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if tolerance:
        assert abs(rest - Fraction(1, 2)) > Fraction(1, 2**tolerance), f"{float(value)!r} is too close to a midpoint"
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    if n * Fraction(2) ** q >= Fraction(2) ** 128:
        return sign | 0x7F800000
    # n * 2^q with n < 2^24 (or 2^24 after rounding up: the next binade's even significand)
    return sign | bits_of(float(n * Fraction(2) ** q))


def round_mpf(value: mpmath.mpf, negative_zero: bool = False) -> int:
    if mpmath.isinf(value):
        return 0x7F800000 if value > 0 else 0xFF800000
    if value == 0 or abs(value) < mpmath.ldexp(1, -160):  # below a quarter of the least subnormal
        return 0x80000000 if (value < 0 or (value == 0 and negative_zero)) else 0
    if abs(value) >= mpmath.ldexp(1, 129):
        return 0x7F800000 if value > 0 else 0xFF800000
    man, exp = value.man_exp  # |value| = man * 2^exp (no mpf(): it would round to the current precision)
    exact = Fraction(int(man)) * (Fraction(2) ** int(exp)) * (-1 if value < 0 else 1)
    return round_rational(exact, negative_zero, tolerance=200)


# ---- the references ----------------------------------------------------------------------------
def _gelu_tanh(x: mpmath.mpf) -> mpmath.mpf:
    z = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3)
    return x / (1 + mpmath.exp(-2 * z))


# The mathematical definitions in forms exact to the working precision (no cancellation), with
# 0.044715 the exact decimal, as the contract states.
def _gelu(x: mpmath.mpf) -> mpmath.mpf:
    if abs(x) < 1:  # 1 + erf(t) keeps its digits here, and erf(t) its tiny t (erfc(t) rounds to 1)
        return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))
    return x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))


REFERENCES: dict[str, Callable[[mpmath.mpf], mpmath.mpf]] = {
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x / (1 + mpmath.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
    "tanh": mpmath.tanh,
    "exp": mpmath.exp,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x),
}
# Below these, the exact result is far under 2^-150 (mpmath would take long to say so).
NEGLIGIBLE_BELOW = {"gelu": -15.0, "gelu_tanh": -12.0, "silu": -120.0, "sigmoid": -104.0, "exp": -104.0}


def expected_unary(name: str, bits: int) -> int:
    x = f32(bits)
    if math.isnan(x):
        return NAN32
    negative = bits >> 31 == 1
    if name == "rsqrt":
        if x == 0:
            return 0xFF800000 if negative else 0x7F800000
        if x < 0:
            return NAN32
        if math.isinf(x):
            return 0
    if math.isinf(x):  # the limits (docs: gelu, gelu_tanh, silu of -inf are -0)
        return {"gelu": 0x80000000, "gelu_tanh": 0x80000000, "silu": 0x80000000, "sigmoid": 0, "exp": 0,
                "tanh": 0xBF800000}[name] if negative else (0x3F800000 if name in ("sigmoid", "tanh") else 0x7F800000)
    if name in NEGLIGIBLE_BELOW and x < NEGLIGIBLE_BELOW[name]:
        return 0x80000000 if name in ("gelu", "gelu_tanh", "silu") else 0
    if x == 0 and name != "exp" and name != "sigmoid":
        return bits  # +-0 in, +-0 out
    with mpmath.workprec(PRECISION):
        value = REFERENCES[name](mpmath.mpf(x))
    return round_mpf(value, negative_zero=negative)


def expected_binary(name: str, a_bits: int, b_bits: int) -> int:
    a, b = f32(a_bits), f32(b_bits)
    if math.isnan(a) or math.isnan(b):
        return NAN32
    if name in ("maximum", "minimum"):
        if a == b == 0:  # IEEE 754-2019: -0 < +0
            both = {a_bits >> 31, b_bits >> 31}
            return (0 if name == "maximum" else 0x80000000) if both == {0, 1} else a_bits
        return a_bits if (a > b) == (name == "maximum") else b_bits
    sign_a, sign_b = a_bits >> 31, b_bits >> 31
    if math.isinf(a) or math.isinf(b) or (name == "div" and b == 0):
        with np.errstate(all="ignore"):
            out = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[name](
                np.float64(a), np.float64(b))  # IEEE special-value rules, exact here
        return NAN32 if np.isnan(out) else bits_of(float(out))
    fa, fb = Fraction(a), Fraction(b)
    exact = {"add": lambda: fa + fb, "sub": lambda: fa - fb, "mul": lambda: fa * fb, "div": lambda: fa / fb}[name]()
    if exact == 0:  # the IEEE signs of an exact zero
        if name == "add":
            negative = sign_a == 1 and sign_b == 1
        elif name == "sub":
            negative = sign_a == 1 and sign_b == 0
        else:
            negative = (sign_a ^ sign_b) == 1
        return round_rational(exact, negative)
    return round_rational(exact)


def expected_binary_many(name: str, a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """expected_binary over arrays, by numpy: add, sub, mul and div in float64, then rounded to
    float32 (nearest even). That is the correctly rounded float32 of the exact result: float64's 53
    bits are at least 2 * 24 + 2, so rounding twice equals rounding once for these four operations
    (Figueroa, "When is double rounding innocuous?", 1995), and float32 operands give float64
    results far from float64's own underflow and overflow (at most 2^277 and at least 2^-298 in
    magnitude, or 0). IEEE 754 gives the signs of exact zeros and the infinities; maximum and
    minimum are selections. The slow tier's 10^6 pairs per op use this (the rational reference
    took 40 s an op); they check it against expected_binary on a sample first."""
    with np.errstate(all="ignore"):  # NaN operands, overflow to inf, 0 / 0: IEEE's results, as wanted
        a = a_bits.view(np.float32).astype(np.float64)
        b = b_bits.view(np.float32).astype(np.float64)
        nan = np.isnan(a) | np.isnan(b)
        if name in ("maximum", "minimum"):
            pick_a = (a > b) if name == "maximum" else (a < b)
            out = np.where(pick_a, a_bits, b_bits)
            zeros = (a == 0) & (b == 0) & ((a_bits >> 31) != (b_bits >> 31))
            out = np.where(zeros, np.uint32(0 if name == "maximum" else 0x80000000), out)
            out = np.where((a == b) & ~zeros, a_bits, out)
        else:
            wide = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[name](a, b)
            out = wide.astype(np.float32).view(np.uint32)
            nan |= np.isnan(wide)
    return np.where(nan, np.uint32(NAN32), out).astype(np.uint32)


# ---- inputs ------------------------------------------------------------------------------------
def as_bits(values: object) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


def neighbours(value: float, count: int) -> np.ndarray:
    """The 2 * count + 1 floats around value (both signs of the step)."""
    centre = int(as_bits([value])[0])
    return np.array([centre + d for d in range(-count, count + 1) if 0 <= centre + d < 2**32], np.uint32)


SPECIALS = np.array(
    [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FA00000,
     1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,
     0x3F800000, 0xBF800000, 0x3F000000, 0x40000000, 0x0DA24260, 0x8DA24260],
    np.uint32)

# Where each op's result changes class (zero, subnormal, normal, inf), rounds to its limit, or the
# library switches formula or cut-off: every float within a few of these.
EDGES: dict[str, list[float]] = {
    "exp": [88.72283935546875, -87.33654022216797, -103.27892303466797, -103.97207641601562, -104.0, 0.0],
    "sigmoid": [-87.33654022216797, -103.27892303466797, -103.97207641601562, -104.0, 16.635532, 17.32868, 0.0],
    "silu": [-88.7, -100.0, -103.9, -106.5, -110.0, -120.0, 2.0**-100, -(2.0**-100)],
    "gelu": [-13.1, -13.5, -14.0, -14.2, -14.5, -15.0, 5.4, 2.0**-100, -(2.0**-100)],
    "gelu_tanh": [-9.5, -10.0, -10.5, -10.9, -11.0, -12.0, 2.0**-100, -(2.0**-100)],
    "tanh": [9.010913, -9.010913, 2.0**-12, 2.0**-13, 0.0],
    "rsqrt": [1.0, 2.0, 4.0, 2.0**-126, 2.0**-140, 2.0**126, 3.4e38],
}


def edge_inputs(name: str, count: int) -> np.ndarray:
    return np.concatenate([neighbours(v, count) for v in EDGES[name]])


def random_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """A third each: any bit pattern; uniform in [-20, 20]; +-2^u for u uniform in [-150, 10]."""
    k = n // 3
    anybits = rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32)
    uniform = as_bits(rng.uniform(-20, 20, k))
    logs = rng.choice([-1.0, 1.0], n - 2 * k) * np.exp2(rng.uniform(-150, 10, n - 2 * k))
    return np.concatenate([anybits, uniform, as_bits(logs)])


def _double_values(name: str, x: np.ndarray) -> np.ndarray:
    """numpy's float64 value of each op (only to find inputs near a midpoint: not a reference)."""
    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(x)
        if name == "tanh":
            return np.tanh(x)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if name == "silu":
            return x / (1 + np.exp(-x))
        if name == "gelu_tanh":
            z = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return x / (1 + np.exp(-2 * z))
        if name == "gelu":
            return x * 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2))
        return 1 / np.sqrt(x)


def hard_inputs(name: str, rng: np.random.Generator, sample: int, keep: int) -> np.ndarray:
    """The `keep` inputs of a random sample (over the range where the op is neither constant nor
    negligible) whose float64 value lies closest to a float32 midpoint, relative to the quantum."""
    lo, hi = {"exp": (-103.0, 88.7), "sigmoid": (-103.0, 17.0), "silu": (-110.0, 30.0), "gelu": (-14.0, 6.0),
              "gelu_tanh": (-10.9, 6.0), "tanh": (-9.0, 9.0), "rsqrt": (2.0**-10, 2.0**10)}[name]
    x = rng.uniform(lo, hi, sample).astype(np.float32)
    if name != "rsqrt":
        x = np.concatenate([x, (rng.choice([-1.0, 1.0], sample) * np.exp2(rng.uniform(-30, 3, sample))).astype(np.float32)])
    y = np.abs(_double_values(name, x.astype(np.float64)))
    ok = np.isfinite(y) & (y > 2.0**-149)
    x, y = x[ok], y[ok]
    quantum = np.exp2(np.maximum(np.floor(np.log2(y)), -126) - 23)
    frac = y / quantum - np.floor(y / quantum)
    distance = np.abs(frac - 0.5)
    return as_bits(x[np.argsort(distance)[:keep]])


def check_unary(name: str, inputs: np.ndarray) -> None:
    inputs = np.unique(inputs.astype(np.uint32))
    got = run(name, inputs)
    wrong = [(hex(int(b)), f32(int(b)), hex(int(g)), hex(expected_unary(name, int(b))))
             for b, g in zip(inputs, got) if int(g) != expected_unary(name, int(b))]
    assert not wrong, f"{name}: {len(wrong)} of {inputs.size} wrong, e.g. {wrong[:5]}"


def check_binary(name: str, a: np.ndarray, b: np.ndarray, want: np.ndarray | None = None) -> None:
    """The library's bits against want (by default the rational reference, pair by pair)."""
    got = run(name, a, b)
    if want is None:
        want = np.array([expected_binary(name, int(x), int(y)) for x, y in zip(a, b)], np.uint32)
    wrong = [(f32(int(a[i])), f32(int(b[i])), hex(int(got[i])), hex(int(want[i]))) for i in np.flatnonzero(got != want)]
    assert not wrong, f"{name}: {len(wrong)} of {a.size} wrong, e.g. {wrong[:5]}"


# ---- the core tier -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", UNARY_TRANSCENDENTAL)
def test_transcendental_ops_are_correctly_rounded_on_specials_edges_and_a_sample(name: str) -> None:
    rng = np.random.default_rng(sum(map(ord, name)))
    check_unary(name, np.concatenate([SPECIALS, edge_inputs(name, 6), random_inputs(rng, 600)]))


@pytest.mark.parametrize("name", UNARY_TRANSCENDENTAL)
def test_hard_inputs_take_the_slow_path_and_are_correctly_rounded(name: str) -> None:
    rng = np.random.default_rng(7 + sum(map(ord, name)))
    hard = hard_inputs(name, rng, 1 << 16, 40)
    before = slow_counts(name)
    check_unary(name, hard)
    after = slow_counts(name)
    assert after[0] - before[0] >= hard.size  # each value evaluated (check_unary runs them once)
    if name != "rsqrt":  # rsqrt decides exactly: its "slow" count is a correction, never needed
        assert after[1] > before[1], "no input reached the slow path"
    assert after[2] == before[2], "the slow path left a value undecided"


@pytest.mark.parametrize("name", ["relu", "neg", "abs", "square"])
def test_exact_unary_ops(name: str) -> None:
    rng = np.random.default_rng(3)
    inputs = np.concatenate([SPECIALS, random_inputs(rng, 3000), neighbours(2.0**-75, 4), neighbours(1.8446744e19, 4)])
    got = run(name, inputs)
    for b, g in zip(inputs, got):
        x = f32(int(b))
        if math.isnan(x):
            want = NAN32
        elif name == "relu":
            want = 0 if (x < 0) else int(b)  # relu(-0) = -0, as the bf16 op
        elif name == "neg":
            want = int(b) ^ 0x80000000
        elif name == "abs":
            want = int(b) & 0x7FFFFFFF
        else:
            want = expected_binary("mul", int(b), int(b))
        assert int(g) == want, (name, x, hex(int(g)), hex(want))


def binary_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bit patterns, normal values, big against tiny, subnormals, near-ties, and every pair
    of the specials."""
    k = n // 5
    a = [rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32), as_bits(rng.standard_normal(k))]
    b = [rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32), as_bits(rng.standard_normal(k))]
    a.append(as_bits(rng.standard_normal(k) * np.exp2(rng.integers(-60, 60, k))))
    b.append(as_bits(rng.standard_normal(k) * np.exp2(rng.integers(-60, 60, k))))
    sub = rng.integers(1, 1 << 23, k).astype(np.uint32) | (rng.integers(0, 2, k).astype(np.uint32) << 31)
    a.append(sub)
    b.append(as_bits(rng.integers(1, 9, k) * np.exp2(rng.integers(-3, 3, k))))
    # a + b, a - b near a midpoint: b a power of two at a's half-ulp, a's last bit either way
    base = as_bits(rng.uniform(1, 2, k))
    a.append(base)
    b.append(as_bits(np.exp2(-24.0 - rng.integers(0, 3, k)) * rng.choice([-1.0, 1.0], k)))
    sa, sb = np.meshgrid(SPECIALS, SPECIALS)
    a.append(sa.ravel())
    b.append(sb.ravel())
    return np.concatenate(a), np.concatenate(b)


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_equal_exact_rationals_rounded_once(name: str) -> None:
    rng = np.random.default_rng(11 + sum(map(ord, name)))
    a, b = binary_pairs(rng, 4000)
    check_binary(name, a, b)


def test_every_nan_becomes_the_canonical_nan() -> None:
    nans = np.array([0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0xFF800001, 0x7FC00001, 0xFFFFFFFF], np.uint32)
    for name in UNARY_TRANSCENDENTAL + ["relu", "neg", "abs", "square"]:
        assert (run(name, nans) == NAN32).all(), name
    one = as_bits(np.ones(nans.size))
    for name in BINARY:
        assert (run(name, nans, one) == NAN32).all() and (run(name, one, nans) == NAN32).all(), name
    inf = as_bits([np.inf, np.inf, 0.0])
    assert (run("sub", inf[:2], inf[:2]) == NAN32).all() and run("div", inf[2:], inf[2:])[0] == NAN32


def test_stated_special_cases() -> None:
    minus_inf = as_bits([-np.inf])
    for name in ("gelu", "gelu_tanh", "silu"):
        assert run(name, minus_inf)[0] == 0x80000000, name  # the limit, -0 (torch: NaN)
    # near 0, gelu, gelu_tanh and silu lie just above x/2: an odd subnormal's half rounds up
    odd = np.array([1, 3, 0x80000001, 0x80000003], np.uint32)
    for name in ("gelu", "gelu_tanh", "silu"):
        assert run(name, odd).tolist() == [1, 2, 0x80000000, 0x80000001], name
    assert run("rsqrt", as_bits([0.0, -0.0, -1.0, np.inf])).tolist() == [0x7F800000, 0xFF800000, NAN32, 0]


def test_debug_calls_refuse_bad_arguments_and_change_nothing() -> None:
    out = np.full(2, 7, np.uint32)
    a = np.zeros(2, np.uint32)
    pa, po = ffi.from_buffer("uint32_t[]", a), ffi.from_buffer("uint32_t[]", out)
    assert lib.tgrad_debug_elementwise_f32(0, pa, ffi.NULL, po, 2) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_elementwise_f32(op_code("exp"), pa, pa, po, 2) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_elementwise_f32(op_code("add"), pa, ffi.NULL, po, 2) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_elementwise_f32(op_code("exp"), pa, ffi.NULL, po, -1) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert out.tolist() == [7, 7]
    counts = np.zeros(5, np.int64)
    pc = ffi.from_buffer("int64_t[]", counts)
    assert lib.tgrad_debug_f32_slow_path(op_code("exp"), pc, 5) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_f32_slow_path(op_code("exp"), ffi.NULL, 3) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_f32_slow_path(99, pc, 3) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert counts.tolist() == [0, 0, 0, 0, 0]


def test_the_reference_rounding_itself() -> None:
    # ties to even, the subnormal grid, overflow to inf and the largest float
    assert round_rational(Fraction(1) + Fraction(1, 2**24)) == 0x3F800000
    assert round_rational(Fraction(1) + Fraction(3, 2**24)) == 0x3F800002
    assert round_rational(Fraction(1, 2**150)) == 0 and round_rational(Fraction(3, 2**151)) == 1
    assert round_rational(Fraction(3, 2**150)) == 2 and round_rational(Fraction(-5, 2**150)) == 0x80000002
    big = Fraction(2**128 - 2**103)  # the midpoint above the largest float: ties to even, inf
    assert round_rational(big) == 0x7F800000 and round_rational(big - 1) == 0x7F7FFFFF
    assert round_rational(Fraction(2**23 - 1, 2**149) + Fraction(1, 2**150)) == 0x00800000  # into the normals


# ---- the slow tier -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", UNARY_TRANSCENDENTAL)
def test_transcendental_sweep(name: str) -> None:
    """100,000 random inputs, the 2,000 hardest of 2^22 candidates, every float within 64 of each
    edge."""
    rng = np.random.default_rng(1000 + sum(map(ord, name)))
    before = slow_counts(name)
    check_unary(name, np.concatenate([random_inputs(rng, 100_000), hard_inputs(name, rng, 1 << 22, 2000),
                                      edge_inputs(name, 64)]))
    assert slow_counts(name)[2] == before[2], "the slow path left a value undecided"


@pytest.mark.slow
@pytest.mark.parametrize("name", BINARY)
def test_binary_sweep(name: str) -> None:
    """10^6 pairs against the float64 reference, which first equals the rational one on 20,000."""
    rng = np.random.default_rng(2000 + sum(map(ord, name)))
    a, b = binary_pairs(rng, 1_000_000)
    sample = rng.choice(a.size, 20_000, replace=False)
    many = expected_binary_many(name, a[sample], b[sample])
    assert [int(v) for v in many] == [expected_binary(name, int(x), int(y)) for x, y in zip(a[sample], b[sample])]
    check_binary(name, a, b, expected_binary_many(name, a, b))
