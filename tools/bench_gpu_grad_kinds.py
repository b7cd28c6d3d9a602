"""PoCL against the CPU for the gradient's kinds: place, scatter_add and optim_step (docs/kernels.md,
"The gradient's routes"). Each kind's fresh node realized, CPU and PoCL interleaved, 15 pairs after
a warm-up (the kernel compiled); prints a markdown row per kind: the medians and the per-pair
ratio's median [min, max]. Run: TGRAD_LIB=... PYTHONPATH=bindings/python python
tools/bench_gpu_grad_kinds.py (needs device "opencl")."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import tgrad
from tgrad import autograd
from tgrad.optim import _kernel


def place(dev: str) -> Callable[[], object]:
    x = tgrad.Tensor.from_numpy(np.zeros((1024, 1024), np.float32), dtype=tgrad.bfloat16, device=dev).requires_grad_()
    seed = tgrad.Tensor.from_numpy(np.ones((1024, 512), np.float32), dtype=tgrad.bfloat16, device=dev)
    return lambda: autograd.grads_of([x.T[:, ::2]], [seed], [x])[0].realize()


def scatter_add(dev: str) -> Callable[[], object]:
    w = tgrad.Tensor.from_numpy(np.zeros((1000, 256), np.float32), dtype=tgrad.bfloat16, device=dev).requires_grad_()
    ix = tgrad.tensor(np.random.default_rng(0).integers(0, 1000, 512).astype(np.int32), dtype=tgrad.int32, device=dev)
    seed = tgrad.Tensor.from_numpy(np.ones((512, 256), np.float32), dtype=tgrad.bfloat16, device=dev)
    return lambda: autograd.grads_of([tgrad.take(w, ix, 0)], [seed], [w])[0].realize()


def optim_step(dev: str) -> Callable[[], object]:
    ins = [tgrad.Tensor.from_numpy(np.abs(np.random.default_rng(k).standard_normal((1024, 1024))).astype(np.float32),
                                   dtype=tgrad.float32, device=dev) for k in range(4)]
    scalars = [0.999, 0.1, -0.9, 0.999, 1e-3, 0.03, 1e-8, -1e-3]
    return lambda: _kernel.step(_kernel.ADAMW, 0, _kernel.DECAY, ins, scalars).realize()


KINDS = [("place [1024, 1024] bf16 (x.T[:, ::2]'s gradient)", place),
         ("scatter_add [1000, 256] bf16, 512 indices", scatter_add),
         ("optim_step AdamW, a [1024, 1024] parameter", optim_step)]

if __name__ == "__main__":
    for name, make in KINDS:
        on_cpu, on_pocl = make("cpu"), make("opencl")
        on_cpu(), on_pocl()
        c, p = [], []
        for _ in range(15):
            for fn, times in ((on_cpu, c), (on_pocl, p)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        r = np.array(p) / np.array(c)
        print(f"| {name} | {np.median(c) * 1e3:.2f} ms | {np.median(p) * 1e3:.2f} ms | "
              f"{np.median(r):.1f}x [{r.min():.1f}, {r.max():.1f}] |")
