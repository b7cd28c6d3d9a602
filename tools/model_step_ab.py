"""A model's decode step or prefill, two or more libtgrad builds paired (the same Python):

    python tools/model_step_ab.py MODEL_DIR OLD.so,NEW.so THREADS ROUNDS decode
    python tools/model_step_ab.py MODEL_DIR OLD.so,NEW.so THREADS ROUNDS prefill [PROMPT]

decode: greedy steps with the KV cache after a 64-token prompt, as generate runs them (captured
programs: tgrad.models.step), 48 steps a pass, the best of 3
passes per child process, as tokens/s; prefill: a PROMPT-token forward (64) computing the last
position's logits, the best of 5, in ms. The builds alternate round by round."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r'''
import sys, time, numpy as np, tgrad, tgrad.models
from tgrad.models.step import DecodeSteps
tgrad.set_num_threads(int(sys.argv[2]))
model = tgrad.models.from_pretrained(sys.argv[1])
what, prompt_len = sys.argv[3], int(sys.argv[4])
prompt = (np.arange(prompt_len)[None] * 7 + 3) % model.config.vocab_size
best, steps = float("inf"), 48
for _ in range(3 if what == "decode" else 5):
    cache = model.new_cache(prompt_len + steps + 8)
    t = time.perf_counter()
    model(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
    if what == "decode":
        t = time.perf_counter()
        step = DecodeSteps(model, cache)  # as generate decodes: captured programs
        for i in range(steps):
            step(np.array([[5 + i]])).numpy()
    best = min(best, time.perf_counter() - t)
print(steps / best if what == "decode" else best * 1e3)
'''


def main() -> None:
    model, libs, threads, rounds, what = sys.argv[1], sys.argv[2].split(","), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    prompt = sys.argv[6] if len(sys.argv) > 6 else "64"
    got: dict[str, list[float]] = {lib: [] for lib in libs}
    for _ in range(rounds):
        for lib in libs:
            out = subprocess.run([sys.executable, "-c", CHILD, model, threads, what, prompt],
                                 env=dict(os.environ, TGRAD_LIB=lib), capture_output=True, text=True, check=True)
            got[lib].append(float(out.stdout.split()[-1]))
    unit = "tokens/s" if what == "decode" else "ms"
    for lib, values in got.items():
        best = max(values) if what == "decode" else min(values)
        print(f"{lib}: {what}, {threads} threads, " + " ".join(f"{v:.1f}" for v in values) + f"; best {best:.1f} {unit}")


if __name__ == "__main__":
    main()
