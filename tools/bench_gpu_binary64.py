"""PoCL against the CPU for the ops the GPU routes evaluate in binary64 with a bound (float32
transcendental and derivative ops, pow in either dtype; docs/kernels.md, "float32 transcendental
kernels"), with the share of elements each kernel left to the host.
Run from tests/: ../.nox/tests/bin/python ../tools/bench_gpu_binary64.py (needs device "opencl")."""
import time

import numpy as np

import tgrad
from tgrad._ffi import ffi, lib


def best_ms(fn, reps=5):
    best = 1e9
    for _ in range(reps):
        s = time.perf_counter()
        y = fn()
        y.realize()
        best = min(best, time.perf_counter() - s)
        y.release()
    return best * 1e3


def host_count(name, bf16):
    counts = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_F32_COUNT))
    read = lib.tgrad_debug_bf16_slow_path if bf16 else lib.tgrad_debug_f32_slow_path
    read(tgrad.ops.REGISTRY[name].code, counts, int(lib.TGRAD_DEBUG_F32_COUNT))
    return int(counts[int(lib.TGRAD_DEBUG_F32_DEVICE_HOST)])


rng = np.random.default_rng(0)
n = 1 << 20
x = (rng.standard_normal(n) * 2).astype(np.float32)
g = rng.standard_normal(n).astype(np.float32)
cases = [("exp", tgrad.float32, 1), ("log", tgrad.float32, 1), ("sin", tgrad.float32, 1),
         ("tanh", tgrad.float32, 1), ("silu", tgrad.float32, 1), ("gelu", tgrad.float32, 1),
         ("silu_backward", tgrad.float32, 2), ("gelu_backward", tgrad.float32, 2),
         ("pow", tgrad.float32, 2), ("pow", tgrad.bfloat16, 2)]
print(f"{n} elements, best of 5; host: the elements the kernel left to the host")
for name, dt, arity in cases:
    a = np.abs(x) + 0.5 if name in ("log", "pow") else x
    row = [f"{name} ({dt.name})"]
    for dev in ("cpu", "opencl"):
        ops = [tgrad.Tensor.from_numpy(v, dtype=dt, device=dev) for v in (a, g)[:arity]]
        before = host_count(name, dt is tgrad.bfloat16)
        ms = best_ms(lambda: tgrad.ops.apply(name, *ops))
        host = (host_count(name, dt is tgrad.bfloat16) - before) / 5
        row.append(f"{dev} {ms:.2f} ms" + (f" (host {host:.0f})" if dev != "cpu" else ""))
    print(" | ".join(row))
