"""The float32 arithmetic the optimizers and clip_grad_norm_ compose (docs/numerics.md,
"Optimizers"): library ops only, each rounded once; Python prepares scalar hyperparameters.

`mul_add(c, a, s)` is RN(c + a * s) with one rounding, torch's CPU `fmadd` (the vector path of
``add(alpha=)``, ``lerp``, ``addcmul``): a is split into two 12-bit halves (Veltkamp: ``h = a*4097``,
``hi = h - (h - a)``, ``lo = a - hi``, each exact in float32), and s likewise (a number on the host, a tensor by the same ops), so the four
partial products are exact and the correctly rounded sum of ``c`` and them (tgrad.sum over a stacked
axis: the exact sum rounded once) is the fused result. Where |a| (or |s|) >= 2**115 (the split
would overflow) or either is not finite, it is RN(c + RN(a * s)) instead; a partial product below 2**-126
(subnormal) may lose its last bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor

_SPLIT = 4097.0  # 2**12 + 1: halves of 12 bits for float32's 24
_SPLIT_LIMIT = 2.0 ** 115


def _tgrad() -> Any:
    import tgrad

    return tgrad


def f32(x: float) -> float:
    """x rounded once to float32 (a number operand of a float32 op is rounded so too)."""
    return float(np.float32(x))


def split_scalar(s: float) -> tuple[float, float]:
    """float32(s) as hi + lo, each of at most 12 significant bits (Veltkamp, in float32)."""
    v = np.float32(s)
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.float32(v * np.float32(_SPLIT))
        hi = np.float32(h - np.float32(h - v))
        lo = np.float32(v - hi)
    return float(hi), float(lo)


def _split(a: Tensor) -> tuple[Tensor, Tensor]:
    """a as hi + lo, each of at most 12 significant bits, exactly (Veltkamp; |a| < 2**115)."""
    h = a * _SPLIT
    hi = h - (h - a)
    return hi, a - hi


def mul_add(c: Tensor, a: Tensor, b: float | Tensor) -> Tensor:
    """RN(c + a * b), rounded once, for a tensor or number b (a number is first rounded to
    float32); see the module's docstring."""
    tg = _tgrad()
    if isinstance(b, Tensor):
        a_hi, a_lo = _split(a)
        b_hi, b_lo = _split(b)
        fused = tg.stack([c, a_hi * b_hi, a_hi * b_lo, a_lo * b_hi, a_lo * b_lo]).sum(axis=0)
        splittable = tg.logical_and(a.abs() < _SPLIT_LIMIT, b.abs() < _SPLIT_LIMIT)
        result: Tensor = tg.where(splittable, fused, c + a * b)
        return result
    s32 = f32(b)
    if s32 == 0.0 or not np.isfinite(s32) or abs(s32) >= _SPLIT_LIMIT:
        return c + a * s32
    s_hi, s_lo = split_scalar(s32)
    a_hi, a_lo = _split(a)
    fused = tg.stack([c, a_hi * s_hi, a_hi * s_lo, a_lo * s_hi, a_lo * s_lo]).sum(axis=0)
    result = tg.where(a.abs() < _SPLIT_LIMIT, fused, c + a * s32)
    return result


def as_f32(x: Tensor) -> Tensor:
    """x in float32 (bf16 -> float32 is exact)."""
    tg = _tgrad()
    return x if x.dtype is tg.float32 else x.to(tg.float32)
