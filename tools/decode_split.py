"""Where a decode step of tgrad.models goes: building the graph (Python and libtgrad's node
calls) against realizing it, per token, wall and process CPU time.

    python tools/decode_split.py MODEL_DIR THREADS [TOKENS]

Prefills a 64-token prompt, then times TOKENS (default 100) single-token forwards with the KV
cache, greedy: `model.forward(token, cache)` (building) and `.numpy()` of its logits (realizing)
apart. CPU time counts every thread of the process (a waiting pool worker's spin too)."""

from __future__ import annotations

import sys
import time

import numpy as np

import tgrad
import tgrad.models


def main() -> None:
    path, threads = sys.argv[1], int(sys.argv[2])
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    tgrad.set_num_threads(threads)
    model = tgrad.models.from_pretrained(path)
    ids = (np.arange(64)[None] * 7 + 3) % model.config.vocab_size
    cache = model.new_cache(64 + tokens + 8)
    step = model(ids, cache, logits_to_keep=1, logits_dtype=tgrad.float32)
    tok = np.argmax(step.numpy()[:, -1, :], -1)
    build = run = build_cpu = run_cpu = 0.0
    for _ in range(tokens):
        a, ca = time.perf_counter(), time.process_time()
        step = model(tok[:, None], cache, logits_to_keep=1, logits_dtype=tgrad.float32)
        b, cb = time.perf_counter(), time.process_time()
        logits = step.numpy()[:, -1, :]
        c, cc = time.perf_counter(), time.process_time()
        tok = np.argmax(logits, -1)
        build, run, build_cpu, run_cpu = build + b - a, run + c - b, build_cpu + cb - ca, run_cpu + cc - cb
    per = 1e3 / tokens
    print(f"threads {threads}: building {build * per:.2f} ms (cpu {build_cpu * per:.2f}), "
          f"realizing {run * per:.2f} ms (cpu {run_cpu * per:.2f}) a token")


if __name__ == "__main__":
    main()
