"""An embedding's gradient (take's transpose, the scatter_add kind) on a device, timed, with the
result's hash, so that two libtgrad builds compare by speed and by bytes (docs/kernels.md, "The
gradient's routes"):

    TGRAD_LIB=OLD.so python tools/scatter_add_ab.py VOCAB HIDDEN INDICES [ROUNDS [DEVICE]]
    TGRAD_LIB=NEW.so python tools/scatter_add_ab.py VOCAB HIDDEN INDICES [ROUNDS [DEVICE]]

A [VOCAB, HIDDEN] bf16 weight, INDICES random ones among -VOCAB .. VOCAB - 1 (negative ones count
from the end; repeats sum), a random bf16 gradient [INDICES, HIDDEN]; each round builds the
backward graph and times its realize (the scatter_add kernel and the copy back to the host);
prints the median of ROUNDS (5) after a warm-up and the first 12 hex digits of the result's
sha256. DEVICE: opencl by default."""

from __future__ import annotations

import hashlib
import statistics
import sys
import time

import numpy as np

import tgrad
from tgrad import autograd


def main() -> None:
    vocab, hidden, count = (int(v) for v in sys.argv[1:4])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    dev = sys.argv[5] if len(sys.argv) > 5 else "opencl"
    rng = np.random.default_rng(0)
    w = tgrad.Tensor.from_numpy(np.zeros((vocab, hidden), np.float32), device=dev).bfloat16().requires_grad_()
    ix = tgrad.tensor(rng.integers(-vocab, vocab, count).astype(np.int32), dtype=tgrad.int32, device=dev)
    seed = tgrad.Tensor.from_numpy(rng.standard_normal((count, hidden)).astype(np.float32), device=dev).bfloat16()
    seed.realize()

    def once() -> tuple[float, np.ndarray]:
        (g,) = autograd.grads_of([tgrad.take(w, ix, 0)], [seed], [w])
        start = time.perf_counter()
        out = g.numpy()
        return time.perf_counter() - start, out

    once()
    runs = [once() for _ in range(rounds)]
    digest = hashlib.sha256(runs[-1][1].tobytes()).hexdigest()[:12]
    print(f"scatter_add [{vocab}, {hidden}] from {count} indices on {dev}: median "
          f"{statistics.median(t for t, _ in runs) * 1e3:.1f} ms; result sha256 {digest}")


if __name__ == "__main__":
    main()
