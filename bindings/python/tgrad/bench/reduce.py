"""``python -m tgrad bench --reduce``: tgrad's correctly rounded reductions and softmax against
torch's bf16 ones, paired and interleaved like the matmul bench, beside the machine's read bandwidth measured
on the same input in the same rounds (tgrad_cpu_read_run).

Each case is checked first: tgrad's bytes against the exact rational reference
(tgrad.conformance.exact), and the same at one thread. Then rounds of every region in balanced
orders; ratios are medians of paired ratios with a bootstrap 95% interval (bench.stats)."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .stats import bootstrap_ratio, verdict
from .timing import _interleaved, _Timed, warm_up
from .op_cases import run_cases, torch_suffix
from .peers import _torch


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple[int, ...]
    axis: int | None
    op: str  # "sum", "max" or "softmax"
    spread: int = 0  # values are normal(0, 1) * 2^u, u uniform in [-spread, spread)


CASES = [Case("sum, 64 MiB of bf16", (32 * 1024 * 1024,), None, "sum"),
         Case("sum, 64 MiB of bf16 spread over 2^+-20", (32 * 1024 * 1024,), None, "sum", 20),
         Case("sum(axis=-1), [4096, 4096] bf16", (4096, 4096), -1, "sum"),
         Case("max(axis=-1), [4096, 4096] bf16", (4096, 4096), -1, "max"),
         Case("softmax(dim=-1), [4096, 4096] bf16", (4096, 4096), -1, "softmax")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reduce", action="store_true",
                        help="time correctly rounded reductions against torch's bf16 sum and "
                        "max and the read bandwidth (tgrad.bench.reduce)")


def _check(tgrad: Any, x: Any, bits: np.ndarray, case: Case) -> bool:
    """tgrad's bytes equal the exact reference's (sum) or numpy's (max), at T threads and at 1."""
    exact = importlib.import_module("tgrad.conformance.exact")

    if case.op == "softmax":
        return _check_softmax(tgrad, x, bits)
    got = getattr(tgrad, case.op)(x, axis=case.axis).numpy().view(np.uint16).ravel()
    rows = bits.reshape(1, -1) if case.axis is None else bits.reshape(-1, bits.shape[-1])
    sample = range(0, rows.shape[0], max(1, rows.shape[0] // 16))  # 16 rows: the reference is Python
    if case.op == "sum":
        want = [exact.sum_bits(rows[i], 1, 1) for i in sample]
    else:
        want = [int(rows[i][exact.extremum_index(rows[i].tolist(), 1, True)]) for i in sample]
    threads = tgrad.num_threads()
    tgrad.set_num_threads(1)
    try:
        one = getattr(tgrad, case.op)(x, axis=case.axis).numpy().view(np.uint16).ravel()
    finally:
        tgrad.set_num_threads(threads)
    return [int(got[i]) for i in sample] == want and np.array_equal(got, one)


def _check_softmax(tgrad: Any, x: Any, bits: np.ndarray) -> bool:
    """Two rows against the mpmath reference (tgrad.conformance.softmax), every row at 1 thread."""
    ref = importlib.import_module("tgrad.conformance.softmax")

    got = tgrad.softmax(x, -1).numpy().view(np.uint16)
    rows = (0, bits.shape[0] - 1)
    ok = all(ref.reference("softmax", bits[r].tolist(), "bfloat16", "bfloat16") == got[r].tolist() for r in rows)
    threads = tgrad.num_threads()
    tgrad.set_num_threads(1)
    try:
        one = tgrad.softmax(x, -1).numpy().view(np.uint16)
    finally:
        tgrad.set_num_threads(threads)
    return ok and np.array_equal(got, one)


def _call(tgrad: Any, x: Any, case: Case) -> Any:
    if case.op == "softmax":
        return tgrad.softmax(x, case.axis).realize()
    return getattr(tgrad, case.op)(x, axis=case.axis).realize()


def run_case(case: Case, *, budget_s: float, seed: int, peers: bool) -> dict[str, Any]:
    import ml_dtypes

    import tgrad
    from tgrad._ffi import ffi, lib

    rng = np.random.default_rng(seed)
    values = rng.standard_normal(case.shape, dtype=np.float32)
    if case.spread:
        values *= np.exp2(rng.integers(-case.spread, case.spread, case.shape)).astype(np.float32)
    host = values.astype(ml_dtypes.bfloat16)
    x = tgrad.Tensor.from_bf16_bits(host.view(np.uint16))
    bits = host.view(np.uint16)
    nbytes = host.nbytes
    res: dict[str, Any] = {"case": case.name, "bytes": nbytes, "correct": _check(tgrad, x, bits, case)}
    pointer = ffi.from_buffer(bits)
    threads = tgrad.num_threads()
    regions: list[_Timed] = [
        _Timed("tgrad", lambda: _call(tgrad, x, case)),
        _Timed("read", lambda: lib.tgrad_cpu_read_run(pointer, nbytes, threads)),
    ]
    torch = _torch() if peers else None
    if torch is not None:
        tx = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
        call: Callable[[], Any] = (lambda: tx.sum()) if case.axis is None else (
            (lambda: tx.sum(dim=-1)) if case.op == "sum" else
            (lambda: torch.softmax(tx, dim=-1)) if case.op == "softmax" else (lambda: tx.amax(dim=-1)))
        regions.append(_Timed("torch", call))
    round_s = warm_up(regions)
    repeat = int(min(200, max(10, budget_s / max(round_s, 1e-9))))
    _interleaved(regions, repeat, balanced=True)
    samples = {t.name: np.array(t.samples) for t in regions}
    med = {name: float(np.median(s)) for name, s in samples.items()}
    res.update({"repeat": repeat, "median_s": med, "gbs": {n: nbytes / s / 1e9 for n, s in med.items()},
                "fraction_of_read": med["read"] / med["tgrad"]})
    if torch is not None:
        ratio, lo, hi = bootstrap_ratio(samples["torch"], samples["tgrad"])
        res["torch"] = {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi),
                        "version": torch.__version__}
    return res


def format_case(res: dict[str, Any]) -> str:
    gbs = res["gbs"]
    line = (f"{res['case']}: tgrad {res['median_s']['tgrad'] * 1e3:.3f} ms ({gbs['tgrad']:.1f} GB/s, "
            f"{res['fraction_of_read']:.0%} of the read bandwidth {gbs['read']:.1f} GB/s), "
            f"bytes {'exact' if res['correct'] else 'WRONG'}")
    return line + torch_suffix(res)


def run(args: argparse.Namespace) -> int:
    return run_cases(args, CASES, run_case, format_case, "bench-reduce.json")
