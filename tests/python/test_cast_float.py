"""The cast kind's bfloat16 <-> float32 rows (libtgrad/src/ops/cast.c, cast_float_rows): through
every kind of view (transposed, stepped, broadcast, 0-d, empty), the bytes of an independent
reference: widening is exact (the bf16 bits shifted left 16); narrowing rounds to nearest even,
any NaN the canonical 0x7FC0 (docs/numerics.md)."""

from __future__ import annotations

import numpy as np
import pytest

import tgrad


def narrow_reference(f: np.ndarray) -> np.ndarray:
    u = np.array(f, np.float32).view(np.uint32).astype(np.uint64)  # keeps a 0-d shape
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), r)


def special_f32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    # ties to even: a low half of exactly 0x8000, both parities; NaNs with payloads; infinities
    bits[: n // 4] = (bits[: n // 4] & 0xFFFF0000) | 0x8000
    f = bits.view(np.float32)
    extra = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, 1e-45], np.float32)
    f[: min(n, len(extra))] = extra[: min(n, len(extra))]
    f[np.isnan(f)] = np.float32(np.nan)  # tgrad.tensor keeps float32 bits; a signalling NaN stays NaN
    return f.reshape(shape)


VIEWS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.T,
    "stepped": lambda t: t[::2, 1::3],
    "broadcast": lambda t: t[:1].expand(5, t.shape[1]),
    "row": lambda t: t[3],
    "element": lambda t: t[2, 4],
    "empty": lambda t: t[:0],
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_float_casts_through_views(view: str) -> None:
    rng = np.random.default_rng(11)
    host = special_f32(rng, (9, 14))
    f32 = tgrad.tensor(host, dtype=tgrad.float32)
    v = VIEWS[view](f32)
    want = narrow_reference(v.numpy(np.float32))
    got = v.to(tgrad.bfloat16)
    assert np.array_equal(np.frombuffer(got.to_bytes(), np.uint16).reshape(want.shape), want)
    # widening: exact, from bf16 tensors through the same view
    b = tgrad.tensor(host, dtype=tgrad.float32).to(tgrad.bfloat16)
    bits = np.frombuffer(VIEWS[view](b).to_bytes(), np.uint16).reshape(want.shape)
    wide = VIEWS[view](b).to(tgrad.float32).numpy(np.float32)
    assert np.array_equal(wide.view(np.uint32), bits.astype(np.uint32) << 16)
