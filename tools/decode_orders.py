"""Decode speed of one model under both matmul orders, in one process, and the routes of a
decode step's products: `python tools/decode_orders.py MODEL_DIR [THREADS] [STEPS]`
(MODEL_DIR: e.g. the bench's ~100 M Llama, `tgrad.bench.generate.write_model(path)`).
Greedy decoding after a 64-token prompt with a preallocated KV cache; orders alternate per round
so that a neighbour's load falls on both."""

from __future__ import annotations

import collections
import sys
import time

import numpy as np

import tgrad
import tgrad.models

model = tgrad.models.from_pretrained(sys.argv[1])
tgrad.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 24
best: dict[str, float] = {}
routes: dict[str, collections.Counter[str]] = {}
for _round in range(3):
    for order in ("pairwise", "block32"):
        with tgrad.matmul_order(order):
            prompt = (np.arange(64)[None] * 7 + 3) % model.config.vocab_size
            cache = model.new_cache(64 + steps + 8)
            model(prompt, cache=cache, logits_to_keep=1).numpy()
            t0 = time.perf_counter()
            for i in range(steps):
                out = model(np.array([[5 + i]]), cache=cache, logits_to_keep=1)
                if i == steps - 1:
                    plan = out.explain(json=True)
                    routes[order] = collections.Counter(s["route"] for s in plan["steps"]
                                                        if ".gemm" in s["route"] or "rowvec" in s["route"]
                                                        or "skinny" in s["route"])
                out.numpy()
            rate = steps / (time.perf_counter() - t0)
            best[order] = max(best.get(order, 0.0), rate)
for order, rate in best.items():
    print(f"{order}: {rate:.1f} tokens/s (best of 3 rounds); products: {dict(routes[order])}")
print(f"block32 / pairwise: {best['block32'] / best['pairwise']:.2f}")
