"""A decode step's two attention products alone, at several cache lengths: a query group's rows
against the cached keys (q [1, 4, 4, 64] @ k.mT, float32 scores) and the probabilities times the
values ([1, 4, 4, S] @ v), k and v views of a longer cache as the model's KV cache makes them;
the best of 3 repeats of 2000 realizes each, in microseconds.

    python tools/attention_products.py [S ...]     (default 65 128 520 2048)"""

from __future__ import annotations

import sys
import timeit

import numpy as np

import tgrad


def main() -> None:
    lengths = [int(a) for a in sys.argv[1:]] or [65, 128, 520, 2048]
    rng = np.random.default_rng(1)
    for s in lengths:
        q = tgrad.Tensor.from_numpy(rng.standard_normal((1, 4, 4, 64)).astype(np.float32)).bfloat16().realize()
        cache = tgrad.Tensor.from_numpy(rng.standard_normal((1, 4, s + 80, 64)).astype(np.float32)).bfloat16()
        k = cache.realize().narrow(2, 0, s)
        p = tgrad.Tensor.from_numpy(rng.random((1, 4, 4, s)).astype(np.float32)).bfloat16().realize()

        def scores() -> None:
            q.matmul(k.mT, out_dtype=tgrad.float32).realize()

        def mix() -> None:
            (p @ k).realize()

        n = 2000
        times = [min(timeit.repeat(f, number=n, repeat=3)) / n * 1e6 for f in (scores, mix)]
        print(f"{s:6d} keys: scores {times[0]:.1f} us, probs @ v {times[1]:.1f} us")


if __name__ == "__main__":
    main()
