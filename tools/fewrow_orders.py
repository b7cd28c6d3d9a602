"""Few-row products (2-16 rows: a small batch's decoding step) in both matmul orders, paired and
interleaved in one process, over x @ W.T (column-major B) and x @ W (row-major B); prints each
order's best time and route and the median of the paired block32 / pairwise ratios.
Run: python tools/fewrow_orders.py [THREADS]   (TGRAD_CPU_ISA=avx2 etc. to force a variant)."""
import time, numpy as np, tgrad, sys
tgrad.set_num_threads(int(sys.argv[1]) if len(sys.argv)>1 else 2)
rng=np.random.default_rng(0)
def T(*s): return tgrad.Tensor.from_numpy(rng.standard_normal(s).astype(np.float32)*0.1)
for (m,k,n) in [(4,4096,4096),(16,4096,4096),(16,1024,2816)]:
    x=T(m,k); W=T(n,k); Wt=T(k,n)
    for lab,f in (("W.T",lambda: x@W.T),("rowB",lambda: x@Wt)):
        best={}; ratios=[]
        for o in ("pairwise","block32"):
            with tgrad.matmul_order(o): f().realize()
        for r in range(15):
            t={}
            for o in (("pairwise","block32") if r%2 else ("block32","pairwise")):
                with tgrad.matmul_order(o):
                    c=f(); t0=time.perf_counter(); c.realize(); t[o]=time.perf_counter()-t0
            ratios.append(t["block32"]/t["pairwise"])
            for o in t: best[o]=min(best.get(o,1),t[o])
        with tgrad.matmul_order("block32"): r32=f().route
        with tgrad.matmul_order("pairwise"): rpw=f().route
        print(f"{m}x{k}x{n} {lab}: pw {best['pairwise']*1e3:.3f}ms ({rpw}) b32 {best['block32']*1e3:.3f}ms ({r32}) median b32/pw {np.median(ratios):.2f}", flush=True)
