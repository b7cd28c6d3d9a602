"""``python -m tgrad bench --device cuda``: tgrad's CUDA backend against torch's CUDA bf16 matmul,
paired as on the CPU: each round times tgrad and torch back to back on the same operands (the
order alternating), so a clock or a neighbour that slows one round slows both; the record is each
side's median and the median of the per-round ratios. The result's bytes are checked against
tgrad on the CPU (the naive and tiled routes are meant to be bit-exact). On a machine without a
usable CUDA backend, or without torch built with CUDA, it refuses in one line (exit 2)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .shapes import Shape, _shape_str

DEFAULT_SHAPES: list[Shape] = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]


def refusal() -> str | None:
    """Why this machine cannot run the CUDA bench, or None."""
    import tgrad

    row = next((b for b in tgrad.backends() if b.name == "cuda"), None)
    if row is None or not row.built:
        return "the cuda backend is not built into this libtgrad"
    if not row.available:
        return f"the cuda backend is unavailable: {row.device}"
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return "torch is not installed (the peer to compare against)"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no usable CUDA device (torch.cuda.is_available() is False)"
    return None


def _time(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_shape(shape: Shape, rounds: int, seed: int) -> dict[str, Any]:
    import tgrad
    import torch  # type: ignore[import-not-found, unused-ignore]

    m, k, n = shape
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    with tgrad.Tensor.from_numpy(x) as ha, tgrad.Tensor.from_numpy(y) as hb, ha @ hb as hc:
        want = hc.to_bytes()
    ta, tb = torch.from_numpy(x).to("cuda", torch.bfloat16), torch.from_numpy(y).to("cuda", torch.bfloat16)
    with tgrad.Tensor.from_numpy(x, device="cuda") as a, tgrad.Tensor.from_numpy(y, device="cuda") as b:

        def ours() -> None:
            with a @ b as c:
                c.realize()

        def theirs() -> None:
            torch.matmul(ta, tb)
            torch.cuda.synchronize()

        with a @ b as c:  # the first call compiles the kernel: checked, not timed
            route, got = c.route, c.to_bytes()
        theirs()
        pairs = []
        for r in range(rounds):
            if r % 2:
                t_theirs, t_ours = _time(theirs), _time(ours)
            else:
                t_ours, t_theirs = _time(ours), _time(theirs)
            pairs.append((t_ours, t_theirs))
    flops = 2.0 * m * n * k
    ours_s = statistics.median(p[0] for p in pairs)
    theirs_s = statistics.median(p[1] for p in pairs)
    return {"shape": [m, k, n], "route": route, "byte_match_cpu": got == want, "rounds": rounds,
            "tgrad_ms": ours_s * 1e3, "torch_ms": theirs_s * 1e3,
            "tgrad_tflops": flops / ours_s / 1e12, "torch_tflops": flops / theirs_s / 1e12,
            "paired_ratio": statistics.median(p[0] / p[1] for p in pairs),
            "device": next(b.device for b in tgrad.backends() if b.name == "cuda"),
            "torch": torch.__version__, "torch_device": torch.cuda.get_device_name()}


def run(args: argparse.Namespace) -> int:
    why = refusal()
    if why is not None:
        print(f"python -m tgrad bench: error: --device cuda: {why}", file=sys.stderr)
        return 2
    shapes = [s for group in args.shape for s in group] if args.shape else DEFAULT_SHAPES
    rounds = args.repeat or 10
    results = []
    for shape in shapes:
        res = run_shape(shape, rounds, args.seed)
        results.append(res)
        print(f"{_shape_str(shape):<16} {res['route']:<12} tgrad {res['tgrad_ms']:9.3f} ms "
              f"({res['tgrad_tflops']:7.2f} TFLOP/s)  torch {res['torch_ms']:9.3f} ms "
              f"({res['torch_tflops']:7.2f} TFLOP/s)  tgrad/torch {res['paired_ratio']:7.2f}  "
              f"bytes {'= cpu' if res['byte_match_cpu'] else 'DIFFER from cpu'}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-cuda.json").write_text(json.dumps({"format": "tgrad-bench-cuda/1", "results": results}, indent=2))
    print(f"wrote {out / 'bench-cuda.json'}")
    return 0 if all(r["byte_match_cpu"] for r in results) else 1
