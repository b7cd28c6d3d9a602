"""``python -m tgrad bench --batched``: a batched product ([B, M, K] @ [B, K, N]) against the 2-D
product of one batch's size, in GFLOP/s (issue 34's target: the batched product at the 2-D
one's rate), and both against torch's bf16 ones when torch imports; paired and interleaved like
the matmul bench.

Each case is checked first: every batch's bytes equal the 2-D product of that batch (what
docs/numerics.md promises), at the bench's thread count and at one thread. Then rounds of every
region in balanced orders; ratios are medians of paired ratios with a bootstrap 95% interval
(bench.stats)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import numpy as np

from .stats import bootstrap_ratio, verdict
from .timing import _interleaved, _Timed, warm_up
from .op_cases import run_cases
from .peers import _torch


@dataclass(frozen=True)
class Case:
    batch: int
    m: int
    k: int
    n: int

    @property
    def name(self) -> str:
        return f"[{self.batch}, {self.m}, {self.k}] @ [{self.batch}, {self.k}, {self.n}]"


CASES = [Case(16, 512, 512, 512)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batched", action="store_true",
                        help="time a batched matmul against the 2-D product of one batch and torch's "
                        "bf16 ones (tgrad.bench.batched)")


def _check(tgrad: Any, a: Any, b: Any) -> bool:
    """Each batch's bytes are its 2-D product's, at T threads and at 1."""
    got = (a @ b).numpy().view(np.uint16)
    threads = tgrad.num_threads()
    tgrad.set_num_threads(1)
    try:
        one = (a @ b).numpy().view(np.uint16)
    finally:
        tgrad.set_num_threads(threads)
    each = all(np.array_equal(got[i], (a[i] @ b[i]).numpy().view(np.uint16)) for i in range(a.shape[0]))
    return each and np.array_equal(got, one)


def run_case(case: Case, *, budget_s: float, seed: int, peers: bool) -> dict[str, Any]:
    import ml_dtypes

    import tgrad

    rng = np.random.default_rng(seed)
    an = rng.standard_normal((case.batch, case.m, case.k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    bn = rng.standard_normal((case.batch, case.k, case.n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    a, b = tgrad.Tensor.from_numpy(an), tgrad.Tensor.from_numpy(bn)
    a0, b0 = tgrad.Tensor.from_numpy(an[0]), tgrad.Tensor.from_numpy(bn[0])
    res: dict[str, Any] = {"case": case.name, "correct": _check(tgrad, a, b)}
    regions = [_Timed("tgrad batched", lambda: (a @ b).realize()), _Timed("tgrad 2-D", lambda: (a0 @ b0).realize())]
    torch = _torch() if peers else None
    if torch is not None:
        ta = torch.from_numpy(an.view(np.int16)).view(torch.bfloat16)
        tb = torch.from_numpy(bn.view(np.int16)).view(torch.bfloat16)
        ta0, tb0 = ta[0].contiguous(), tb[0].contiguous()
        regions += [_Timed("torch batched", lambda: torch.matmul(ta, tb)), _Timed("torch 2-D", lambda: ta0 @ tb0)]
    round_s = warm_up(regions)
    repeat = int(min(200, max(10, budget_s / max(round_s, 1e-9))))
    _interleaved(regions, repeat, balanced=True)
    samples = {t.name: np.array(t.samples) for t in regions}
    med = {name: float(np.median(s)) for name, s in samples.items()}
    flops = {name: 2.0 * case.m * case.k * case.n * (case.batch if "batched" in name else 1) for name in med}
    res.update({"repeat": repeat, "median_s": med, "gflops": {n: flops[n] / s / 1e9 for n, s in med.items()}})
    # the batched product's rate over the 2-D one's: paired per round (batch x the 2-D time over the batched time)
    ratio, lo, hi = bootstrap_ratio(samples["tgrad 2-D"] * case.batch, samples["tgrad batched"])
    res["batched_vs_2d"] = {"ratio": ratio, "lo": lo, "hi": hi}
    if torch is not None:
        ratio, lo, hi = bootstrap_ratio(samples["torch batched"], samples["tgrad batched"])
        res["torch"] = {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi), "version": torch.__version__}
    return res


def format_case(res: dict[str, Any]) -> str:
    g, v = res["gflops"], res["batched_vs_2d"]
    line = (f"{res['case']}: tgrad batched {g['tgrad batched']:.0f} GFLOP/s, 2-D {g['tgrad 2-D']:.0f} GFLOP/s "
            f"(batched/2-D rate {v['ratio']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]), "
            f"bytes {'each batch its 2-D product' if res['correct'] else 'WRONG'}")
    if "torch" in res:
        t = res["torch"]
        line += (f"; torch bf16 batched {g['torch batched']:.0f} GFLOP/s, 2-D {g['torch 2-D']:.0f} GFLOP/s, "
                 f"torch/tgrad time {t['ratio']:.2f} [{t['lo']:.2f}, {t['hi']:.2f}] {t['verdict']}")
    return line


def run(args: argparse.Namespace) -> int:
    return run_cases(args, CASES, run_case, format_case, "bench-batched.json")
