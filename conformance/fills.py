"""Seeded operand fills, as bf16 bit patterns (uint16). numpy only.

Every fill takes a ``numpy.random.Generator`` so a case is reproduced from its seed alone.

- ``normal``: standard normal float32 rounded (RNE) to bf16: ordinary data.
- ``smallint``: integers in [-8, 8]: every product and partial sum is exact.
- ``special``: a mix of +-0, +-inf, NaN (quiet and signalling, both signs), bf16 subnormals,
  huge and tiny exponents (so products overflow or underflow), and ordinary values.
- ``exponents``: random sign, exponent field uniform over 0..254 (0 makes subnormals and zeros),
  random mantissa: products over the whole range, no inf or NaN inputs.
- ``tiny``: exponents around 2^-63 so that products and sums land near the flush threshold
  2^-126 (exercises tininess after rounding and signed zeros).
- ``ties``: few-bit values over a narrow exponent window plus values 2^-24..2^-20, so that the
  f32 additions and the final bf16 rounding often meet exact ties.
- ``allbits``: every one of the 65,536 bf16 patterns once per 65,536 elements, in a seeded order
  (an elementwise op on a [256, 256] operand sees every input).
"""

from __future__ import annotations

import numpy as np

from .oracle import f32_to_bf16_bits

__all__ = ["FILLS", "fill_bits"]


def _normal(shape, rng):
    return f32_to_bf16_bits(rng.standard_normal(shape, dtype=np.float32))


def _smallint(shape, rng):
    return f32_to_bf16_bits(rng.integers(-8, 9, size=shape).astype(np.float32))


def _pattern(sign, exp_field, mantissa):
    return ((sign.astype(np.uint16) << 15) | (exp_field.astype(np.uint16) << 7)
            | mantissa.astype(np.uint16)).astype(np.uint16)


def _exponents(shape, rng):
    sign = rng.integers(0, 2, size=shape)
    exp_field = rng.integers(0, 255, size=shape)
    mantissa = rng.integers(0, 128, size=shape)
    return _pattern(sign, exp_field, mantissa)


def _tiny(shape, rng):
    sign = rng.integers(0, 2, size=shape)
    exp_field = rng.integers(127 - 80, 127 - 50, size=shape)  # 2^-80 .. 2^-51
    mantissa = rng.choice(np.array([0, 0, 1, 64, 96, 127]), size=shape)
    bits = _pattern(sign, exp_field, mantissa)
    zero = rng.random(shape) < 0.05
    return np.where(zero, (sign << 15).astype(np.uint16), bits).astype(np.uint16)


def _ties(shape, rng):
    sign = rng.integers(0, 2, size=shape).astype(np.float32)
    coarse = rng.choice(np.array([1.0, 1.25, 1.5, 1.0078125], dtype=np.float32), size=shape)
    coarse = np.ldexp(coarse, rng.integers(-4, 5, size=shape)).astype(np.float32)
    fine = np.ldexp(np.float32(1.0), rng.integers(-24, -19, size=shape)).astype(np.float32)
    x = np.where(rng.random(shape) < 0.75, coarse, fine).astype(np.float32)
    x = np.where(sign > 0, -x, x).astype(np.float32)
    return f32_to_bf16_bits(x)


_SPECIAL_PATTERNS = np.array(
    [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFA5, 0x7FFF], dtype=np.uint16
)


def _special(shape, rng):
    u = rng.random(shape)
    sign = rng.integers(0, 2, size=shape)
    mantissa = rng.integers(0, 128, size=shape)
    ordinary = _pattern(sign, rng.integers(100, 155, size=shape), mantissa)
    huge = _pattern(sign, rng.integers(190, 255, size=shape), mantissa)
    tiny = _pattern(sign, rng.integers(1, 64, size=shape), mantissa)
    subnormal = _pattern(sign, np.zeros(shape, np.int64), rng.integers(1, 128, size=shape))
    zero = (sign.astype(np.uint16) << 15).astype(np.uint16)
    inf = (0x7F80 | (sign.astype(np.uint16) << 15)).astype(np.uint16)
    nan = rng.choice(_SPECIAL_PATTERNS[4:], size=shape)
    # nan 0.5%, inf 1%, zero 10%, subnormal 8%, huge 8%, tiny 8%, ordinary the rest
    pick = np.select(
        [u < 0.005, u < 0.015, u < 0.115, u < 0.195, u < 0.275, u < 0.355],
        [nan, inf, zero, subnormal, huge, tiny],
        default=ordinary,
    )
    return pick.astype(np.uint16)


def _allbits(shape, rng):
    size = int(np.prod(shape, dtype=np.int64))
    rounds = -(-size // 65536)
    patterns = [rng.permutation(65536).astype(np.uint16) for _ in range(rounds)]
    flat = np.concatenate(patterns) if patterns else np.zeros(0, np.uint16)
    return flat[:size].reshape(shape)


FILLS = {
    "normal": _normal,
    "smallint": _smallint,
    "special": _special,
    "exponents": _exponents,
    "tiny": _tiny,
    "ties": _ties,
    "allbits": _allbits,
}


def fill_bits(kind: str, shape, rng: np.random.Generator) -> np.ndarray:
    """A C-contiguous uint16 array of bf16 patterns of the given shape, drawn from rng."""
    try:
        make = FILLS[kind]
    except KeyError:
        raise ValueError(f"unknown fill {kind!r}; known: {sorted(FILLS)}") from None
    shape = tuple(int(s) for s in shape)
    # reshape: ascontiguousarray makes a 0-d array 1-d
    return np.ascontiguousarray(make(shape, rng), dtype=np.uint16).reshape(shape)
