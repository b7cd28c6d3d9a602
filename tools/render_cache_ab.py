"""The render cache on and off (docs/kernels.md, "The render cache"): the time to render every
step of a model's one-token forward, in each kernel language, paired in one process:

    python tools/render_cache_ab.py MODEL_DIR [DEVICE [PASSES]]
    python tools/render_cache_ab.py MODEL_DIR DEVICE STEPS decode

The forward is left pending on DEVICE (default opencl), so its schedule is the device's; each
pass renders all of its steps through tgrad_render_tensor (length only: the text is made and
measured, not copied out), which builds the schedule and renders the step as a device realize
does. Prints, per language, the median pass with the cache off and on (the schedule's own cost
is in both), the time the library spent rendering a step's kernel itself (its debug counter,
tgrad_debug_render_cache: off, then on), and the kernels and bytes the cache holds. With
`decode`: STEPS greedy-shaped decode steps on DEVICE as generate runs them (captured programs,
tgrad.models.step.DecodeSteps, after a 16-token prompt), cache off then on, each step's time and
the time the device realizes spent rendering (the same counter), and the logits' bytes compared.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import tgrad
import tgrad.models
from tgrad._ffi import ffi, lib
from tgrad.render import _LANGS


def decode(model_dir: str, device: str, steps: int) -> None:
    from tgrad.models.step import DecodeSteps

    counts = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT))
    model = tgrad.models.from_pretrained(model_dir, device=device)
    prompt = (np.arange(16)[None] * 7 + 3) % model.config.vocab_size
    logits = {}
    for mode in (0, 1):
        assert lib.tgrad_debug_render_cache(mode, ffi.NULL, 0) == 0
        cache = model.new_cache(16 + steps + 8)
        model(prompt, cache=cache, logits_to_keep=1, logits_dtype=tgrad.float32).numpy()
        step = DecodeSteps(model, cache)
        outs = [step(np.array([[5 + i]])).numpy() for i in range(2)]  # the capture, the first run
        assert lib.tgrad_debug_render_cache(-1, counts, int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT)) == 0
        ns0, n0 = counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDER_NS], counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDERS]
        start = time.perf_counter()
        outs += [step(np.array([[7 + i]])).numpy() for i in range(steps)]
        took = (time.perf_counter() - start) / steps
        assert lib.tgrad_debug_render_cache(-1, counts, int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT)) == 0
        ns = (counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDER_NS] - ns0) / steps
        kernels = (counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDERS] - n0) / steps
        logits[mode] = b"".join(o.tobytes() for o in outs)
        print(f"{device} decode, cache {'on' if mode else 'off'}: {took * 1e3:.1f} ms a step, {kernels:.0f} kernels "
              f"rendered in {ns / 1e6:.2f} ms ({ns / kernels / 1e3:.1f} us each)")
    print(f"logits the same with the cache off and on: {logits[0] == logits[1]}")
    lib.tgrad_debug_render_cache(1, ffi.NULL, 0)


def main() -> None:
    model_dir = sys.argv[1]
    if len(sys.argv) > 4 and sys.argv[4] == "decode":
        decode(model_dir, sys.argv[2], int(sys.argv[3]))
        return
    device = sys.argv[2] if len(sys.argv) > 2 else "opencl"
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    model = tgrad.models.from_pretrained(model_dir, device=device)
    ids = tgrad.Tensor.from_numpy(np.array([[5]], np.int32), dtype=tgrad.int32, device=device)
    pending = model.model(ids)
    steps = len(tgrad.explain(pending, json=True)["steps"])
    length = ffi.new("size_t *")
    launch = ffi.new("struct tgrad_launch *")
    counts = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT))

    def render_all(lang: int) -> None:
        for i in range(steps):
            launch.size = ffi.sizeof("struct tgrad_launch")
            assert lib.tgrad_render_tensor(0, lang, pending._h, i, ffi.NULL, 0, length, launch) == 0

    for name in ("opencl", "cuda", "msl"):
        lang = _LANGS[name]
        medians, per_kernel = {}, {}
        for mode in (0, 1):
            assert lib.tgrad_debug_render_cache(mode, ffi.NULL, 0) == 0
            render_all(lang)  # the cache filled (mode 1)
            assert lib.tgrad_debug_render_cache(-1, counts, int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT)) == 0
            ns0, n0 = counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDER_NS], counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDERS]
            times = []
            for _ in range(passes):
                start = time.perf_counter()
                render_all(lang)
                times.append(time.perf_counter() - start)
            medians[mode] = statistics.median(times)
            assert lib.tgrad_debug_render_cache(-1, counts, int(lib.TGRAD_DEBUG_RENDER_CACHE_COUNT)) == 0
            per_kernel[mode] = ((counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDER_NS] - ns0)
                                / (counts[lib.TGRAD_DEBUG_RENDER_CACHE_RENDERS] - n0) / 1e3)
        print(f"{name}: {steps} steps, a pass with the cache off {medians[0] * 1e3:.2f} ms, on {medians[1] * 1e3:.2f} ms; "
              f"a kernel's render {per_kernel[0]:.1f} us off, {per_kernel[1]:.1f} us on; "
              f"{counts[lib.TGRAD_DEBUG_RENDER_CACHE_ENTRIES]} kernels, "
              f"{counts[lib.TGRAD_DEBUG_RENDER_CACHE_BYTES] / 1024:.0f} KiB kept")
    lib.tgrad_debug_render_cache(1, ffi.NULL, 0)


if __name__ == "__main__":
    main()
