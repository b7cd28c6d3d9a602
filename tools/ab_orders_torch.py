"""Paired, interleaved in one process: tgrad pairwise, tgrad block32 (AMX where the CPU has it) and torch
(oneDNN) bf16 products, best of N per shape, 2 threads by default (docs/performance.md, "The AMX kernel").
Run: python tools/ab_orders_torch.py [threads]  (needs torch)."""
import time, numpy as np, tgrad, torch, sys
th=int(sys.argv[1]) if len(sys.argv)>1 else 2
torch.set_num_threads(th); tgrad.set_num_threads(th)
shapes=[(2048,2048,2048),(1024,1024,1024),(127,255,511),(512,4096,4096),(512,1024,4096),(512,4096,1024),(16,4096,4096),(4096,4096,4096),(64,64,64)]
for (m,k,n) in shapes:
    rng=np.random.default_rng(0)
    a=rng.standard_normal((m,k)).astype(np.float32); b=rng.standard_normal((k,n)).astype(np.float32)
    A=tgrad.Tensor.from_numpy(a); B=tgrad.Tensor.from_numpy(b)
    ta=torch.from_numpy(a).bfloat16(); tb=torch.from_numpy(b).bfloat16()
    fns={'pair':lambda: tgrad.matmul(A,B,order='pairwise').realize(),'b32':lambda: tgrad.matmul(A,B,order='block32').realize(),'torch':lambda: ta@tb}
    reps = 4 if m*k*n>1e10 else 12 if m*k*n > 1e9 else 50
    best={kk:1e9 for kk in fns}
    for f in fns.values(): f()
    for _ in range(reps):
        for kk,f in fns.items():
            t=time.perf_counter(); f(); best[kk]=min(best[kk],time.perf_counter()-t)
    fl=2*m*k*n
    print(f"{m}x{k}x{n}: " + "  ".join(f"{kk} {v*1e3:.3f}ms {fl/v/1e9:.0f}GF/s" for kk,v in best.items()) + f"  torch/b32 {best['torch']/best['b32']:.2f}", flush=True)
