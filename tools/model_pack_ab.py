"""A model's decode and prefill, unpacked against packed (from_pretrained(pack_weights=True)),
alternating in one process; the greedy tokens asserted equal.

    python tools/model_pack_ab.py MODEL_DIR [ROUNDS]

Each round: the 64-token prompt's last logits (prefill), then decode tokens/s as the time of
generate(ids, 33) less generate(ids, 1), over 32 tokens. 2 threads.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tgrad
import tgrad.models


def main(path: str, rounds: int) -> None:
    tgrad.set_num_threads(2)
    new = 32
    models = {"unpacked": tgrad.models.from_pretrained(path),
              "packed": tgrad.models.from_pretrained(path, pack_weights=True)}
    vocab = models["packed"].config.vocab_size
    ids = (np.arange(64)[None] * 7 + 3) % vocab
    tokens = [m.generate(ids, 8) for m in models.values()]
    assert np.array_equal(tokens[0], tokens[1])
    decode: dict[str, list[float]] = {k: [] for k in models}
    prefill: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(rounds):
        for name, m in models.items():
            t = time.perf_counter()
            m(ids, logits_to_keep=1, logits_dtype=tgrad.float32).realize()
            prefill[name].append(time.perf_counter() - t)
            t = time.perf_counter()
            m.generate(ids, 1)
            one = time.perf_counter() - t
            t = time.perf_counter()
            m.generate(ids, new + 1)
            decode[name].append(new / (time.perf_counter() - t - one))
    for name in models:
        print(f"{name:8s} decode tokens/s {' '.join(f'{v:.1f}' for v in decode[name])} (median "
              f"{np.median(decode[name]):.1f}); prefill ms {' '.join(f'{v * 1e3:.1f}' for v in prefill[name])}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
