"""The exact sum against torch's bf16 sum, one thread, interleaved in one process (a preliminary
check of issue 32's target before the graph has a reduction kind; docs/performance.md).

Cases, each repetition in turn: torch.sum over 64 MiB of bf16 and tgrad's exact sum of the same
bytes (tgrad_debug_exact_sum); torch's x.sum(dim=-1) and x.sum(dim=0) over [4096, 4096] bf16 and
tgrad's row and column sums (tgrad_debug_exact_sum_2d, one call each). Times are the thread's CPU
time (time.thread_time: torch runs on this one thread; on a shared VM wall time also counts
other processes' slices). Prints medians and the median of the paired ratios torch time / tgrad
time (> 1: tgrad faster).

    python tools/bench_reduce_exact_torch.py [reps]      (needs torch and tgrad importable)
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch

from tgrad._ffi import ffi, lib


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n = 32 << 20
    values = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(torch.bfloat16)
    bits = values.view(torch.int16).numpy()
    mat = values[: 4096 * 4096].reshape(4096, 4096)
    out = ffi.new("uint32_t *")
    base = ffi.cast("uint16_t *", ffi.from_buffer(bits))

    def tgrad_all() -> None:
        assert lib.tgrad_debug_exact_sum(base, 1, n, 1, 0, 1, out) == 0

    outs = ffi.new("uint32_t[]", 4096)

    def tgrad_rows() -> None:
        assert lib.tgrad_debug_exact_sum_2d(base, 1, 4096, 4096, 4096, 1, 1, 0, 1, outs) == 0

    def tgrad_cols() -> None:
        assert lib.tgrad_debug_exact_sum_2d(base, 1, 4096, 4096, 4096, 1, 0, 0, 1, outs) == 0

    cases = {
        "torch sum, 64 MiB": lambda: torch.sum(values),
        "tgrad exact sum, 64 MiB": tgrad_all,
        "torch sum(dim=-1), [4096,4096]": lambda: mat.sum(dim=-1),
        "tgrad exact row sums, [4096,4096]": tgrad_rows,
        "torch sum(dim=0), [4096,4096]": lambda: mat.sum(dim=0),
        "tgrad exact column sums, [4096,4096]": tgrad_cols,
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            t0 = time.thread_time()
            fn()
            times[name].append(time.thread_time() - t0)
    print(f"one thread, {reps} repetitions, interleaved, thread CPU time; torch {torch.__version__}")
    for name, ts in times.items():
        print(f"{name:38s} median {statistics.median(ts) * 1e3:8.3f} ms   fastest {min(ts) * 1e3:8.3f} ms")
    for torch_case, tgrad_case in (
        ("torch sum, 64 MiB", "tgrad exact sum, 64 MiB"),
        ("torch sum(dim=-1), [4096,4096]", "tgrad exact row sums, [4096,4096]"),
        ("torch sum(dim=0), [4096,4096]", "tgrad exact column sums, [4096,4096]"),
    ):
        ratios = sorted(a / b for a, b in zip(times[torch_case], times[tgrad_case], strict=True))
        q = len(ratios) // 4
        print(f"{tgrad_case:38s} torch/tgrad median {statistics.median(ratios):.2f} "
              f"[quartiles {ratios[q]:.2f}, {ratios[-1 - q]:.2f}]")


if __name__ == "__main__":
    main()
