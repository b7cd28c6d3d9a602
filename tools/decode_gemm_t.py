"""A model's decoding steps with route gemm_t on and off (tgrad_debug_cpu_blocking's
TGRAD_DEBUG_CPU_NO_GEMM_T), alternating token by token in one process: the median time per token
of each and their ratio. The float32 logits' product (one row times the embedding's transpose)
takes gemm_t on AMX; with it off, the packed route packs the whole embedding every token.
Run: python tools/decode_gemm_t.py MODEL_DIR THREADS"""
import sys, time, numpy as np, tgrad, tgrad.models
from tgrad._ffi import lib
tgrad.set_num_threads(int(sys.argv[2]))
m = tgrad.models.from_pretrained(sys.argv[1])
prompt = (np.arange(64)[None] * 7 + 3) % m.config.vocab_size
cache = m.new_cache(64 + 200)
m(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
t = {0: [], 2: []}
tok = np.array([[5]])
for i in range(80):
    flag = 2 if i % 2 else 0
    lib.tgrad_debug_cpu_blocking(0, 0, flag)
    t0 = time.perf_counter()
    out = m(tok, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
    t[flag].append(time.perf_counter() - t0)
    tok = np.array([[int(out.reshape(-1).argmax())]])
lib.tgrad_debug_cpu_blocking(0, 0, 0)
print(f"gemm_t on: {np.median(t[0])*1e3:.2f} ms/token, off: {np.median(t[2])*1e3:.2f} ms/token, ratio {np.median(t[0])/np.median(t[2]):.3f}")
