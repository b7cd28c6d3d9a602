"""``python -m tgrad bench``: check bytes against the oracle and time tgrad against live peers.

For each shape MxKxN: seeded normal bf16 inputs are made resident, tgrad computes ``a @ b``, the
result is read back and compared byte for byte with ``conformance.oracle.matmul_bits`` (skipped
above an oracle size limit unless ``--check-all``), then tgrad and its peers are timed live,
interleaved in this one process (DESIGN §7):

- timed region of tgrad: ``(a @ b).realize()`` with both inputs resident (input creation,
  readback and release excluded); ``py_call_median_s`` also times the whole Python call with the
  readback, ``(a @ b).numpy()``;
- peers, same inputs resident, output computed: numpy float32 ``a @ b`` (always), torch bf16
  ``torch.matmul`` with ``torch.set_num_threads`` equal to tgrad's threads (when torch imports),
  ml_dtypes bfloat16 ``a @ b`` (small shapes only: it is a scalar loop);
- each repetition runs every timed region once, in a rotating order; raw samples are kept paired;
- ``ratio_<peer>`` = median(peer) / median(tgrad), > 1 means tgrad is faster, with a seeded
  bootstrap 95% interval over paired repetitions. "win" only when the interval is above 1,
  "loss" when it is below 1, else "tie".

Output: ``key: value`` lines per shape; the first six are py_shape, py_dtype, py_byte_match,
py_pipeline_ok, py_median_s, py_gflops. Exit status 1 when bytes differ or a pipeline stage
failed, 2 for bad command-line input. This module imports without torch.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["add_arguments", "parse_shape", "run", "run_shape"]

#: Above this many multiply-adds the byte check is skipped unless --check-all. The oracle is
#: O(M*N*K) in numpy: about 0.3 s at 1024^3 and 2 s at 2048^3 = 2^33 on this project's 2-core
#: machine, 9 s at 4096^3 and 75 s at 8192^3.
ORACLE_LIMIT_MACS = 1 << 33
#: ml_dtypes' bfloat16 matmul is an elementwise loop (~0.5 GFLOP/s): only small shapes.
ML_DTYPES_LIMIT_MACS = 1 << 21
#: Seconds of measurement per shape when --repeat is not given.
AUTO_BUDGET_S = 1.0
AUTO_MIN_REPEAT, AUTO_MAX_REPEAT = 7, 200
BOOTSTRAP_RESAMPLES = 2000

_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxKxN' -> (M, K, N), non-negative integers; argparse turns the error into exit 2."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid shape {text!r}: expected MxKxN with three non-negative integers, e.g. 64x64x64"
        )
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", type=parse_shape, required=True,
                        metavar="MxKxN", help="matmul shape, a [M,K] @ [K,N]; repeatable")
    parser.add_argument("--dtype", default="bf16", choices=["bf16"],
                        help="element type (only bf16 exists)")
    parser.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                        help=f"timed repetitions per shape (default: about {AUTO_BUDGET_S:g} s of "
                        f"measurement, {AUTO_MIN_REPEAT}..{AUTO_MAX_REPEAT})")
    parser.add_argument("--threads", type=_positive_int, default=None, metavar="T",
                        help="threads for tgrad and the peers (default: tgrad's default)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write every result, raw samples included, as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the input fill (default 0)")
    parser.add_argument("--check-all", action="store_true",
                        help=f"compare bytes with the oracle at every size (default: only up to "
                        f"M*K*N = 2^{int(math.log2(ORACLE_LIMIT_MACS))})")
    parser.add_argument("--no-peers", action="store_true", help="time tgrad only")
    parser.set_defaults(func=run)


# ---- measurement ----------------------------------------------------------------------------


@dataclass
class _Timed:
    name: str
    call: Callable[[], Any]
    samples: list[float] = field(default_factory=list)

    def once(self) -> float:
        start = time.perf_counter()
        result = self.call()
        elapsed = time.perf_counter() - start
        del result  # release outside the timed region
        return elapsed


def _interleaved(timed: list[_Timed], repeat: int) -> None:
    for i in range(repeat):
        shift = i % len(timed)
        for t in timed[shift:] + timed[:shift]:
            t.samples.append(t.once())


def _bootstrap_ratio(peer: np.ndarray, ours: np.ndarray, seed: int) -> tuple[float, float, float]:
    """median(peer)/median(ours) and a 95% percentile-bootstrap interval over paired samples."""
    ratio = float(np.median(peer) / np.median(ours)) if np.median(ours) > 0 else math.inf
    n = len(ours)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.median(peer[idx], axis=1) / np.median(ours[idx], axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return ratio, float(lo), float(hi)


def _verdict(lo: float, hi: float) -> str:
    if lo > 1:
        return "win"
    if hi < 1:
        return "loss"
    return "tie"


def _fmt_s(x: float) -> str:
    return f"{x:.9f}" if math.isfinite(x) else "nan"


def _set_peer_threads(threads: int | None) -> dict[str, str]:
    """Limit BLAS threads when threadpoolctl is there; report what each peer really uses."""
    info = {"numpy_f32": "default (not controlled)"}
    if threads is None:
        return info
    try:
        import threadpoolctl  # type: ignore[import-not-found]

        threadpoolctl.threadpool_limits(limits=threads)
        info["numpy_f32"] = str(threads)
    except ImportError:
        info["numpy_f32"] = "default (threadpoolctl not installed)"
    return info


def _torch():
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:  # ImportError, or a broken install
        return None
    return torch


# ---- one shape ------------------------------------------------------------------------------


def run_shape(shape: tuple[int, int, int], *, repeat: int | None = None, seed: int = 0,
              check_all: bool = False, peers: bool = True, threads: int | None = None,
              bootstrap_seed: int = 0) -> dict[str, Any]:
    """Check and time one shape; returns a dict (also what --json writes)."""
    import tgrad
    from conformance.fills import fill_bits
    from conformance.oracle import bf16_bits_to_f32, matmul_bits

    m, k, n = shape
    macs = m * k * n
    res: dict[str, Any] = {
        "shape": f"{m}x{k}x{n}", "m": m, "k": k, "n": n, "dtype": "bf16",
        "threads": tgrad.num_threads(), "cpu_isa": tgrad.cpu_isa(),
        "byte_match": None, "byte_check": "skipped", "pipeline_ok": False, "errors": [],
        "median_s": math.nan, "gflops": math.nan, "call_median_s": math.nan,
        "repeat": 0, "samples": {}, "peers": {},
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
    else:
        res["byte_check"] = "skipped (oracle limit)"

    # -- timing, interleaved with the peers
    timed = [
        _Timed("tgrad", lambda: (ta @ tb).realize()),
        _Timed("tgrad_call", lambda: (ta @ tb).numpy()),
    ]
    peer_threads: dict[str, str] = {}
    if peers:
        peer_threads = _set_peer_threads(threads)
        a32 = np.ascontiguousarray(bf16_bits_to_f32(a_bits))
        b32 = np.ascontiguousarray(bf16_bits_to_f32(b_bits))
        timed.append(_Timed("numpy_f32", lambda: a32 @ b32))
        torch = _torch()
        if torch is not None:
            torch.set_num_threads(tgrad.num_threads())
            peer_threads["torch_bf16"] = str(torch.get_num_threads())
            at = torch.from_numpy(a_bits.view(np.int16)).view(torch.bfloat16)
            bt = torch.from_numpy(b_bits.view(np.int16)).view(torch.bfloat16)
            timed.append(_Timed("torch_bf16", lambda: torch.matmul(at, bt)))
        if macs <= ML_DTYPES_LIMIT_MACS:
            import ml_dtypes

            a16 = a_bits.view(ml_dtypes.bfloat16)
            b16 = b_bits.view(ml_dtypes.bfloat16)
            timed.append(_Timed("ml_dtypes_bf16", lambda: a16 @ b16))
            peer_threads["ml_dtypes_bf16"] = "1"

    try:
        for t in timed:  # warm-up (first-touch, thread pools, caches), not recorded
            t.once()
            t.once()
        if repeat is None:
            round_s = sum(t.once() for t in timed)
            wanted = math.ceil(AUTO_BUDGET_S / max(round_s, 1e-9))
            repeat = int(min(AUTO_MAX_REPEAT, max(AUTO_MIN_REPEAT, wanted)))
        _interleaved(timed, repeat)
    except Exception as exc:
        res["errors"].append(f"timing: {type(exc).__name__}: {exc}")
        res["pipeline_ok"] = False
        return res

    samples = {t.name: np.array(t.samples) for t in timed}
    res["repeat"] = repeat
    res["samples"] = {name: s.tolist() for name, s in samples.items()}
    ours = samples["tgrad"]
    res["median_s"] = float(np.median(ours))
    res["call_median_s"] = float(np.median(samples["tgrad_call"]))
    res["gflops"] = 2.0 * macs / res["median_s"] / 1e9 if res["median_s"] > 0 else math.nan
    for t in timed[2:]:
        ratio, lo, hi = _bootstrap_ratio(samples[t.name], ours, bootstrap_seed)
        res["peers"][t.name] = {
            "median_s": float(np.median(samples[t.name])), "ratio": ratio, "lo": lo, "hi": hi,
            "verdict": _verdict(lo, hi), "threads": peer_threads.get(t.name, "?"),
        }
    return res


def format_shape(res: dict[str, Any]) -> list[str]:
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
    ]
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
    return lines


def run(args: argparse.Namespace) -> int:
    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    results = []
    failed = False
    for i, shape in enumerate(args.shape):
        res = run_shape(shape, repeat=args.repeat, seed=args.seed, check_all=args.check_all,
                        peers=not args.no_peers, threads=args.threads)
        results.append(res)
        if i:
            print()
        print("\n".join(format_shape(res)), flush=True)
        failed |= (res["byte_match"] is False) or not res["pipeline_ok"]
    if args.json:
        report = {
            "tgrad_version": tgrad.version(),
            "cpu_isa": tgrad.cpu_isa(),
            "threads": tgrad.num_threads(),
            "argv": sys.argv,
            "ratio": "median(peer time) / median(tgrad time); > 1 means tgrad is faster",
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_finite(report), f, indent=1, allow_nan=False)
            f.write("\n")
    return 1 if failed else 0


def _finite(x: Any) -> Any:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x
