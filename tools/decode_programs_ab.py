"""Decode steps built op by op against decode steps run as captured programs, paired in one
process (the same library and Python):

    python tools/decode_programs_ab.py MODEL_DIR [THREADS [ROUNDS [DEVICE]]]

Each round: a 64-token prompt into a cache of 120 positions, then 48 greedy-shaped steps each way
(tgrad.models.step.DecodeSteps, or model.forward with the cache), tokens/s and the Python time per
step before the realize ("build"). DEVICE: where the model runs (default cpu; on "opencl" a step
built op by op compiles the kernels whose text holds the cache length, a program's are the same
for 32 positions)."""

from __future__ import annotations

import sys
import time

import numpy as np

import tgrad
import tgrad.models
from tgrad.models.step import DecodeSteps


def main() -> None:
    model_dir = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    tgrad.set_num_threads(threads)
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    m = tgrad.models.from_pretrained(model_dir, device=device)
    prompt = (np.arange(64)[None] * 7 + 3) % m.config.vocab_size
    for _ in range(rounds):
        for mode in ("ops", "program"):
            cache = m.new_cache(64 + 56)
            m(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
            steps = DecodeSteps(m, cache, programs=mode == "program")
            build, start = 0.0, time.perf_counter()
            for i in range(48):
                t = time.perf_counter()
                out = steps(np.array([[5 + i]]))
                build += time.perf_counter() - t
                out.numpy()
            took = time.perf_counter() - start
            print(f"{mode:8s} {48 / took:6.1f} tokens/s, build {build / 48 * 1e3:.2f} ms/step")


if __name__ == "__main__":
    main()
