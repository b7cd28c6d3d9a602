"""PoCL against the CPU for batched matmul and the random draws (docs/kernels.md), paired and
interleaved in one process: per repetition the CPU route then the PoCL kernel, each timed from the
node made to it realized (inputs resident, output left on its device), after one warm-up each
(the kernel compiled). Run from tests/: ../.nox/tests/bin/python ../tools/bench_gpu_batched_random.py"""
import statistics, sys, time
import numpy as np, tgrad

def run(fn):
    s = time.perf_counter(); y = fn(); y.realize(); d = time.perf_counter() - s; y.release(); return d

def pair(name, make, reps):
    for dev in ("cpu", "opencl"):  # warm: compile the kernel, fill the caches
        run(make(dev))
    t = {"cpu": [], "opencl": []}
    fns = {d: make(d) for d in t}
    for _ in range(reps):
        for d in ("cpu", "opencl"):
            t[d].append(run(fns[d]))
    c, o = statistics.median(t["cpu"]), statistics.median(t["opencl"])
    ratios = sorted(a / b for a, b in zip(t["opencl"], t["cpu"]))
    print(f"| {name} | {c*1e3:.3f} ms | {o*1e3:.3f} ms | {statistics.median(ratios):.1f}x [{ratios[0]:.1f}, {ratios[-1]:.1f}] |")
    sys.stdout.flush()

rng = np.random.default_rng(0)
def bf(shape): return rng.standard_normal(shape).astype(np.float32)
A, B, W = bf((16, 64, 128)), bf((16, 128, 64)), bf((128, 64))
held = {}
def tensors(dev):
    if dev not in held:
        held[dev] = [tgrad.Tensor.from_numpy(x, device=dev) for x in (A, B, W)]
    return held[dev]
print("| kind | CPU route (median) | PoCL kernel (median) | PoCL / CPU, median [min, max] of paired ratios |")
print("|---|---|---|---|")
for order in ("pairwise", "block32"):
    def mk(dev, order=order):
        a, b, _ = tensors(dev)
        def f():
            with tgrad.matmul_order(order):
                return a @ b
        return f
    pair(f"batched matmul [16, 64, 128] @ [16, 128, 64], {order}", mk, 15)
def mk_bc(dev):
    a, _, w = tensors(dev)
    return lambda: a @ w
pair("batched matmul [16, 64, 128] @ [128, 64] (b broadcast)", mk_bc, 15)
def mk_rand(dev, dt=tgrad.bfloat16):
    g = tgrad.random.Generator(0)
    return lambda: g.rand(1 << 20, dtype=dt, device=dev)
pair("rand 2^20 bf16", mk_rand, 15)
pair("rand 2^20 float32", lambda dev: mk_rand(dev, tgrad.float32), 15)
def mk_uni(dev):
    g = tgrad.random.Generator(0)
    return lambda: g.uniform(-0.1, 0.1, 1 << 20, device=dev)
pair("uniform(-0.1, 0.1) 2^20 bf16", mk_uni, 15)
def mk_int(dev):
    g = tgrad.random.Generator(0)
    return lambda: g.randint(0, 1000, 1 << 20, device=dev)
pair("randint(0, 1000) 2^20", mk_int, 15)
