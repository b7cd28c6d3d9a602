"""The unary elementwise kernels against mpmath: an oracle that shares no code with libm.

tests/c/test_elementwise.c proves every op on every input against a long double reference (built
on glibc's libm, as the kernels' tables are). This is the independent cross-check: for each table
op, every input in the hard regions (the subnormals and the smallest normals, where gelu, gelu_tanh
and silu sit a hair above a bf16 midpoint; every input whose result is subnormal, in the smallest
normal binade, or at the overflow edge; |x| in [2^-10, 2^7], where the ops bend) and a stratified
sample of the rest, evaluated in arbitrary precision and rounded to bf16 here, must equal what the
library computes (through tgrad_debug_elementwise). The special values (zeros, infinities, NaN)
are stated and checked in the C test.
"""

from __future__ import annotations

from collections.abc import Callable

import mpmath  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pytest

import tgrad
from tgrad._ffi import ffi, lib

pytestmark = pytest.mark.slow  # arbitrary-precision sweeps of every table op

mp = mpmath.mp
# 400 bits: near 0, gelu(x) - x/2 is ~2^-134 of x/2 for a subnormal x; elsewhere the results'
# distance to a bf16 midpoint is at least ~2^-21 of them (the C test's margins).
PRECISION = 400


def _sqrt_2_over_pi() -> mpmath.mpf:
    return mpmath.sqrt(2 / mpmath.pi)


# Each op on an mpf, in forms whose value is exact to the working precision (no cancellation):
# these are the mathematical definitions, with 0.044715 the exact decimal.
REFERENCES: dict[str, Callable[[mpmath.mpf], mpmath.mpf]] = {
    "gelu": lambda x: x / 2 * mpmath.erfc(-x / mpmath.sqrt(2)),
    "gelu_tanh": lambda x: x / (1 + mpmath.exp(-2 * _sqrt_2_over_pi() * (x + mpmath.mpf("0.044715") * x**3))),
    "silu": lambda x: x / (1 + mpmath.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
    "tanh": mpmath.tanh,
    "exp": mpmath.exp,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x),
}


def op_code(name: str) -> int:
    for op in range(1, lib.tgrad_op_count() + 1):
        if ffi.string(lib.tgrad_op_name(op)).decode() == name:
            return op
    raise AssertionError(f"no op {name}")


def run(name: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.uint16)
    out = np.zeros_like(a)
    pb = ffi.NULL if b is None else ffi.from_buffer("uint16_t[]", np.ascontiguousarray(b, dtype=np.uint16))
    status = lib.tgrad_debug_elementwise(op_code(name), ffi.from_buffer("uint16_t[]", a), pb,
                                         ffi.from_buffer("uint16_t[]", out), a.size)
    tgrad.errors._check(status)
    return out


def bf16_value(bits: int) -> mpmath.mpf:
    return mpmath.mpf(float(np.array([bits << 16], np.uint32).view(np.float32)[0]))


def round_to_bf16(v: mpmath.mpf, negative_zero: bool) -> int:
    """v rounded to bf16, nearest with ties to even, gradual underflow, overflow to inf; a zero
    result takes the sign of the exact value (negative_zero, since mpmath has no -0)."""
    sign = 0x8000 if v < 0 or (v == 0 and negative_zero) else 0
    a = abs(v)
    if a >= mpmath.ldexp(1, 128):
        return sign | 0x7F80
    e = -126 if a < mpmath.ldexp(1, -126) else max(int(mpmath.floor(mpmath.log(a, 2))), -126)
    if a >= mpmath.ldexp(1, e + 1):  # log's rounding at an exact power of two
        e += 1
    ulp = mpmath.ldexp(1, e - 7)
    q = a / ulp
    n = int(mpmath.floor(q))
    frac = q - n
    assert abs(frac - mpmath.mpf(0.5)) > mpmath.ldexp(1, 40 - PRECISION), f"{v} is too close to a midpoint"
    if frac > 0.5 or (frac == 0.5 and n % 2 == 1):
        n += 1
    value = np.float32(float(n * ulp))  # exact: a bf16 value (2^128 overflows to inf)
    return sign | int(np.array([value]).view(np.uint32)[0] >> 16)


def expected(name: str, bits: int) -> int:
    x = bf16_value(bits)
    # every op here is odd or positive: a zero result has the sign of x for the odd ones
    negative_zero = name in ("gelu", "gelu_tanh", "silu", "tanh") and x < 0
    with mpmath.workprec(PRECISION):
        return round_to_bf16(REFERENCES[name](x), negative_zero)


def hard_inputs(name: str) -> np.ndarray:
    """Finite nonzero inputs (positive for rsqrt) in the hard regions, plus every 61st other."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    exponent = (x >> 7) & 0xFF
    finite_nonzero = (exponent < 0xFF) & ((x & 0x7FFF) != 0)
    if name == "rsqrt":
        finite_nonzero &= x < 0x8000
    y = run(name, x)
    y_exponent = (y >> 7) & 0xFF
    # the result's class: zero, subnormal, normal, inf or NaN; the inputs within 8 of a change of
    # class (in bits, so within a binade) are the underflow and overflow edges
    kind = np.where((y & 0x7FFF) == 0, 0, np.where(y_exponent == 0, 1, np.where(y_exponent < 0xFF, 2, 3)))
    change = np.flatnonzero(kind[1:] != kind[:-1])
    edge = np.zeros(65536, bool)
    for d in range(-8, 9):
        edge[np.clip(change + d, 0, 65535)] = True
    tiny_in = exponent <= 2  # subnormals and the two smallest binades
    extreme_out = (kind == 1) | (y_exponent == 1) | (y_exponent == 0xFE)  # subnormal, smallest, largest binade
    bending = (exponent >= 127 - 10) & (exponent < 127 + 7)
    pick = tiny_in | edge | extreme_out | (bending & (x % 7 == 0)) | (np.arange(65536) % 61 == 0)
    return x[finite_nonzero & pick]


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_table_op_is_correctly_rounded_against_mpmath(name: str) -> None:
    inputs = hard_inputs(name)
    assert inputs.size >= 1000
    got = run(name, inputs)
    want = [expected(name, int(x)) for x in inputs]
    wrong = [(int(x), int(g), w) for x, g, w in zip(inputs, got, want) if int(g) != w]
    assert wrong == [], [f"{name}(0x{x:04x}) = 0x{g:04x}, mpmath 0x{w:04x}" for x, g, w in wrong[:10]]


def test_near_zero_gelus_and_silu_round_up_from_the_midpoint() -> None:
    # x/2 is a midpoint for these subnormal x; the exact value sits above it (c x^2 > 0), so the
    # result is x/2 rounded up, not to even: 5 units -> 3 (not 2), -5 units -> -2 (not -3)
    for name in ("gelu", "gelu_tanh", "silu"):
        assert list(run(name, np.array([0x0005, 0x8005, 0x0001, 0x8001]))) == [0x0003, 0x8002, 0x0001, 0x8000]
        assert expected(name, 0x0005) == 0x0003 and expected(name, 0x8005) == 0x8002


def test_binary_ops_through_the_debug_entry_point() -> None:
    a = np.array([0x3F80, 0x8000, 0x0001, 0x7F7F], np.uint16)
    b = np.array([0x3B80, 0x0000, 0x0001, 0x7F7F], np.uint16)
    # 1 + 2^-8 ties to 1; -0 + 0 = +0; subnormals add exactly; max + max overflows
    assert list(run("add", a, b)) == [0x3F80, 0x0000, 0x0002, 0x7F80]
    # 2^-133 * 0.5 and 3 * 2^-133 * 0.5 are ties: to even, 0 and 2 units
    assert list(run("mul", np.array([0x0001, 0x0003], np.uint16), np.array([0x3F00, 0x3F00], np.uint16))) == [
        0x0000, 0x0002]
    assert list(run("maximum", np.array([0x8000, 0x3F80], np.uint16), np.array([0x0000, 0xFFC1], np.uint16))) == [
        0x0000, 0x7FC0]


def test_debug_entry_point_refuses_bad_arguments_and_leaves_out_alone() -> None:
    a = np.array([0x3F80, 0x4000], np.uint16)
    out = np.array([7, 9], np.uint16)
    pa, po = ffi.from_buffer("uint16_t[]", a), ffi.from_buffer("uint16_t[]", out)
    invalid = tgrad.errors.InvalidArgumentError.status
    assert lib.tgrad_debug_elementwise(0, pa, ffi.NULL, po, 2) == invalid
    assert lib.tgrad_debug_elementwise(lib.tgrad_op_count() + 1, pa, ffi.NULL, po, 2) == invalid
    assert lib.tgrad_debug_elementwise(lib.TGRAD_OP_EXP, pa, pa, po, 2) == invalid  # b for a unary op
    assert lib.tgrad_debug_elementwise(lib.TGRAD_OP_ADD, pa, ffi.NULL, po, 2) == invalid  # no b
    assert lib.tgrad_debug_elementwise(lib.TGRAD_OP_EXP, pa, ffi.NULL, po, -1) == invalid
    assert lib.tgrad_debug_elementwise(lib.TGRAD_OP_EXP, ffi.NULL, ffi.NULL, po, 2) == invalid
    assert list(out) == [7, 9]
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="unary"):
        tgrad.errors._check(lib.tgrad_debug_elementwise(lib.TGRAD_OP_EXP, pa, pa, po, 2))
