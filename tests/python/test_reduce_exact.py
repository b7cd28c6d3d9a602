"""The exact reductions' engine, through tgrad_debug_exact_sum and tgrad_debug_extrema, against an
exact rational reference (tgrad.conformance.exact: Fractions, rounded once to nearest even).

sum and mean are the exact sum (or sum / n) of the inputs rounded once to the output dtype, on
every CPU variant; max/min/argmax/argmin follow numpy's rules: NaN propagates (the first NaN wins),
ties give the first index, -0.0 and +0.0 compare equal (docs/numerics.md, "Reductions").
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest

import tgrad
from tgrad._ffi import ffi, lib
from tgrad.conformance import exact
from tgrad.conformance.exact import BF16, F32

INVALID = lib.TGRAD_ERR_INVALID_ARGUMENT


def _runnable() -> list[str]:
    return [name for name, runs in tgrad.cpu_isas().items() if runs]


@pytest.fixture(params=["auto", *_runnable()])
def variant(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test runs on the automatic choice and on every CPU variant this machine runs (each
    selects its exact-sum kernels: AVX512-BF16, AVX-512F, AVX2, or the portable loops)."""
    before = tgrad.cpu_isa() if tgrad.cpu_isa_forced() else "auto"
    tgrad.set_cpu_isa(request.param)
    try:
        yield request.param
    finally:
        tgrad.set_cpu_isa(before)


def _engine_sum(bits: np.ndarray, dtype: int, mean: bool, out: int, stride: int = 1) -> int:
    a = np.ascontiguousarray(bits)
    n = a.size if stride in (0, 1) else (a.size + abs(stride) - 1) // abs(stride)
    if stride == 0:
        n = 5
    start = 0 if stride >= 0 else a.size - 1
    ctype = "uint16_t[]" if dtype == BF16 else "uint32_t[]"
    buf = ffi.from_buffer(ctype, a)
    ptr = ffi.cast("uint16_t *" if dtype == BF16 else "uint32_t *", buf) + start
    o = ffi.new("uint32_t *")
    status = lib.tgrad_debug_exact_sum(ptr, dtype, n, stride, int(mean), out, o)
    assert status == 0
    return int(o[0])


def _viewed(bits: np.ndarray, stride: int) -> np.ndarray:
    """The values the engine reads with this stride, for the reference."""
    if stride == 0:
        return np.repeat(bits[:1], 5)
    return bits[::stride]


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 bits (RNE), NaN kept."""
    b = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)


def _f32(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def _check(bits: np.ndarray, dtype: int, strides: tuple[int, ...] = (1,)) -> None:
    for stride in strides:
        seen = _viewed(bits, stride)
        for out in (BF16, F32):
            assert _engine_sum(bits, dtype, False, out, stride) == exact.sum_bits(seen, dtype, out), (stride, out)
            assert _engine_sum(bits, dtype, True, out, stride) == exact.mean_bits(seen, dtype, out), (stride, out)


# ---- the reference itself ----------------------------------------------------------------------


def test_reference_rounding_matches_numpy_on_float_conversions() -> None:
    """round_to agrees with numpy's own float64 -> float32 rounding (RNE, subnormals, overflow) on
    values that float64 holds exactly, and exact_sum_units with summing Fractions."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(4000) * 2.0 ** rng.integers(-160, 130, 4000)
    x = np.concatenate([x, [0.5 * 2.0**-149, 1.5 * 2.0**-149, 2.0**128 * (1 - 2.0**-25), 3.4028235677973366e38]])
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).view(np.uint32)
    for v, w in zip(x.tolist(), want.tolist(), strict=True):
        assert exact.round_to(Fraction(v), F32) == w, v
    bits = _f32(rng.standard_normal(300) * 2.0 ** rng.integers(-150, 120, 300))
    total = sum((exact.value_of(int(b), F32) for b in bits), Fraction(0))
    assert Fraction(exact.exact_sum_units(bits, F32)) * exact.UNIT == total


def test_reference_round_to_bf16_ties_and_edges() -> None:
    one = Fraction(1)
    assert exact.round_to(one + Fraction(1, 256), BF16) == 0x3F80  # a tie: to even, down
    assert exact.round_to(one + Fraction(3, 256), BF16) == 0x3F82  # a tie: to even, up
    assert exact.round_to(one + Fraction(1, 256) + Fraction(1, 2**200), BF16) == 0x3F81
    assert exact.round_to(Fraction(2**128), BF16) == 0x7F80
    assert exact.round_to(Fraction(255 * 2**120) + Fraction(2**119) - 1, BF16) == 0x7F7F
    assert exact.round_to(Fraction(255 * 2**120) + Fraction(2**119), BF16) == 0x7F80  # tie, odd: up
    assert exact.round_to(Fraction(1, 2**133), BF16) == 0x0001
    assert exact.round_to(Fraction(1, 2**134), BF16) == 0x0000  # a tie with 0: to even
    assert exact.round_to(-Fraction(3, 2**135), BF16) == 0x8001


# ---- sum and mean ------------------------------------------------------------------------------


def test_cancellation_1e30_plus_1_minus_1e30(variant: str) -> None:
    for dtype, conv in ((BF16, _bf16), (F32, _f32)):
        bits = conv([1e30, 1.0, -1e30])
        _check(bits, dtype)
        assert _engine_sum(bits, dtype, False, F32) == 0x3F800000  # exactly 1, not 0
    # the same inside long rows, big values first and last
    rng = np.random.default_rng(1)
    body = rng.standard_normal(5000).astype(np.float32)
    row = np.concatenate([[3e38], body, [-3e38]]).astype(np.float32)
    _check(_bf16(row), BF16)
    _check(_f32(row), F32)


def test_random_rows_every_window(variant: str) -> None:
    """Normal data at many scales and spreads, sizes around the 32-value vectors and 4096-value
    blocks, strides 1, 2, -1 and 0."""
    rng = np.random.default_rng(2)
    for n in (1, 2, 31, 32, 33, 4095, 4096, 4097, 9000):
        for spread in (0, 10, 20, 40, 300):
            scale = 2.0 ** rng.integers(-100, 100)
            x = rng.standard_normal(n) * scale * 2.0 ** rng.integers(-spread, 1, n)
            with np.errstate(over="ignore"):
                x32 = x.astype(np.float32)
            strides = (1, 2, -1, 0) if n in (33, 4097) else (1,)
            _check(_bf16(x32), BF16, strides)
            _check(_f32(x32), F32, strides)


def test_subnormals(variant: str) -> None:
    rng = np.random.default_rng(3)
    for dtype, top in ((BF16, 0x80), (F32, 0x800000)):
        sub = rng.integers(1, top, 5000).astype(np.uint32)
        sign = (rng.integers(0, 2, 5000).astype(np.uint32)) << (15 if dtype == BF16 else 31)
        bits = (sub | sign).astype(np.uint16 if dtype == BF16 else np.uint32)
        _check(bits, dtype)
        # subnormals summing past 2^-126 into normals, and a mix with normal values
        _check(np.full(5000, top - 1, dtype=bits.dtype), dtype)
        mixed = bits.copy()
        mixed[::7] = (0x3F80 if dtype == BF16 else 0x3F800000)
        _check(mixed, dtype)


def test_sums_that_overflow_to_inf(variant: str) -> None:
    for dtype, big in ((BF16, 0x7F7F), (F32, 0x7F7FFFFF)):
        t = np.uint16 if dtype == BF16 else np.uint32
        sign = 0x8000 if dtype == BF16 else 0x80000000
        bits = np.full(5000, big, dtype=t)
        _check(bits, dtype)
        assert _engine_sum(bits, dtype, False, dtype) == (0x7F80 if dtype == BF16 else 0x7F800000)
        # the mean of values whose sum overflows float32 is finite and exact
        assert _engine_sum(bits, dtype, True, dtype) == big
        _check(bits | t(sign), dtype)
        # +max and -max alternating: exactly 0
        alt = bits.copy()
        alt[1::2] |= t(sign)
        _check(alt, dtype)
        assert _engine_sum(alt, dtype, False, F32) == 0
    # two values on the rounding edge of float32's largest: max + half an ulp is a tie (to inf)
    _check(np.array([0x7F7FFFFF, 0x73000000], dtype=np.uint32), F32)
    _check(np.array([0x7F7FFFFF, 0x72FFFFFF], dtype=np.uint32), F32)


def test_nan_and_inf_mixes(variant: str) -> None:
    cases_bf16 = [
        [0x3F80, 0x7F80, 0x4000],  # +inf
        [0xFF80, 0x3F80],  # -inf
        [0x7F80, 0xFF80],  # +inf + -inf: NaN
        [0x7FC1, 0x3F80],  # a NaN with a payload: canonical NaN out
        [0xFFFF],  # a negative NaN
        [0x7F80, 0x7F80, 0x7F7F],  # +inf twice and the largest finite
    ]
    for case in cases_bf16:
        _check(np.array(case, dtype=np.uint16), BF16)
    long = _bf16(np.linspace(-3, 3, 6000).astype(np.float32))
    long[4500] = 0x7FA0
    _check(long, BF16)
    assert _engine_sum(long, BF16, False, BF16) == 0x7FC0
    assert _engine_sum(long, BF16, True, F32) == 0x7FC00000
    f = _f32([1.0, np.inf, -np.inf, 2.0])
    _check(f, F32)


def test_signed_zeros(variant: str) -> None:
    """sum([-0.0]) is -0.0, as IEEE's left-to-right sum x1 + x2 + ... gives it (numpy 2.4 starts
    from the identity +0.0 and returns +0.0: docs/numerics.md); a zero is -0.0 only when every
    value is -0.0; an exact cancellation gives +0.0; the empty sum is +0.0, the empty mean NaN."""
    z = np.array([0x8000], dtype=np.uint16)
    assert _engine_sum(z, BF16, False, BF16) == 0x8000
    assert _engine_sum(z, BF16, True, F32) == 0x80000000
    assert _engine_sum(np.full(5000, 0x8000, dtype=np.uint16), BF16, False, BF16) == 0x8000
    assert _engine_sum(np.array([0x8000, 0x0000], dtype=np.uint16), BF16, False, BF16) == 0
    assert _engine_sum(np.array([0x3F80, 0xBF80], dtype=np.uint16), BF16, False, BF16) == 0
    assert _engine_sum(np.array([0x80000000], dtype=np.uint32), F32, False, F32) == 0x80000000
    for case in ([0x8000], [0x8000, 0x8000], [0x8000, 0], [0x3F80, 0xBF80], [0x8000, 0x3F80, 0xBF80]):
        _check(np.array(case, dtype=np.uint16), BF16)
    o = ffi.new("uint32_t *")
    for mean, want in ((0, 0), (1, 0x7FC0)):
        assert lib.tgrad_debug_exact_sum(ffi.NULL, BF16, 0, 1, mean, BF16, o) == 0
        assert o[0] == want


def test_all_equal_and_huge_spreads(variant: str) -> None:
    rng = np.random.default_rng(4)
    _check(np.full(7777, 0x3DCD, dtype=np.uint16), BF16)  # 0.1 in bf16, 7777 times
    _check(np.full(7777, 0x3DCCCCCD, dtype=np.uint32), F32)
    for dtype in (BF16, F32):
        for _ in range(3):
            if dtype == BF16:
                bits = rng.integers(0, 0x7F80, 5000).astype(np.uint16) | (rng.integers(0, 2, 5000) << 15).astype(np.uint16)
            else:
                bits = rng.integers(0, 0x7F800000, 5000).astype(np.uint32) | (rng.integers(0, 2, 5000) << 31).astype(
                    np.uint32
                )
            _check(bits, dtype)


def test_ties_on_a_bf16_midpoint(variant: str) -> None:
    """1 + 2^-8 is a bf16 tie (to even: 1); one subnormal either way breaks it."""
    assert _engine_sum(np.array([0x3F80, 0x3B80], dtype=np.uint16), BF16, False, BF16) == 0x3F80
    assert _engine_sum(np.array([0x3F81, 0x3B80], dtype=np.uint16), BF16, False, BF16) == 0x3F82
    assert _engine_sum(np.array([0x3F80, 0x3B80, 0x0001], dtype=np.uint16), BF16, False, BF16) == 0x3F81
    assert _engine_sum(np.array([0x3F80, 0x3B80, 0x8001], dtype=np.uint16), BF16, False, BF16) == 0x3F80
    # the mean's division makes a tie only when exact: 3 / 2 and 0x3F81 * 3 / 3
    assert _engine_sum(np.array([0x3F81, 0x3F81, 0x3F81], dtype=np.uint16), BF16, True, BF16) == 0x3F81


def test_same_bytes_on_every_variant() -> None:
    """Every variant and any split give the same bytes (they are all the exact sum)."""
    rng = np.random.default_rng(6)
    x = _bf16((rng.standard_normal(20000) * 2.0 ** rng.integers(-30, 1, 20000)).astype(np.float32))
    results = set()
    before = tgrad.cpu_isa() if tgrad.cpu_isa_forced() else "auto"
    try:
        for name in ["auto", *_runnable()]:
            tgrad.set_cpu_isa(name)
            results.add(tuple(_engine_sum(x, BF16, m, o) for m in (False, True) for o in (BF16, F32)))
    finally:
        tgrad.set_cpu_isa(before)
    assert len(results) == 1
    want = tuple(f(x, BF16, o) for f in (exact.sum_bits, exact.mean_bits) for o in (BF16, F32))
    assert results == {want}


def _engine_2d(bits: np.ndarray, dtype: int, axis: int, mean: bool, out: int, transpose: bool = False) -> list[int]:
    """bits is a C-contiguous [rows, cols] array; with transpose, the engine reads its transpose."""
    a = np.ascontiguousarray(bits)
    rows, cols = a.shape
    rs, cs = cols, 1
    if transpose:
        rows, cols, rs, cs = cols, rows, 1, cols
    n_out = rows if axis == 1 else cols
    o = ffi.new("uint32_t[]", max(n_out, 1))
    buf = ffi.from_buffer("uint16_t[]" if dtype == BF16 else "uint32_t[]", a)
    assert lib.tgrad_debug_exact_sum_2d(buf, dtype, rows, rs, cols, cs, axis, int(mean), out, o) == 0
    return [int(o[i]) for i in range(n_out)]


_REFS_2D: dict[tuple[int, ...], list[dict[tuple[bool, int], int]]] = {}  # the oracle's answers, per case


def _matrix(rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(rows * 10007 + cols)
    x = (rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-30, 1, (rows, cols))).astype(np.float32)
    if rows > 2 and cols > 4:
        x[1, 0] = np.nan
        x[:, 1] = np.float32(-0.0)
        x[2, 2] = np.inf
        x[:, 3] = np.float32(3e30)
        x[0, 3] = np.float32(1e-30)
    return x


def test_rows_and_columns_of_a_matrix(variant: str) -> None:
    """Sums over the last axis (rows, the next one prefetched) and over the first (columns, each
    row read once), through views and their transposes, against the oracle per row or column;
    columns with a NaN, an inf, only -0.0, a tiny value beside large ones."""
    for rows, cols in ((1, 1), (3, 70), (600, 5), (5, 600), (0, 4), (4, 0)):
        x = _matrix(rows, cols)
        for dtype, bits in ((BF16, _bf16(x)), (F32, _f32(x))):
            for transpose in (False, True):
                view = bits.T if transpose else bits
                for axis in (0, 1):
                    key = (rows, cols, dtype, transpose, axis)
                    if key not in _REFS_2D:
                        lines = [view[r, :] for r in range(view.shape[0])] if axis == 1 else [
                            view[:, c] for c in range(view.shape[1])]
                        _REFS_2D[key] = [exact.sum_mean_bits(line, dtype) for line in lines]
                    for mean in (False, True):
                        for out in (BF16, F32):
                            got = _engine_2d(bits, dtype, axis, mean, out, transpose)
                            assert got == [r[(mean, out)] for r in _REFS_2D[key]], (*key, mean, out)


@pytest.mark.slow
def test_ten_million_element_rows() -> None:
    """10^7-value rows, bf16 and float32, with cancellation and a wide spread."""
    rng = np.random.default_rng(7)
    n = 10_000_000
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 1, n)).astype(np.float32)
    x[::2] = -x[1::2] * np.float32(1.0)  # pairs that cancel exactly ...
    x[12345] = np.float32(1e-30)  # ... and what is left
    for bits, dtype in ((_bf16(x), BF16), (_f32(x), F32)):
        for out in (BF16, F32):
            assert _engine_sum(bits, dtype, False, out) == exact.sum_bits(bits, dtype, out)
            assert _engine_sum(bits, dtype, True, out) == exact.mean_bits(bits, dtype, out)
    y = (rng.standard_normal(n) * 1e3).astype(np.float32)
    for bits, dtype in ((_bf16(y), BF16), (_f32(y), F32)):
        for out in (BF16, F32):
            assert _engine_sum(bits, dtype, False, out) == exact.sum_bits(bits, dtype, out)
            assert _engine_sum(bits, dtype, True, out) == exact.mean_bits(bits, dtype, out)


# ---- extrema -----------------------------------------------------------------------------------


def _extrema(bits: np.ndarray, dtype: int, want_max: bool, stride: int = 1) -> tuple[int, int]:
    a = np.ascontiguousarray(bits)
    buf = ffi.from_buffer("uint16_t[]" if dtype == BF16 else "uint32_t[]", a)
    v, i = ffi.new("uint32_t *"), ffi.new("int64_t *")
    n = (a.size + abs(stride) - 1) // abs(stride)
    ptr = ffi.cast("uint16_t *" if dtype == BF16 else "uint32_t *", buf) + (0 if stride > 0 else a.size - 1)
    assert lib.tgrad_debug_extrema(ptr, dtype, n, stride, int(want_max), v, i) == 0
    return int(v[0]), int(i[0])


def test_extrema_follow_numpy() -> None:
    """argmax/argmin as numpy's on float32 (bf16 widened exactly): the first NaN, else the first
    of the extreme values with -0.0 == +0.0; the value is the element at that index."""
    rng = np.random.default_rng(8)
    for trial in range(120):
        n = int(rng.integers(1, 9000 if trial % 4 == 0 else 200))
        x = rng.integers(-3, 4, n).astype(np.float32) * np.float32(0.5)  # many ties and zeros
        x[rng.random(n) < 0.1] = np.float32(-0.0)
        if trial % 5 == 0:
            x[rng.integers(0, n)] = np.inf if trial % 2 else -np.inf
        if trial % 7 == 0:
            x[rng.integers(0, n, 2)] = np.nan
        for dtype, bits in ((BF16, _bf16(x)), (F32, _f32(x))):
            wide = (bits.astype(np.uint32) << 16).view(np.float32) if dtype == BF16 else bits.view(np.float32)
            for stride in (1, -1, 3):
                seen_bits, seen = bits[::stride], wide[::stride]
                for want_max in (True, False):
                    value, index = _extrema(bits, dtype, want_max, stride)
                    want = int(np.argmax(seen) if want_max else np.argmin(seen))
                    assert index == want
                    if n < 200:  # the Fraction reference is slow
                        assert index == exact.extremum_index(seen_bits.tolist(), dtype, want_max)
                    assert value == int(seen_bits[index])


def test_extrema_stated_rules() -> None:
    z = np.array([0x8000, 0x0000], dtype=np.uint16)
    assert _extrema(z, BF16, True) == (0x8000, 0)  # -0.0 first: max([-0.0, 0.0]) is -0.0
    assert _extrema(z[::-1].copy(), BF16, True) == (0x0000, 0)
    assert _extrema(np.array([0x3F80, 0x4000, 0x4000], dtype=np.uint16), BF16, True) == (0x4000, 1)
    assert _extrema(np.array([0x3F80, 0x7FC0, 0x7F80, 0xFFC0], dtype=np.uint16), BF16, False) == (0x7FC0, 1)


# ---- the entry points' argument checks -----------------------------------------------------------


def test_debug_entry_points_refuse_bad_arguments() -> None:
    x = ffi.new("uint16_t[]", [0x3F80, 0x4000])
    o, i = ffi.new("uint32_t *", 7), ffi.new("int64_t *", 9)
    s = lib.tgrad_debug_exact_sum
    assert s(x, 0, 2, 1, 0, BF16, o) == INVALID  # unknown dtype
    assert s(x, 4, 2, 1, 0, BF16, o) == INVALID  # int32: not summed by this engine
    assert s(x, BF16, -1, 1, 0, BF16, o) == INVALID
    assert s(ffi.NULL, BF16, 2, 1, 0, BF16, o) == INVALID
    assert s(x, BF16, 2, 1, 0, 9, o) == INVALID  # unknown output dtype
    assert s(x, BF16, 2, 1, 3, BF16, o) == INVALID  # mean neither 0 nor 1
    assert s(x, BF16, 2, 1, 0, BF16, ffi.NULL) == INVALID
    e = lib.tgrad_debug_extrema
    assert e(x, BF16, 0, 1, 1, o, i) == INVALID  # the extremum of nothing
    assert e(x, 5, 2, 1, 1, o, i) == INVALID
    assert e(x, BF16, -3, 1, 1, o, i) == INVALID
    assert e(ffi.NULL, BF16, 2, 1, 1, o, i) == INVALID
    assert e(x, BF16, 2, 1, 1, ffi.NULL, i) == INVALID
    assert e(x, BF16, 2, 1, 1, o, ffi.NULL) == INVALID
    assert e(x, BF16, 2, 1, 2, o, i) == INVALID  # want_max neither 0 nor 1
    assert o[0] == 7 and i[0] == 9  # untouched
    d = lib.tgrad_debug_exact_sum_2d
    assert d(x, BF16, 1, 2, 2, 1, 2, 0, BF16, o) == INVALID  # axis neither 0 nor 1
    assert d(x, BF16, -1, 2, 2, 1, 1, 0, BF16, o) == INVALID
    assert d(x, BF16, 1, 2, -2, 1, 1, 0, BF16, o) == INVALID
    assert d(ffi.NULL, BF16, 1, 2, 2, 1, 1, 0, BF16, o) == INVALID
    assert d(x, 3, 1, 2, 2, 1, 1, 0, BF16, o) == INVALID
    assert d(x, BF16, 1, 2, 2, 1, 1, 0, 0, o) == INVALID
    assert d(x, BF16, 1, 2, 2, 1, 1, 5, BF16, o) == INVALID
    assert d(x, BF16, 1, 2, 2, 1, 1, 0, BF16, ffi.NULL) == INVALID
    assert o[0] == 7
    assert d(ffi.NULL, BF16, 0, 0, 5, 1, 1, 0, BF16, ffi.NULL) == 0  # no rows: nothing to write
    with pytest.raises(tgrad.errors.InvalidArgumentError, match="extremum of nothing"):
        tgrad.errors._check(e(x, BF16, 0, 1, 1, o, i))
