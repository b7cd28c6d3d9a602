"""tgrad's decode step against llama.cpp's in one process, alternating in blocks of 8 steps:

    python tools/decode_vs_llamacpp.py MODEL_DIR [PROMPT [STEPS [THREADS]]]

The model bench (`python -m tgrad bench --model`) runs each peer in its own child process, a round
at a time; on a machine whose other tenants move its memory bandwidth by a third within minutes,
a round's median says as much about the minute as about the peer. Here both decode the same
PROMPT-token prompt (default 512) in one process: tgrad packed, through captured programs
(tgrad.models.step, as generate runs it), and llama.cpp (llama-cpp-python) on the bf16 GGUF that
the bench writes. Then STEPS (default 200) steps each, in blocks of 8 steps of one library then 8
of the other, each block after a 20 ms pause (the other library's idle threads stop spinning) and
a first step not counted (it wakes the library's threads); the token fed to each is its own
greedy choice. A block counts its mean step (tgrad's periodic recapture of
its program, every 32 steps, included). Prints the medians over the blocks and the median of the
per-pair ratios (a tgrad block and the llama.cpp block after it); and after each pair a block of
libtgrad's read probe over the weights a step reads (as the bench's), so each decode's share of
the machine's read rate is paired too.
Needs llama-cpp-python and gguf (the bench venv)."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
import time
from pathlib import Path

import numpy as np

import tgrad
import tgrad.models
from tgrad._ffi import ffi, lib
from tgrad.bench.gguf_export import write_gguf
from tgrad.errors import _check
from tgrad.models.step import DecodeSteps

BLOCK = 8  # steps of one library in a row; the first of each block (waking its threads) is not counted


def _block_mean(run: Callable[[], None]) -> float:
    """The mean time of BLOCK calls of run, after a 20 ms pause and one call not counted."""
    time.sleep(0.02)
    block = []
    for _ in range(BLOCK + 1):
        t = time.perf_counter()
        run()
        block.append(time.perf_counter() - t)
    return float(np.mean(block[1:]))


def main() -> None:
    path = Path(sys.argv[1])
    prompt = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    import llama_cpp

    tgrad.set_num_threads(threads)
    model = tgrad.models.from_pretrained(path, pack_weights=True)
    ids = (np.arange(prompt)[None] * 7 + 3) % model.config.vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        llm = llama_cpp.Llama(model_path=str(write_gguf(path, Path(tmp) / "m.gguf")), n_threads=threads,
                              n_threads_batch=threads, n_ctx=prompt + steps + steps // BLOCK + 16, n_batch=prompt, verbose=False)
    width = llm.n_vocab()
    cache = model.new_cache(prompt + steps + steps // BLOCK + 8)
    ours = int(np.argmax(model(ids, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()[0, -1]))
    step = DecodeSteps(model, cache)
    llm.reset()
    llm.eval([int(i) for i in ids[0]])
    theirs = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(width,))))
    parts = []  # what a decode step reads whole: every weight but the embedding table (as the bench's probe)
    for name, w in model.named_parameters():
        if "embed_tokens" not in name or model.config.tie_word_embeddings:
            ptr = ffi.new("const uint16_t **")
            _check(lib.tgrad_tensor_data(w._h, ptr))
            parts.append((ptr[0], 2 * int(np.prod(w.shape))))
    weight_bytes = sum(n for _, n in parts)
    state = {"ours": ours, "theirs": theirs}

    def ours_step() -> None:
        state["ours"] = int(np.argmax(step(np.array([[state["ours"]]])).numpy()[0, -1]))

    def theirs_step() -> None:
        llm.eval([state["theirs"]])
        state["theirs"] = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(width,))))

    def read_pass() -> None:
        for data, nbytes in parts:
            _check(lib.tgrad_cpu_read_run(data, nbytes, threads))

    t_ours, t_theirs, t_read = [], [], []
    for _ in range(steps // BLOCK):
        for run, times in ((ours_step, t_ours), (theirs_step, t_theirs), (read_pass, t_read)):
            times.append(_block_mean(run))
    a, b, r = np.array(t_ours), np.array(t_theirs), np.array(t_read)
    print(f"prompt {prompt}, {steps // BLOCK} blocks of {BLOCK} steps each, {threads} threads, alternating")
    print(f"tgrad     median {np.median(a) * 1e3:.3f} ms ({1 / np.median(a):.1f} tokens/s), mean {a.mean() * 1e3:.3f} ms")
    print(f"llama.cpp median {np.median(b) * 1e3:.3f} ms ({1 / np.median(b):.1f} tokens/s), mean {b.mean() * 1e3:.3f} ms")
    print(f"llama.cpp time / tgrad time, median of the block pairs: {np.median(b / a):.3f}")
    print(f"read probe over the {weight_bytes / 1e6:.0f} MB of weights: median {weight_bytes / np.median(r) / 1e9:.1f} GB/s; "
          f"a decode step's share of it, median of the blocks: tgrad {np.median(r / a):.0%}, llama.cpp {np.median(r / b):.0%}")


if __name__ == "__main__":
    main()
