"""A prefill loop to profile: `perf record -D 5000 -g python tools/profile_prefill.py MODEL_DIR [TOKENS] [CALLS] [--packed]`.

Loads the model, warms up twice, then runs CALLS (default 5) forwards of a TOKENS-token prompt
(default 64) keeping the last position's float32 logits, as the model bench's prefill does, and
prints the median and best time. perf's delay (-D, milliseconds) skips the checkpoint's load.
--packed: the weights packed (pack_weights=True), as the model bench and generate's CLI run them."""

from __future__ import annotations

import sys
import time

import numpy as np

import tgrad
import tgrad.models

args = [a for a in sys.argv[1:] if a != "--packed"]
model = tgrad.models.from_pretrained(args[0], pack_weights="--packed" in sys.argv)
tokens = int(args[1]) if len(args) > 1 else 64
calls = int(args[2]) if len(args) > 2 else 5
ids = (np.arange(tokens)[None] * 7 + 3) % model.config.vocab_size
for _ in range(2):
    model(ids, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
times = []
for _ in range(calls):
    t0 = time.perf_counter()
    model(ids, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
    times.append(time.perf_counter() - t0)
print(f"prefill of {tokens} tokens: median {1e3 * np.median(times):.1f} ms, best {1e3 * min(times):.1f} ms")
