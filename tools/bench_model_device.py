"""The Llama of tests/python/model_dirs.py on a device against the CPU, paired in one process
(docs/models.md, "On a GPU device"), and the renderer's share of a device forward.

Run from tests/python (needs device "opencl", or pass another):
    ../../.nox/tests/bin/python ../../tools/bench_model_device.py [device] [layers hidden vocab]

Prints, per shape: the forward's median time on the CPU and on the device (warm: every kernel
compiled), the steps of one forward, and the median time to render all of them (the text every
device realize renders before it looks up the compiled program by the text's hash).
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tgrad
import tgrad.models
from tgrad import render as R

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from model_dirs import model_dir  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "opencl"
layers, hidden, vocab = (int(v) for v in sys.argv[2:5]) if len(sys.argv) > 4 else (2, 32, 96)
heads = max(4, hidden // 32)
path = model_dir(Path(tempfile.mkdtemp()) / "m", num_hidden_layers=layers, hidden_size=hidden, vocab_size=vocab,
                 intermediate_size=3 * hidden, num_attention_heads=heads, num_key_value_heads=heads // 2,
                 head_dim=hidden // heads)
cpu = tgrad.models.from_pretrained(path)
gpu = tgrad.models.from_pretrained(path, device=device)


def median_ms(fn, reps: int = 15) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


for batch, length in ((1, 1), (1, 16), (4, 64)):
    ids = np.random.default_rng(0).integers(0, vocab, (batch, length))
    assert gpu(ids).numpy().tobytes() == cpu(ids).numpy().tobytes()  # compiles every kernel, checks the bytes
    t_cpu = median_ms(lambda: cpu(ids).numpy())
    t_dev = median_ms(lambda: gpu(ids).numpy())
    pending = gpu.model(tgrad.Tensor.from_numpy(ids.astype(np.int32), dtype=tgrad.int32, device=device))
    steps = len(tgrad.explain(pending, json=True)["steps"])
    lang = {"opencl": "opencl", "cuda": "cuda", "metal": "msl"}[device]
    t_render = median_ms(lambda: [R.render_tensor(pending, None, lang, step=i) for i in range(steps)], reps=7)
    print(f"{device} layers={layers} hidden={hidden} vocab={vocab} ids {batch}x{length}: forward cpu {t_cpu:.2f} ms, "
          f"{device} {t_dev:.2f} ms ({t_dev / t_cpu:.1f}x); {steps} steps rendered in {t_render:.2f} ms "
          f"({1e3 * t_render / steps:.0f} us a step, {100 * t_render / t_dev:.0f}% of the device forward)")
