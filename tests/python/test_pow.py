"""sqrt, log, log1p, sin, cos and pow (tgrad.elementwise_more) against exact references, and clamp.

The references share no code with libtgrad or libm's pow: pow of bf16 is the conformance oracle
(numpy's float64 power, and where that lies near a midpoint exact Fractions or mpmath at 400
bits: tgrad.conformance.elementwise.pow_exact_bits); pow and the unary ops of float32 are
Fractions where the result is rational, mpmath at 256 bits elsewhere, rounded here by integer
arithmetic (tgrad.conformance.exact.round_to). The bf16 unary ops are proven exhaustively in C
(tests/c/test_elementwise.c) and against the oracle in test_elementwise_oracle.py.

Hard inputs: every bf16 base to the exponents whose results can be exact midpoints (small integer
powers: 7^3 = 343; roots: 49^1.5 = 343), bases near 1 to large exponents, exponents at the
overflow and underflow edges, and the C99 special cases. The slow-path counters must move on the
exact midpoints and the "undecided" counter never.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import mpmath  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pytest

import tgrad
from tgrad import Tensor, errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.elementwise import binary_bits, pow_exact_bits
from tgrad.conformance.exact import round_to

BF16, F32 = 1, 2
NAN16, NAN32 = 0x7FC0, 0x7FC00000


def code(name: str) -> int:
    return tgrad.ops.REGISTRY[name].code


def kernel16(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = (np.ascontiguousarray(v, dtype=np.uint16) for v in np.broadcast_arrays(a, b))
    out = np.zeros_like(a)
    assert lib.tgrad_debug_elementwise(code(name), ffi.from_buffer("uint16_t[]", a), ffi.from_buffer("uint16_t[]", b),
                                       ffi.from_buffer("uint16_t[]", out), a.size) == 0
    return out


def kernel32(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.uint32)
    out = np.zeros_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint32_t[]", np.ascontiguousarray(b, dtype=np.uint32))
    assert lib.tgrad_debug_elementwise_f32(code(name), ffi.from_buffer("uint32_t[]", a), pb,
                                           ffi.from_buffer("uint32_t[]", out), a.size) == 0
    return out


def counts(fn: str, name: str) -> np.ndarray:
    c = np.zeros(3, np.int64)
    assert getattr(lib, fn)(code(name), ffi.from_buffer("int64_t[]", c), 3) == 0
    return c


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def b16(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0] >> 16


def describe(name: str, a: np.ndarray, b: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(got != want)
    rows = [f"{name}(0x{int(a.flat[i]):x}, 0x{int(b.flat[i]):x}) = 0x{int(got.flat[i]):x}, want 0x{int(want.flat[i]):x}"
            for i in bad[:6]]
    return f"{bad.size} of {got.size} differ: " + "; ".join(rows)


# ---- bf16 pow against the oracle ---------------------------------------------------------------------
ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
# exponents whose results can be exact (dyadic) values, midpoints among them
EXACT_EXPONENTS = [2.0, 3.0, 4.0, 5.0, 7.0, 9.0, -1.0, -2.0, -3.0, 0.5, 1.5, 2.5, 0.25, 0.75, -0.5, -1.5, 0.125]


@pytest.mark.parametrize("exponent", EXACT_EXPONENTS)
def test_bf16_pow_of_every_base_to_exponents_with_exact_results(exponent: float) -> None:
    b = np.full_like(ALL16, b16(exponent))
    got, want = kernel16("pow", ALL16, b), binary_bits("pow", ALL16, b)
    assert np.array_equal(got, want), describe("pow", ALL16, b, got, want)


def test_bf16_pow_on_random_pairs_near_one_and_at_the_range_edges() -> None:
    rng = np.random.default_rng(2341)
    a = rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint32).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint32).astype(np.uint16)
    # bases within a few ulps of 1 to exponents up to 2^14, where |b log a| nears the edges
    near_one = (0x3F80 + rng.integers(-6, 7, 8192)).astype(np.uint16)
    big = np.array([b16(float(v)) for v in rng.choice([-1, 1], 8192) * 2.0 ** rng.uniform(4, 14, 8192)], np.uint16)
    # exponents that put 2^k near the overflow (128) and underflow (-133, -134) edges
    twos = np.array([b16(2.0 ** float(e)) for e in rng.integers(-133, 128, 4096)], np.uint16)
    edges = np.array([b16(float(v)) for v in rng.choice([-135.0, -134.0, -133.5, -133.0, 127.0, 127.99, 128.0], 4096)],
                     np.uint16)
    a, b = np.concatenate([a, near_one, twos]), np.concatenate([b, big, edges])
    got, want = kernel16("pow", a, b), binary_bits("pow", a, b)
    assert np.array_equal(got, want), describe("pow", a, b, got, want)


SPECIAL16 = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8001, 0x3F00, 0xBF00,
                      0x4000, 0xC000, 0x4040, 0xC040, 0x3FC0, 0xBFC0, 0x7F7F, 0xFF7F, 0x4B80, 0xCB80], np.uint16)


def test_bf16_pow_special_values_pairwise_match_c99() -> None:
    a, b = (v.ravel() for v in np.meshgrid(SPECIAL16, SPECIAL16))
    got, want = kernel16("pow", a, b), binary_bits("pow", a, b)
    assert np.array_equal(got, want), describe("pow", a, b, got, want)
    # the oracle's special cases are numpy's float64 power, C99's: spot-check the statement
    with np.errstate(all="ignore"):
        assert np.power(np.nan, 0.0) == 1 and np.power(1.0, np.nan) == 1 and np.isnan(np.power(-8.0, 1 / 3))


def test_bf16_pow_exact_midpoints_tie_to_even_through_the_slow_path() -> None:
    before = counts("tgrad_debug_bf16_slow_path", "pow")
    a = np.array([b16(7.0), b16(49.0), b16(3.0), b16(2.0)], np.uint16)
    b = np.array([b16(3.0), b16(1.5), b16(5.0), b16(-134.0)], np.uint16)
    got = kernel16("pow", a, b)
    # 343 = 1.0101011 1 x 2^8 lies between 342 and 344: to even, 344; 3^5 = 243 exact; 2^-134 -> +0
    assert [int(v) for v in got] == [b16(344.0), b16(344.0), b16(243.0), 0]
    after = counts("tgrad_debug_bf16_slow_path", "pow")
    assert after[0] - before[0] == 4 and after[1] - before[1] >= 3 and after[2] == before[2]


# ---- float32: the new unary ops and pow against mpmath -----------------------------------------------
def round_mp(value: mpmath.mpf, negative: bool, tolerance: int = 200) -> int:
    """An mpmath value (or zero/inf) correctly rounded to float32 bits; it must lie further than
    2^-tolerance quanta from a midpoint (else more precision would be needed: fail)."""
    if mpmath.isinf(value):
        return 0xFF800000 if value < 0 else 0x7F800000
    if value == 0:
        return 0x80000000 if negative else 0
    man, exp = value.man_exp  # |value| = man 2^exp
    exact = Fraction(int(man)) * Fraction(2) ** int(exp) * (-1 if value < 0 else 1)
    mag = abs(exact)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    scaled = mag / Fraction(2) ** (max(e, -126) - 23)
    rest = scaled - scaled.numerator // scaled.denominator
    assert abs(rest - Fraction(1, 2)) > Fraction(1, 2**tolerance), f"{value} is too close to a midpoint"
    return round_to(exact, F32)


UNARY_MP = {"sqrt": mpmath.sqrt, "log": mpmath.log, "log1p": mpmath.log1p, "sin": mpmath.sin, "cos": mpmath.cos}


def expected32(name: str, bits: int) -> int:
    x = f32(bits)
    negative = bits >> 31 == 1
    with np.errstate(all="ignore"):
        special = {"sqrt": np.sqrt, "log": np.log, "log1p": np.log1p, "sin": np.sin, "cos": np.cos}[name](np.float64(x))
    if math.isnan(x) or math.isinf(x) or np.isnan(special) or np.isinf(special) or x == 0:
        if np.isnan(special):
            return NAN32
        return struct.unpack("<I", struct.pack("<f", float(special)))[0]  # IEEE specials, exact
    if name == "log" and x == 1:
        return 0
    with mpmath.workprec(256):
        return round_mp(UNARY_MP[name](mpmath.mpf(x)), negative)


def unary_inputs(name: str, rng: np.random.Generator) -> np.ndarray:
    every = rng.integers(0, 1 << 32, 1500, dtype=np.uint64).astype(np.uint32)
    near_one = np.float32(1) + rng.uniform(-2**-10, 2**-10, 300).astype(np.float32)
    tiny = (rng.choice([-1, 1], 300) * 2.0 ** rng.uniform(-149, -20, 300)).astype(np.float32)
    huge = (rng.choice([-1, 1], 300) * 2.0 ** rng.uniform(20, 127.9, 300)).astype(np.float32)
    return np.concatenate([every, near_one.view(np.uint32), tiny.view(np.uint32), huge.view(np.uint32),
                           np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000, 0xBF800000,
                                     0x7F7FFFFF, 1, 0x80000001], np.uint32)])


@pytest.mark.parametrize("name", list(UNARY_MP))
def test_float32_unary_ops_are_correctly_rounded(name: str) -> None:
    x = unary_inputs(name, np.random.default_rng(len(name) * 7919))
    before = counts("tgrad_debug_f32_slow_path", name)
    got = kernel32(name, x)
    want = np.array([expected32(name, int(v)) for v in x], np.uint32)
    assert np.array_equal(got, want), describe(name, x, x, got, want)
    assert counts("tgrad_debug_f32_slow_path", name)[2] == before[2]  # nothing undecided


def expected_pow32(a_bits: int, b_bits: int) -> int:
    x, y = f32(a_bits), f32(b_bits)
    with np.errstate(all="ignore"):
        v = np.power(np.float64(x), np.float64(y))  # C99's special cases; finite results below
    if np.isnan(v):
        return NAN32
    if np.isinf(v) or v == 0 or math.isinf(x) or math.isinf(y) or x == 0 or y == 0 or x == 1:
        return struct.unpack("<I", struct.pack("<f", float(v)))[0]  # 0, inf and 1 are exact in float32
    return pow_exact_bits(x, y, F32)


def pow32_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # moderate ranges, where results are finite and non-zero
    ma = rng.uniform(0.01, 100, n).astype(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    mb = rng.uniform(-20, 20, n).astype(np.float32)
    mb[::3] = np.round(mb[::3])  # integer exponents (negative bases are defined there)
    # exact-midpoint candidates: odd integers to small integer powers, squares to half powers
    ints = rng.integers(3, 1 << 12, n // 4).astype(np.float32)
    ib = rng.integers(2, 4, n // 4).astype(np.float32)
    sq = (rng.integers(3, 1 << 8, n // 4) ** 2).astype(np.float32)
    hb = rng.choice([0.5, 1.5, 2.5, -0.5], n // 4).astype(np.float32)
    return (np.concatenate([a, ma.view(np.uint32), ints.view(np.uint32), sq.view(np.uint32)]),
            np.concatenate([b, mb.view(np.uint32), ib.view(np.uint32), hb.view(np.uint32)]))


def test_float32_pow_is_correctly_rounded_on_random_and_exact_cases() -> None:
    a, b = pow32_inputs(np.random.default_rng(977), 600)
    before = counts("tgrad_debug_f32_slow_path", "pow")
    got = kernel32("pow", a, b)
    want = np.array([expected_pow32(int(x), int(y)) for x, y in zip(a, b)], np.uint32)
    assert np.array_equal(got, want), describe("pow", a, b, got, want)
    after = counts("tgrad_debug_f32_slow_path", "pow")
    assert after[1] > before[1] and after[2] == before[2]  # the exact cases took the slow path


@pytest.mark.slow
def test_float32_pow_large_random_sweep() -> None:
    a, b = pow32_inputs(np.random.default_rng(12345), 40000)
    got = kernel32("pow", a, b)
    want = np.array([expected_pow32(int(x), int(y)) for x, y in zip(a, b)], np.uint32)
    assert np.array_equal(got, want), describe("pow", a, b, got, want)


@pytest.mark.slow
def test_bf16_pow_every_pair_is_decided() -> None:
    """All 2^32 bf16 pairs through the library: the slow path decides every one (none left to
    the 'undecided' counter). The values of a sample are compared above; this is the proof that
    no pair needs more than binary128."""
    before = counts("tgrad_debug_bf16_slow_path", "pow")
    b = ALL16.copy()
    for x in range(1 << 16):
        kernel16("pow", np.full_like(b, x), b)
    after = counts("tgrad_debug_bf16_slow_path", "pow")
    assert after[2] == before[2]


# ---- the Python surface -------------------------------------------------------------------------------
def bf(values: object) -> Tensor:
    return Tensor.from_numpy(np.asarray(values, np.float32))


def bits(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


def test_pow_spellings_agree_with_the_kernel() -> None:
    x = bf([1.0, 2.0, -2.0, 3.0, 0.0, -0.0, 0.5, -8.0])
    xb = bits(x)
    two, half = np.uint16(b16(2.0)), np.uint16(b16(0.5))
    assert np.array_equal(bits(x ** 2), kernel16("pow", xb, two))
    assert np.array_equal(bits(x.pow(0.5)), kernel16("pow", xb, half))
    assert np.array_equal(bits(2 ** x), kernel16("pow", two, xb))
    assert np.array_equal(bits(tgrad.pow(x, x)), kernel16("pow", xb, xb))
    assert np.array_equal(bits(tgrad.pow(3, x)), kernel16("pow", np.uint16(b16(3.0)), xb))
    assert [float(v) for v in (x ** 3).numpy()[:4]] == [1.0, 8.0, -8.0, 27.0]
    assert np.isnan((bf([-8.0]) ** (1 / 3)).numpy()[0])
    assert (bf([np.nan]) ** 0).numpy()[0] == 1  # pow(NaN, 0) = 1, as torch.pow


def test_pow_broadcasts_and_promotes_like_the_other_binary_ops() -> None:
    x = bf(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    e = bf([1.0, 2.0, 3.0])
    assert (x ** e).shape == (2, 3)
    assert np.array_equal((x ** e).numpy().astype(np.float32), np.array([[1, 4, 27], [4, 25, 216]], np.float32))
    y32 = Tensor.from_numpy(np.array([2.0, 3.0], np.float32), dtype=tgrad.float32)
    assert (y32 ** 2).dtype is tgrad.float32 and list((y32 ** 2).numpy()) == [4.0, 9.0]
    with pytest.raises(TypeError):
        x ** "2"  # noqa: B018 - not an operand: Python's TypeError, as numpy


def test_clamp_is_maximum_then_minimum_with_torch_semantics() -> None:
    x = bf([-3.0, -0.5, 0.0, 0.5, 3.0, np.nan, -0.0])
    assert list(bits(x.clamp(-1, 1))) == list(bits(tgrad.minimum(tgrad.maximum(x, -1), 1)))
    out = x.clamp(min=-1.0, max=1.0).numpy().astype(np.float32)
    assert list(out[:5]) == [-1.0, -0.5, 0.0, 0.5, 1.0] and np.isnan(out[5])
    assert list(x.clamp(min=0.0).numpy().astype(np.float32)[:5]) == [0.0, 0.0, 0.0, 0.5, 3.0]
    assert list(x.clip(max=0.0).numpy().astype(np.float32)[:5]) == [-3.0, -0.5, 0.0, 0.0, 0.0]
    assert (x.clamp(2.0, 1.0).numpy().astype(np.float32)[:5] == 1.0).all()  # min > max gives max
    assert np.isnan(x.clamp(min=np.nan).numpy().astype(np.float32)).all()  # a NaN bound propagates
    lo, hi = bf([[-1.0], [0.0]]), bf([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    assert tgrad.clamp(x, lo, hi).shape == (2, 7)  # tensor bounds broadcast
    assert tgrad.clip is tgrad.clamp
    with pytest.raises(errors.InvalidArgumentError):
        x.clamp()
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.clamp([1.0], 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_chains_with_the_new_ops_give_the_same_bytes_fused_or_not_on_any_thread_count(fusion: bool) -> None:
    rng = np.random.default_rng(5)
    host = rng.standard_normal((64, 300)).astype(np.float32)
    saved_fusion, saved_threads = tgrad.fusion_enabled(), tgrad.num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            tgrad.set_fusion(fusion)
            tgrad.set_num_threads(threads)
            x = bf(host)
            y = ((x.abs() + 1).log() * x.sin() + x.cos().square().sqrt() - x.log1p().clamp(-2, 2)) ** 2
            z = 2 ** y.clamp(max=8) + x ** bf(host[:1])
            outs.append(bits(z))
    finally:
        tgrad.set_fusion(saved_fusion)
        tgrad.set_num_threads(saved_threads)
    # the same bytes as ops applied one by one to materialized values
    xb = bits(bf(host))
    step = lambda name, *v: kernel16(name, *v) if len(v) == 2 else _unary16(name, v[0])  # noqa: E731
    one = np.uint16(b16(1.0))
    t = step("mul", step("log", step("add", step("abs", xb), one)), step("sin", xb))
    t = step("add", t, step("sqrt", step("square", step("cos", xb))))
    t = step("sub", t, step("minimum", step("maximum", step("log1p", xb), np.uint16(b16(-2.0))), np.uint16(b16(2.0))))
    t = step("pow", t, np.uint16(b16(2.0)))
    want = step("add", step("pow", np.uint16(b16(2.0)), step("minimum", t, np.uint16(b16(8.0)))),
                step("pow", xb, xb[:1]))
    for got in outs:
        assert np.array_equal(got, want)


def _unary16(name: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.uint16)
    out = np.zeros_like(x)
    assert lib.tgrad_debug_elementwise(code(name), ffi.from_buffer("uint16_t[]", x), ffi.NULL,
                                       ffi.from_buffer("uint16_t[]", out), x.size) == 0
    return out


def test_debug_bf16_slow_path_refusals() -> None:
    c = np.zeros(3, np.int64)
    invalid = lib.TGRAD_ERR_INVALID_ARGUMENT
    assert lib.tgrad_debug_bf16_slow_path(0, ffi.from_buffer("int64_t[]", c), 3) == invalid
    assert lib.tgrad_debug_bf16_slow_path(code("pow"), ffi.NULL, 3) == invalid
    assert lib.tgrad_debug_bf16_slow_path(code("pow"), ffi.from_buffer("int64_t[]", c), 5) == invalid
    assert lib.tgrad_debug_bf16_slow_path(code("exp"), ffi.from_buffer("int64_t[]", c), 3) == 0 and not c.any()
