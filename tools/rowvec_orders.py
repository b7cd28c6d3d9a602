"""One-row products (a decoding step's) in both matmul orders, paired and interleaved in one
process: the ~100 M Llama's projection shapes as x @ W.T (column-major B) and x @ W (row-major
B), and its grouped-query attention products at 80 cached positions. Prints each order's best
time and route and the median of the paired block32 / pairwise time ratios.
Run: python tools/rowvec_orders.py [THREADS]   (TGRAD_CPU_ISA=avx2 etc. to force a variant)."""
import time, numpy as np, tgrad, sys
tgrad.set_num_threads(int(sys.argv[1]) if len(sys.argv)>1 else 1)
rng=np.random.default_rng(0)
def T(*s): return tgrad.Tensor.from_numpy(rng.standard_normal(s).astype(np.float32)*0.1)
cases=[]
for (k,n) in [(1024,1024),(1024,256),(1024,2816),(2816,1024),(1024,8192)]:
    x=T(1,k); W=T(n,k)
    cases.append((f"1x{k}x{n} W.T", lambda x=x,W=W: x@W.T)); Wt=T(k,n); cases.append((f"1x{k}x{n} rowB", lambda x=x,Wt=Wt: x@Wt))
# attention at T=80: q [16,1,64] @ K^T (K cache [4,T,64] per kv head, GQA 4)
Tk=80
q=T(4,4,64); Kc=T(4,Tk,64); V=T(4,Tk,64); P=T(4,4,Tk)
cases.append(("q@K^T gqa", lambda: q@Kc.transpose(1,2)))
cases.append(("P@V gqa", lambda: P@V))
for name,f in cases:
    best={}
    for o in ("pairwise","block32"):
        with tgrad.matmul_order(o): f().realize()
    ratios=[]
    for r in range(41):
        t={}
        for o in (("pairwise","block32") if r%2 else ("block32","pairwise")):
            with tgrad.matmul_order(o):
                c=f(); t0=time.perf_counter(); c.realize(); t[o]=time.perf_counter()-t0
        ratios.append(t["block32"]/t["pairwise"])
        for o in t: best[o]=min(best.get(o,1),t[o])
    with tgrad.matmul_order("block32"): r32=f().route
    with tgrad.matmul_order("pairwise"): rpw=f().route
    print(f"{name:18s} pw {best['pairwise']*1e6:8.1f}us ({rpw})  b32 {best['block32']*1e6:8.1f}us ({r32})  median b32/pw {np.median(ratios):.2f}")
