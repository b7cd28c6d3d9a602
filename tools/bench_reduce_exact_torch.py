"""The exact sum against torch's bf16 sum, one thread, interleaved in one process (a preliminary
check of issue 32's target before the graph has a reduction kind; docs/performance.md).

Cases, each repetition in turn: torch.sum over 64 MiB of bf16 and tgrad's exact sum of the same
bytes (one tgrad_debug_exact_sum call); torch's x.sum(dim=-1) over [4096, 4096] bf16 and tgrad's
4096 row sums (one tgrad_debug_exact_sum call per row through cffi, so tgrad's time includes
4096 foreign calls: conservative). Prints medians and the median of the paired ratios
torch time / tgrad time (> 1: tgrad faster).

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

    def tgrad_rows() -> None:
        f = lib.tgrad_debug_exact_sum
        for r in range(4096):
            f(base + r * 4096, 1, 4096, 1, 0, 1, out)

    cases = {
        "torch sum, 64 MiB": lambda: torch.sum(values),
        "tgrad exact sum, 64 MiB": tgrad_all,
        "torch sum(dim=-1), [4096,4096]": lambda: mat.sum(dim=-1),
        "tgrad exact row sums, [4096,4096]": tgrad_rows,
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"one thread, {reps} repetitions, interleaved; torch {torch.__version__}")
    for name, ts in times.items():
        print(f"{name:36s} median {statistics.median(ts) * 1e3:8.3f} ms   fastest {min(ts) * 1e3:8.3f} ms")
    for torch_case, tgrad_case in (
        ("torch sum, 64 MiB", "tgrad exact sum, 64 MiB"),
        ("torch sum(dim=-1), [4096,4096]", "tgrad exact row sums, [4096,4096]"),
    ):
        ratios = sorted(a / b for a, b in zip(times[torch_case], times[tgrad_case], strict=True))
        q = len(ratios) // 4
        print(f"{tgrad_case:36s} torch/tgrad median {statistics.median(ratios):.2f} "
              f"[quartiles {ratios[q]:.2f}, {ratios[-1 - q]:.2f}]")


if __name__ == "__main__":
    main()
