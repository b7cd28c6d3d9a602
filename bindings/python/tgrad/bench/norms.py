"""``python -m tgrad bench --norms``: tgrad's correctly rounded rms_norm, layer_norm and rope
against torch's eager bf16 ``F.rms_norm`` / ``F.layer_norm`` and Hugging Face Llama's rotary
embedding written in torch (float32 angles, cos/sin rounded to bf16, bf16 products), paired and interleaved like the reduction
bench (same inputs resident, the output realized, the same threads); ratios are medians of paired
ratios with a bootstrap 95% interval (bench.stats).

Each case is checked first: the bytes at T threads equal those at one thread and those of the
portable loops (tgrad_set_cpu_isa("portable")), an independent build of the fast path. The
exact-reference proof is tests/python/test_norms.py (too slow for a bench)."""

from __future__ import annotations

import argparse
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
    op: str  # "rms_norm", "layer_norm" or "rope"


CASES = [Case("rms_norm, [4096, 4096] bf16, weight, eps 1e-6", (4096, 4096), "rms_norm"),
         Case("layer_norm, [4096, 1024] bf16, weight and bias, eps 1e-5", (4096, 1024), "layer_norm"),
         Case("rope, [1, 8, 512, 128] bf16, positions 0..511, base 10000", (1, 8, 512, 128), "rope")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--norms", action="store_true",
                        help="time the correctly rounded rms_norm and layer_norm against torch's eager bf16 "
                        "ones (tgrad.bench.norms)")


def _call(tgrad: Any, case: Case, x: Any, w: Any, b: Any) -> Any:
    n = case.shape[-1]
    if case.op == "rope":
        return tgrad.rope(x, np.arange(case.shape[-2], dtype=np.int32), 10000.0)
    if case.op == "rms_norm":
        return tgrad.rms_norm(x, n, w, eps=1e-6)
    return tgrad.layer_norm(x, n, w, b, eps=1e-5)


def _check(tgrad: Any, case: Case, x: Any, w: Any, b: Any) -> bool:
    got = _call(tgrad, case, x, w, b).numpy().view(np.uint16)
    threads, isa = tgrad.num_threads(), tgrad._cpu_isa_setting()
    try:
        tgrad.set_num_threads(1)
        one = _call(tgrad, case, x, w, b).numpy().view(np.uint16)
        tgrad.set_cpu_isa("portable")
        portable = _call(tgrad, case, x, w, b).numpy().view(np.uint16)
    finally:
        tgrad.set_num_threads(threads)
        tgrad.set_cpu_isa(isa)
    return bool(np.array_equal(got, one) and np.array_equal(got, portable))


def run_case(case: Case, *, budget_s: float, seed: int, peers: bool) -> dict[str, Any]:
    import ml_dtypes

    import tgrad

    rng = np.random.default_rng(seed)
    host = rng.standard_normal(case.shape, dtype=np.float32).astype(ml_dtypes.bfloat16)
    whost = (1 + 0.1 * rng.standard_normal(case.shape[-1], dtype=np.float32)).astype(ml_dtypes.bfloat16)
    bhost = (0.1 * rng.standard_normal(case.shape[-1], dtype=np.float32)).astype(ml_dtypes.bfloat16)
    x, w, b = (tgrad.Tensor.from_bf16_bits(h.view(np.uint16)) for h in (host, whost, bhost))
    counts = tgrad.norms.rope_slow_path_counts if case.op == "rope" else tgrad.norms.slow_path_counts
    before = counts()
    res: dict[str, Any] = {"case": case.name, "correct": _check(tgrad, case, x, w, b)}
    after = counts()
    res["slow_path"] = [after[0] - before[0], after[1] - before[1]]
    regions: list[_Timed] = [_Timed("tgrad", lambda: _call(tgrad, case, x, w, b).realize())]
    torch = _torch() if peers else None
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(h.view(np.int16)).view(torch.bfloat16) for h in (host, whost, bhost))
        F = torch.nn.functional
        n = case.shape[-1]
        call: Callable[[], Any] = ((lambda: F.rms_norm(tx, (n,), tw, 1e-6)) if case.op == "rms_norm"
                                   else (lambda: F.layer_norm(tx, (n,), tw, tb, 1e-5)) if case.op == "layer_norm"
                                   else _hf_rope(torch, tx, case.shape[-2], n))
        regions.append(_Timed("torch", call))
    round_s = warm_up(regions)
    repeat = int(min(200, max(10, budget_s / max(round_s, 1e-9))))
    _interleaved(regions, repeat, balanced=True)
    samples = {t.name: np.array(t.samples) for t in regions}
    res.update({"repeat": repeat, "median_s": {name: float(np.median(s)) for name, s in samples.items()}})
    if torch is not None:
        ratio, lo, hi = bootstrap_ratio(samples["torch"], samples["tgrad"])
        res["torch"] = {"ratio": ratio, "lo": lo, "hi": hi, "verdict": verdict(lo, hi), "version": torch.__version__}
    return res


def _hf_rope(torch: Any, tx: Any, L: int, d: int) -> Callable[[], Any]:
    """Hugging Face Llama's rotary embedding in torch: float32 angles, cos/sin rounded to bf16."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))

    def call() -> Any:
        freqs = torch.arange(L).float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        rotated = torch.cat((-tx[..., d // 2:], tx[..., :d // 2]), dim=-1)
        return tx * cos + rotated * sin

    return call


def format_case(res: dict[str, Any]) -> str:
    evaluated, slow = res["slow_path"]
    line = (f"{res['case']}: tgrad {res['median_s']['tgrad'] * 1e3:.3f} ms, bytes "
            f"{'identical across threads and variants' if res['correct'] else 'DIFFER'}, slow path "
            f"{slow} of {evaluated}")
    return line + torch_suffix(res)


def run(args: argparse.Namespace) -> int:
    return run_cases(args, CASES, run_case, format_case, "bench-norms.json")
