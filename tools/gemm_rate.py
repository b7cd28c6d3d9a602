"""One product's rate: `x @ W.T` for x [M, K] and W [N, K] (bf16, random), the best of 30, in
GFLOP/s; compare builds by running it under each (`TGRAD_LIB=...`).

    python tools/gemm_rate.py THREADS MxKxN"""

from __future__ import annotations

import sys
import time

import tgrad


def best_seconds(m: int, k: int, n: int, rounds: int) -> float:
    """The fastest of `rounds` realized products x @ W.T, x [m, k] and W [n, k] random bf16."""
    w = tgrad.randn(n, k).bfloat16().realize()
    x = tgrad.randn(m, k).bfloat16().realize()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        (x @ w.T).realize()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    tgrad.set_num_threads(int(sys.argv[1]))
    m, k, n = map(int, sys.argv[2].split("x"))
    print(f"{2 * m * n * k / best_seconds(m, k, n, 30) / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
