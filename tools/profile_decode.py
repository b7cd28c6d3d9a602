"""Where a decode step's time goes: `python tools/profile_decode.py MODEL_DIR [STEPS] [--cprofile]`.

Prints, per token of greedy decoding with a preallocated KV cache after a 64-token prompt, run as
generate runs it (captured programs: tgrad.models.step; `--built` builds every step op by op), the
time spent making the lazy graph (the step call) and realizing it in libtgrad
(the steps: the matmuls, attention over the cache, the norms); with --cprofile, the Python
functions by their own time. The weights are packed, as generate's CLI runs them (`--unpacked`:
[out, in]). For the C side run it under `perf record -g` (docs/models.md)."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import numpy as np

import tgrad
import tgrad.models
from tgrad.models.step import DecodeSteps

model = tgrad.models.from_pretrained(sys.argv[1], pack_weights="--unpacked" not in sys.argv)
steps = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 64
prompt = (np.arange(64)[None] * 7 + 3) % model.config.vocab_size
cache = model.new_cache(64 + steps + 8 + 8)
model(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
step = DecodeSteps(model, cache, programs="--built" not in sys.argv)
build = realize = 0.0
for i in range(steps):
    t0 = time.perf_counter()
    out = step(np.array([[5 + i]]))
    t1 = time.perf_counter()
    out.numpy()
    realize += time.perf_counter() - t1
    build += t1 - t0
print(f"per token: build {build / steps * 1e3:.2f} ms, realize {realize / steps * 1e3:.2f} ms "
      f"({steps / (build + realize):.1f} tokens/s)")
if "--cprofile" in sys.argv:
    profile = cProfile.Profile()
    profile.enable()
    for i in range(8):
        step(np.array([[5 + i]])).numpy()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)
