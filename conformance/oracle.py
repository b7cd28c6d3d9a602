"""The bit-exact oracle for tgrad's bf16 matmul: the numerics contract as numpy code.

This module is independent of libtgrad (numpy only) so that it can judge it.

Contract of ``matmul_bits(a_bits, b_bits, order=...)`` (a: uint16 [M, K], b: uint16 [K, N], bf16
bit patterns, any strides). Two documented orders: ``"block32"`` (the default since tgrad 0.2,
AMX's ``TDPBF16PS``; below, after the common rules) and ``"pairwise"`` (the default until 0.1,
``vdpbf16ps``'s), whose rules come first here:

- Inputs: bf16 -> f32 by ``bits << 16``. DAZ: a bf16 whose exponent field is 0 and mantissa is
  not 0 is replaced by a zero of the same sign.
- pairwise: K is padded to even with +0.0 in both operands (element K of each row of a and column of b).
  For each output C[m, n]: ``acc = +0.0f``; for j = 0 .. K/2-1 over pairs (2j, 2j+1): first
  ``acc = step(acc, a[m,2j+1] * b[2j+1,n])``, then ``acc = step(acc, a[m,2j] * b[2j,n])``
  (odd element first, as ``vdpbf16ps`` does).
- ``step(acc, p)``: ``exact = acc + p`` with p the exact product. r = round-to-nearest-even of
  exact to a 24-bit significand with unbounded exponent; then flush to zero AFTER rounding: if
  |r| < 2^-126, r becomes a zero with the sign of exact. If exact is exactly 0 the IEEE rule
  gives its sign: +0, except (-0) + (-0) = -0. Overflow gives +-inf; inf*0, inf-inf and NaN
  inputs give NaN. (Tininess after rounding with unbounded exponent was checked on x86 for both
  FMA under MXCSR FTZ and ``vdpbf16ps``.) Since acc is 0 or a normal f32, the unbounded rounding
  is tiny exactly when |exact| < 2^-126 - 2^-151 (the tie at that point goes to the even 2^-126).
- Output: any NaN -> 0x7FC0 (canonical quiet NaN, positive); otherwise f32 -> bf16 round to
  nearest even. K = 0 gives +0 (0x0000) everywhere; M or N = 0 gives an empty result.

``order="block32"`` (the default; docs/numerics.md, "The block32 order"): K is padded
with +0.0 to a multiple of 32. For each output, ``acc = +0.0f``; for each block of 32 elements
(k0 = 0, 32, ...): ``even = odd = +0.0f``; for j = 0 .. 15 ``even = step(even, a[m,k0+2j] *
b[k0+2j,n])`` and ``odd = step(odd, a[m,k0+2j+1] * b[k0+2j+1,n])``; then ``t = step(even, odd)``
(the sum rounded and flushed as a step is) and ``acc = step(acc, t)``. Output as above.

Implementation: the K loop runs in Python, each step is vectorized over a block of rows x N.
When every product of the operands is a multiple of 2^-126 and below 2^128 in magnitude (true
for ordinary data, checked from the exponent fields), every sum is a multiple of 2^-126, so
nothing is ever tiny and plain float32 arithmetic (RNE, products exact) is the contract; this is
the fast path. Otherwise each step is computed in float64: the product is exact (8-bit
significands, exponents >= -266), and the float64 sum is either exact or so far from any f32
rounding boundary that rounding it to f32 is still correct; the flush test |d| < 2^-126 - 2^-151
is decided on the same float64 value (exact whenever it is close to that threshold).

Conversion helpers (independent references for tests of libtgrad's conversions):
``bf16_bits_to_f32``, ``f32_to_bf16_bits`` (RNE, NaN -> quiet with sign and top payload kept:
``(u >> 16) | 0x40``), ``f64_to_bf16_bits`` (one rounding directly from f64; NaN as f64 -> f32
-> bf16 would keep it: sign, top 7 payload bits, quiet bit set).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CANONICAL_NAN_BITS",
    "bf16_bits_to_f32",
    "daz_bits",
    "f32_to_bf16_bits",
    "f64_to_bf16_bits",
    "matmul_bits",
    "matmul_f32",
    "TC_BOUND_OVERFLOW",
    "tc_bound",
]

CANONICAL_NAN_BITS = 0x7FC0

# Smallest normal f32, and the flush threshold of the unbounded-exponent rounding: exact values
# strictly below it in magnitude round (24-bit significand) to something below 2^-126.
_TINY = 2.0**-126
_FLUSH_BELOW = 2.0**-126 - 2.0**-151

# Bytes of working set per block of rows (keeps the accumulator in cache, bounds memory).
_BLOCK_BYTES = 1 << 18


def _as_bits(x) -> np.ndarray:
    """Accept uint16 bit patterns, or any 2-byte float type such as ml_dtypes.bfloat16."""
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return x
    if x.dtype.itemsize == 2 and x.dtype.kind in "Vf" and x.dtype != np.float16:
        return x.view(np.uint16)
    if x.dtype.name == "bfloat16":
        return x.view(np.uint16)
    raise TypeError(f"expected bf16 bit patterns as uint16 (or bfloat16), got {x.dtype}")


# ---- conversions -----------------------------------------------------------------------------


def bf16_bits_to_f32(bits) -> np.ndarray:
    """Exact widening: the f32 whose high half is the bf16 pattern (NaN payloads kept)."""
    bits = _as_bits(bits)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def daz_bits(bits) -> np.ndarray:
    """bf16 patterns with subnormals (exponent 0, mantissa != 0) replaced by same-sign zeros."""
    bits = _as_bits(bits)
    sub = ((bits & 0x7F80) == 0) & ((bits & 0x007F) != 0)
    return np.where(sub, bits & np.uint16(0x8000), bits).astype(np.uint16)


def f32_to_bf16_bits(x) -> np.ndarray:
    """Round float32 to bf16 bits, to nearest even (gradual underflow, overflow to inf).

    NaN stays NaN: sign and top payload bits kept, quiet bit set: ``(u >> 16) | 0x40``.
    """
    u = np.array(x, dtype=np.float32, order="C").view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet = (u >> np.uint32(16)) | np.uint32(0x40)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def f64_to_bf16_bits(x) -> np.ndarray:
    """Round float64 to bf16 bits once, to nearest even (no double rounding through f32).

    Gradual underflow (bf16 subnormals down to 2^-133), overflow to inf at (2 - 2^-8) * 2^127
    (the tie goes to inf). NaN: sign kept, top 7 payload bits kept, quiet bit set (what
    f64 -> f32 -> bf16 would give).
    """
    x = np.asarray(x, dtype=np.float64)
    u = np.array(x, order="C").view(np.uint64)
    sign = ((u >> np.uint64(48)) & np.uint64(0x8000)).astype(np.uint16)
    ax = np.abs(x)
    with np.errstate(invalid="ignore", over="ignore"):
        biased = ((u >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
        # Exponent of the bf16 quantum: 7 bits below the leading bit, never below 2^-133.
        e = np.clip(biased - 1023, -126, 128)
        q_exp = e - 7
        scaled = np.ldexp(np.where(np.isfinite(ax), ax, 0.0), -q_exp)  # exact: power-of-2 scale
        n = np.rint(scaled)  # round half to even, exact in float64
        value = np.ldexp(n, q_exp)  # a bf16 value, or 2^128
        as_f32 = value.astype(np.float32)  # exact (2^128 and above become inf)
    mag = (as_f32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    mag = np.where(biased >= 1023 + 128, np.uint16(0x7F80), mag)
    nan_bits = (np.uint16(0x7FC0) | ((u >> np.uint64(45)) & np.uint64(0x7F)).astype(np.uint16))
    out = np.where(np.isnan(x), nan_bits, mag) | sign
    return out.astype(np.uint16)


def _f32_to_bf16_output(acc: np.ndarray) -> np.ndarray:
    """The matmul's output rounding: RNE, every NaN becomes the canonical 0x7FC0."""
    bits = f32_to_bf16_bits(acc)
    return np.where(np.isnan(acc), np.uint16(CANONICAL_NAN_BITS), bits).astype(np.uint16)


# ---- matmul ----------------------------------------------------------------------------------


def _exponent_range(bits: np.ndarray):
    """(min quantum exponent, max exponent + 1) over finite nonzero values; None if none."""
    e = ((bits >> 7) & 0xFF).astype(np.int32)
    finite_nonzero = (e != 0) & (e != 0xFF)
    if not finite_nonzero.any():
        return None
    e = e[finite_nonzero] - 127
    return int(e.min()) - 7, int(e.max()) + 1


def _fast_path_is_exact(a_bits: np.ndarray, b_bits: np.ndarray) -> bool:
    """True when every product is a multiple of 2^-126 and below 2^128 in magnitude.

    Then products are exact in f32, every partial sum is a multiple of 2^-126 (so nothing is
    ever tiny and no flush happens), and float32 RNE arithmetic is exactly the contract.
    """
    ra, rb = _exponent_range(a_bits), _exponent_range(b_bits)
    if ra is None or rb is None:
        return True  # every product is a zero, an inf or a NaN: f32 handles those exactly
    return ra[0] + rb[0] >= -126 and ra[1] + rb[1] <= 128


def _accumulate_f32(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fast path. a_t: f32 [K, mb] (a block transposed), b: f32 [K, N]; K even."""
    k_total, mb = a_t.shape
    n = b.shape[1]
    acc = np.zeros((mb, n), dtype=np.float32)
    prod = np.empty((mb, n), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(0, k_total, 2):
            for k in (j + 1, j):
                np.multiply(a_t[k][:, None], b[k][None, :], out=prod)
                np.add(acc, prod, out=acc)
    return acc


def _accumulate_f64(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    """General path with flush after rounding. a_t: f64 [K, mb], b: f64 [K, N]; K even."""
    k_total, mb = a_t.shape
    n = b.shape[1]
    acc = np.zeros((mb, n), dtype=np.float64)  # always holds f32 values
    d = np.empty((mb, n), dtype=np.float64)
    acc32 = np.empty((mb, n), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(0, k_total, 2):
            for k in (j + 1, j):
                np.multiply(a_t[k][:, None], b[k][None, :], out=d)
                np.add(acc, d, out=d)
                tiny = np.abs(d) < _FLUSH_BELOW  # False for NaN
                # d * 0.0 is a zero with the sign of d (d is finite where tiny).
                np.copyto(d, d * 0.0, where=tiny)
                np.copyto(acc32, d, casting="unsafe")  # RNE to f32; exact for the flushed zeros
                np.copyto(acc, acc32)
    return acc.astype(np.float32)


def _step_f64(acc: np.ndarray, d: np.ndarray, acc32: np.ndarray) -> None:
    """acc = step(acc, d) in place: d holds the exact addend (a product, or an f32 value)."""
    np.add(acc, d, out=d)
    tiny = np.abs(d) < _FLUSH_BELOW  # False for NaN
    np.copyto(d, d * 0.0, where=tiny)  # a zero with the sign of d (d is finite where tiny)
    np.copyto(acc32, d, casting="unsafe")  # RNE to f32; exact for the flushed zeros
    np.copyto(acc, acc32)


def _accumulate_block32(a_t: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The block32 order. a_t: [K, mb], b: [K, N], K a multiple of 32; float32 arrays (the fast
    path: every step exact-product-then-RNE, nothing tiny) or float64 (steps with the flush)."""
    k_total, mb = a_t.shape
    n = b.shape[1]
    exact32 = a_t.dtype == np.float32
    acc = np.zeros((mb, n), dtype=a_t.dtype)
    even = np.empty_like(acc)
    odd = np.empty_like(acc)
    d = np.empty_like(acc)
    acc32 = np.empty((mb, n), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k0 in range(0, k_total, 32):
            even.fill(0.0)
            odd.fill(0.0)
            for j in range(0, 32, 2):
                for chain, k in ((even, k0 + j), (odd, k0 + j + 1)):
                    np.multiply(a_t[k][:, None], b[k][None, :], out=d)
                    if exact32:
                        np.add(chain, d, out=chain)
                    else:
                        _step_f64(chain, d, acc32)
            if exact32:
                np.add(even, odd, out=d)
                np.add(acc, d, out=acc)
            else:
                np.copyto(d, odd)
                _step_f64(even, d, acc32)
                np.copyto(d, even)
                _step_f64(acc, d, acc32)
    return acc.astype(np.float32)


ORDERS = ("pairwise", "block32")


def matmul_f32(a_bits, b_bits, *, path: str = "auto", order: str = "block32") -> np.ndarray:
    """The float32 accumulators of the contract (before the final bf16 rounding), [M, N].

    path: "auto" (fast float32 path when provably exact, else float64), "f32" is refused when
    not provably exact, "f64" forces the general path (tests compare both).
    order: "block32" (the default since 0.2) or "pairwise" (see the module's docstring).
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}")
    a_bits = _as_bits(a_bits)
    b_bits = _as_bits(b_bits)
    if a_bits.ndim != 2 or b_bits.ndim != 2:
        raise ValueError(f"matmul_bits needs 2-D operands, got {a_bits.shape} and {b_bits.shape}")
    m, k = a_bits.shape
    k2, n = b_bits.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {a_bits.shape}, b is {b_bits.shape}")
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n), dtype=np.float32)

    a_bits = daz_bits(a_bits)
    b_bits = daz_bits(b_bits)
    exact_in_f32 = _fast_path_is_exact(a_bits, b_bits)
    if path == "auto":
        use_f32 = exact_in_f32
    elif path == "f32":
        if not exact_in_f32:
            raise ValueError("the float32 path is not exact for these operands")
        use_f32 = True
    elif path == "f64":
        use_f32 = False
    else:
        raise ValueError(f"unknown path {path!r}")

    dtype = np.float32 if use_f32 else np.float64
    k_even = k + (k & 1) if order == "pairwise" else -(-k // 32) * 32
    # Zero padding: element K of each row of a / column of b is +0.0.
    a_t = np.zeros((k_even, m), dtype=dtype)
    b_f = np.zeros((k_even, n), dtype=dtype)
    with np.errstate(invalid="ignore"):  # signalling NaN inputs widen to quiet NaN
        a_t[:k] = bf16_bits_to_f32(a_bits).T
        b_f[:k] = bf16_bits_to_f32(b_bits)

    itemsize = np.dtype(dtype).itemsize
    rows = max(1, _BLOCK_BYTES // max(1, n * itemsize))
    out = np.empty((m, n), dtype=np.float32)
    accumulate = _accumulate_block32 if order == "block32" else _accumulate_f32 if use_f32 else _accumulate_f64
    for m0 in range(0, m, rows):
        block = np.ascontiguousarray(a_t[:, m0 : m0 + rows])
        out[m0 : m0 + rows] = accumulate(block, b_f)
    return out


def matmul_bits(a_bits, b_bits, *, path: str = "auto", order: str = "block32") -> np.ndarray:
    """C = A @ B under the contract above: uint16 bf16 bits [M, K] x [K, N] -> uint16 [M, N]."""
    return _f32_to_bf16_output(matmul_f32(a_bits, b_bits, path=path, order=order))


# ---- the tc route's error bound (docs/kernels.md, "Numerics of tc") ------------------------------
# The bound's domain: (1 + gamma_K) P below bf16's overflow threshold, the midpoint between its
# largest finite value and 2^128. Then no product and no partial sum, in any order, leaves the
# fp32 range, and the result rounds to a finite bf16.
TC_BOUND_OVERFLOW = 2.0**128 - 2.0**119


def tc_bound(a_bits, b_bits, lang: str = "msl") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exact sums s, allowed |out - s|, in_domain) for finite DAZ'd operands; see docs/kernels.md.

    |out - s| <= 2^-8 |s| + (1 + 2^-8) gamma_n P + n 2^-126 + 2^-134, P = sum|a_k b_k|,
    gamma_n = n u / (1 - n u): in MSL n = K, u = 2^-24; in CUDA (tensor cores that align and
    truncate) n = 2K, u = 2^-23. Plus K 2^-52 P for the float64 reference's own rounding. The
    bound is promised where in_domain: (1 + gamma_n) P (with that margin) < TC_BOUND_OVERFLOW.
    """
    a = bf16_bits_to_f32(daz_bits(a_bits)).astype(np.float64)
    b = bf16_bits_to_f32(daz_bits(b_bits)).astype(np.float64)
    k = a.shape[1]
    s = a @ b
    mag = np.abs(a) @ np.abs(b)
    n, u = (2 * k, 2.0**-23) if lang == "cuda" else (k, 2.0**-24)
    gamma = n * u / (1 - n * u)
    allowed = 2.0**-8 * np.abs(s) + (1 + 2.0**-8) * gamma * mag + n * 2.0**-126 + 2.0**-134 + k * 2.0**-52 * mag
    in_domain = (1 + gamma + k * 2.0**-52) * mag < TC_BOUND_OVERFLOW
    return s, allowed, in_domain
