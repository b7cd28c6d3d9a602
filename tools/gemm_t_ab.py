"""Route gemm_t against the packed route for x @ W.T (a few rows times a column-major B, block32
order on AMX), paired and interleaved in one process: the packed route is forced with
tgrad_debug_cpu_blocking's TGRAD_DEBUG_CPU_NO_GEMM_T flag; both results' bytes are compared.
Prints each route's best time and the median of the paired gemm_t / gemm ratios.
Run: python tools/gemm_t_ab.py [THREADS] [ROWS,ROWS,...] [K] [N] [REPEATS]"""
import sys
import time

import numpy as np

import tgrad
from tgrad._ffi import lib

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rows = [int(r) for r in sys.argv[2].split(",")] if len(sys.argv) > 2 else [2, 16, 64, 128, 256]
k = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
n = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 12
tgrad.set_num_threads(threads)
rng = np.random.default_rng(0)
w_t = tgrad.Tensor.from_numpy(rng.standard_normal((n, k)).astype(np.float32)).T


def timed(x: tgrad.Tensor, flags: int) -> tuple[float, str, bytes]:
    lib.tgrad_debug_cpu_blocking(0, 0, flags)
    try:
        c = tgrad.matmul(x, w_t, order="block32")
        t0 = time.perf_counter()
        c.realize()
        return time.perf_counter() - t0, c.route, c.numpy().tobytes()
    finally:
        lib.tgrad_debug_cpu_blocking(0, 0, 0)


for m in rows:
    x = tgrad.Tensor.from_numpy(rng.standard_normal((m, k)).astype(np.float32))
    best: dict[str, float] = {}
    route: dict[str, str] = {}
    ratios = []
    same = True
    for r in range(repeats + 1):
        t = {}
        for name in (("gemm_t", "gemm") if r % 2 else ("gemm", "gemm_t")):
            t[name], route[name], out = timed(x, 0 if name == "gemm_t" else lib.TGRAD_DEBUG_CPU_NO_GEMM_T)
            if r == 0:
                route[name + " bytes"] = out  # type: ignore[assignment]
        if r == 0:
            same = route.pop("gemm_t bytes") == route.pop("gemm bytes")  # type: ignore[comparison-overlap]
            continue
        ratios.append(t["gemm_t"] / t["gemm"])
        for name in t:
            best[name] = min(best.get(name, 1e9), t[name])
    print(f"{m}x{k}x{n} {threads} threads: {route['gemm']} {best['gemm'] * 1e3:.3f} ms, {route['gemm_t']} "
          f"{best['gemm_t'] * 1e3:.3f} ms, median gemm_t/gemm {np.median(ratios):.3f}, same bytes {same}", flush=True)
