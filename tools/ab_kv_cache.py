"""A/B per decode step: the cat-grown KV cache (before issue 35's slice_scatter) against the preallocated one,
alternating, the median of step times, logits bytes checked equal.

    python tools/ab_kv_cache.py MODEL_DIR STEPS ROUNDS PROMPT_LENGTH
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import tgrad
import tgrad.models
from tgrad.models.llama import KVCache
from tgrad.shape_ops import cat


class CatCache(KVCache):
    """The cache before issue 35's in-place write: each step a tgrad.cat of the old one and the new positions."""

    def append(self, layer: int, k: Any, v: Any) -> Any:
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None:
            k, v = cat([old_k, k], dim=2), cat([old_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


m = tgrad.models.from_pretrained(sys.argv[1])
steps, rounds, plen = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prompt = (np.arange(plen)[None] * 7 + 3) % m.config.vocab_size
L = m.config.num_hidden_layers
kinds = {"cat": lambda: CatCache(L), "slice_scatter": lambda: KVCache(L, plen + steps)}
res: dict[str, list[float]] = {k: [] for k in kinds}
logits: dict[str, list[bytes]] = {}
for r in range(rounds):
    for name, make in kinds.items():
        cache = make()
        m(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
        got = []
        for i in range(steps):
            t = time.perf_counter()
            out = m(np.array([[5 + i]]), cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
            res[name].append(time.perf_counter() - t)
            got.append(out.tobytes())
        logits[name] = got
assert logits["cat"] == logits["slice_scatter"]
for name, v in res.items():
    print(f"prompt {plen}: {name:14s} per token median {np.median(v) * 1e3:.2f} ms ({1/np.median(v):.1f} tok/s), "
          f"p10 {np.percentile(v, 10) * 1e3:.2f} ms, {len(v)} steps; logits bytes equal")
