"""tgrad's random numbers (docs/random.md): every value equals an independent reference built here
from the documented definition (Philox-4x32-10 in Python integers, the transforms exactly with
Fraction or at 200 bits with mpmath, rounded once by the conformance kit), the same bytes on every
thread count and chunking, the generator's replay semantics, sane statistics on fixed seeds, and
typed refusals."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath  # type: ignore[import-untyped, unused-ignore]
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance import exact

M32 = 0xFFFFFFFF
DIST = {"uniform": 1, "normal": 2, "randint": 3}


def philox(c: list[int], k0: int, k1: int) -> list[int]:
    """Philox-4x32-10 (Salmon et al. 2011), straight from the paper's round function."""
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return c


def words(dist: str, seed: int, g: int, per: int) -> tuple[list[int], int]:
    """The Philox words of element g and its index among the call's elements."""
    q = g // per
    return philox([q & M32, q >> 32, DIST[dist], 0], seed & M32, seed >> 32), g % per


def bits_of(t: tgrad.Tensor) -> list[int]:
    dt = np.uint16 if t.dtype == tgrad.bfloat16 else np.uint32
    return [int(b) for b in t.numpy().view(dt).reshape(-1)]


def code(dtype: str) -> int:
    return exact.BF16 if dtype == "bfloat16" else exact.F32


def test_philox_known_answers() -> None:
    """Random123's kat_vectors for philox4x32-10 through the library, and through the reference."""
    kat = [([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
           ([M32] * 4, [M32] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
           ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]
    for ctr, key, want in kat:
        out = ffi.new("uint32_t[4]")
        assert lib.tgrad_debug_philox(ctr, key, out) == 0
        assert list(out) == want
        assert philox(ctr, key[0], key[1]) == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_rand_is_the_top_bits_of_one_word(dtype: str) -> None:
    seed, b = 0x1234_5678_9ABC_DEF0, 8 if dtype == "bfloat16" else 24
    g = tgrad.random.Generator(seed)
    g.set_state((seed, 3))
    t = g.rand(257, dtype=dtype)
    for i, got in enumerate(bits_of(t)):
        w, j = words("uniform", seed, 3 + i, 4)
        assert got == exact.round_to(Fraction(w[j] >> (32 - b), 1 << b), code(dtype))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("low,high", [(-0.1, 0.1), (0.0, 3.0), (1.0, 1.0 + 2**-9), (-1e30, 7.5), (1e-40, 3e-40),
                                      (0.999, 1.001), (1 - 2**-30, 1 + 2**-30), (-1e-38, 1e-38), (3e38, 3.3e38),
                                      (2.0**126 - 2.0**100, 2.0**126 + 2.0**100), (-5.0, -5.0)])
def test_uniform_is_rounded_once(dtype: str, low: float, high: float) -> None:
    """low + (high - low) U exactly, then one rounding (some of these are exact midpoints)."""
    b = 8 if dtype == "bfloat16" else 24
    t = tgrad.random.Generator(99).uniform(low, high, 1000, dtype=dtype)
    for i, got in enumerate(bits_of(t)):
        w, j = words("uniform", 99, i, 4)
        u = Fraction(w[j] >> (32 - b), 1 << b)
        assert got == exact.round_to(Fraction(low) + (Fraction(high) - Fraction(low)) * u, code(dtype)), i


def test_uniform_midpoints_take_the_exact_path() -> None:
    before = ffi.new("int64_t[2]")
    lib.tgrad_debug_random_slow_path(DIST["uniform"], before, 2)
    tgrad.random.Generator(5).uniform(0.0, 3.0, 4096).realize()  # 3k/256 with 10 bits: many ties
    after = ffi.new("int64_t[2]")
    lib.tgrad_debug_random_slow_path(DIST["uniform"], after, 2)
    assert after[0] > before[0]
    assert after[1] == before[1] == 0  # the exact path always decides


def normal_reference(seed: int, g: int, mean: float, std: float, dtype: str) -> int:
    mpmath.mp.prec = 200
    w, j = words("normal", seed, g, 4)
    w0, w1 = w[2 * (j // 2)], w[2 * (j // 2) + 1]
    u = mpmath.mpf(w0 + 1) / 2**32
    r = mpmath.sqrt(-2 * mpmath.log(u))
    angle = 2 * mpmath.pi * mpmath.mpf(w1) / 2**32
    exact_zero = w0 == M32 or (j % 2 == 0 and w1 % (1 << 30) == 0 and (w1 >> 30) % 2 == 1) or \
        (j % 2 == 1 and w1 % (1 << 31) == 0)
    if exact_zero or std == 0:
        return exact.round_to(Fraction(mean), code(dtype))
    z = r * (mpmath.cos(angle) if j % 2 == 0 else mpmath.sin(angle))
    v = mpmath.mpf(mean) + mpmath.mpf(std) * z
    man, e = mpmath.frexp(v)
    q = Fraction(int(mpmath.ldexp(man, 220)), 1) * Fraction(2) ** (int(e) - 220)
    return exact.round_to(q, code(dtype))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.02), (-1e-3, 1e-3), (2.5, 0.0)])
def test_normal_is_the_exact_box_muller_rounded_once(dtype: str, mean: float, std: float) -> None:
    """Against mpmath at 200 bits: each value is mean + std sqrt(-2 ln u) cos or sin (2 pi t)."""
    t = tgrad.random.Generator(2024).normal(mean, std, 400, dtype=dtype)
    for i, got in enumerate(bits_of(t)):
        assert got == normal_reference(2024, i, mean, std, dtype), i


@pytest.mark.parametrize("dtype,mean", [("bfloat16", 1 + 2**-8), ("float32", 1 + 2**-24)])
def test_normal_near_a_midpoint_takes_the_slow_path(dtype: str, mean: float) -> None:
    """mean on a rounding midpoint and a tiny std: the double sees the midpoint itself, binary128
    sees which side each value lies on (counted as slow, never undecided)."""
    before = ffi.new("int64_t[2]")
    lib.tgrad_debug_random_slow_path(DIST["normal"], before, 2)
    t = tgrad.random.Generator(8).normal(mean, 1e-30, 64, dtype=dtype)
    got = bits_of(t)
    after = ffi.new("int64_t[2]")
    lib.tgrad_debug_random_slow_path(DIST["normal"], after, 2)
    assert after[0] - before[0] == 64 and after[1] == before[1]
    assert got == [normal_reference(8, i, mean, 1e-30, dtype) for i in range(64)]
    assert len(set(got)) == 2  # both neighbours of the midpoint occur


def test_randint_is_lemire_multiply_shift() -> None:
    t = tgrad.random.Generator(11).randint(-5, 1000, 500)
    assert t.dtype == tgrad.int32
    for i, got in enumerate(t.numpy().tolist()):
        w, j = words("randint", 11, i, 2)
        x = w[2 * j] | (w[2 * j + 1] << 32)
        assert got == -5 + ((x * 1005) >> 64)


@pytest.mark.parametrize("draw", ["rand", "randn", "randint"])
def test_bytes_do_not_depend_on_threads_or_chunking(draw: str) -> None:
    def make(n: int, offset: int) -> bytes:
        g = tgrad.random.Generator(77)
        g.set_state((77, offset))
        t = g.randint(0, 50, n) if draw == "randint" else getattr(g, draw)(n, dtype="float32")
        return bytes(t.numpy().tobytes())

    n = 70001
    threads = tgrad.num_threads()
    try:
        tgrad.set_num_threads(1)
        one = make(n, 0)
        tgrad.set_num_threads(2)
        assert make(n, 0) == one
    finally:
        tgrad.set_num_threads(threads)
    # element i depends on offset + i alone: a draw equals two draws that continue each other
    assert make(1234, 0) + make(n - 1234, 1234) == one


def test_fusion_setting_changes_no_byte() -> None:
    def chain() -> bytes:
        g = tgrad.random.Generator(4)
        return bytes(((g.randn(5000) * 2 + 1).relu() + g.rand(5000)).numpy().tobytes())

    was = tgrad.fusion_enabled()
    try:
        tgrad.set_fusion(True)
        fused = chain()
        tgrad.set_fusion(False)
        assert chain() == fused
    finally:
        tgrad.set_fusion(was)


def test_generator_replays_and_advances() -> None:
    tgrad.manual_seed(3)
    a, b = tgrad.rand(1000), tgrad.rand(1000)
    assert a.numpy().tobytes() != b.numpy().tobytes()
    assert tgrad.random.get_rng_state() == (3, 2000)
    tgrad.random.seed(3)
    assert tgrad.rand(1000).numpy().tobytes() == a.numpy().tobytes()
    state = tgrad.random.get_rng_state()
    c = tgrad.randn(10).numpy().tobytes()
    tgrad.random.set_rng_state(state)
    assert tgrad.randn(10).numpy().tobytes() == c
    # rand(1000) is rand(300) followed by rand(700)
    g = tgrad.random.Generator(3)
    parts = np.concatenate([g.rand(300).numpy(), g.rand(700).numpy()])
    assert parts.tobytes() == a.numpy().tobytes()
    # a private generator does not touch the global one
    before = tgrad.random.get_rng_state()
    tgrad.rand(5, generator=tgrad.random.Generator(1))
    assert tgrad.random.get_rng_state() == before
    # a refused draw does not advance
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.randint(5, 5, (3,))
    assert tgrad.random.get_rng_state() == before
    assert tgrad.random.Generator(-1).initial_seed() == (1 << 64) - 1  # torch's modulo 2^64


def test_statistics_on_fixed_seeds() -> None:
    g = tgrad.random.Generator(12345)
    u = g.rand(200_000, dtype="float32").numpy().astype(np.float64)
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    z = g.randn(200_000, dtype="float32").numpy().astype(np.float64)
    assert abs(z.mean()) < 0.01 and abs(z.var() - 1) < 0.02
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01
    h = g.randn(100_000).numpy().astype(np.float64)  # bf16
    assert abs(h.mean()) < 0.015 and abs(h.var() - 1) < 0.03
    n = g.normal(10.0, 0.5, (100_000,), dtype="float32").numpy().astype(np.float64)
    assert abs(n.mean() - 10) < 0.01 and abs(n.std() - 0.5) < 0.01
    r = g.randint(0, 10, 100_000).numpy()
    counts = np.bincount(r, minlength=10)
    assert r.min() == 0 and r.max() == 9
    assert ((counts - 10_000) ** 2 / 10_000).sum() < 40  # chi-square with 9 dof: p < 1e-5 above
    b = g.rand(100_000).numpy().astype(np.float64)  # bf16: multiples of 2^-8
    assert np.all(b * 256 == np.floor(b * 256)) and b.max() < 1 and len(np.unique(b)) == 256


def test_torch_style_surface() -> None:
    tgrad.manual_seed(0)
    x = tgrad.randn(2, 3)
    assert x.shape == (2, 3) and x.dtype == tgrad.bfloat16
    assert tgrad.rand((4,), dtype=tgrad.float32).dtype == tgrad.float32
    assert tgrad.randint(10, (3, 2)).shape == (3, 2)
    assert tgrad.normal(0.0, 2.0, (5,)).shape == (5,)
    assert tgrad.rand_like(x).shape == (2, 3) and tgrad.randn_like(x).dtype == tgrad.bfloat16
    assert tgrad.rand(0, 3).shape == (0, 3) and tgrad.rand().shape == ()
    w = tgrad.random.uniform_((8, 4), -0.5, 0.5, generator=tgrad.random.Generator(1))
    vals = w.numpy().astype(np.float64)
    assert w.shape == (8, 4) and vals.min() >= -0.5 and vals.max() < 0.5
    assert "normal" in tgrad.randn(3).explain()
    from tgrad import render

    for lang in ("opencl", "cuda", "msl"):  # MSL: on the software double (docs/random.md)
        assert "tg_normal_value(" in render.render_tensor(tgrad.randn(4), lang=lang).source
    assert "tg_philox4x32_10" in render.render_tensor(tgrad.rand(4), lang="opencl").source


def test_refusals() -> None:
    live = tgrad.live_tensors()
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.rand(-1)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.randint(3, 1, (2,))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.randint(0, 1 << 40, (2,))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.normal(0.0, -1.0, (2,))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.normal(math.nan, 1.0, (2,))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.random.uniform(1.0, 0.0, (2,))
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.rand(3, dtype=tgrad.int32)
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.randint(0, 3, (3,), dtype=tgrad.float32)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.random.seed(1 << 64)
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.rand(3, generator="not a generator")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):  # a device tgrad does not know
        tgrad.random.uniform(-1.0, 1.0, (3,), dtype=tgrad.float32, device="gpu")
    g = tgrad.random.Generator(1)
    g.set_state((1, (1 << 64) - 2))
    with pytest.raises(errors.InvalidArgumentError):
        g.rand(3)  # the counter space ends
    assert tgrad.live_tensors() == live
