"""Issue 37's measurements on a lent NVIDIA GPU: attention and the Llama's prefill and decode on
tgrad's CUDA backend against torch on the same GPU, each result's bytes checked against tgrad on
the CPU (docs/cuda.md, "On a GPU"). Needs torch with CUDA and transformers; from the repository:

    python tools/bench_cuda_device.py OUT.json [--tokens N] [--device cuda]

(--device opencl runs the same script against PoCL and torch on the CPU: how the script itself is
checked on a machine without a GPU.)

Times: the median of `reps` calls after warm-up calls that compile every kernel (tgrad's realize
synchronizes; torch's side ends with torch.cuda.synchronize()). The first (compiling) call's time is
recorded too: NVRTC builds each kernel text once per process.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import tgrad
import tgrad.models
import tgrad.nn.functional as F
from tgrad.bench.generate import SHAPE, write_model

DEV = "cuda"
TORCH_DEV = "cuda"


def _sync() -> None:
    if TORCH_DEV == "cuda":
        torch.cuda.synchronize()


@functools.cache
def _llama() -> Path:
    """The ~100 M Llama checkpoint (bench --generate's shape), written once for every part."""
    return write_model(Path(tempfile.mkdtemp()) / "llama")


def _ms(fn: Callable[[], Any], reps: int, sync: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def attention(batch: int, heads: int, length: int, sources: int, features: int, reps: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((batch, heads, n, features)).astype(np.float32) for n in (length, sources, sources))
    causal = length == sources
    on = {d: [tgrad.Tensor.from_numpy(x, device=d) for x in (q, k, v)] for d in ("cpu", DEV)}

    def run(device: str) -> tgrad.Tensor:
        query, key, value = on[device]
        return F.scaled_dot_product_attention(query, key, value, is_causal=causal).realize()

    start = time.perf_counter()
    got = run(DEV).to_bytes()
    first = time.perf_counter() - start
    same = got == run("cpu").to_bytes()
    tq, tk, tv = (torch.from_numpy(x).to(TORCH_DEV, torch.bfloat16) for x in (q, k, v))
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
    sdpa()
    _sync()
    return {"shape": [batch, heads, length, sources, features], "causal": causal, "cpu_bytes": same,
            "tgrad_first_ms": 1e3 * first, "tgrad_ms": _ms(lambda: run(DEV), reps),
            "torch_ms": _ms(sdpa, reps, _sync)}


def matmul_tc(n: int, reps: int) -> dict[str, Any]:
    """An n^3 product on route tiled (exact, the default) and on tc (tgrad.matmul_precision("bounded")),
    against torch; tc's bytes are not the CPU's (its bound: docs/kernels.md), so only tiled's are checked."""
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    a, b = tgrad.Tensor.from_numpy(x, device=DEV), tgrad.Tensor.from_numpy(y, device=DEV)
    out: dict[str, Any] = {"n": n}
    for policy in ("exact", "bounded"):
        with tgrad.matmul_precision(policy):
            c = (a @ b).realize()
            out[f"{policy}_route"] = c.route
            out[f"{policy}_ms"] = _ms(lambda: (a @ b).realize(), reps)
    ta, tb = torch.from_numpy(x).to(TORCH_DEV, torch.bfloat16), torch.from_numpy(y).to(TORCH_DEV, torch.bfloat16)
    torch.matmul(ta, tb)
    _sync()
    out["torch_ms"] = _ms(lambda: torch.matmul(ta, tb), reps, _sync)
    return out


def model_fresh(tokens: int, prompt: int) -> dict[str, Any]:
    """generate(tokens) on a freshly loaded model, twice: the first compiles every kernel text it
    meets (prefill's, and each decode step's attention and cache-write kernels, whose shapes
    change with the key length), the second finds them compiled (while they fit the device's
    program cache)."""
    path = _llama()
    ids = np.random.default_rng(1).integers(3, SHAPE["vocab_size"], (1, prompt))
    gpu = tgrad.models.from_pretrained(path, device=DEV)
    out: dict[str, Any] = {"prompt": prompt, "new_tokens": tokens}
    for run in ("first", "second"):
        start = time.perf_counter()
        gpu.generate(ids, tokens)
        out[f"{run}_s"] = time.perf_counter() - start
    return out


def one_row(reps: int) -> dict[str, Any]:
    """x @ W.T for one row x [1, K] (a decoding step's products) on the naive and the tiled route:
    the same bytes (both the documented order), different speed."""
    rng = np.random.default_rng(3)
    out: dict[str, Any] = {}
    for k, n in ((1024, 1024), (1024, 2816), (2816, 1024), (1024, 8192), (4096, 4096)):
        x = tgrad.Tensor.from_numpy(rng.standard_normal((1, k)).astype(np.float32), device=DEV)
        w = tgrad.Tensor.from_numpy(rng.standard_normal((n, k)).astype(np.float32), device=DEV)
        row: dict[str, Any] = {}
        for route in ("naive", "tiled"):
            tgrad.set_device_route(route)
            try:
                row[f"{route}_bytes"] = (x @ w.T).realize().to_bytes()
                row[f"{route}_ms"] = _ms(lambda: (x @ w.T).realize(), reps)
            finally:
                tgrad.set_device_route("auto")
        row["same_bytes"] = row.pop("naive_bytes") == row.pop("tiled_bytes")
        out[f"1x{k}x{n}"] = row
    return out


def model_routes(tokens: int, prompt: int) -> dict[str, Any]:
    """generate(ids, tokens) with every product on one route (naive, then tiled), after a warm-up
    call that compiles: the decode's speed per route, and whether the tokens agree."""
    path = _llama()
    ids = np.random.default_rng(1).integers(3, SHAPE["vocab_size"], (1, prompt))
    gpu = tgrad.models.from_pretrained(path, device=DEV)
    out: dict[str, Any] = {}
    tokens_of: dict[str, Any] = {}
    for route in ("naive", "tiled"):
        tgrad.set_device_route(route)
        try:
            gpu.generate(ids, tokens)
            start = time.perf_counter()
            tokens_of[route] = np.asarray(gpu.generate(ids, tokens))
            out[f"{route}_generate_s"] = time.perf_counter() - start
            out[f"{route}_prefill_ms"] = _ms(lambda: gpu(ids).realize(), 3)
        finally:
            tgrad.set_device_route("auto")
    out["same_tokens"] = bool(np.array_equal(tokens_of["naive"], tokens_of["tiled"]))
    return out


def model(tokens: int, prompt: int) -> dict[str, Any]:
    path = _llama()
    ids = np.random.default_rng(1).integers(3, SHAPE["vocab_size"], (1, prompt))
    out: dict[str, Any] = {"shape": SHAPE, "prompt": prompt, "new_tokens": tokens}
    cpu = tgrad.models.from_pretrained(path)
    gpu = tgrad.models.from_pretrained(path, device=DEV)
    start = time.perf_counter()
    got = gpu.generate(ids, tokens)
    out["tgrad_first_generate_s"] = time.perf_counter() - start
    want = cpu.generate(ids, tokens)
    out["tokens_equal_cpu"] = bool(np.array_equal(np.asarray(got), np.asarray(want)))
    out["logits_equal_cpu"] = gpu(ids[:, :16]).to_bytes() == cpu(ids[:, :16]).to_bytes()
    out["tgrad_prefill_ms"] = _ms(lambda: gpu(ids).realize(), 3)
    start = time.perf_counter()
    gpu.generate(ids, tokens)
    total = time.perf_counter() - start
    out["tgrad_decode_tok_s"] = (tokens - 1) / max(total - out["tgrad_prefill_ms"] / 1e3, 1e-9)

    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(TORCH_DEV).eval()
    tid = torch.from_numpy(ids).to(TORCH_DEV)
    with torch.no_grad():
        def generate() -> Any:
            return hf.generate(tid, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)

        generate()
        _sync()
        out["torch_prefill_ms"] = _ms(lambda: hf(tid), 5, _sync)
        start = time.perf_counter()
        hf_tokens = generate()
        _sync()
        total = time.perf_counter() - start
    out["torch_decode_tok_s"] = (tokens - 1) / max(total - out["torch_prefill_ms"] / 1e3, 1e-9)
    new = hf_tokens[0, prompt:].cpu().numpy()
    mine = np.asarray(got).reshape(-1)
    differ = np.flatnonzero(new != mine)
    out["torch_first_divergence"] = int(differ[0]) if differ.size else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--device", default="cuda", choices=["cuda", "opencl"])
    parser.add_argument("--parts", default="attention,model", help="comma-separated: attention, model, tc, fresh, rows")
    args = parser.parse_args()
    global DEV, TORCH_DEV
    DEV, TORCH_DEV = args.device, "cuda" if args.device == "cuda" else "cpu"
    report: dict[str, Any] = {"device": next(b.device for b in tgrad.backends() if b.name == DEV),
                              "torch": torch.__version__}
    parts = {"attention": [("attention_prefill", lambda: attention(1, 16, 512, 512, 64, 5)),
                           ("attention_decode", lambda: attention(1, 16, 1, 512, 64, 10))],
             "model": [("model", lambda: model(args.tokens, args.prompt))],
             "tc": [("matmul_tc_4096", lambda: matmul_tc(4096, 5)), ("matmul_tc_8192", lambda: matmul_tc(8192, 3))],
             "fresh": [("model_fresh", lambda: model_fresh(args.tokens, args.prompt))],
             "rows": [("one_row", lambda: one_row(20)), ("model_routes", lambda: model_routes(args.tokens, args.prompt))]}
    chosen = [part for name in args.parts.split(",") for part in parts[name]]
    for name, fn in chosen:
        try:
            report[name] = fn()
        except Exception as exc:  # one part failing must not lose the others' numbers
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(name, json.dumps(report[name]), flush=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
