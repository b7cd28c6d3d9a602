"""One shape, checked and timed: seeded bf16 inputs made resident, tgrad's ``a @ b`` read back
and compared byte for byte with the oracle, then tgrad, its peers and the shape's limits timed
interleaved, and the samples turned into speeds and paired ratios (one entry of the JSON's
"results")."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from .limits import LIMIT_REGIONS, _limit_regions, _paired_limit
from .machine import _cpu_sample, _others_load
from .peers import ONE_THREAD, SEPARATE_PEERS, peer_regions, _set_peer_threads
from .shapes import (CALL_LIMIT_MACS, ORACLE_LIMIT_MACS, Shape, _bytes_moved, is_memory_bound)
from .stats import BOOTSTRAP_SEED, peer_entry
from .timing import (AUTO_BUDGET_S, _auto_repeat, _interleaved, _separate_phase, _Timed,
                     quiet_summary, warm_up)


def _new_result(m: int, k: int, n: int) -> dict[str, Any]:
    import tgrad

    return {
        "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n, "dtype": "bf16", "flops": 2 * m * k * n,
        "bytes": _bytes_moved(m, k, n), "memory_bound": is_memory_bound(m, k, n),
        "threads": tgrad.num_threads(), "cpu_isa": tgrad.cpu_isa(), "route": None,
        "matmul_order": tgrad.get_matmul_order(),
        "byte_match": None, "byte_check": "skipped", "pipeline_ok": False, "errors": [],
        "median_s": math.nan, "gflops": math.nan, "gbps": math.nan, "call_median_s": math.nan,
        "repeat": 0, "regions": [], "orders": [], "samples": {}, "peers": {}, "load": None,
        "peers_skipped": {}, "separate": {}, "paired_limits": {},
    }


def _pipeline(res: dict[str, Any], a_bits: np.ndarray,
              b_bits: np.ndarray) -> tuple[Any, Any, np.ndarray] | None:
    """Build, matmul, realize, read: the resident inputs and the result's bits, or None with the
    failing stage named in `res`."""
    import tgrad

    m, n = res["m"], res["n"]
    stage = "build"
    try:
        ta = tgrad.Tensor.from_bf16_bits(a_bits)
        tb = tgrad.Tensor.from_bf16_bits(b_bits)
        stage = "matmul"
        tc = ta @ tb
        stage = "realize"
        tc.realize()
        res["route"] = tc.route
        stage = "read"
        got = np.frombuffer(tc.to_bytes(), dtype="<u2").reshape(tc.shape)
        stage = "shape"
        if got.shape != (m, n) or tc.shape != (m, n):
            raise AssertionError(f"result shape {tc.shape}, expected {(m, n)}")
        del tc
    except Exception as exc:  # report and go on with the next shape
        res["errors"].append(f"{stage}: {type(exc).__name__}: {exc}")
        res["byte_match"] = False
        res["byte_check"] = "pipeline failed"
        return None
    res["pipeline_ok"] = True
    return ta, tb, got


def _byte_check(res: dict[str, Any], got: np.ndarray, want: Callable[[], np.ndarray]) -> None:
    """tgrad's bits against the oracle's (`want` computes them), first mismatch named."""
    start = time.perf_counter()
    expected = want()
    res["oracle_s"] = time.perf_counter() - start
    same = bool(np.array_equal(got, expected))
    res["byte_match"] = same
    res["byte_check"] = "done"
    if not same:
        bad = np.argwhere(got != expected)
        res["mismatches"] = int(len(bad))
        i, j = (int(v) for v in bad[0])
        res["first_mismatch"] = {"m": i, "n": j, "got": f"0x{int(got[i, j]):04x}",
                                 "want": f"0x{int(expected[i, j]):04x}"}


def run_shape(shape: Shape, *, repeat: int | None = None, seed: int = 0,
              check_all: bool = False, peers: bool = True, threads: int | None = None,
              bootstrap_seed: int = BOOTSTRAP_SEED, budget_s: float = AUTO_BUDGET_S,
              tick: Callable[[int, int], None] | None = None,
              limits_paired: bool = True, cold_s: float | None = None,
              sleep: Callable[[float], None] = time.sleep, fill: str = "normal") -> dict[str, Any]:
    """Check and time one shape; returns a dict (one entry of the JSON's "results").
    tgrad's products take this thread's matmul order (bench --order sets it), recorded as
    "matmul_order"; the oracle computes the same order. `fill`: the inputs' fill
    (conformance.fills; the bench's is "normal", where the two orders' bytes rarely differ).
    With `limits_paired`, the shape's limit (compute or read, see _limit_regions) is timed in
    every round beside the matmul and reported as the matmul's share of it, with an interval.
    With tgrad at T > 1 threads, tgrad at one thread is timed too (ONE_THREAD, paired like a
    peer). `cold_s` (bench --cold): every region sleeps that long (`sleep`) before each timed
    call."""
    import tgrad
    from .. import _conformance

    fills, oracle = _conformance.module("fills"), _conformance.module("oracle")
    m, k, n = shape
    res = _new_result(m, k, n)
    rng = np.random.default_rng([seed, m, k, n])
    a_bits = fills.fill_bits(fill, (m, k), rng)
    b_bits = fills.fill_bits(fill, (k, n), rng)
    made = _pipeline(res, a_bits, b_bits)
    if made is None:
        return res
    ta, tb, got = made
    if m * k * n <= ORACLE_LIMIT_MACS or check_all:
        _byte_check(res, got, lambda: oracle.matmul_bits(a_bits, b_bits, order=res["matmul_order"]))
    else:
        res["byte_check"] = "skipped (oracle limit)"
    del got

    threads_now = tgrad.num_threads()
    timed = [_tgrad_region("tgrad", ta, tb, threads_now, threads_now)]
    if m * k * n <= CALL_LIMIT_MACS:
        timed.append(_Timed("tgrad_call", lambda: (ta @ tb).numpy()))
    if threads_now > 1:
        timed.append(_tgrad_region(ONE_THREAD, ta, tb, 1, threads_now))
    nthreads = tgrad.num_threads() if threads is None else threads
    peer_threads: dict[str, str] = {}
    if peers:
        peer_threads = _set_peer_threads(nthreads)
        timed += peer_regions(a_bits, b_bits, nthreads, res["peers_skipped"])
    if limits_paired:
        timed += _limit_regions(res, ta, tb, tgrad.num_threads())
    for t in timed:
        t.cold_s, t.sleep = cold_s, sleep
    res["cold_s"] = cold_s
    if _time(res, timed, repeat, budget_s, tick):
        _summarize(res, timed, peer_threads, bootstrap_seed)
    return res


def _tgrad_region(name: str, ta: Any, tb: Any, during: int, threads: int) -> _Timed:
    """`(ta @ tb).realize()` at `during` threads: set before the clock starts and set back to
    `threads` after it stops (a store under the pool's locks, no thread started or stopped).
    "tgrad" at T > 1 makes the same two calls with T as "tgrad_1t" makes with 1: without them,
    the one-thread region's call before the clock warmed the call path, and a product of a few µs
    that runs on the calling thread either way measured 2-5% faster there (ratios 0.95-0.98,
    "loss", at 64³ and below). At one thread "tgrad" has no such calls (there is no "tgrad_1t")."""
    import tgrad

    if threads <= 1:
        return _Timed(name, lambda: (ta @ tb).realize())
    return _Timed(name, lambda: (ta @ tb).realize(),
                  before=lambda: tgrad.set_num_threads(during),
                  after=lambda: tgrad.set_num_threads(threads))


def _time(res: dict[str, Any], timed: list[_Timed], repeat: int | None, budget_s: float,
          tick: Callable[[int, int], None] | None) -> bool:
    """The interleaved rounds (in balanced orders: every region follows every other one equally
    often), then each separate peer's phase; False (error recorded) when the rounds failed.
    `timed` keeps the regions of the main rounds only."""
    separate = [t for t in timed if t.name in SEPARATE_PEERS]  # timed after the others
    timed[:] = [t for t in timed if t.name not in SEPARATE_PEERS]
    try:
        round_s = warm_up(timed)
        rounds = _auto_repeat(round_s, budget_s) if repeat is None else repeat
        cpu_before = _cpu_sample()
        res["orders"] = _interleaved(timed, rounds, tick, balanced=True)
        res["load"] = _others_load(cpu_before, _cpu_sample())
        res["repeat"] = rounds
    except Exception as exc:
        res["errors"].append(f"timing: {type(exc).__name__}: {exc}")
        res["pipeline_ok"] = False
        return False
    for peer in separate:  # `repeat` None: each phase sized by the budget on its own
        try:
            res["separate"][peer.name] = _separate_phase(peer, timed, repeat, budget_s)
        except Exception as exc:
            res["peers_skipped"][peer.name] = f"timing: {type(exc).__name__}: {exc}"
    return True


def _summarize(res: dict[str, Any], timed: list[_Timed], peer_threads: dict[str, str],
               seed: int) -> None:
    """The raw samples into `res`, with tgrad's speed, each limit's share and each peer's ratios."""
    res["quiet"] = quiet_summary(timed)
    res["hot"] = {t.name: t.hot for t in timed}
    samples = {t.name: np.array(t.samples) for t in timed}
    res["regions"] = [t.name for t in timed]
    res["samples"] = {name: s.tolist() for name, s in samples.items()}
    median = res["median_s"] = float(np.median(samples["tgrad"]))
    res["gflops"] = res["flops"] / median / 1e9 if median > 0 else math.nan
    res["gbps"] = res["bytes"] / median / 1e9 if median > 0 else math.nan
    if "tgrad_call" in samples:
        res["call_median_s"] = float(np.median(samples["tgrad_call"]))
    for t in timed:
        if t.name in LIMIT_REGIONS:
            res["paired_limits"][t.name] = _paired_limit(t.name, samples, res, seed)
    phases: list[tuple[str, dict[str, np.ndarray], str | None]] = [
        (t.name, samples, None) for t in timed
        if t.name not in ("tgrad", "tgrad_call") and t.name not in LIMIT_REGIONS]
    phases += [(name, {k: np.array(v) for k, v in phase["samples"].items()}, "separate")
               for name, phase in res["separate"].items()]
    for name, paired, phase in phases:
        if name == ONE_THREAD:  # against tgrad's T-thread realize only: no whole-call ratio
            paired = {k: v for k, v in paired.items() if k != "tgrad_call"}
        threads = "1" if name == ONE_THREAD else peer_threads.get(name, "?")
        res["peers"][name] = peer_entry(name, paired, res["flops"], threads, phase, seed)
