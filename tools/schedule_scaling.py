"""Scheduling time against graph size (docs/performance.md, "Scheduling at scale").

    python tools/schedule_scaling.py                       # 10^3 .. 10^6 ops, 3 repeats
    python tools/schedule_scaling.py --sizes 1000,10000 --repeat 5

A graph of n ops is a chain on a [1, 2] tensor (+1, neg, +1, neg, ...), in two shapes:

- ``kept``: a handle on every intermediate, so nothing fuses: n steps, the walk n deep;
- ``fused``: only the end held: an op and 8 fused per step (n / 9 steps).

Each is realized and timed: ``build`` is the schedule's build (the walk, the buffer-to-step index,
the memory plan: what runs under the graph lock), from tgrad_debug_schedule_work; ``realize`` is
the whole ``realize()`` (the build, the tiny kernels, the releases), wall clock, and ``cpu`` its
CPU time (the process's, all threads: on a shared machine the wall times include the time others
held the CPUs, the CPU time does not). Also the index's
probes per step and read (a count: about 3 at every size when the work is linear). The median of
``--repeat`` runs. Against a library without tgrad_debug_schedule_work (TGRAD_LIB naming an older
build) only ``realize`` is reported; such a library overflows the C stack on a kept chain of about
30,000 ops, so give it smaller ``--sizes``. Memory: about 1.5 KB per kept op at the peak.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

import numpy as np

import tgrad
from tgrad._ffi import ffi, lib


def _work() -> list[int] | None:
    if not hasattr(lib, "tgrad_debug_schedule_work"):
        return None
    try:
        w = ffi.new("int64_t[]", 5)
        if lib.tgrad_debug_schedule_work(w, 5) != 0:
            return None
        return list(w)
    except AttributeError:  # the symbol is not in this library
        return None


def _chain(n: int, keep: bool) -> tuple[tgrad.Tensor, list[tgrad.Tensor]]:
    one = tgrad.Tensor.from_numpy(np.ones((1, 2), np.float32))
    y = tgrad.Tensor.from_numpy(np.full((1, 2), 0.5, np.float32))
    kept = [y] if keep else []
    for i in range(n):
        y = -y if i % 2 else y + one
        if keep:
            kept.append(y)
    return y, kept


def measure(n: int, keep: bool) -> dict[str, float]:
    end, kept = _chain(n, keep)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    end.realize()
    realize_s, realize_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    w = _work()
    expect = (0.5, 1.5, -1.5, -0.5)[n % 4]
    assert float(end.numpy()[0, 0]) == expect, "wrong value"
    out = {"realize_ms": realize_s * 1e3, "realize_cpu_ms": realize_cpu_s * 1e3}
    if w:
        steps, reads, probes, _, build_ns = w
        out.update(steps=steps, build_ms=build_ns / 1e6, build_ns_per_step=build_ns / max(steps, 1),
                   probes_per_read=probes / max(steps + reads, 1))
    del end, kept
    gc.collect()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000",
                        help="chain lengths, comma-separated (default 10^3 .. 10^6)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the median is shown")
    parser.add_argument("--shapes", default="kept,fused", help="kept, fused or both")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    _work()  # the first call turns the build's clock on
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
          f"libtgrad {tgrad.library_path()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'shape':6s} {'ops':>8s} {'steps':>8s} {'build ms':>9s} {'ns/step':>8s} {'probes':>7s} {'realize ms':>11s} "
          f"{'cpu ms':>9s}")
    for shape in args.shapes.split(","):
        for n in sizes:
            runs = [measure(n, shape == "kept") for _ in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            if "steps" in med:
                print(f"{shape:6s} {n:8d} {int(med['steps']):8d} {med['build_ms']:9.2f} {med['build_ns_per_step']:8.0f} "
                      f"{med['probes_per_read']:7.2f} {med['realize_ms']:11.1f} {med['realize_cpu_ms']:9.1f}", flush=True)
            else:
                print(f"{shape:6s} {n:8d} {'-':>8s} {'-':>9s} {'-':>8s} {'-':>7s} {med['realize_ms']:11.1f} "
                      f"{med['realize_cpu_ms']:9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
