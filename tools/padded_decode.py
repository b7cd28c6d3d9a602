"""Greedy decoding of a batch of 4 prompts: equal lengths (no mask) against left-padded prompts of
64, 40, 17 and 5 tokens (attention_mask), paired and interleaved in one process, on a random Llama
(hidden 512, 4 layers, 8 heads, 4 KV heads, vocab 8192). Prints each one's prefill time and decode
time per step (medians of the rounds). docs/models.md, "Batches of prompts of different lengths".

    python tools/padded_decode.py [ROUNDS]
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time

import numpy as np

import tgrad
import tgrad.models
import tgrad.safetensors

DOC = {"architectures": ["LlamaForCausalLM"], "vocab_size": 8192, "hidden_size": 512, "intermediate_size": 1408,
       "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "rms_norm_eps": 1e-5,
       "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
STEPS = 32


def main() -> None:
    import json

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    path = pathlib.Path(tempfile.mkdtemp())
    (path / "config.json").write_text(json.dumps(DOC))
    gen = tgrad.random.Generator(0)
    shapes = tgrad.models.expected_weights(tgrad.models.config_from_dict(DOC))
    tgrad.safetensors.save(path / "model.safetensors", {n: gen.randn(*s) * 0.05 for n, s in shapes.items()})
    model = tgrad.models.from_pretrained(path)
    ids = np.random.default_rng(0).integers(0, DOC["vocab_size"], (4, 64))
    mask = np.ones_like(ids)
    for r, n in enumerate([64, 40, 17, 5]):
        mask[r, :64 - n] = 0

    def run(padded: bool) -> tuple[float, float]:
        m = mask if padded else None
        t0 = time.perf_counter()
        model.generate(ids, 1, attention_mask=m)
        t1 = time.perf_counter()
        model.generate(ids, STEPS + 1, attention_mask=m)
        t2 = time.perf_counter()
        return t1 - t0, (t2 - t1 - (t1 - t0)) / STEPS

    times: dict[str, list[tuple[float, float]]] = {"equal lengths": [], "left-padded": []}
    for _ in range(rounds):
        for name in times:
            times[name].append(run(name == "left-padded"))
    for name, got in times.items():
        a = np.array(got)
        print(f"{name}: prefill {1e3 * np.median(a[:, 0]):.1f} ms, decode {1e3 * np.median(a[:, 1]):.2f} ms/step")


if __name__ == "__main__":
    main()
