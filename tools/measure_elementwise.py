"""Two numbers for issue 20's targets, measured the way ``python -m tgrad bench`` measures
(interleaved rounds, paired ratios, seeded bootstrap intervals; tgrad.bench's helpers):

(a) a fused epilogue's cost: ``(x @ wt + b).gelu()`` against the bare ``x @ wt`` (fusion on; wt
    the .T view of a [N, K] weight, as a Linear holds it), at MxKxN = 512x4096x4096 and
    16x4096x4096. Target: at most 5% over the bare matmul.
(b) a standalone elementwise op over 64 MiB of bf16 (32 Mi elements): ``x.gelu()``, ``a + b``
    and ``x.relu()`` (a cheap op: the pass's memory traffic alone) against a plain copy of 64 MiB
    (numpy copyto into a resident array, split over the threads: the matmul bench's copy
    bandwidth) and against torch's bf16 op on the same bytes. GB/s counts bytes read + bytes
    written. Target: 80% of the copy bandwidth, and faster than torch.

Not a test: it asserts nothing. Usage, from a worktree with a release build:

    TGRAD_LIB=build-rel/libtgrad/libtgrad.so PYTHONPATH=bindings/python:. \\
        python tools/measure_elementwise.py --threads 2 [--repeat N] [--part a|b]
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

import tgrad
from tgrad import bench

ELEMENTS = 32 << 20  # 64 MiB of bf16


def _timed(regions: dict[str, Callable[[], Any]], repeat: int) -> dict[str, np.ndarray]:
    """Warm up twice, then `repeat` interleaved rounds (order rotated); samples by region."""
    timed = [bench._Timed(name, call) for name, call in regions.items()]
    for _ in range(2):
        for t in timed:
            bench._wait_quiet()
            once = t.once()
            t.hot = once < bench.HOT_LIMIT_S
    before = bench._cpu_sample()
    bench._interleaved(timed, repeat)
    load = bench._others_load(before, bench._cpu_sample())
    print(f"  others' CPU while timing: {100 * load['others']:.0f}%" if load else "")
    return {t.name: np.array(t.samples) for t in timed}


def _ratio_line(name: str, samples: dict[str, np.ndarray], base: str) -> str:
    r, lo, hi = bench.bootstrap_ratio(samples[name], samples[base])
    return f"{name} / {base} time: {r:.3f} [{lo:.3f}, {hi:.3f}]"


def _bits(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    from tgrad.conformance.oracle import f32_to_bf16_bits

    return np.asarray(f32_to_bf16_bits(rng.standard_normal(shape, dtype=np.float32)
                                       * np.float32(scale)))


def epilogue(shapes: list[tuple[int, int, int]], repeat: int) -> None:
    """(a): the fused bias + gelu epilogue against the bare matmul, same operands."""
    tgrad.set_fusion(True)
    for m, k, n in shapes:
        rng = np.random.default_rng([m, k, n])
        x = tgrad.Tensor.from_bf16_bits(_bits(rng, (m, k)))
        wt = tgrad.Tensor.from_bf16_bits(_bits(rng, (n, k), k ** -0.5)).T
        b = tgrad.Tensor.from_bf16_bits(_bits(rng, (n,)))
        fused = (x @ wt + b).gelu()
        print(f"{m}x{k}x{n}: kernels {[s['kernel'] for s in fused.explain(json=True)['steps']]}")
        del fused
        samples = _timed({"bare": lambda: (x @ wt).realize(),
                          "bias_gelu": lambda: (x @ wt + b).gelu().realize()}, repeat)
        for name, s in samples.items():
            print(f"  {name}: median {np.median(s) * 1e3:.3f} ms, "
                  f"{2 * m * k * n / np.median(s) / 1e9:.1f} GFLOP/s")
        print("  " + _ratio_line("bias_gelu", samples, "bare"))


def _copy_region(threads: int) -> Callable[[], None]:
    """A copy of 64 MiB into a resident array, split over `threads` (numpy drops the GIL)."""
    src = np.ones(ELEMENTS // 4, dtype=np.float64)
    dst = np.zeros_like(src)
    bounds = np.linspace(0, len(src), threads + 1).astype(np.int64)
    parts = [(dst[lo:hi], src[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    pool = ThreadPoolExecutor(max_workers=threads)

    def copy() -> None:
        list(pool.map(lambda p: np.copyto(*p), parts))
    return copy


def standalone(threads: int, repeat: int) -> None:
    """(b): x.gelu() and a + b over 64 MiB against the copy and torch."""
    rng = np.random.default_rng(0)
    xa, xb = _bits(rng, (ELEMENTS,)), _bits(rng, (ELEMENTS,))
    x, y = tgrad.Tensor.from_bf16_bits(xa), tgrad.Tensor.from_bf16_bits(xb)
    regions: dict[str, Callable[[], Any]] = {
        "copy": _copy_region(threads),
        "tgrad_gelu": lambda: x.gelu().realize(),
        "tgrad_add": lambda: (x + y).realize(),
        "tgrad_relu": lambda: x.relu().realize(),  # a cheap op: the pass's memory traffic alone
    }
    moved = {"copy": 2 * 2 * ELEMENTS, "tgrad_gelu": 2 * 2 * ELEMENTS,
             "tgrad_add": 3 * 2 * ELEMENTS, "tgrad_relu": 2 * 2 * ELEMENTS}
    torch = bench._torch()
    if torch is not None:
        torch.set_num_threads(threads)
        xt = torch.from_numpy(xa.view(np.int16)).view(torch.bfloat16)
        yt = torch.from_numpy(xb.view(np.int16)).view(torch.bfloat16)
        regions["torch_gelu"] = lambda: torch.nn.functional.gelu(xt)
        regions["torch_add"] = lambda: xt + yt
        regions["torch_relu"] = lambda: torch.relu(xt)
        for op in ("gelu", "add", "relu"):
            moved[f"torch_{op}"] = moved[f"tgrad_{op}"]
    samples = _timed(regions, repeat)
    for name, s in samples.items():
        print(f"  {name}: median {np.median(s) * 1e3:.2f} ms, "
              f"{moved[name] / np.median(s) / 1e9:.1f} GB/s (read + written)")
    for op in ("gelu", "add", "relu"):
        # share of the copy's bandwidth: (bytes / tgrad time) / (copy bytes / copy time), paired
        r, lo, hi = bench.bootstrap_ratio(samples["copy"] * moved[f"tgrad_{op}"] / moved["copy"],
                                          samples[f"tgrad_{op}"])
        print(f"  tgrad_{op}: {100 * r:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}] of the paired copy's GB/s")
        if torch is not None:
            print("  " + _ratio_line(f"torch_{op}", samples, f"tgrad_{op}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--part", choices=["a", "b", "both"], default="both")
    args = parser.parse_args()
    for key, value in bench.SPIN_ENV.items():  # read when torch's OpenMP loads, below
        os.environ.setdefault(key, value)
    if args.threads:
        tgrad.set_num_threads(args.threads)
    threads = tgrad.num_threads()
    print(f"tgrad {tgrad.version()}, ISA {tgrad.cpu_isa()}, {threads} threads, "
          f"load average {os.getloadavg()}")
    if args.part in ("a", "both"):
        print("(a) fused epilogue against the bare matmul")
        epilogue([(512, 4096, 4096), (16, 4096, 4096)], args.repeat)
    if args.part in ("b", "both"):
        print(f"(b) standalone elementwise over {2 * ELEMENTS >> 20} MiB")
        standalone(threads, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
