"""``python -m tgrad bench --transformer``: issue 34's table, the transformer ops against torch's
eager bf16 ones on the same threads: softmax and rms_norm over [4096, 4096], layer_norm over
[4096, 1024], attention prefill (B=1, 32 query heads, 8 kv heads, L=512, d=128, causal) and the
batched matmul [16, 512, 512] @ [16, 512, 512].

The rows reuse the other benches' cases and their paired, interleaved timing (bench.reduce for
softmax, bench.norms for the norms, bench.batched for the product; each checks its bytes first,
as that bench does); the attention row is this module's: tgrad's
``F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)`` against torch's, its
bytes checked first against the documented composition run op by op (each step realized, the kv
heads repeated on the host) and against one thread. Ratios are torch's time over tgrad's, medians
of paired ratios with a bootstrap 95% interval (bench.stats)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from . import batched, norms, reduce
from .op_cases import threads_and_torch, write_report
from .peers import _torch
from .stats import bootstrap_ratio, verdict
from .timing import _interleaved, _Timed, warm_up


@dataclass(frozen=True)
class Attention:
    batch: int
    heads: int
    kv_heads: int
    length: int
    features: int

    @property
    def name(self) -> str:
        return (f"attention prefill, B={self.batch}, {self.heads} heads, {self.kv_heads} kv heads, "
                f"L={self.length}, d={self.features}, causal")


@dataclass(frozen=True)
class Row:
    """One row of the table: the bench module that runs `case` (its run_case) and the row's label."""
    label: str
    module: ModuleType | None  # None: this module's attention case
    case: Any


def _rows() -> list[Row]:
    softmax = next(c for c in reduce.CASES if c.op == "softmax" and c.shape == (4096, 4096))
    rms, layer = (next(c for c in norms.CASES if c.op == op) for op in ("rms_norm", "layer_norm"))
    return [Row("softmax(dim=-1), [4096, 4096]", reduce, softmax),
            Row("rms_norm, [4096, 4096]", norms, rms),
            Row("layer_norm, [4096, 1024]", norms, layer),
            Row("attention prefill, [1, 32, 512, 128], 8 kv heads, causal", None, Attention(1, 32, 8, 512, 128)),
            Row("batched matmul, [16, 512, 512] @ [16, 512, 512]", batched, batched.CASES[0])]


#: The table's rows (a test replaces them with small ones).
ROWS = _rows()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transformer", action="store_true",
                        help="issue 34's table: softmax, rms_norm, layer_norm, GQA attention prefill and a "
                        "batched matmul against torch's eager bf16 ones (tgrad.bench.transformer)")


def _composed(tgrad: Any, q: Any, k: Any, v: Any, case: Attention) -> np.ndarray:
    """The documented composition op by op, each step realized, the kv heads repeated on the host."""
    group = case.heads // case.kv_heads
    k_rep, v_rep = (tgrad.Tensor.from_bf16_bits(np.repeat(t.numpy().view(np.uint16), group, axis=-3)) for t in (k, v))
    scores = ((q @ k_rep.mT).realize() * (1 / math.sqrt(case.features))).realize()
    bias = np.triu(np.full((case.length, case.length), -np.inf, np.float32), k=1)
    scores = (scores + tgrad.Tensor.from_numpy(bias)).realize()
    return (tgrad.softmax(scores, dim=-1).realize() @ v_rep).numpy().view(np.uint16)  # type: ignore[no-any-return]


def _check_attention(tgrad: Any, call: Callable[[], Any], q: Any, k: Any, v: Any, case: Attention) -> bool:
    got = call().numpy().view(np.uint16)
    threads = tgrad.num_threads()
    tgrad.set_num_threads(1)
    try:
        one = call().numpy().view(np.uint16)
    finally:
        tgrad.set_num_threads(threads)
    return bool(np.array_equal(got, one) and np.array_equal(got, _composed(tgrad, q, k, v, case)))


def run_attention(case: Attention, *, budget_s: float, seed: int, peers: bool) -> dict[str, Any]:
    import ml_dtypes

    import tgrad
    import tgrad.nn.functional as F

    rng = np.random.default_rng(seed)
    shapes = ((case.batch, case.heads, case.length, case.features),
              (case.batch, case.kv_heads, case.length, case.features),
              (case.batch, case.kv_heads, case.length, case.features))
    host = [rng.standard_normal(s, dtype=np.float32).astype(ml_dtypes.bfloat16) for s in shapes]
    q, k, v = (tgrad.Tensor.from_numpy(h) for h in host)

    def ours() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    res: dict[str, Any] = {"case": case.name, "correct": _check_attention(tgrad, ours, q, k, v, case)}
    regions = [_Timed("tgrad", lambda: ours().realize())]
    torch = _torch() if peers else None
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(h.view(np.int16)).view(torch.bfloat16) for h in host)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        regions.append(_Timed("torch", lambda: sdpa(tq, tk, tv, is_causal=True, enable_gqa=True)))
    round_s = warm_up(regions)
    repeat = int(min(200, max(10, budget_s / max(round_s, 1e-9))))
    _interleaved(regions, repeat, balanced=True)
    samples = {t.name: np.array(t.samples) for t in regions}
    res.update({"repeat": repeat, "median_s": {name: float(np.median(s)) for name, s in samples.items()}})
    if torch is not None:
        ratio, lo, hi = bootstrap_ratio(samples["torch"], samples["tgrad"])
        res["torch"] = {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi), "version": torch.__version__}
    return res


def run_row(row: Row, *, budget_s: float, seed: int, peers: bool) -> dict[str, Any]:
    """The row's case run by its bench module, and its times under one set of names."""
    runner = run_attention if row.module is None else row.module.run_case
    res = runner(row.case, budget_s=budget_s, seed=seed, peers=peers)
    median = res["median_s"]
    # bench.batched names its regions "tgrad batched" and "torch batched" (beside the 2-D ones)
    ours, theirs = (median.get(name, median.get(f"{name} batched")) for name in ("tgrad", "torch"))
    return {"label": row.label, "correct": bool(res["correct"]), "tgrad_s": ours, "torch_s": theirs,
            "torch": res.get("torch"), "detail": res}


def format_table(rows: list[dict[str, Any]], threads: int, order: str = "block32") -> str:
    lines = [f"| op ({threads} threads, bf16, {order} order) | tgrad ms | torch ms | torch/tgrad [95% interval] | verdict | bytes |",
             "|---|---:|---:|---|---|---|"]
    for r in rows:
        t = r["torch"]
        torch_ms = "-" if r["torch_s"] is None else f"{r['torch_s'] * 1e3:.2f}"
        ratio = "-" if t is None else f"{t['ratio']:.2f} [{t['lo']:.2f}, {t['hi']:.2f}]"
        lines.append(f"| {r['label']} | {r['tgrad_s'] * 1e3:.2f} | {torch_ms} | {ratio} | "
                     f"{'-' if t is None else t['verdict']} | {'checked' if r['correct'] else 'WRONG'} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import tgrad

    torch = threads_and_torch(args)
    results = []
    for row in ROWS:
        res = run_row(row, budget_s=args.budget, seed=args.seed, peers=not args.no_peers)
        results.append(res)
        t = res["torch"]
        print(f"{row.label}: tgrad {res['tgrad_s'] * 1e3:.3f} ms"
              + ("" if t is None else f", torch {res['torch_s'] * 1e3:.3f} ms, torch/tgrad {t['ratio']:.2f}"),
              file=sys.stderr, flush=True)
    print(format_table(results, tgrad.num_threads(), tgrad.get_matmul_order()), flush=True)
    write_report(args, {"torch": None if torch is None else torch.__version__, "results": results},
                 "bench-transformer.json")
    return 0 if all(r["correct"] for r in results) else 1
