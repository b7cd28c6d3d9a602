"""``python -m tgrad bench --graph``: MLP blocks, tgrad fused and unfused against torch, paired.

The blocks are issue 20's ("Measured"), each at M rows of x (M = 1 is decode, 512 prefill):

- GELU MLP ``gelu(x @ W1.T + b1) @ W2.T + b2``, d -> h -> d;
- LLaMA-style SiLU-gated MLP ``(silu(x @ G.T) * (x @ U.T)) @ D.T``, d -> h -> d.

``--graph-shapes`` picks them: a set name (``--list`` shows them: ``tiny``, ``default``, ``small``,
``full``, the issue's sizes) or ``gelu:MxDxH`` / ``silu:MxDxH``. Seeded normal bf16 inputs, the
weights scaled by 1/sqrt(fan-in) as torch.nn.Linear's are, all resident before timing. Regions,
each a whole block computed into memory, with the same threads:

- ``tgrad``: the block's expression realized with fusion on (the matmuls' consumers run as their
  epilogues); the weights' ``.T`` views are made once, as a layer holds them;
- ``tgrad_unfused``: the same with ``tgrad.set_fusion(False)``: every op its own pass;
- ``torch_eager``: ``F.linear`` with ``F.gelu`` / ``F.silu`` on bf16 tensors sharing tgrad's input
  bytes, ``torch.set_num_threads`` as tgrad's;
- ``torch_compile``: ``torch.compile(the same function, dynamic=False)``, compiled before timing
  (its seconds reported); "unavailable: <reason>" where it fails, or after a compile took longer
  than ``--compile-limit``.

Bytes, before timing: tgrad fused and unfused must give the same bytes (else the block is not
timed, it is reported as DIFFER and the exit status is 1); the largest difference from torch's
result is reported, not required (torch's F.linear adds the bias before rounding, tgrad rounds
each op; docs/numerics.md). Timing, pairing, intervals, load and the environment are the matmul
bench's (tgrad.bench): interleaved rounds in a rotated order, ratio = median of peer / tgrad
over paired rounds with a seeded bootstrap interval. Output: ``key: value`` lines per block, then
bench-graph.md and bench-graph.json in ``--out`` (``--json``, ``--doc`` as for the matmul bench).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from .graph_blocks import (BLOCK_SETS, COMPILE_LIMIT_S, KIND_LABELS, MATMULS, REGION_LABELS,
                           Block, _bits, _compare, _Compile, _difference, _kernels, _product_routes,
                           _tgrad_program, _torch_regions, _weight_bits, _with_fusion,
                           parse_block_list)
from .graph_report import DOC_BEGIN, DOC_END, _report, _write, format_block, format_markdown
from .machine import (_cpu_sample, _maybe_reexec, _others_load, _wait_for_quiet_machine,
                      environment)
from .peers import _torch
from .progress import _Progress
from .record import doc_has_section
from .shapes import _positive_float
from .stats import bootstrap_ratio, verdict
from .timing import AUTO_BUDGET_S, HOT_LIMIT_S, _auto_repeat, _interleaved, _Timed, _wait_quiet

__all__ = ["BLOCK_SETS", "DOC_BEGIN", "DOC_END", "KIND_LABELS", "REGION_LABELS", "Block",
           "add_arguments", "auto_repeat", "format_block", "format_markdown", "parse_block_list",
           "run", "run_block"]

#: Without --repeat the matmul bench's rule sizes a run (about --budget seconds, at least 10
#: rounds), except that a round longer than SLOW_ROUND_S needs only SLOW_MIN_REPEAT: a full-size
#: block at M=512 takes over a minute per round on 2 cores (torch bf16 without AVX512-BF16 runs
#: at a few GFLOP/s), and 10 such rounds would hold the shared machine for a quarter of an hour.
SLOW_ROUND_S, SLOW_MIN_REPEAT = 5.0, 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The --graph options of ``python -m tgrad bench`` (the others are the matmul bench's)."""
    parser.add_argument("--graph", action="store_true",
                        help="time MLP blocks (tgrad fused and unfused, torch eager, torch.compile) "
                        "instead of matmul shapes (tgrad.bench.graph)")
    parser.add_argument("--graph-shapes", action="append", type=parse_block_list, default=None,
                        metavar="SET|KIND:MxDxH[,...]",
                        help=f"blocks for --graph (implies it): a set ({', '.join(BLOCK_SETS)}; "
                        "default: default) or gelu:MxDxH / silu:MxDxH; repeatable, comma-separated")
    parser.add_argument("--no-compile", action="store_true",
                        help="with --graph: leave torch.compile out")
    parser.add_argument("--compile-limit", type=_positive_float, default=COMPILE_LIMIT_S,
                        metavar="S", help="with --graph: after a torch.compile that took longer "
                        f"than S seconds, leave it out of the later blocks (default {COMPILE_LIMIT_S:g})")


def _blocks(args: argparse.Namespace) -> list[Block]:
    if args.graph_shapes:
        return [b for group in args.graph_shapes for b in group]
    return BLOCK_SETS["default"][1] + (BLOCK_SETS["full"][1] if args.full else [])


def _tgrad_bits(tgrad: Any, program: Callable[[], Any], fused: bool) -> np.ndarray:
    """The block's result bits with fusion on or off (the byte check's two sides)."""
    out = _with_fusion(tgrad, program, fused)()
    bits: np.ndarray = out.numpy().view(np.uint16)
    return bits



# ---- one block --------------------------------------------------------------------------------


def _new_result(block: Block, threads: int, isa: str, order: str) -> dict[str, Any]:
    return {
        "block": block.name, "kind": block.kind, "spec": block.spec, "m": block.m, "d": block.d,
        "h": block.h, "flops": block.flops, "threads": threads, "cpu_isa": isa,
        "matmul_order": order, "routes": [],
        "fused_equals_unfused": None, "byte_detail": None, "pipeline_ok": False, "errors": [],
        "kernels": {}, "median_s": math.nan, "gflops": math.nan, "repeat": 0, "regions": [],
        "orders": [], "samples": {}, "peers": {}, "peers_skipped": {}, "differences": {},
        "load": None, "hot": {}, "quiet": {},
    }


def run_block(block: Block, *, repeat: int | None = None, seed: int = 0, peers: bool = True,
              compiler: _Compile | None = None, budget_s: float = AUTO_BUDGET_S,
              tick: Callable[[int, int], None] | None = None,
              weights: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Check and time one block; returns one entry of the JSON's "results". `weights`: the
    block's weight bits when the caller has them (the same for every M of a block)."""
    import tgrad

    res = _new_result(block, tgrad.num_threads(), tgrad.cpu_isa(), tgrad.get_matmul_order())
    was_fused = tgrad.fusion_enabled()
    try:
        return _check_and_time(tgrad, block, res, repeat=repeat, seed=seed, peers=peers,
                               compiler=compiler or _Compile(peers, COMPILE_LIMIT_S),
                               budget_s=budget_s, tick=tick, weights=weights)
    finally:
        tgrad.set_fusion(was_fused)


def _check_and_time(tgrad: Any, block: Block, res: dict[str, Any], *, repeat: int | None,
                    seed: int, peers: bool, compiler: _Compile, budget_s: float,
                    tick: Callable[[int, int], None] | None,
                    weights: dict[str, np.ndarray] | None) -> dict[str, Any]:
    rng = np.random.default_rng([seed, MATMULS[block.kind], block.m, block.d, block.h])
    x_bits = _bits(rng, (block.m, block.d), 1.0)
    w_bits = weights if weights is not None else _weight_bits(block, seed)
    stage = "build"
    try:
        x = tgrad.Tensor.from_bf16_bits(x_bits)
        program = _tgrad_program(block.kind, x,
                                 {k: tgrad.Tensor.from_bf16_bits(v) for k, v in w_bits.items()})
        stage = "explain"
        res["kernels"] = {"fused": _kernels(tgrad, program, True),
                          "unfused": _kernels(tgrad, program, False)}
        res["routes"] = _product_routes(tgrad, program)
        stage = "fused"
        fused = _tgrad_bits(tgrad, program, True)
        stage = "unfused"
        unfused = _tgrad_bits(tgrad, program, False)
    except Exception as exc:  # report and go on with the next block
        res["errors"].append(f"{stage}: {type(exc).__name__}: {exc}")
        return res
    res["pipeline_ok"] = True
    same = _compare(fused, unfused)
    res["fused_equals_unfused"] = same["equal"]
    res["byte_detail"] = same.get("detail")
    if not same["equal"]:  # a fused kernel that computes something else is not worth timing
        res["errors"].append(f"fused and unfused results differ: {same['detail']}")
        return res

    timed = [_Timed("tgrad", _with_fusion(tgrad, program, True)),
             _Timed("tgrad_unfused", _with_fusion(tgrad, program, False))]
    torch = _torch() if peers else None
    if peers and torch is None:
        res["peers_skipped"]["torch_eager"] = res["peers_skipped"]["torch_compile"] = \
            "torch not importable"
    elif torch is not None:
        try:
            for name, region, first in _torch_regions(torch, block, x_bits, w_bits, compiler, res):
                res["differences"][name] = _difference(fused, first)
                timed.append(_Timed(name, region))
        except Exception as exc:  # torch eager itself failed: time tgrad alone
            res["peers_skipped"].setdefault("torch_eager", f"{type(exc).__name__}: {exc}")
    del fused, unfused
    try:
        _time(res, timed, repeat, budget_s, tick)
    except Exception as exc:
        res["errors"].append(f"timing: {type(exc).__name__}: {exc}")
        res["pipeline_ok"] = False
    return res


def auto_repeat(round_s: float, budget_s: float) -> int:
    """Rounds for a block whose round takes `round_s` (see SLOW_ROUND_S)."""
    if round_s > SLOW_ROUND_S:
        return max(SLOW_MIN_REPEAT, math.ceil(budget_s / round_s))
    return _auto_repeat(round_s, budget_s)


def _time(res: dict[str, Any], timed: list[Any], repeat: int | None, budget_s: float,
          tick: Callable[[int, int], None] | None) -> None:
    """The matmul bench's loop: the byte check was the first warm-up; a second round, timed,
    sizes the run and marks the short regions hot; then interleaved rounds, paired ratios."""
    start = time.perf_counter()
    hot_s = 0.0
    for t in timed:
        _wait_quiet()
        once = t.once()
        t.hot = once < HOT_LIMIT_S
        hot_s += once if t.hot else 0.0
    if repeat is None:
        repeat = auto_repeat(time.perf_counter() - start + hot_s, budget_s)
    cpu_before = _cpu_sample()
    res["orders"] = _interleaved(timed, repeat, tick)
    res["load"] = _others_load(cpu_before, _cpu_sample())
    samples = {t.name: np.array(t.samples) for t in timed}
    res["repeat"], res["regions"] = repeat, [t.name for t in timed]
    res["samples"] = {name: s.tolist() for name, s in samples.items()}
    res["hot"] = {t.name: t.hot for t in timed}
    res["quiet"] = {t.name: {"median_wait_s": float(np.median(t.quiet_waits)),
                             "timeouts": t.quiet_timeouts} for t in timed}
    res["median_s"] = float(np.median(samples["tgrad"]))
    res["gflops"] = res["flops"] / res["median_s"] / 1e9 if res["median_s"] > 0 else math.nan
    for name, s in samples.items():
        if name == "tgrad":
            continue
        ratio, lo, hi = bootstrap_ratio(s, samples["tgrad"])
        med = float(np.median(s))
        res["peers"][name] = {"median_s": med, "ratio": ratio, "lo": lo, "hi": hi,
                              "verdict": verdict(lo, hi),
                              "gflops": res["flops"] / med / 1e9 if med > 0 else math.nan}


# ---- the command ------------------------------------------------------------------------------


def _usage_error(message: str) -> int:
    print(f"python -m tgrad bench: error: {message}", file=sys.stderr)
    return 2


def _set_torch_threads(threads: int, peers: bool) -> dict[str, str]:
    torch = _torch() if peers else None
    if torch is None:
        return {}
    torch.set_num_threads(threads)
    return {"torch": str(torch.get_num_threads())}


def run(args: argparse.Namespace) -> int:
    """``python -m tgrad bench --graph``: exit status 0, 1 when bytes differ or a block failed, 2
    for bad command-line input."""
    if args.shape:
        return _usage_error("--shape is for matmul shapes; --graph takes --graph-shapes")
    blocks = _blocks(args)
    if args.doc is not None and not doc_has_section(args.doc, DOC_BEGIN, DOC_END):
        # fail before minutes of measurement, not after
        return _usage_error(f"--doc {args.doc}: needs a '{DOC_BEGIN}' line and a '{DOC_END}' "
                            "line")
    if args.list:
        for block in blocks:
            print(f"{block.spec:<24} {block.name}, M={block.m}")
        return 0
    _maybe_reexec(args)

    import tgrad

    if args.threads is not None:
        tgrad.set_num_threads(args.threads)
    threads = tgrad.num_threads()
    peer_threads = _set_torch_threads(threads, not args.no_peers)
    env = environment()
    started = _dt.datetime.now(_dt.timezone.utc)
    cpu_start = _cpu_sample()
    results, failed = _run_blocks(args, blocks)
    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    env["others_load"] = _others_load(cpu_start, _cpu_sample())
    report = _report(args, env, started, threads, peer_threads, results)
    _write(args, report)
    return 1 if failed else 0


def _run_blocks(args: argparse.Namespace, blocks: list[Block]) -> tuple[list[dict[str, Any]], bool]:
    """Each block checked and timed, its lines printed as it ends; (results, any failed). The
    weights are made once per (kind, d, h): the same at every M."""
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = _Progress(len(blocks), bool(show))
    compiler = _Compile(not args.no_peers and not args.no_compile, args.compile_limit)
    results: list[dict[str, Any]] = []
    weights: tuple[tuple[str, int, int], dict[str, np.ndarray]] | None = None
    failed = False
    try:
        for i, block in enumerate(blocks):
            progress.start(block.spec)
            waited = _wait_for_quiet_machine(args.wait_quiet)
            key = (block.kind, block.d, block.h)
            if weights is None or weights[0] != key:
                weights = (key, _weight_bits(block, args.seed))
            res = run_block(block, repeat=args.repeat, seed=args.seed, peers=not args.no_peers,
                            compiler=compiler, budget_s=args.budget, tick=progress.tick,
                            weights=weights[1])
            res["waited_for_quiet_s"] = waited
            results.append(res)
            progress.advance()
            progress.write(("\n" if i else "") + "\n".join(format_block(res)))
            failed |= res["fused_equals_unfused"] is not True or not res["pipeline_ok"]
    finally:
        progress.close()
    return results, failed
