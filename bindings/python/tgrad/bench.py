"""``python -m tgrad bench``: check bytes against the oracle and time tgrad against live peers.

Without ``--shape`` the default suite runs (``--list`` shows it; ``--full`` adds the slow
8192-row shapes); ``--graph`` times MLP blocks instead (tgrad.bench_graph). For each shape MxKxN: seeded normal bf16 inputs are made resident, tgrad
computes ``a @ b``, the result is read back and compared byte for byte with
``conformance.oracle.matmul_bits`` (skipped above an oracle size limit unless ``--check-all``),
then tgrad and its peers are timed live, interleaved in this one process (DESIGN §7):

- timed region of tgrad: ``(a @ b).realize()`` with both inputs resident (input creation,
  readback and release excluded); ``tgrad_call`` also times the whole Python call with the
  readback into a new numpy array, ``(a @ b).numpy()`` (shapes up to 2^30 multiply-adds);
- peers, same inputs resident, output computed into host memory, same thread count: numpy
  float32 ``a @ b`` (BLAS threads limited with threadpoolctl), torch bf16 ``torch.matmul`` with
  ``torch.set_num_threads`` (when torch imports), ml_dtypes bfloat16 ``a @ b`` (small shapes only:
  a scalar loop), tinygrad bf16 ``(a @ b).realize()`` on its CPU device (when it imports; not
  above 2^30; timed after the others, paired with tgrad samples of its own phase: SEPARATE_PEERS);
- garbage collection is off while timing; each repetition runs every timed region once, in an
  order rotated by one per repetition; the raw samples are kept, paired by repetition; before a
  region the bench waits until no other thread of the process runs, and a short region gets an
  untimed call right before its timed one (see SPIN_ENV and docs/performance.md);
- ``ratio_<peer>`` is the median over repetitions of peer time / tgrad time (> 1: tgrad is
  faster), with a seeded percentile-bootstrap 95% interval; "win" only when the interval is above
  1, "loss" when it is below 1, else "tie". ``ratio_call_<peer>`` compares the peer with tgrad's
  whole Python call.

Output: ``key: value`` lines per shape (the first six are py_shape, py_dtype, py_byte_match,
py_pipeline_ok, py_median_s, py_gflops), then a block naming the files written to ``--out``:
bench.md (tables), bench.json (raw samples, environment, limits) and bench.png (plot; needs
matplotlib). Exit status 1 when bytes differ or a pipeline stage failed, 2 for bad command-line
input. This module imports without torch, matplotlib, tqdm, threadpoolctl or tinygrad.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

__all__ = [
    "DEFAULT_SUITE",
    "FULL_ONLY",
    "add_arguments",
    "bootstrap_ratio",
    "format_markdown",
    "format_shape",
    "measure_limits",
    "parse_shape",
    "parse_shape_list",
    "refresh_limits",
    "run",
    "run_shape",
    "suite",
    "update_doc",
    "verdict",
    "write_plot",
]

#: Above this many multiply-adds the byte check is skipped unless --check-all. The oracle is
#: O(M*N*K) in numpy: about 0.3 s at 1024^3 and 2 s at 2048^3 = 2^33 on this project's 2-core
#: machine, 9 s at 4096^3 and 75 s at 8192^3.
ORACLE_LIMIT_MACS = 1 << 33
#: ml_dtypes' bfloat16 matmul is an elementwise loop (~0.5 GFLOP/s): only small shapes.
ML_DTYPES_LIMIT_MACS = 1 << 21
#: tinygrad's CPU matmul ran at ~5 GFLOP/s at 1024^3 (DESIGN §7): nothing bigger.
TINYGRAD_LIMIT_MACS = 1 << 30
#: tgrad's whole Python call (readback included) is timed up to this size...
CALL_LIMIT_MACS = 1 << 30
#: ...and shown in the "whole call" table up to this one (64^3 and 127x255x511 are the targets).
CALL_TABLE_LIMIT_MACS = 1 << 24
#: Seconds of measurement per shape when --repeat is not given.
AUTO_BUDGET_S = 2.0
AUTO_MIN_REPEAT, AUTO_MAX_REPEAT = 10, 200
#: Regions whose call takes less than this get an untimed call right before each timed one, so
#: that the library's own threads are awake as in a loop of calls.
HOT_LIMIT_S = 0.05
#: Shapes of at least this many multiply-adds get the compute limit timed beside them (region
#: "limit_peak"); memory-bound ones get the read limit ("limit_read"), and may get both.
PAIRED_PEAK_MIN_MACS = 1 << 26
#: Regions that time a limit, not a peer: paired with tgrad like a peer, reported apart.
LIMIT_REGIONS = ("limit_peak", "limit_read")
#: Before each region: wait (polling every QUIET_POLL_S) until no other thread of the process
#: QUIET_TIMEOUT_S. Busy polling: sleeping would let the idle vCPU be descheduled.
QUIET_TIMEOUT_S, QUIET_POLL_S = 0.25, 0.0
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
#: Size of each of the two arrays of the stream-copy bandwidth measurement.
STREAM_BYTES = 256 << 20
#: Idle spinning of the peers' thread pools, shortened for the bench process. After a call,
#: OpenBLAS's workers spin for 2^28 cycles (~0.1 s) and torch's OpenMP (libgomp) workers for
#: ~7 ms; on 2 cores a spinning thread of one library takes a core from the next one timed
#: (torch after numpy took 4-8 ms instead of 60 us at 127x255x511), and waiting it out lets the
#: idle vCPU be descheduled (4 ms stalls on wake-up). 2^19 cycles and 10000 spins are ~0.2 ms:
#: longer than the gap between a region's untimed and timed call, so a library still runs hot.
#: Set only where unset; the bench re-executes itself once to apply them (they are read when
#: the libraries load), see --no-reexec.
SPIN_ENV = {"OPENBLAS_THREAD_TIMEOUT": "19", "GOMP_SPINCOUNT": "10000"}
REEXEC_MARK = "TGRAD_BENCH_REEXEC"
#: Environment variables recorded in the JSON (by prefix) because they change a peer's speed.
ENV_PREFIXES = ("TGRAD_", "OPENBLAS_", "OMP_", "MKL_", "GOTO", "BLIS_", "KMP_", "DNNL_",
                "ONEDNN_", "TORCH_", "ATEN_", "PYTHONHASHSEED", "CPU", "CLANG", "TINYGRAD_",
                "GOMP_", "DEV", "NUM_CPU_THREADS", "CC")
#: Variables that make numpy's OpenBLAS pick other kernels or block sizes; ``nox -s bench``
#: unsets them (and says so through TGRAD_BENCH_UNSET, recorded in the JSON).
OPENBLAS_TUNING_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

#: The default suite: issue 3's targets, then Tgrad's sentinels (DESIGN §4).
DEFAULT_SUITE: list[tuple[tuple[int, int, int], str]] = [
    ((64, 64, 64), "target: whole call under 10 us; sentinel"),
    ((127, 255, 511), "target: odd sizes, whole call"),
    ((1024, 1024, 1024), "target: >= 90% of peak; sentinel"),
    ((2048, 2048, 2048), "target: >= 90% of peak; sentinel"),
    ((4096, 4096, 4096), "target: >= 90% of peak; sentinel"),
    ((1, 4096, 4096), "target: vector x matrix, memory bound"),
    ((4096, 4096, 1), "target: matrix x vector, memory bound"),
    ((16, 4096, 4096), "target: skinny, memory bound"),
    ((4096, 64, 4096), "target: small K"),
    ((4096, 1024, 1024), "sentinel: tall"),
    ((2048, 1024, 1024), "sentinel: tall"),
    ((1024, 1024, 8192), "sentinel: wide"),
    ((1024, 1024, 4096), "sentinel: wide"),
    ((1024, 1024, 2048), "sentinel: wide"),
    ((4, 4, 4), "sentinel: below tile"),
    ((8, 8, 4), "sentinel: below tile"),
    ((4, 32, 4), "sentinel: below tile"),
    ((6, 32, 6), "sentinel: below tile"),
    ((4, 4, 32), "sentinel: below tile"),
]
#: Added by --full (minutes each on 2 cores).
FULL_ONLY: list[tuple[tuple[int, int, int], str]] = [
    ((8192, 8192, 8192), "sentinel (--full)"),
    ((8192, 1024, 1024), "sentinel: tall (--full)"),
]

PEER_LABELS = {
    "tgrad": "tgrad bf16",
    "numpy_f32": "numpy f32",
    "torch_bf16": "torch bf16",
    "ml_dtypes_bf16": "ml_dtypes bf16",
    "tinygrad_bf16": "tinygrad bf16",
}

#: A share of the machine's CPU time used by other processes (or stolen by the hypervisor)
#: above which the report flags a run or a shape as disturbed.
DISTURBED = 0.05
#: Where --doc puts the report in a markdown file.
DOC_BEGIN, DOC_END = "<!-- bench:begin -->", "<!-- bench:end -->"

_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxKxN' -> (M, K, N), non-negative integers; argparse turns the error into exit 2."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected MxKxN with three non-negative integers, e.g. 64x64x64"
        )
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def parse_shape_list(text: str) -> list[tuple[int, int, int]]:
    """'64x64x64,1x4096x4096' -> [(64, 64, 64), (1, 4096, 4096)]; every item must be a shape."""
    return [parse_shape(item) for item in text.split(",")]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", type=parse_shape_list, default=None,
                        metavar="MxKxN[,MxKxN...]",
                        help="matmul shapes, a [M,K] @ [K,N]; repeatable and comma-separated "
                        "(default: the default suite, see --list)")
    parser.add_argument("--full", action="store_true",
                        help="add the slow shapes (8192^3, 8192x1024x1024) to the default suite")
    parser.add_argument("--list", action="store_true",
                        help="print the shapes that would run, and exit")
    parser.add_argument("--dtype", default="bf16", choices=["bf16"],
                        help="element type (only bf16 exists)")
    parser.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                        help=f"timed repetitions per shape (default: about --budget seconds of "
                        f"measurement, {AUTO_MIN_REPEAT}..{AUTO_MAX_REPEAT})")
    parser.add_argument("--budget", type=_positive_float, default=AUTO_BUDGET_S, metavar="S",
                        help=f"seconds of measurement per shape without --repeat "
                        f"(default {AUTO_BUDGET_S:g})")
    parser.add_argument("--threads", type=_positive_int, default=None, metavar="T",
                        help="threads for tgrad and the peers (default: tgrad's default)")
    parser.add_argument("--out", default="bench-out", metavar="DIR",
                        help="directory for bench.md, bench.json and bench.png (default bench-out)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the JSON report to PATH")
    parser.add_argument("--doc", default=None, metavar="PATH",
                        help=f"also put the report into the markdown file PATH, between its "
                        f"'{DOC_BEGIN}' and '{DOC_END}' lines (docs/performance.md)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the input fill (default 0)")
    parser.add_argument("--check-all", action="store_true",
                        help=f"compare bytes with the oracle at every size (default: only up to "
                        f"M*K*N = 2^{int(math.log2(ORACLE_LIMIT_MACS))})")
    parser.add_argument("--no-peers", action="store_true", help="time tgrad only")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                        help="before each shape, wait up to S seconds for other processes to "
                        f"use under {DISTURBED * 100:.0f}%% of the CPUs (default 0: do not wait)")
    parser.add_argument("--no-reexec", action="store_true",
                        help="do not re-execute the bench with the peers' idle spinning shortened "
                        f"({', '.join(f'{k}={v}' for k, v in SPIN_ENV.items())}, where unset)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: only when stderr is a terminal)")
    from . import bench_graph

    bench_graph.add_arguments(parser)  # --graph: MLP blocks instead of matmul shapes
    parser.set_defaults(func=run)


def suite(full: bool = False) -> list[tuple[tuple[int, int, int], str]]:
    """The default suite, plus the --full shapes when asked."""
    return DEFAULT_SUITE + (FULL_ONLY if full else [])


def _shape_str(shape: Iterable[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


# ---- statistics -----------------------------------------------------------------------------


def bootstrap_ratio(peer: Any, ours: Any, *, seed: int = BOOTSTRAP_SEED,
                    resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float, float]:
    """Median of the paired ratios peer[i] / ours[i] and its percentile-bootstrap 95% interval.

    The two sample lists are paired by repetition (same index = same round of the interleaved
    loop), so load that hits one round hits both sides of its ratio. The resampling is seeded:
    the same samples always give the same interval.
    """
    peer = np.asarray(peer, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    if peer.shape != ours.shape or peer.ndim != 1 or len(ours) == 0:
        raise ValueError("bootstrap_ratio: two non-empty sample lists of the same length")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = peer / ours
    ratio = float(np.median(ratios))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    lo, hi = np.percentile(np.median(ratios[idx], axis=1), [2.5, 97.5])
    return ratio, float(lo), float(hi)


def verdict(lo: float, hi: float) -> str:
    """'win' when the interval is above 1, 'loss' when below 1, else 'tie'."""
    if lo > 1:
        return "win"
    if hi < 1:
        return "loss"
    return "tie"


# Old private names, kept for callers of the first version.
_verdict = verdict


def _bootstrap_ratio(peer: np.ndarray, ours: np.ndarray, seed: int) -> tuple[float, float, float]:
    return bootstrap_ratio(peer, ours, seed=seed)


def _fmt_s(x: float) -> str:
    return f"{x:.9f}" if math.isfinite(x) else "nan"


# ---- measurement ----------------------------------------------------------------------------


@dataclass
class _Timed:
    name: str
    call: Callable[[], Any]
    samples: list[float] = field(default_factory=list)
    hot: bool = False  # one untimed call right before each timed one
    quiet_waits: list[float] = field(default_factory=list)
    quiet_timeouts: int = 0

    def once(self) -> float:
        start = time.perf_counter()
        result = self.call()
        elapsed = time.perf_counter() - start
        del result  # release outside the timed region
        return elapsed

    def sample(self) -> float:
        """Wait until no other thread of the process runs, warm up when hot, time one call."""
        waited, quiet = _wait_quiet()
        self.quiet_waits.append(waited)
        self.quiet_timeouts += not quiet
        if self.hot:
            self.once()
        return self.once()


_TASKS = "/proc/self/task"


def _busy_threads(me: int) -> int | None:
    """Threads of this process other than `me` that are running (state R); None without /proc."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    busy = 0
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"{_TASKS}/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread exited
            continue
        if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R":
            busy += 1
    return busy


def _wait_quiet(timeout: float | None = None) -> tuple[float, bool]:
    """Wait until the other threads of this process sleep: after a call, OpenBLAS's workers spin
    for about 0.1 s and torch's OpenMP workers for a few ms, and a spinning thread of one library
    takes a core from the next one timed. Returns (seconds waited, whether it got quiet)."""
    timeout = QUIET_TIMEOUT_S if timeout is None else timeout
    me = threading.get_native_id()
    start = time.perf_counter()
    while True:
        busy = _busy_threads(me)
        waited = time.perf_counter() - start
        if not busy:  # 0, or None where /proc is missing (nothing to wait for then)
            return waited, True
        if waited > timeout:
            return waited, False
        if QUIET_POLL_S:
            time.sleep(QUIET_POLL_S)


def _interleaved(timed: list[_Timed], repeat: int,
                 tick: Callable[[int, int], None] | None = None) -> list[list[str]]:
    """`repeat` rounds; round i runs every region once, starting at region i mod len(timed)."""
    orders = []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(repeat):
            shift = i % len(timed)
            order = timed[shift:] + timed[:shift]
            for t in order:
                t.samples.append(t.sample())
            orders.append([t.name for t in order])
            if tick is not None:
                tick(i + 1, repeat)
    finally:
        if was_enabled:
            gc.enable()
    return orders


# ---- peers and environment ------------------------------------------------------------------


def _torch() -> Any:
    """torch, or None when it is not importable."""
    try:
        # torch ships py.typed where it is installed; the module is handled as Any here.
        import torch  # type: ignore[import-not-found, unused-ignore]
    except Exception:  # ImportError, or a broken install
        return None
    return torch


#: Peers timed in a phase of their own after the others, each paired with tgrad samples of that
#: phase: a tinygrad call is milliseconds of Python and waits, after which every region ran
#: slower even with its untimed call first (tgrad 64^3 3.5 -> 5.1 us, torch 127x255x511 629 ->
#: 535 GFLOP/s), and its seconds per call would have cut every region's repetitions to the minimum.
SEPARATE_PEERS = ("tinygrad_bf16",)
#: tinygrad is timed on its CPU device (DESIGN §7's anchors are tinygrad CPU), with its default
#: renderer where that runs a bf16 matmul, else with its x86 renderer (which needs no compiler):
#: the default one compiles C with clang, and clang before 15 has no __bf16 on x86. A DEV set in
#: the environment is tinygrad's own choice and is left as it is.
TINYGRAD_TARGETS = ("CPU", "CPU:X86")
_TINYGRAD: tuple[Any, str | None, str] | None = None  # (module or None, device, note), once


class _QuietStderr:
    """File descriptor 2 to /dev/null for a while: tinygrad's compiler subprocess writes there."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)


def _tinygrad(threads: int) -> tuple[Any, str | None, str]:
    """tinygrad set up for the bench: (the module or None, the device to put tensors on, a note:
    where it runs, or why it does not). Decided once per process: a 5x7x3 bf16 matmul must give
    the right values on the target before any shape uses it."""
    global _TINYGRAD
    if _TINYGRAD is not None:
        return _TINYGRAD
    try:
        import tinygrad  # type: ignore[import-not-found, unused-ignore]
    except Exception:
        _TINYGRAD = (None, None, "tinygrad not importable")
        return _TINYGRAD
    try:
        from tinygrad.helpers import (  # type: ignore[import-not-found, unused-ignore]
            DEV, NUM_CPU_THREADS)
    except Exception as exc:
        _TINYGRAD = (None, None, f"tinygrad {_version('tinygrad') or '?'} lacks the settings the "
                                 f"bench uses (DEV, NUM_CPU_THREADS; written for 0.14): {exc}")
        return _TINYGRAD
    NUM_CPU_THREADS.value = threads
    env_dev = os.environ.get("DEV")
    targets: tuple[str | None, ...] = (None,) if env_dev else TINYGRAD_TARGETS
    failed: list[str] = []
    for target in targets:
        if target is not None:
            DEV.value = target
        device = None if target is None else target.split(":")[0]
        try:
            with _QuietStderr():  # as the timed region uses it: bf16 operands realized, then @
                tt, bf16 = tinygrad.Tensor, tinygrad.dtypes.bfloat16
                x = tt(np.full((5, 7), 1.5, np.float32), device=device).cast(bf16).realize()
                y = tt(np.full((7, 3), -2.0, np.float32), device=device).cast(bf16).realize()
                got = (x @ y).realize().float().numpy()
            if not np.array_equal(got, np.full((5, 3), -21.0, np.float32)):
                raise RuntimeError(f"a 5x7x3 check gave {got.ravel()[:3]}")
        except Exception as exc:
            cmd = getattr(exc, "cmd", None)  # a compiler subprocess: name it, not its argv
            if isinstance(cmd, (list, tuple)) and cmd:
                status = getattr(exc, "returncode", "?")
                why = f"{os.path.basename(str(cmd[0]))} exited with status {status}"
            else:
                why = (str(exc).splitlines() or [""])[0][:120]
            failed.append(f"{target or env_dev}: {type(exc).__name__}: {why}")
            continue
        where = f"DEV={env_dev} (from the environment)" if target is None else f"DEV={target}"
        note = where + (f" (default renderer failed: {failed[0]})" if failed else "")
        _TINYGRAD = (tinygrad, device, note)
        return _TINYGRAD
    _TINYGRAD = (None, None, "tinygrad cannot run a bf16 matmul here: " + "; ".join(failed))
    return _TINYGRAD


_BLAS_LIMITS: Any = None  # keeps threadpoolctl's limit alive for the process


def _set_peer_threads(threads: int) -> dict[str, str]:
    """Give every peer `threads` threads where it can be set; report what each one uses."""
    global _BLAS_LIMITS
    info = {"ml_dtypes_bf16": "1 (scalar loop)"}
    tinygrad, _, note = _tinygrad(threads)
    if tinygrad is not None:
        info["tinygrad_bf16"] = f"{threads} (NUM_CPU_THREADS; {note})"
    try:
        # No stubs or py.typed: untyped where installed, missing where not.
        import threadpoolctl  # type: ignore[import-untyped, import-not-found, unused-ignore]

        _BLAS_LIMITS = threadpoolctl.threadpool_limits(limits=threads)
        blas = [p for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
        info["numpy_f32"] = ",".join(str(p.get("num_threads")) for p in blas) or str(threads)
    except ImportError:
        info["numpy_f32"] = "default (threadpoolctl not installed)"
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
        info["torch_bf16"] = str(torch.get_num_threads())
    return info


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    wanted = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16",
              "avx_vnni", "avx512_vnni"}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(wanted & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def environment() -> dict[str, Any]:
    """What the JSON records about the machine, the libraries and the environment variables."""
    import tgrad

    env: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "tgrad_library": tgrad.version(),
        "tgrad_cpu_isa": tgrad.cpu_isa(),
        "tgrad_cpu_stream_isa": tgrad.cpu_stream_isa(),
        "tgrad_cpu_isas": tgrad.cpu_isas(),
        "tgrad_threads": tgrad.num_threads(),
        "versions": {name: _version(name) for name in
                     ("numpy", "ml_dtypes", "cffi", "torch", "threadpoolctl", "matplotlib",
                      "tqdm", "tinygrad")},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "unset_by_launcher": [v for v in os.environ.get("TGRAD_BENCH_UNSET", "").split(",") if v],
        "set_by_reexec": [v for v in os.environ.get(REEXEC_MARK, "").split(",") if v],
    }
    try:
        # No stubs or py.typed: untyped where installed, missing where not.
        import threadpoolctl  # type: ignore[import-untyped, import-not-found, unused-ignore]

        env["threadpools"] = threadpoolctl.threadpool_info()
    except ImportError:
        env["threadpools"] = "threadpoolctl not installed"
    torch = _torch()
    if torch is not None:
        try:
            env["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        except Exception:
            pass
        env["torch_threads"] = torch.get_num_threads()
        env["torch_mkldnn"] = bool(torch.backends.mkldnn.is_available())
        try:
            env["torch_config"] = torch.__config__.show()
        except Exception:
            pass
    return env


def _blas_summary(env: dict[str, Any]) -> str:
    pools = env.get("threadpools")
    if not isinstance(pools, list):
        return str(pools)
    blas = [p for p in pools if p.get("user_api") == "blas"]
    return "; ".join(f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture')} "
                     f"kernels, {p.get('num_threads')} threads)" for p in blas) or "none found"


def _cpu_sample() -> tuple[int, int, int, int] | None:
    """(all CPU time, idle time, steal time, this process's time) in clock ticks; None without
    /proc. Two samples tell how much of the machine other processes used in between."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
    except (OSError, ValueError):
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return sum(v), v[3] + v[4], v[7], int(rest[11]) + int(rest[12])


def _others_load(before: tuple[int, int, int, int] | None,
                 after: tuple[int, int, int, int] | None) -> dict[str, float] | None:
    """Shares of the machine's CPU time between two samples: used by other processes, and
    stolen by the hypervisor. Either one high means the timings were disturbed."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    total = after[0] - before[0]
    busy = total - (after[1] - before[1]) - (after[2] - before[2])
    ours = after[3] - before[3]
    return {"others": max(0.0, (busy - ours) / total), "steal": (after[2] - before[2]) / total}


def _wait_for_quiet_machine(limit_s: float, window_s: float = 0.5) -> float | None:
    """Wait (sleeping) until other processes used under DISTURBED of the CPU time over a window,
    at most `limit_s` seconds; returns the seconds waited, None when nothing was waited for."""
    if limit_s <= 0 or _cpu_sample() is None:
        return None
    start = time.perf_counter()
    while True:
        before = _cpu_sample()
        time.sleep(window_s)
        load = _others_load(before, _cpu_sample())
        waited = time.perf_counter() - start
        if load is None or load["others"] + load["steal"] < DISTURBED or waited >= limit_s:
            return waited


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

    from ._ffi import ffi, lib
    from .errors import _check

    probe = getattr(tgrad, "cpu_peak_gflops", None)
    source = "tgrad.cpu_peak_gflops"
    if probe is None and hasattr(lib, "tgrad_cpu_peak_gflops"):
        source = "tgrad_cpu_peak_gflops"

        def probe(n: int) -> float:
            out = ffi.new("double *")
            _check(lib.tgrad_cpu_peak_gflops(n, out))
            return float(out[0])

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


# ---- one shape ------------------------------------------------------------------------------


def _bytes_moved(m: int, k: int, n: int) -> int:
    """bf16 bytes of both operands read once and the output written once."""
    return 2 * (m * k + k * n + m * n)


def is_memory_bound(m: int, k: int, n: int) -> bool:
    """Matrix-vector-like shapes (a side of 16 or less) big enough for memory to be the limit."""
    return min(m, n) <= 16 and _bytes_moved(m, k, n) >= (1 << 20)


def run_shape(shape: tuple[int, int, int], *, repeat: int | None = None, seed: int = 0,
              check_all: bool = False, peers: bool = True, threads: int | None = None,
              bootstrap_seed: int = BOOTSTRAP_SEED, budget_s: float = AUTO_BUDGET_S,
              tick: Callable[[int, int], None] | None = None,
              limits_paired: bool = True) -> dict[str, Any]:
    """Check and time one shape; returns a dict (one entry of the JSON's "results").
    With `limits_paired`, the shape's limit (compute or read, see _limit_regions) is timed in
    every round beside the matmul and reported as the matmul's share of it, with an interval."""
    import tgrad
    from . import _conformance

    fills, oracle = _conformance.module("fills"), _conformance.module("oracle")
    fill_bits: Callable[[str, tuple[int, int], np.random.Generator], np.ndarray] = fills.fill_bits
    bf16_bits_to_f32: Callable[[np.ndarray], np.ndarray] = oracle.bf16_bits_to_f32
    matmul_bits: Callable[[np.ndarray, np.ndarray], np.ndarray] = oracle.matmul_bits

    m, k, n = shape
    macs = m * k * n
    res: dict[str, Any] = {
        "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n, "dtype": "bf16", "flops": 2 * macs,
        "bytes": _bytes_moved(m, k, n), "memory_bound": is_memory_bound(m, k, n),
        "threads": tgrad.num_threads(), "cpu_isa": tgrad.cpu_isa(), "route": None,
        "byte_match": None, "byte_check": "skipped", "pipeline_ok": False, "errors": [],
        "median_s": math.nan, "gflops": math.nan, "gbps": math.nan, "call_median_s": math.nan,
        "repeat": 0, "regions": [], "orders": [], "samples": {}, "peers": {}, "load": None,
        "peers_skipped": {}, "separate": {}, "paired_limits": {},
    }
    rng = np.random.default_rng([seed, m, k, n])
    a_bits = fill_bits("normal", (m, k), rng)
    b_bits = fill_bits("normal", (k, n), rng)

    # -- pipeline: build, matmul, realize, read (each stage named when it fails)
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
        res["pipeline_ok"] = True
    except Exception as exc:  # report and go on with the next shape
        res["errors"].append(f"{stage}: {type(exc).__name__}: {exc}")
        res["byte_match"] = False
        res["byte_check"] = "pipeline failed"
        return res

    # -- bytes against the oracle
    if macs <= ORACLE_LIMIT_MACS or check_all:
        start = time.perf_counter()
        want = matmul_bits(a_bits, b_bits)
        res["oracle_s"] = time.perf_counter() - start
        same = bool(np.array_equal(got, want))
        res["byte_match"] = same
        res["byte_check"] = "done"
        if not same:
            bad = np.argwhere(got != want)
            res["mismatches"] = int(len(bad))
            i, j = (int(v) for v in bad[0])
            res["first_mismatch"] = {"m": i, "n": j, "got": f"0x{int(got[i, j]):04x}",
                                     "want": f"0x{int(want[i, j]):04x}"}
        del want
    else:
        res["byte_check"] = "skipped (oracle limit)"
    del got

    # -- timing, interleaved with the peers
    timed = [_Timed("tgrad", lambda: (ta @ tb).realize())]
    if macs <= CALL_LIMIT_MACS:
        timed.append(_Timed("tgrad_call", lambda: (ta @ tb).numpy()))
    peer_threads: dict[str, str] = {}
    if peers:
        peer_threads = _set_peer_threads(tgrad.num_threads() if threads is None else threads)
        a32 = np.ascontiguousarray(bf16_bits_to_f32(a_bits))
        b32 = np.ascontiguousarray(bf16_bits_to_f32(b_bits))
        timed.append(_Timed("numpy_f32", lambda: a32 @ b32))
        torch = _torch()
        if torch is None:
            res["peers_skipped"]["torch_bf16"] = "torch not importable"
        else:
            at = torch.from_numpy(a_bits.view(np.int16)).view(torch.bfloat16)
            bt = torch.from_numpy(b_bits.view(np.int16)).view(torch.bfloat16)
            timed.append(_Timed("torch_bf16", lambda: torch.matmul(at, bt)))
        if macs <= ML_DTYPES_LIMIT_MACS:
            import ml_dtypes

            a16 = a_bits.view(ml_dtypes.bfloat16)
            b16 = b_bits.view(ml_dtypes.bfloat16)
            timed.append(_Timed("ml_dtypes_bf16", lambda: a16 @ b16))
        else:
            res["peers_skipped"]["ml_dtypes_bf16"] = "above its size limit (a scalar loop)"
        tinygrad, tdev, tnote = _tinygrad(tgrad.num_threads() if threads is None else threads)
        if tinygrad is None:
            res["peers_skipped"]["tinygrad_bf16"] = tnote
        elif macs > TINYGRAD_LIMIT_MACS:
            res["peers_skipped"]["tinygrad_bf16"] = "above its size limit (too slow)"
        else:
            try:
                tt, dtypes = tinygrad.Tensor, tinygrad.dtypes
                ag = tt(a32, device=tdev).cast(dtypes.bfloat16).realize()
                bg = tt(b32, device=tdev).cast(dtypes.bfloat16).realize()
                timed.append(_Timed("tinygrad_bf16", lambda: (ag @ bg).realize()))
            except Exception as exc:
                res["peers_skipped"]["tinygrad_bf16"] = f"{type(exc).__name__}: {exc}"

    if limits_paired:
        timed += _limit_regions(res, ta, tb, tgrad.num_threads())

    separate = [t for t in timed if t.name in SEPARATE_PEERS]  # timed after the others
    timed = [t for t in timed if t.name not in SEPARATE_PEERS]
    asked_repeat = repeat  # None: each phase sized by the budget on its own
    try:
        for t in timed:  # warm-up (first touch, thread pools, caches, JIT), not recorded
            _wait_quiet()
            t.once()
        start = time.perf_counter()  # a second warm-up round, timed to size the run
        hot_s = 0.0
        for t in timed:
            _wait_quiet()
            once = t.once()
            t.hot = once < HOT_LIMIT_S
            hot_s += once if t.hot else 0.0
        round_s = time.perf_counter() - start + hot_s
        if repeat is None:
            repeat = _auto_repeat(round_s, budget_s)
        cpu_before = _cpu_sample()
        res["orders"] = _interleaved(timed, repeat, tick)
        res["load"] = _others_load(cpu_before, _cpu_sample())
    except Exception as exc:
        res["errors"].append(f"timing: {type(exc).__name__}: {exc}")
        res["pipeline_ok"] = False
        return res

    for peer in separate:
        try:
            res["separate"][peer.name] = _separate_phase(peer, timed, asked_repeat, budget_s)
        except Exception as exc:
            res["peers_skipped"][peer.name] = f"timing: {type(exc).__name__}: {exc}"

    res["quiet"] = {t.name: {"median_wait_s": float(np.median(t.quiet_waits)),
                             "max_wait_s": float(np.max(t.quiet_waits)),
                             "timeouts": t.quiet_timeouts} for t in timed}
    res["hot"] = {t.name: t.hot for t in timed}
    samples = {t.name: np.array(t.samples) for t in timed}
    res["repeat"] = repeat
    res["regions"] = [t.name for t in timed]
    res["samples"] = {name: s.tolist() for name, s in samples.items()}
    ours = samples["tgrad"]
    res["median_s"] = float(np.median(ours))
    res["gflops"] = 2.0 * macs / res["median_s"] / 1e9 if res["median_s"] > 0 else math.nan
    res["gbps"] = res["bytes"] / res["median_s"] / 1e9 if res["median_s"] > 0 else math.nan
    call = samples.get("tgrad_call")
    if call is not None:
        res["call_median_s"] = float(np.median(call))
    for t in timed:
        if t.name in LIMIT_REGIONS:
            res["paired_limits"][t.name] = _paired_limit(t.name, samples, res, bootstrap_seed)
    phases: list[tuple[str, dict[str, np.ndarray], str | None]] = [
        (t.name, samples, None) for t in timed
        if t.name not in ("tgrad", "tgrad_call") and t.name not in LIMIT_REGIONS]
    phases += [(name, {k: np.array(v) for k, v in phase["samples"].items()}, "separate")
               for name, phase in res["separate"].items()]
    for name, paired, phase in phases:
        s, ours, call = paired[name], paired["tgrad"], paired.get("tgrad_call")
        ratio, lo, hi = bootstrap_ratio(s, ours, seed=bootstrap_seed)
        med = float(np.median(s))
        entry: dict[str, Any] = {
            "median_s": med, "gflops": 2.0 * macs / med / 1e9 if med > 0 else math.nan,
            "ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi),
            "threads": peer_threads.get(name, "?"),
        }
        if phase is not None:  # paired with tgrad's samples in res["separate"][name]
            entry["phase"] = phase
        if call is not None:
            c_ratio, c_lo, c_hi = bootstrap_ratio(s, call, seed=bootstrap_seed)
            entry["call"] = {"ratio": c_ratio, "lo": c_lo, "hi": c_hi,
                             "verdict": verdict(c_lo, c_hi)}
        res["peers"][name] = entry
    return res


def _limit_regions(res: dict[str, Any], ta: Any, tb: Any, threads: int) -> list[_Timed]:
    """The limits a shape is judged by, as regions timed in every round beside the matmul: for a
    memory-bound shape, a plain read of both operands' bytes (libtgrad's tgrad_cpu_read_run: each
    of `threads` threads streams one contiguous part); for a shape of PAIRED_PEAK_MIN_MACS or more
    (a memory-bound one too: with few cores, 16x4096x4096's flops can take as long as its bytes),
    the shape's flops done by the peak probe's instruction stream (tgrad_cpu_peak_run). Pairing
    them round by round makes "% of the limit" a paired ratio: a clock change or a neighbour that
    slows one sample slows its partner too, where a limit measured once, elsewhere in the run,
    does not."""
    from ._ffi import ffi, lib
    from .errors import _check

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


def _auto_repeat(round_s: float, budget_s: float) -> int:
    """Rounds that fill about `budget_s` at `round_s` each, within AUTO_MIN/MAX_REPEAT."""
    return int(min(AUTO_MAX_REPEAT, max(AUTO_MIN_REPEAT, math.ceil(budget_s / max(round_s, 1e-9)))))


def _separate_phase(peer: _Timed, timed: list[_Timed], repeat: int | None,
                    budget_s: float) -> dict[str, Any]:
    """Time `peer` interleaved with tgrad's regions only (new samples of them, same calls),
    `repeat` rounds or as many as the budget allows (at least AUTO_MIN_REPEAT)."""
    ours = [t for t in timed if t.name in ("tgrad", "tgrad_call")]
    regions = [_Timed(t.name, t.call, hot=t.hot) for t in ours]
    _wait_quiet()
    peer.once()  # warm-up (its compiler, caches), not recorded
    _wait_quiet()
    once = peer.once()
    peer.hot = once < HOT_LIMIT_S
    if repeat is None:
        round_s = once * (2 if peer.hot else 1) + sum(2 * float(np.median(t.samples)) for t in ours)
        repeat = _auto_repeat(round_s, budget_s)
    regions.append(peer)
    orders = _interleaved(regions, repeat)
    return {"repeat": repeat, "regions": [t.name for t in regions], "orders": orders,
            "samples": {t.name: list(t.samples) for t in regions},
            "hot": {t.name: t.hot for t in regions}}


def format_shape(res: dict[str, Any], limits: dict[str, Any] | None = None) -> list[str]:
    """The key: value lines printed for one shape (the first six are the stable contract)."""
    if res["byte_check"] == "done":
        match = "true" if res["byte_match"] else "false"
    elif res["byte_check"] == "pipeline failed":
        match = "false"
    else:
        match = res["byte_check"]
    lines = [
        f"py_shape: {res['shape']}",
        f"py_dtype: {res['dtype']}",
        f"py_byte_match: {match}",
        f"py_pipeline_ok: {'true' if res['pipeline_ok'] else 'false'}",
        f"py_median_s: {_fmt_s(res['median_s'])}",
        f"py_gflops: {res['gflops']:.2f}",
        f"py_call_median_s: {_fmt_s(res['call_median_s'])}",
        f"py_repeat: {res['repeat']}",
        f"py_threads: {res['threads']}",
        f"py_cpu_isa: {res['cpu_isa']}",
        f"py_route: {res.get('route') or 'none'}",
    ]
    peak = ((limits or {}).get("peak") or {}).get("gflops")
    if peak and math.isfinite(res["gflops"]):
        lines.append(f"py_peak_pct: {100 * res['gflops'] / peak:.1f}")
    if res.get("memory_bound") and math.isfinite(res["gbps"]):
        lines.append(f"py_gbps: {res['gbps']:.2f}")
    for name, key in (("limit_peak", "py_peak_pct_paired"), ("limit_read", "py_read_pct_paired")):
        lim = res.get("paired_limits", {}).get(name)
        if lim and math.isfinite(lim["share"]):
            lines.append(f"{key}: {100 * lim['share']:.1f} [{100 * lim['lo']:.1f}, "
                         f"{100 * lim['hi']:.1f}]")
    if res.get("load"):
        lines.append(f"py_others_cpu: {res['load']['others']:.3f}")
    if "mismatches" in res:
        fm = res["first_mismatch"]
        lines.append(f"py_mismatches: {res['mismatches']} (first at [{fm['m']}, {fm['n']}]: "
                     f"got {fm['got']}, want {fm['want']})")
    for err in res["errors"]:
        lines.append(f"py_error: {err}")
    for name, p in res["peers"].items():
        lines.append(f"peer_{name}_median_s: {_fmt_s(p['median_s'])}")
        lines.append(f"peer_{name}_threads: {p['threads']}")
        lines.append(f"ratio_{name}: {p['ratio']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}] {p['verdict']}")
        if "call" in p:
            c = p["call"]
            lines.append(f"ratio_call_{name}: {c['ratio']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}] "
                         f"{c['verdict']}")
    return lines


# ---- reports --------------------------------------------------------------------------------


def _fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_gflops(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.3f}"


def _fmt_ratio(p: dict[str, Any] | None) -> str:
    if not p or p.get("ratio") is None or not math.isfinite(p["ratio"]):
        return "—"
    return f"{p['ratio']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}] {p['verdict']}"


def _fmt_share(lim: dict[str, Any]) -> str:
    """A paired share of a limit: "91% [90, 92]"."""
    if not math.isfinite(lim["share"]):
        return "—"
    return f"{100 * lim['share']:.0f}% [{100 * lim['lo']:.0f}, {100 * lim['hi']:.0f}]"


def _fmt_load(load: dict[str, float] | None) -> str:
    if not load:
        return "—"
    share = load["others"] + load["steal"]
    return f"{100 * share:.0f}%" + (" **disturbed**" if share > DISTURBED else "")


def _load_line(load: dict[str, float] | None) -> str:
    if not load:
        return "Load from other processes: not measured (no /proc)."
    text = (f"While timing, other processes used {100 * load['others']:.1f}% of the machine's CPU "
            f"time and the hypervisor stole {100 * load['steal']:.1f}% (from /proc/stat; the "
            f"\"others' CPU\" column is the same per shape).")
    if load["others"] + load["steal"] > DISTURBED:
        text = ("**This run was disturbed**: " + text + " Spinning thread pools (OpenMP, "
                "OpenBLAS) suffer most from a third runnable thread on 2 cores; rerun on a quiet "
                "machine before reading the verdicts.")
    return text


def _peer_names(results: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for res in results:
        for name in res["peers"]:
            if name not in names:
                names.append(name)
    return names


def _bytes_cell(res: dict[str, Any]) -> str:
    if res["byte_check"] == "done":
        return "ok" if res["byte_match"] else "**DIFFER**"
    if res["byte_check"] == "pipeline failed":
        return "**FAILED**"
    return "not checked"


def _memory_line(env: dict[str, Any]) -> str:
    scratch, rss = env.get("tgrad_cpu_scratch_bytes"), env.get("process_peak_rss_kib")
    parts = []
    if scratch is not None:
        parts.append(f"tgrad's CPU scratch (packing buffers and accumulator tiles, all threads, "
                     f"reused from call to call) after the run: {scratch / 2**20:.1f} MiB")
    if rss is not None:
        parts.append(f"peak RSS of the whole bench process (peers, oracle and inputs included): "
                     f"{rss / 1024:.0f} MiB")
    return "Memory: " + ("; ".join(parts) if parts else "not measured")


def format_markdown(report: dict[str, Any]) -> str:
    """bench.md: how it was run, the limits, the speed table and the whole-call table."""
    env = report["environment"]
    limits = report["limits"]
    results = report["results"]
    peak = limits["peak"].get("gflops")
    stream = limits["stream"].get("copy_gbps")
    peers = _peer_names(results)
    out = [
        f"# tgrad bench, {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        f"CPU: {env['cpu_model']} ({env['cpus_usable']} usable CPUs; "
        f"{', '.join(env['cpu_flags']) or 'no flags read'}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in env['loadavg'] or [])}  ",
        f"tgrad {env['tgrad_library']}, ISA `{env['tgrad_cpu_isa']}`"
        + (f" (packed products; `{env['tgrad_cpu_stream_isa']}` for one-row and few-row ones)"
           if env.get("tgrad_cpu_stream_isa", env["tgrad_cpu_isa"]) != env["tgrad_cpu_isa"] else "")
        + f", {env['tgrad_threads']} "
        f"threads; peers' threads: "
        + ", ".join(f"{PEER_LABELS.get(p, p)} {report['peer_threads'].get(p, '?')}"
                    for p in peers) + "  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v) + "  ",
        f"numpy BLAS: {_blas_summary(env)}; " + (
            "OpenBLAS tuning variables unset by the launcher (value they had): "
            + ", ".join(env["unset_by_launcher"]) if env["unset_by_launcher"] else
            "OpenBLAS tuning variables: " + (", ".join(
                f"{v}={env['env'][v]}" for v in OPENBLAS_TUNING_VARS if v in env["env"])
                or "none set")) + "  ",
        "Idle spinning of the peers' pools: " + ", ".join(
            f"{k}={env['env'].get(k, 'unset')}" for k in SPIN_ENV) + (
            " (set by the bench's re-exec)" if env["set_by_reexec"] else "")
        + "; before each timed region the bench waits until no other thread of the process "
        "runs.  ",
        "Measured limits: compute "
        + (f"{peak:.0f} GFLOP/s ({limits['peak']['source']})" if peak else
           f"not measured ({limits['peak']['source']})")
        + f"; memory {stream:.1f} GB/s ({limits['stream']['method']})  ",
        _memory_line(env),
        "",
        _load_line(env.get("others_load")),
        "",
        "Time is the median of the interleaved repetitions of `(a @ b).realize()` (inputs "
        "resident). A ratio is the median of peer time / tgrad time over paired repetitions, "
        "> 1 means tgrad is faster, with a 95% bootstrap interval; **win** only when the interval "
        "is above 1, loss when below, else tie. GB/s (memory-bound shapes only) counts the bf16 "
        "operands read once and the output written once. \"% of peak: paired\" is the median "
        "over repetitions of (time of the shape's flops on the peak probe's instruction stream, "
        "`tgrad_cpu_peak_run`) / (tgrad's time), both timed in the same repetition, with a 95% "
        "bootstrap interval; \"of the best probe\" divides by the best compute limit of the run "
        "instead. \"% of the paired read\" is the same for a plain read of both operands' bytes "
        "(`tgrad_cpu_read_run`: one contiguous part per thread); \"of copy bw\" divides by the "
        "copy bandwidth above."
        + "".join(f" {PEER_LABELS.get(p, p)} is timed in a phase of its own after the others, "
                  "paired with tgrad samples of that phase (its calls slowed whatever ran after "
                  "them)." for p in SEPARATE_PEERS
                  if any(p in r.get("separate", {}) for r in results)),
        "",
    ]
    head = ["shape", "bytes", "reps", "others' CPU", "tgrad time", "tgrad GFLOP/s",
            "% of peak: paired [95%]; of the best probe",
            "GB/s: % of the paired read [95%]; of copy bw"]
    for p in peers:
        head += [f"{PEER_LABELS.get(p, p)} GFLOP/s", f"{PEER_LABELS.get(p, p)} / tgrad time"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        limits_paired = res.get("paired_limits", {})
        pct = (f"{100 * res['gflops'] / peak:.0f}%" if peak and math.isfinite(res["gflops"])
               else "—")
        if "limit_peak" in limits_paired:
            pct = _fmt_share(limits_paired["limit_peak"]) + "; " + pct
        gbps = "—"
        if res.get("memory_bound") and math.isfinite(res["gbps"]):
            shares = ([_fmt_share(limits_paired["limit_read"])]
                      if "limit_read" in limits_paired else [])
            if stream:
                shares.append(f"{100 * res['gbps'] / stream:.0f}%")
            gbps = f"{res['gbps']:.1f}" + (f" ({'; '.join(shares)})" if shares else "")
        row = [res["shape"], _bytes_cell(res), str(res["repeat"]), _fmt_load(res.get("load")),
               _fmt_time(res["median_s"]),
               _fmt_gflops(res["gflops"]), pct, gbps]
        for p in peers:
            entry = res["peers"].get(p)
            row += [_fmt_gflops(entry["gflops"]) if entry else "—", _fmt_ratio(entry)]
        out.append("| " + " | ".join(row) + " |")
    small = [r for r in results if "tgrad_call" in r["samples"]
             and r["m"] * r["k"] * r["n"] <= CALL_TABLE_LIMIT_MACS]
    if small:
        out += ["", "Whole Python call, result read back into a new numpy array: "
                "`(a @ b).numpy()` for tgrad; a peer's timed region already leaves its result in "
                "host memory.", ""]
        head = ["shape", "tgrad call"]
        for p in peers:
            head += [f"{PEER_LABELS.get(p, p)}", f"{PEER_LABELS.get(p, p)} / tgrad call"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for res in small:
            row = [res["shape"], _fmt_time(res["call_median_s"])]
            for p in peers:
                entry = res["peers"].get(p)
                row += [_fmt_time(entry["median_s"]) if entry else "—",
                        _fmt_ratio(entry.get("call") if entry else None)]
            out.append("| " + " | ".join(row) + " |")
    skipped = sorted({f"{PEER_LABELS.get(p, p)}: {why}" for r in results
                      for p, why in r["peers_skipped"].items() if "limit" not in why})
    if skipped:
        out += ["", "Peers not run: " + "; ".join(skipped) + "."]
    errors = [f"{r['shape']}: {e}" for r in results for e in r["errors"]]
    if errors:
        out += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    return "\n".join(out) + "\n"


def write_plot(report: dict[str, Any], path: Path) -> str:
    """bench.png: GFLOP/s per shape per peer (log scale), the measured compute peak as a line,
    and for memory-bound shapes the roof that the copy bandwidth allows. Returns the path written,
    or why nothing was."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]  # typed where installed

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except Exception as exc:
        return f"skipped (matplotlib not importable: {type(exc).__name__})"
    results = [r for r in report["results"] if math.isfinite(r["gflops"]) and r["gflops"] > 0]
    if not results:
        return "skipped (no timed shape)"
    series = ["tgrad"] + _peer_names(results)
    peak = report["limits"]["peak"].get("gflops")
    stream = report["limits"]["stream"].get("copy_gbps")
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.75 * len(results) + 3), 5.5))
    x = np.arange(len(results))
    for i, name in enumerate(series):
        values = [r["gflops"] if name == "tgrad" else r["peers"].get(name, {}).get("gflops", np.nan)
                  for r in results]
        ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=PEER_LABELS.get(name, name))
    if peak:
        ax.axhline(peak, color="black", linestyle="--", linewidth=1.2,
                   label=f"measured peak {peak:.0f} GFLOP/s")
    if stream:
        for xi, r in zip(x, results):
            if r.get("memory_bound"):
                roof = stream * r["flops"] / r["bytes"]
                ax.hlines(roof, xi - 0.45, xi + 0.45, colors="gray", linestyles=":", linewidth=2)
        ax.plot([], [], color="gray", linestyle=":", linewidth=2,
                label=f"memory roof ({stream:.0f} GB/s copy)")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([r["shape"] for r in results], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("GFLOP/s (median, log scale)")
    env = report["environment"]
    ax.set_title(f"bf16 matmul, {env['cpu_model']}, {env['tgrad_threads']} threads, "
                 f"{report['date'][:10]}", fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


class _Progress:
    """A bar over the shapes (tqdm when installed, else one rewritten stderr line)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done, self.bar = total, enabled, 0, None
        self.label, self.shown = "", 0.0
        if enabled:
            try:
                # types-tqdm is not a dependency: untyped where installed, missing where not.
                from tqdm import tqdm  # type: ignore[import-untyped, import-not-found, unused-ignore]

                self.bar = tqdm(total=total, file=sys.stderr, unit="shape", leave=False,
                                dynamic_ncols=True)
            except Exception:
                self.bar = None

    def start(self, shape: str) -> None:
        self.label = shape
        self._show("", force=True)

    def tick(self, rep: int, repeat: int) -> None:
        self._show(f"rep {rep}/{repeat}")

    def _show(self, extra: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.shown < 0.2:
            return
        self.shown = now
        text = f"{self.label} {extra}".strip()
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)
        else:
            sys.stderr.write(f"\r\x1b[K[{self.done}/{self.total}] {text}")
            sys.stderr.flush()

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
            return
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _report_head(schema: str, started: _dt.datetime, threads: int, peer_threads: dict[str, str],
                 env: dict[str, Any]) -> dict[str, Any]:
    """The fields every bench report opens with (the matmul bench's and bench --graph's)."""
    import tgrad

    return {
        "schema": schema,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": (_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(),
        "command": _command(),
        "argv": sys.argv,
        "tgrad_version": tgrad.version(),
        "cpu_isa": tgrad.cpu_isa(),
        "threads": threads,
        "peer_threads": peer_threads,
        "environment": env,
    }


def _command() -> str:
    """How this run was started, to be pasted back: ``nox -s bench -- ARGS`` when nox says so
    (TGRAD_BENCH_LAUNCHER), else ``python -m tgrad bench ARGS``."""
    argv = sys.argv[1:]
    if not sys.argv[0].endswith("__main__.py"):
        return " ".join(sys.argv)
    launcher = os.environ.get("TGRAD_BENCH_LAUNCHER")
    if launcher and argv[:1] == ["bench"]:
        return " ".join([launcher, *(["--", *argv[1:]] if argv[1:] else [])])
    return " ".join(["python -m tgrad", *argv])


def update_doc(path: Path, report_md: str, *, begin: str = DOC_BEGIN, end: str = DOC_END) -> None:
    """Replace the lines between `begin` and `end` (DOC_BEGIN and DOC_END: the matmul bench's
    section) in `path` with the report (its title becomes a level-3 heading); everything else in
    the file is kept."""
    text = path.read_text(encoding="utf-8")
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{path}: no '{begin}' ... '{end}' section to replace")
    body = re.sub(r"^# ", "### ", report_md, count=1)
    path.write_text(text[: start + len(begin)] + "\n" + body + text[stop:], encoding="utf-8")


def _shapes(args: argparse.Namespace) -> list[tuple[tuple[int, int, int], str]]:
    if args.shape:
        return [(s, "") for group in args.shape for s in group]
    return suite(args.full)


def _maybe_reexec(args: argparse.Namespace) -> None:
    """Run this command again in a fresh interpreter with SPIN_ENV set where it is unset: the
    thread pools read it when they load, which was before this point. Only when this process was
    started as ``python -m tgrad bench ...`` (so its argv can be replayed) and only once."""
    missing = {k: v for k, v in SPIN_ENV.items() if k not in os.environ}
    if args.no_reexec or args.no_peers or not missing or os.environ.get(REEXEC_MARK):
        return
    main = Path(sys.argv[0])
    if main.name != "__main__.py" or main.parent.name != "tgrad" or "bench" not in sys.argv[1:]:
        print("note: peers' idle thread pools spin (set "
              + " ".join(f"{k}={v}" for k, v in missing.items())
              + " before start-up to shorten it)", file=sys.stderr)
        return
    env = dict(os.environ, **missing, **{REEXEC_MARK: ",".join(missing)})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "tgrad", *sys.argv[1:]], env)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "graph", False) or getattr(args, "graph_shapes", None):
        from . import bench_graph

        return bench_graph.run(args)
    shapes = _shapes(args)
    if args.doc is not None:  # fail before minutes of measurement, not after
        doc_text = Path(args.doc).read_text(encoding="utf-8") if Path(args.doc).is_file() else ""
        if DOC_BEGIN not in doc_text or DOC_END not in doc_text:
            print(f"python -m tgrad bench: error: --doc {args.doc}: needs a '{DOC_BEGIN}' line "
                  f"and a '{DOC_END}' line", file=sys.stderr)
            return 2
    if args.list:
        for shape, note in shapes:
            print(f"{_shape_str(shape):<16} {note}".rstrip())
        return 0
    _maybe_reexec(args)

    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    threads = tgrad.num_threads()
    for var in OPENBLAS_TUNING_VARS:
        if var in os.environ:
            print(f"note: {var}={os.environ[var]} is set; numpy's OpenBLAS follows it "
                  f"(`nox -s bench` unsets it)", file=sys.stderr)
    peer_threads = {} if args.no_peers else _set_peer_threads(threads)
    env = environment()  # after the thread limits, so that it reports them
    limits_waited = _wait_for_quiet_machine(args.wait_quiet)
    limits_before = _cpu_sample()
    limits = measure_limits(threads)
    limits["waited_for_quiet_s"] = limits_waited
    limits["load"] = _others_load(limits_before, _cpu_sample())
    started = _dt.datetime.now(_dt.timezone.utc)
    cpu_start = _cpu_sample()
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = _Progress(len(shapes), bool(show))
    results = []
    failed = False
    try:
        for i, (shape, _note) in enumerate(shapes):
            progress.start(_shape_str(shape))
            waited = _wait_for_quiet_machine(args.wait_quiet)
            refresh_limits(limits, threads)
            res = run_shape(shape, repeat=args.repeat, seed=args.seed, check_all=args.check_all,
                            peers=not args.no_peers, threads=threads, budget_s=args.budget,
                            tick=progress.tick)
            res["waited_for_quiet_s"] = waited
            results.append(res)
            progress.advance()
            progress.write(("\n" if i else "") + "\n".join(format_shape(res, limits)))
            failed |= (res["byte_match"] is False) or not res["pipeline_ok"]
    finally:
        progress.close()
    refresh_limits(limits, threads, peak=False, stream=True)
    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    env["others_load"] = _others_load(cpu_start, _cpu_sample())
    try:
        import resource

        env["process_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except ImportError:  # not on this OS
        env["process_peak_rss_kib"] = None
    # the packing buffers and accumulator tiles tgrad holds after every shape ran (they only grow
    # to the largest block each thread worked on: this is the run's most)
    env["tgrad_cpu_scratch_bytes"] = tgrad.cpu_scratch_bytes()
    report = {
        **_report_head("tgrad-bench/2", started, threads, peer_threads, env),
        "limits": limits,
        "method": {
            "timer": "time.perf_counter around one call; result released after the clock stops",
            "regions": {
                "tgrad": "(a @ b).realize(), inputs resident",
                "tgrad_call": "(a @ b).numpy(): the whole Python call, readback into a new array",
                "numpy_f32": "a32 @ b32 (float32 copies of the same bf16 values)",
                "torch_bf16": "torch.matmul(a, b) on bfloat16 tensors sharing the input memory",
                "ml_dtypes_bf16": "a @ b on ml_dtypes.bfloat16 arrays",
                "tinygrad_bf16": "(a @ b).realize() on bfloat16 tinygrad tensors",
                "limit_peak": "tgrad_cpu_peak_run(threads, flops): the shape's flops on the peak "
                              "probe's instruction stream (shapes of at least "
                              f"{PAIRED_PEAK_MIN_MACS} multiply-adds)",
                "limit_read": "tgrad_cpu_read_run over each operand's bytes: a plain read, one "
                              "contiguous part per thread (memory-bound shapes)",
            },
            "paired_limits": "median over repetitions i of samples[limit][i] / samples[tgrad][i] "
                             "(1.0: tgrad as fast as the limit), bootstrap as for the ratios; in "
                             "each result's 'paired_limits'",
            "interleave": "per repetition every region once, order rotated by one per repetition "
                          "(see each result's 'orders'); two warm-up rounds first; gc disabled",
            "separate": f"{', '.join(SEPARATE_PEERS)}: timed after the others, interleaved with "
                        "new samples of tgrad and tgrad_call only (each result's 'separate'; the "
                        "peer's entry has phase 'separate' and its ratios pair with those "
                        "samples): its calls slowed every region timed after them",
            "quiet": f"before each region, wait until no other thread of the process runs "
                     f"(polled in /proc/self/task every {QUIET_POLL_S * 1e3:g} ms, at most "
                     f"{QUIET_TIMEOUT_S:g} s; see each result's 'quiet'): OpenBLAS and OpenMP "
                     f"workers spin after a call and would take a core from the next region",
            "hot": f"a region whose call took under {HOT_LIMIT_S * 1e3:g} ms gets one untimed "
                   f"call right before each timed one (its own threads awake, as in a loop); see "
                   f"each result's 'hot'",
            "ratio": "median over repetitions i of samples[peer][i] / samples[tgrad][i]; > 1 "
                     "means tgrad is faster; 'call' uses samples['tgrad_call']",
            "bootstrap": {"statistic": "median of the paired ratios", "interval": "percentile, 95%",
                          "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED,
                          "rng": "numpy.random.default_rng(seed).integers(0, n, (resamples, n))"},
            "verdict": "win if lo > 1, loss if hi < 1, else tie",
        },
        "results": results,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(report), indent=1, allow_nan=False) + "\n"
    (out_dir / "bench.json").write_text(text, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    markdown = format_markdown(report)
    (out_dir / "bench.md").write_text(markdown, encoding="utf-8")
    if args.doc is not None:
        update_doc(Path(args.doc), markdown)
    plot = write_plot(report, out_dir / "bench.png")
    peak = limits["peak"].get("gflops")
    print()
    print("\n".join([
        f"bench_cpu: {env['cpu_model']}",
        f"bench_peak_gflops: {f'{peak:.1f}' if peak else 'not measured'} "
        f"({limits['peak']['source']})",
        f"bench_copy_gbps: {limits['stream']['copy_gbps']:.1f}",
        f"bench_numpy_blas: {_blas_summary(env)}",
        f"bench_markdown: {out_dir / 'bench.md'}",
        f"bench_json: {out_dir / 'bench.json'}" + (f" (and {args.json})" if args.json else ""),
        f"bench_plot: {plot}",
    ] + ([f"bench_doc: {args.doc}"] if args.doc is not None else [])), flush=True)
    return 1 if failed else 0


def _finite(x: Any) -> Any:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
