"""A model's products one weight at a time, grouped by the weight's name: `(x @ W.T).realize()` for
every weight but the embedding table, x of ROWS rows (1: a decode step's products; 64: a
prefill's), in the model's order, 15 passes; the median time per group and its weights' GB/s.

    python tools/products_by_weight.py MODEL_DIR THREADS [ROWS [PASSES]]"""

from __future__ import annotations

import collections
import sys
import time

import numpy as np

import tgrad
import tgrad.models


def main() -> None:
    model_dir, threads = sys.argv[1], int(sys.argv[2])
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    passes = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    tgrad.set_num_threads(threads)
    model = tgrad.models.from_pretrained(model_dir)
    weights = [(n, w) for n, w in model.named_parameters() if w.ndim == 2 and "embed" not in n]
    rng = np.random.default_rng(0)
    xs = {w.shape[1]: tgrad.Tensor.from_numpy(rng.standard_normal((rows, w.shape[1])).astype(np.float32)).bfloat16()
          .realize() for _, w in weights}
    work = [(name.split(".")[-2], xs[w.shape[1]], w.T, 2 * w.shape[0] * w.shape[1]) for name, w in weights]
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(passes):
        spent: dict[str, float] = collections.defaultdict(float)
        start = time.perf_counter()
        for group, x, wt, _ in work:
            t = time.perf_counter()
            (x @ wt).realize()
            spent[group] += time.perf_counter() - t
        for group, s in spent.items():
            times[group].append(s)
        times["all"].append(time.perf_counter() - start)
    nbytes: dict[str, int] = collections.defaultdict(int)
    for group, _, _, b in work:
        nbytes[group] += b
        nbytes["all"] += b
    print(f"{model_dir}: {rows} rows, {threads} threads, median of {passes} passes")
    for group, t in times.items():
        median = float(np.median(t))
        print(f"{group:10s} {median * 1e3:8.3f} ms  {nbytes[group] / median / 1e9:6.1f} GB/s")


if __name__ == "__main__":
    main()
