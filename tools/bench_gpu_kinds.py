"""PoCL against the CPU for the gather, concat, compare and where kinds (docs/kernels.md).
Run from tests/: ../.nox/tests/bin/python ../tools/bench_gpu_kinds.py (needs device "opencl")."""
import time, numpy as np, tgrad
def t(fn, reps=5):
    best = 1e9
    for _ in range(reps):
        s = time.perf_counter(); y = fn(); y.realize(); best = min(best, time.perf_counter() - s); y.release()
    return best * 1e3
rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 1024)).astype(np.float32)
ids = rng.integers(-4096, 4096, 4096).astype(np.int32)
for dev in ("cpu", "opencl"):
    X = tgrad.Tensor.from_numpy(x, dtype=tgrad.bfloat16, device=dev)
    I = tgrad.Tensor.from_numpy(ids, dtype=tgrad.int32, device=dev)
    print(dev, "take 4096x1024 bf16 by 4096 ids: %.2f ms" % t(lambda: tgrad.take(X, I, axis=0)),
          "| cat 2x[4096,1024] axis 1: %.2f ms" % t(lambda: tgrad.cat([X, X.T.T], 1)),
          "| lt 4096x1024: %.2f ms" % t(lambda: X < X[::-1]),
          "| where: %.2f ms" % t(lambda: tgrad.where(X < 0, X, X[::-1])))
