"""x @ W.T against x @ panels (tgrad.nn.PackedLinear's layout), same bytes asserted, timed.

    python tools/packed_products.py decode [ROUNDS]   # the ~100 M Llama's 57 one-row products a token
    python tools/packed_products.py prefill           # one weight of each shape at 1, 64 and 512 rows

decode: best of 15 tokens per layout, the layouts alternating ROUNDS times (default 3); each
product realized alone, so the Python of 57 realizes is in both. prefill: the panels' result
permuted back to [L, N] included, as PackedLinear.product does. 2 threads.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

import tgrad
from tgrad import Tensor
from tgrad.nn.packed import pack_panels

SHAPES = [(1024, 1024), (256, 1024), (256, 1024), (1024, 1024), (2816, 1024), (2816, 1024), (1024, 2816)] * 8 + [
    (8192, 1024)]


def _bits(t: Tensor) -> bytes:
    return t.numpy().view(np.uint16).tobytes()


def _weight(rng: np.random.Generator, n: int, k: int) -> Tensor:
    return Tensor.from_numpy((rng.standard_normal((n, k)) * 0.05).astype(ml_dtypes.bfloat16))


def _best(f, repeats: int) -> float:
    best = 1e9
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def decode(rounds: int) -> None:
    rng = np.random.default_rng(0)
    weights = [_weight(rng, n, k) for n, k in SHAPES]
    layouts = {"W.T": [w.T for w in weights], "panels": [pack_panels(w) for w in weights]}
    xs = {k: Tensor.from_numpy(rng.standard_normal((1, k)).astype(ml_dtypes.bfloat16)) for k in (1024, 2816)}
    for (n, k), wt, p in zip(SHAPES, layouts["W.T"], layouts["panels"]):
        assert _bits(xs[k] @ wt) == _bits((xs[k] @ p).reshape(1, n))
    total = sum(n * k * 2 for n, k in SHAPES)
    for _ in range(rounds):
        for name, ws in layouts.items():
            best = _best(lambda: [(xs[k] @ w).realize() for (_, k), w in zip(SHAPES, ws)], 15)
            print(f"{name:7s} {best * 1e3:6.2f} ms a token, {total / best / 1e9:5.1f} GB/s")


def prefill() -> None:
    rng = np.random.default_rng(1)
    for n, k in [(2816, 1024), (1024, 2816), (1024, 1024), (256, 1024)]:
        w = _weight(rng, n, k)
        wt, p = w.T, pack_panels(w)
        for rows in (1, 64, 512):
            x = Tensor.from_numpy(rng.standard_normal((rows, k)).astype(ml_dtypes.bfloat16))

            def plain() -> Tensor:
                return (x @ wt).realize()

            def packed() -> Tensor:
                y = x @ p
                return (y.reshape(1, n) if rows == 1 else y.permute(1, 0, 2).reshape(rows, n)).realize()

            assert _bits(plain()) == _bits(packed())
            reps = 10 if rows < 512 else 3
            a = min(_best(plain, reps) for _ in range(3))
            b = min(_best(packed, reps) for _ in range(3))
            print(f"{n}x{k} rows {rows:3d}: W.T {a * 1e3:7.3f} ms, panels {b * 1e3:7.3f} ms ({b / a:.2f}x)")


if __name__ == "__main__":
    tgrad.set_num_threads(2)
    mode = sys.argv[1] if len(sys.argv) > 1 else "decode"
    decode(int(sys.argv[2]) if len(sys.argv) > 2 else 3) if mode == "decode" else prefill()
