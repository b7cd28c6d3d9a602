"""The norms' backward, measured (docs/numerics.md, "rms_norm_backward, layer_norm_backward").

  python tools/bench_norm_backward.py op      # the dx op vs the float32 composition it replaced
  python tools/bench_norm_backward.py train   # ms per training step of bench --train's Llama case

`op`: bf16 x [512, 256], a float32 g and a bf16 weight (a Llama block's norm rows), one thread;
tgrad.rms_norm_backward / layer_norm_backward against the old vjp rule's composition (the same
correctly rounded float32 ops it recorded: casts, x^2, mean, + eps, rsqrt, products, row sums,
the difference, then the cast to the chain dtype), timed interleaved in one process (median of the
paired ratios), and the exact path's count on these rows. `train`: the Llama case of
`python -m tgrad bench --train` (tgrad's step alone: no torch needed) with whatever libtgrad
TGRAD_LIB names; run it interleaved against two builds to compare them (docs/autograd.md has
the command and the numbers).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tgrad

EPS = 1e-5


def composed(x, g, w, layer: bool, n: int):
    """The float32 composition the vjp rule made before the op existed (vjp_rows.c's old norm_input)."""
    X, G, W = x.float(), g.float(), w.float()
    D = X - tgrad.mean(X, -1, keepdims=True) if layer else X
    rinv = tgrad.rsqrt(tgrad.mean(D * D, -1, keepdims=True) + EPS)
    gw = G * W
    if layer:
        xh = D * rinv
        r = rinv * ((gw - tgrad.mean(gw, -1, keepdims=True)) - xh * tgrad.mean(gw * xh, -1, keepdims=True))
    else:
        c = rinv * rinv * rinv * tgrad.sum(gw * X, -1, keepdims=True) / float(n)
        r = rinv * gw - X * c
    return r.to(g.dtype)


def op_bench(rounds: int = 30) -> None:
    rng = np.random.default_rng(0)
    rows, n = 512, 256
    x = tgrad.Tensor.from_numpy(rng.standard_normal((rows, n)).astype(np.float32), dtype="bfloat16")
    g = tgrad.Tensor.from_numpy(rng.standard_normal((rows, n)).astype(np.float32), dtype="float32")
    w = tgrad.Tensor.from_numpy(rng.uniform(0.5, 1.5, n).astype(np.float32), dtype="bfloat16")
    tgrad.set_num_threads(1)
    for layer, name in ((False, "rms_norm"), (True, "layer_norm")):
        op = tgrad.layer_norm_backward if layer else tgrad.rms_norm_backward
        before = tgrad.norms.slow_path_counts()
        runs = {"op": lambda: op(x, g, n, w, EPS).realize(), "composed": lambda: composed(x, g, w, layer, n).realize()}
        for f in runs.values():
            f(), f()
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(rounds):
            for k, f in runs.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        after = tgrad.norms.slow_path_counts()
        ratios = [c / o for c, o in zip(times["composed"], times["op"])]
        print(f"{name}_backward [{rows}, {n}] bf16 x, f32 g, 1 thread: op {statistics.median(times['op']) * 1e3:.2f} ms, "
              f"composed {statistics.median(times['composed']) * 1e3:.2f} ms, composed/op {statistics.median(ratios):.2f} "
              f"(median of {rounds} paired rounds); exact path: {after[1] - before[1]} of {after[0] - before[0]} elements")


def train_bench(steps: int = 20) -> None:
    from tgrad.bench.train import CASES, tgrad_step, write_checkpoint

    case = CASES[2]
    tgrad.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        step = tgrad_step(case, write_checkpoint(Path(tmp) / "m", case, 0), 0)
        step(), step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    print(f"{case.label}, 1 thread: {statistics.median(times) * 1e3:.1f} ms per step (median of {steps}; "
          f"{tgrad.library_path()})")


if __name__ == "__main__":
    {"op": op_bench, "train": train_bench}[sys.argv[1] if len(sys.argv) > 1 else "op"]()
