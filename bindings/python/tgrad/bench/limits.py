"""The measured limits a shape is judged by: the compute peak (libtgrad's throughput probe) and
the memory bandwidth (a stream copy), measured for the run, and the same limits timed in every
round beside a shape (paired with tgrad's samples, reported as a share with an interval)."""

from __future__ import annotations

import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .stats import bootstrap_ratio
from .timing import _Timed

#: Shapes of at least this many multiply-adds get the compute limit timed beside them (region
#: "limit_peak"); memory-bound ones get the read limit ("limit_read"), and may get both.
PAIRED_PEAK_MIN_MACS = 1 << 26
#: Regions that time a limit, not a peer: paired with tgrad like a peer, reported apart.
LIMIT_REGIONS = ("limit_peak", "limit_read")
#: Size of each of the two arrays of the stream-copy bandwidth measurement.
STREAM_BYTES = 256 << 20


def _stream_bandwidth(threads: int, nbytes: int = STREAM_BYTES, rounds: int = 5) -> dict[str, Any]:
    """Copy bandwidth: np.copyto of a `nbytes` array into another, split over `threads` threads
    (numpy releases the GIL while copying); bytes read + bytes written per second, best round."""
    n = nbytes // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.zeros(n, dtype=np.float64)  # zeros() pages are touched by the warm-up copy below
    bounds = np.linspace(0, n, threads + 1).astype(np.int64)
    parts = [(dst[lo:hi], src[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    best = math.inf
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for i in range(rounds + 1):
            start = time.perf_counter()
            list(pool.map(lambda p: np.copyto(*p), parts))
            elapsed = time.perf_counter() - start
            if i:  # round 0 is the warm-up (page faults)
                best = min(best, elapsed)
    return {"copy_gbps": 2 * n * 8 / best / 1e9,
            "method": f"numpy copyto of a {nbytes >> 20} MiB float64 array into another, split "
                      f"over {threads} threads, best of {rounds} after a warm-up; "
                      f"GB/s = (bytes read + bytes written) / time"}


def _peak(threads: int, tries: int = 3) -> dict[str, Any]:
    """The compute limit from libtgrad's throughput probe (the best of `tries` runs: noise only
    lowers it), when this libtgrad has one."""
    import tgrad

    from .._ffi import ffi, lib
    from ..errors import _check

    probe: Any = getattr(tgrad, "cpu_peak_gflops", None)
    source = "tgrad.cpu_peak_gflops"
    if probe is None and hasattr(lib, "tgrad_cpu_peak_gflops"):
        source = "tgrad_cpu_peak_gflops"

        def c_probe(n: int) -> float:
            out = ffi.new("double *")
            _check(lib.tgrad_cpu_peak_gflops(n, out))
            return float(out[0])

        probe = c_probe

    if probe is None:
        return {"gflops": None, "source": "none: this libtgrad has no throughput probe"}
    try:
        runs = [float(probe(threads)) for _ in range(tries)]
    except Exception as exc:
        return {"gflops": None, "source": f"probe failed: {type(exc).__name__}: {exc}"}
    return {"gflops": max(runs), "runs": runs, "threads": threads, "cpu_isa": tgrad.cpu_isa(),
            "source": f"{source}, best of {tries}"}


def measure_limits(threads: int) -> dict[str, Any]:
    """Measured hardware limits: compute (libtgrad's probe) and memory (a stream copy)."""
    stream = _stream_bandwidth(threads)
    stream["runs"] = [stream["copy_gbps"]]
    return {"peak": _peak(threads), "stream": stream}


def refresh_limits(limits: dict[str, Any], threads: int, *, peak: bool = True,
                   stream: bool = False) -> None:
    """Measure again and keep the best: load from elsewhere only lowers a limit, so probes
    spread over the run (one before each shape, the copy again at the end) find the real one."""
    p = limits["peak"]
    if peak and p.get("runs"):
        more = _peak(threads, tries=1)
        if more.get("gflops"):
            p["runs"].append(more["gflops"])
            p["gflops"] = max(p["runs"])
            p["source"] = re.sub(r"best of \d+", f"best of {len(p['runs'])}", p["source"])
    if stream:
        st = limits["stream"]
        st["runs"].append(_stream_bandwidth(threads)["copy_gbps"])
        st["copy_gbps"] = max(st["runs"])
        st["method"] += f"; best of {len(st['runs'])} such measurements over the run"


def _limit_regions(res: dict[str, Any], ta: Any, tb: Any, threads: int) -> list[_Timed]:
    """The limits a shape is judged by, as regions timed in every round beside the matmul: for a
    memory-bound shape, a plain read of both operands' bytes (libtgrad's tgrad_cpu_read_run: each
    of `threads` threads streams one contiguous part); for a shape of PAIRED_PEAK_MIN_MACS or more
    (a memory-bound one too: with few cores, 16x4096x4096's flops can take as long as its bytes),
    the shape's flops done by the peak probe's instruction stream (tgrad_cpu_peak_run). Pairing
    them round by round makes "% of the limit" a paired ratio: a clock change or a neighbour that
    slows one sample slows its partner too, where a limit measured once, elsewhere in the run,
    does not."""
    from .._ffi import ffi, lib
    from ..errors import _check

    m, k, n = res["m"], res["k"], res["n"]
    regions = []
    if res["memory_bound"]:
        parts = []
        for t, count in ((ta, m * k), (tb, k * n)):
            ptr = ffi.new("const uint16_t **")
            _check(lib.tgrad_tensor_data(t._h, ptr))
            parts.append((ptr[0], 2 * count))
        res["read_bytes"] = sum(nbytes for _, nbytes in parts)

        def read() -> None:
            for data, nbytes in parts:
                _check(lib.tgrad_cpu_read_run(data, nbytes, threads))

        regions.append(_Timed("limit_read", read))
    if m * k * n >= PAIRED_PEAK_MIN_MACS:
        flops = float(res["flops"])
        regions.append(_Timed("limit_peak", lambda: _check(lib.tgrad_cpu_peak_run(threads, flops))))
    return regions


def _paired_limit(name: str, samples: dict[str, np.ndarray], res: dict[str, Any],
                  seed: int) -> dict[str, Any]:
    """tgrad's share of a limit: the median over rounds of limit time / tgrad time (1.0: as fast as
    the limit), with its bootstrap interval, and the limit's own rate."""
    s = samples[name]
    share, lo, hi = bootstrap_ratio(s, samples["tgrad"], seed=seed)
    med = float(np.median(s))
    entry: dict[str, Any] = {"median_s": med, "share": share, "lo": lo, "hi": hi}
    if name == "limit_peak":
        entry["gflops"] = res["flops"] / med / 1e9 if med > 0 else math.nan
    else:
        entry["gbps"] = res["read_bytes"] / med / 1e9 if med > 0 else math.nan
    return entry
