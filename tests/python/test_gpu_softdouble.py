"""The software double of the MSL kernels (kernels/gpu/softdouble.h: binary64 in integers, for the
double kinds in a language without double) run as MSL on the MSL emulator, against numpy's float64
(IEEE round to nearest even: what a double gives in OpenCL C and CUDA), bit for bit.

tests/c/test_gpu_softdouble.c checks the header as C over millions of operands; this checks that
the same text is MSL the emulator's subset accepts and that it computes the same bits there:
add, sub, mul, div, sqrt and fma (fma against the exact product and sum, rounded by Fraction) on
specials, ties, subnormals and random operands. A planted defect (ties rounded away from zero
instead of to even) is caught. Slow tier (the emulator compiles the kernel as C++). And every
constant the kernel preludes write as tg_dk(literal, bits) has those bits (core tier).
"""

from __future__ import annotations

import re
import struct
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

KERNEL = """
kernel void soft_ops(device const ulong *a [[buffer(0)]], device const ulong *b [[buffer(1)]],
                     device const ulong *c [[buffer(2)]], device ulong *out [[buffer(3)]],
                     uint3 gid [[thread_position_in_grid]])
{
    const uint i = gid.x;
    const tg_f64 x = tg_d_of(a[i]), y = tg_d_of(b[i]), z = tg_d_of(c[i]);
    out[i * 6u + 0u] = tg_d_bits(tg_dadd(x, y));
    out[i * 6u + 1u] = tg_d_bits(tg_dsub(x, y));
    out[i * 6u + 2u] = tg_d_bits(tg_dmul(x, y));
    out[i * 6u + 3u] = tg_d_bits(tg_ddiv(x, y));
    out[i * 6u + 4u] = tg_d_bits(tg_dsqrt(x));
    out[i * 6u + 5u] = tg_d_bits(tg_dfma(x, y, z));
}
"""
HEAD = "#include <metal_stdlib>\nusing namespace metal;\ntypedef ulong tg_u64;\ntypedef long tg_i64;\n"
TIE = "if (rest > tie || (rest == tie && (q & (tg_u64)1u) != (tg_u64)0u))"


def _source(edit: tuple[str, str] | None = None) -> str:
    text = (ROOT / "kernels/gpu/softdouble.h").read_text()
    if edit:
        assert edit[0] in text, edit[0]
        text = text.replace(edit[0], edit[1], 1)
    return HEAD + text + KERNEL


@pytest.fixture(scope="module")
def msl() -> Any:
    from msl_emu.driver import Emulator, find_cxx

    if find_cxx() is None:
        pytest.skip("no C++ compiler for the MSL emulator")
    return Emulator()


def _operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    specials = np.array([0.0, -0.0, 1.0, -1.0, 1.5, 2.0 ** -1074, -(2.0 ** -1074), 2.0 ** -1022, 2.0 ** -1022 * 0.75,
                         1.7976931348623157e308, np.inf, -np.inf, np.nan, 1.0 + 2.0 ** -52, 1.0 / 3.0, 2.0 ** -53,
                         3.0, 0.1, 1e300, 1e-300])
    sa, sb = (m.ravel() for m in np.meshgrid(specials, specials))
    rng = np.random.default_rng(17)
    n = 4096
    ra = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    rb = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    bits = rng.integers(0, 2 ** 63, (2, n), dtype=np.int64).astype(np.uint64)  # any positive double pattern
    sub = rng.standard_normal(n) * 2.0 ** -1040  # subnormal results
    ties = np.ones(64)  # 1 + 2^-53 and 1 + 3 2^-53: ties, to the even neighbour below and above
    tb = 2.0 ** -53 * np.where(np.arange(64) % 2 == 0, 1.0, 3.0)
    a = np.concatenate([sa, ra, bits[0].view(np.float64), sub, ties])
    b = np.concatenate([sb, rb, bits[1].view(np.float64), rng.standard_normal(n) * 2.0 ** -30, tb])
    c = np.roll(a, 1) * 0.5
    return a, b, c


def _run(msl: Any, source: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    n = len(a)
    bufs = [a.view(np.uint64).copy(), b.view(np.uint64).copy(), c.view(np.uint64).copy(), np.zeros(6 * n, np.uint64)]
    groups = (n + 63) // 64
    pad = groups * 64 - n
    if pad:
        bufs = [np.concatenate([x, np.zeros(pad, np.uint64)]) for x in bufs[:3]] + [np.zeros(6 * (n + pad), np.uint64)]
    out = msl.run(msl.compile(source), (groups, 1, 1), (64, 1, 1), bufs, [True, True, True, False])[3]
    return out[: 6 * n].reshape(n, 6)


def _fma(x: float, y: float, z: float) -> float:
    """x y + z rounded once: the exact value as a Fraction, rounded by its conversion."""
    if not all(np.isfinite([x, y, z])):
        return float(np.float64(x) * np.float64(y) + np.float64(z))  # inf and NaN: nothing to round
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # -0 only when the product and z are zeros of that sign
        neg = bool(np.signbit(x) != np.signbit(y))
        return -0.0 if x * y == 0 and z == 0 and neg and np.signbit(z) else 0.0
    try:
        return float(exact)  # Fraction -> float rounds once, to nearest even
    except OverflowError:
        return np.inf if exact > 0 else -np.inf


def _want(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        cols = [a + b, a - b, a * b, a / b, np.sqrt(a), np.array([_fma(*t) for t in zip(a.tolist(), b.tolist(),
                                                                                        c.tolist())])]
    return np.stack(cols, axis=1)


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: the same bits, or both NaN (which NaN an invalid operation gives is free)."""
    g, w = got.view(np.float64), want
    return (got == w.view(np.uint64)) | (np.isnan(g) & np.isnan(w))


def test_every_constant_of_the_preludes_is_its_bits() -> None:
    """tg_dk(literal, bits): OpenCL C and CUDA read the literal, MSL the bits; they must agree."""
    seen = 0
    for header in sorted((ROOT / "kernels/gpu").glob("*.h")):
        for lit, bits in re.findall(r"tg_dk\(([^,()]+), 0x([0-9a-f]{16})ul\)", header.read_text()):
            assert struct.pack("<d", float(lit)) == struct.pack("<Q", int(bits, 16)), (header.name, lit, bits)
            seen += 1
    assert seen >= 40  # softmax.h, norm.h, normal.h and softmath.h's constants


@pytest.mark.slow
def test_the_msl_software_double_gives_ieee_bits(msl: Any) -> None:
    a, b, c = _operands()
    got, want = _run(msl, _source(), a, b, c), _want(a, b, c)
    ok = _same(got, want)
    bad = np.argwhere(~ok)
    assert ok.all(), [(a[i].hex(), b[i].hex(), c[i].hex(), j, hex(int(got[i, j]))) for i, j in bad[:5]]


@pytest.mark.slow
def test_the_emulator_catches_ties_rounded_away_from_zero(msl: Any) -> None:
    a, b, c = _operands()
    got = _run(msl, _source((TIE, "if (rest >= tie)")), a, b, c)
    assert not _same(got, _want(a, b, c)).all()
