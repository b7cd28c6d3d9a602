"""A/B of the two documented matmul orders on the AVX512-BF16 (vdpbf16ps) kernels (issue 38): the
pairwise order (avx512bf16's kernels, today's order) against block32 (avx512bf16_block32), both
under tgrad.set_cpu_isa("avx512bf16"), in one process, interleaved: each round times one
`tgrad.matmul(a, b, order=...).realize()` of each order, in alternating order (AB, BA, ...), at
each thread count. Reported per shape: median time and GFLOP/s of each order, the median and
interquartile range of the per-round ratio block32 time / pairwise time (> 1: block32 slower), and
the ratio of the two best times (the least disturbed by other load on a shared machine).

Where the pairwise order takes its few-rows streaming route (M <= 16: `skinny`), which block32 has
not (the plan sends every block32 product to the packed route), a second pair times both orders on
the packed route: float32 results (the plan's packed route for either order), so the kernels are
compared alone.

    python tools/ab_block32.py [--threads 2,1] [--shapes 1024x1024x1024,...] [--budget 3]

--budget: seconds per shape and thread count (rounds = budget / one round's time, 3 to 50).
Shapes are MxKxN. The routes taken are printed and checked (each order on its own kernel).
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import tgrad

CUBES = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096"]
MLP = [f"{m}x{k}x{n}" for m in (16, 512) for k, n in ((4096, 4096), (1024, 4096), (4096, 1024))]


def _pair(a, b, out_dtype, rounds: int) -> dict[str, list[float]]:
    """Interleaved rounds: each order timed once per round, alternating which goes first."""
    orders = ("pairwise", "block32")
    times: dict[str, list[float]] = {o: [] for o in orders}
    for r in range(rounds):
        for o in orders if r % 2 == 0 else orders[::-1]:
            t0 = time.perf_counter()
            tgrad.matmul(a, b, out_dtype=out_dtype, order=o).realize()
            times[o].append(time.perf_counter() - t0)
    return times


def _route(a, b, out_dtype, order: str) -> str:
    c = tgrad.matmul(a, b, out_dtype=out_dtype, order=order)
    c.realize()
    return c.route


def _report(label: str, shape: tuple[int, int, int], times: dict[str, list[float]], routes: dict[str, str]) -> None:
    m, k, n = shape
    flops = 2.0 * m * k * n
    p, b = np.array(times["pairwise"]), np.array(times["block32"])
    ratio = b / p
    q1, med, q3 = np.percentile(ratio, [25, 50, 75])
    print(f"  {label:31s} pairwise {np.median(p) * 1e3:8.3f} ms {flops / np.median(p) / 1e9:6.1f} GFLOP/s"
          f" | block32 {np.median(b) * 1e3:8.3f} ms {flops / np.median(b) / 1e9:6.1f} GFLOP/s"
          f" | block32/pairwise: paired median {med:.3f} [IQR {q1:.3f}, {q3:.3f}], best-of {b.min() / p.min():.3f},"
          f" {len(ratio)} rounds ({routes['pairwise']}, {routes['block32']})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--shapes", default=",".join(CUBES + MLP))
    ap.add_argument("--budget", type=float, default=3.0)
    args = ap.parse_args()
    if not tgrad.cpu_isas().get("avx512bf16"):
        raise SystemExit("this CPU does not run the avx512bf16 variant")
    tgrad.set_cpu_isa("avx512bf16")
    print(f"tgrad {tgrad.version()}, cpu isa {tgrad.cpu_isa()} (forced), budget {args.budget} s per shape")
    rng = np.random.default_rng(38)
    for threads in (int(t) for t in args.threads.split(",")):
        tgrad.set_num_threads(threads)
        print(f"threads {threads}")
        for spec in args.shapes.split(","):
            m, k, n = (int(x) for x in spec.split("x"))
            a = tgrad.Tensor.from_numpy(rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16))
            b = tgrad.Tensor.from_numpy(rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16))
            pairs = [(spec, tgrad.bfloat16)]
            routes = {o: _route(a, b, tgrad.bfloat16, o) for o in ("pairwise", "block32")}
            assert routes["block32"].startswith("cpu.avx512bf16_block32."), routes
            assert routes["pairwise"].startswith("cpu.avx512bf16."), routes
            if not routes["pairwise"].endswith(".gemm"):
                pairs.append((f"{spec} (both packed, f32)", tgrad.float32))
            for label, out_dtype in pairs:
                if out_dtype is not tgrad.bfloat16:
                    routes = {o: _route(a, b, out_dtype, o) for o in ("pairwise", "block32")}
                t0 = time.perf_counter()
                _pair(a, b, out_dtype, 1)  # warm: packing buffers, the pool, caches
                one = time.perf_counter() - t0
                rounds = int(min(50, max(3, args.budget / max(one, 1e-9))))
                _report(label, (m, k, n), _pair(a, b, out_dtype, rounds), routes)


if __name__ == "__main__":
    main()
