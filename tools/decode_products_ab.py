"""A decode step's products alone, two or more libtgrad builds paired: `(x @ W.T).realize()` for
every weight of a model but its embedding table (one row x, bf16; ROWS rows for a prefill's
products), the best of 15 passes per child process, the libraries alternating round by round;
reported as the weights' GB/s.

    python tools/decode_products_ab.py MODEL_DIR OLD.so,NEW.so THREADS [ROUNDS [ROWS]]"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r'''
import sys, time, numpy as np, tgrad, tgrad.models
tgrad.set_num_threads(int(sys.argv[2]))
m = tgrad.models.from_pretrained(sys.argv[1])
ws = [w for n, w in m.named_parameters() if w.ndim == 2 and "embed" not in n]
rng = np.random.default_rng(0)
x = {w.shape[1]: tgrad.Tensor.from_numpy(rng.standard_normal((int(sys.argv[3]), w.shape[1])).astype(np.float32)).bfloat16()
     for w in ws}
pairs = [(x[w.shape[1]], w.T) for w in ws]
nbytes = sum(2 * w.shape[0] * w.shape[1] for w in ws)
best = float("inf")
for _ in range(15):
    t = time.perf_counter()
    for a, wt in pairs:
        (a @ wt).realize()
    best = min(best, time.perf_counter() - t)
print(nbytes / best / 1e9)
'''


def main() -> None:
    model, libs, threads = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    rows = sys.argv[5] if len(sys.argv) > 5 else "1"
    rates: dict[str, list[float]] = {lib: [] for lib in libs}
    for _ in range(rounds):
        for lib in libs:
            out = subprocess.run([sys.executable, "-c", CHILD, model, threads, rows], capture_output=True, text=True,
                                 env=dict(os.environ, TGRAD_LIB=lib), check=True)
            rates[lib].append(float(out.stdout.split()[-1]))
    for lib, r in rates.items():
        r.sort()
        print(f"{lib}: {threads} threads, {rows} rows, GB/s median {r[len(r) // 2]:.2f}, best {r[-1]:.2f} ({len(r)} rounds)")


if __name__ == "__main__":
    main()
