"""The one-row product's compute rate with W in the last-level cache: `x @ W.T` for one
2816 x 1024 bf16 weight (5.8 MB), 200 times, the best as W's GB/s.

    TGRAD_LIB=... python tools/rowvec_l3.py THREADS"""

from __future__ import annotations

import sys

import tgrad
from gemm_rate import best_seconds  # tools/ is the script's directory, so on sys.path


def main() -> None:
    tgrad.set_num_threads(int(sys.argv[1]))
    n, k = 2816, 1024
    print(f"{n * k * 2 / best_seconds(1, k, n, 200) / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
