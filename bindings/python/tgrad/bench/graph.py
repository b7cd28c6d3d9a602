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
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .lines import _fmt_s
from .machine import _cpu_sample, _maybe_reexec, _others_load, _wait_for_quiet_machine, environment
from .peers import _torch
from .progress import _Progress
from .record import _finite, _report_head, update_doc
from .report import _fmt_gflops, _fmt_load, _fmt_ratio, _fmt_time, _load_line
from .shapes import _positive_float
from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, bootstrap_ratio, verdict
from .timing import AUTO_BUDGET_S, HOT_LIMIT_S, _Timed, _auto_repeat, _interleaved, _wait_quiet

__all__ = ["BLOCK_SETS", "Block", "add_arguments", "auto_repeat", "format_block", "format_markdown",
           "parse_block_list", "run", "run_block"]

#: Matmuls per block: the flops are 2 * M * d * h per matmul.
MATMULS = {"gelu": 2, "silu": 3}
KIND_LABELS = {"gelu": "GELU MLP", "silu": "SiLU-gated MLP"}
#: Regions besides "tgrad" (fused), in the report's column order.
REGION_LABELS = {"tgrad": "tgrad fused", "tgrad_unfused": "tgrad unfused",
                 "torch_eager": "torch eager bf16", "torch_compile": "torch.compile bf16"}
#: Seconds a torch.compile of one block may take before the later blocks leave it out (a first
#: compile of a d=1024 block took 63 s on the 2-core Zen 3 machine under load, 6 s from inductor's
#: cache).
COMPILE_LIMIT_S = 300.0
DOC_BEGIN, DOC_END = "<!-- bench-graph:begin -->", "<!-- bench-graph:end -->"
#: Without --repeat the matmul bench's rule sizes a run (about --budget seconds, at least 10
#: rounds), except that a round longer than SLOW_ROUND_S needs only SLOW_MIN_REPEAT: a full-size
#: block at M=512 takes over a minute per round on 2 cores (torch bf16 without AVX512-BF16 runs
#: at a few GFLOP/s), and 10 such rounds would hold the shared machine for a quarter of an hour.
SLOW_ROUND_S, SLOW_MIN_REPEAT = 5.0, 5


@dataclass(frozen=True)
class Block:
    """One MLP block at M rows: d -> h -> d."""

    kind: str  # "gelu" or "silu"
    m: int
    d: int
    h: int

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.m}x{self.d}x{self.h}"

    @property
    def name(self) -> str:
        return f"{KIND_LABELS[self.kind]} {self.d}->{self.h}->{self.d}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.d * self.h * MATMULS[self.kind]


def _grid(kind: str, d: int, h: int, ms: tuple[int, ...]) -> list[Block]:
    return [Block(kind, m, d, h) for m in ms]


#: LLaMA's hidden size 11008 is 8/3 of 4096 rounded up to a multiple of 256; 2816 is 1024's.
#: "full" is issue 20's: GELU 4096 -> 16384 -> 4096 (the issue's "1024x4096 -> 16384 -> 4096",
#: read as x [M, 4096] at the issue's M) and SiLU 4096 -> 11008 -> 4096.
BLOCK_SETS: dict[str, tuple[str, list[Block]]] = {
    "tiny": ("d=64, M=1: a smoke test", [Block("gelu", 1, 64, 256), Block("silu", 1, 64, 176)]),
    "default": ("d=1024, M=1 and 16: under a minute on 2 cores with torch.compile cached",
                _grid("gelu", 1024, 4096, (1, 16)) + _grid("silu", 1024, 2816, (1, 16))),
    "small": ("d=1024, M=1, 16 and 512 (torch bf16 takes seconds per call at M=512 without "
              "AVX512-BF16)",
              _grid("gelu", 1024, 4096, (1, 16, 512)) + _grid("silu", 1024, 2816, (1, 16, 512))),
    "full": ("issue 20's blocks, M=1, 16 and 512 (minutes; --repeat 3 at M=512)",
             _grid("gelu", 4096, 16384, (1, 16, 512)) + _grid("silu", 4096, 11008, (1, 16, 512))),
}

_SPEC_RE = re.compile(r"^\s*(gelu|silu)\s*:\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_block_list(text: str) -> list[Block]:
    """'tiny,gelu:16x1024x4096' -> the blocks; a set name or KIND:MxDxH per item (argparse turns
    the error into exit status 2)."""
    blocks: list[Block] = []
    for item in text.split(","):
        name = item.strip()
        if name in BLOCK_SETS:
            blocks += BLOCK_SETS[name][1]
            continue
        match = _SPEC_RE.match(item)
        if not match or min(int(g) for g in match.groups()[1:]) < 1:
            raise argparse.ArgumentTypeError(
                f"invalid block {item!r}: expected a set ({', '.join(BLOCK_SETS)}) or "
                f"gelu:MxDxH / silu:MxDxH with positive integers, e.g. gelu:16x1024x4096")
        kind, m, d, h = match.groups()
        blocks.append(Block(kind, int(m), int(d), int(h)))
    return blocks


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


# ---- inputs and programs ----------------------------------------------------------------------


def _bits(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    from .. import _conformance

    f32_to_bf16_bits: Callable[[np.ndarray], np.ndarray] = \
        _conformance.module("oracle").f32_to_bf16_bits
    return f32_to_bf16_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))


def _weight_bits(block: Block, seed: int) -> dict[str, np.ndarray]:
    """The block's weights as bf16 bits, seeded by (seed, kind, d, h): the same at every M."""
    d, h = block.d, block.h
    rng = np.random.default_rng([seed, MATMULS[block.kind], d, h])
    if block.kind == "gelu":
        return {"w1": _bits(rng, (h, d), d ** -0.5), "b1": _bits(rng, (h,), d ** -0.5),
                "w2": _bits(rng, (d, h), h ** -0.5), "b2": _bits(rng, (d,), h ** -0.5)}
    return {"gate": _bits(rng, (h, d), d ** -0.5), "up": _bits(rng, (h, d), d ** -0.5),
            "down": _bits(rng, (d, h), h ** -0.5)}


def _tgrad_program(kind: str, x: Any, w: dict[str, Any]) -> Callable[[], Any]:
    """The block as tgrad ops, lazily; the weights' .T views are made here, once."""
    if kind == "gelu":
        w1t, b1, w2t, b2 = w["w1"].T, w["b1"], w["w2"].T, w["b2"]
        return lambda: (x @ w1t + b1).gelu() @ w2t + b2
    gate_t, up_t, down_t = w["gate"].T, w["up"].T, w["down"].T
    return lambda: ((x @ gate_t).silu() * (x @ up_t)) @ down_t


def _torch_function(torch: Any, kind: str) -> Callable[..., Any]:
    """The block as torch ops, one new function per call (torch.compile caches per function)."""
    F = torch.nn.functional
    if kind == "gelu":
        def gelu_mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
            return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)
        return gelu_mlp

    def silu_mlp(x: Any, gate: Any, up: Any, down: Any) -> Any:
        return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)
    return silu_mlp


def _with_fusion(tgrad: Any, program: Callable[[], Any], fused: bool) -> Callable[[], Any]:
    """A region: set the process-wide fusion switch (read when realize schedules), realize."""
    def region() -> Any:
        tgrad.set_fusion(fused)
        return program().realize()
    return region


def _tgrad_bits(tgrad: Any, program: Callable[[], Any], fused: bool) -> np.ndarray:
    """The block's result bits with fusion on or off (the byte check's two sides)."""
    out = _with_fusion(tgrad, program, fused)()
    bits: np.ndarray = out.numpy().view(np.uint16)
    return bits


def _kernels(tgrad: Any, program: Callable[[], Any], fused: bool) -> list[str]:
    """The kernels realize would run, from explain(): e.g. ['matmul+add+gelu', 'matmul+add']."""
    tgrad.set_fusion(fused)
    plan = program().explain(json=True)
    return [str(step.get("kernel") or step.get("op")) for step in plan.get("steps", [])]


def _compare(fused: np.ndarray, unfused: np.ndarray) -> dict[str, Any]:
    """Fused against unfused, bit for bit; the first difference named."""
    if fused.shape != unfused.shape:
        return {"equal": False, "detail": f"shapes {fused.shape} and {unfused.shape}"}
    bad = np.argwhere(fused != unfused)
    if len(bad) == 0:
        return {"equal": True}
    i, j = (int(v) for v in bad[0])
    return {"equal": False, "mismatches": int(len(bad)),
            "detail": f"{len(bad)} of {fused.size} elements differ, first at [{i}, {j}]: "
                      f"fused 0x{int(fused[i, j]):04x}, unfused 0x{int(unfused[i, j]):04x}"}


def _difference(ours_bits: np.ndarray, theirs: Any) -> dict[str, Any]:
    """How far torch's result is from tgrad's (both bf16 values, compared in float32)."""
    from .. import _conformance

    ours = _conformance.module("oracle").bf16_bits_to_f32(ours_bits)
    them = theirs.float().numpy()
    if them.shape != ours.shape:
        return {"max_abs": math.nan, "detail": f"torch's result is {them.shape}, tgrad's {ours.shape}"}
    with np.errstate(invalid="ignore"):
        diff = np.abs(ours.astype(np.float64) - them.astype(np.float64))
    return {"max_abs": float(np.nanmax(diff)) if diff.size else 0.0,
            "max_abs_out": float(np.nanmax(np.abs(them))) if them.size else 0.0,
            "differ_share": float(np.mean(ours != them)) if them.size else 0.0,
            "nan_mismatch": int(np.sum(np.isnan(ours) != np.isnan(them)))}


# ---- torch ------------------------------------------------------------------------------------


class _Compile:
    """torch.compile's state over a run: left out once a compile failed to start or ran long."""

    def __init__(self, enabled: bool, limit_s: float) -> None:
        self.limit_s = limit_s
        self.off: str | None = None if enabled else "left out (--no-compile)"

    def build(self, torch: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[
            Callable[[], Any] | None, Any, dict[str, Any]]:
        """(the compiled region or None, its first result, what happened)."""
        if self.off is not None:
            return None, None, {"unavailable": self.off}
        try:
            torch._dynamo.reset()  # a fresh cache: dynamo's recompile limit counts per function
            compiled = torch.compile(fn, dynamic=False)
            start = time.perf_counter()
            first = compiled(*args)
            seconds = time.perf_counter() - start
        except Exception as exc:
            why = (str(exc).strip().splitlines() or [""])[0][:160]
            return None, None, {"unavailable": f"{type(exc).__name__}: {why}"}
        info: dict[str, Any] = {"compile_s": seconds}
        if seconds > self.limit_s:
            self.off = (f"unavailable: an earlier block's compile took {seconds:.0f} s "
                        f"(--compile-limit {self.limit_s:g})")
        return (lambda: compiled(*args)), first, info


def _torch_regions(torch: Any, block: Block, x_bits: np.ndarray, w_bits: dict[str, np.ndarray],
                   compiler: _Compile, res: dict[str, Any]) -> list[tuple[str, Callable[[], Any], Any]]:
    """(name, region, its first result) for torch eager and torch.compile; skipped ones are named
    in res["peers_skipped"]."""
    def as_torch(bits: np.ndarray) -> Any:  # shares the bytes
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)

    names = ("w1", "b1", "w2", "b2") if block.kind == "gelu" else ("gate", "up", "down")
    args = (as_torch(x_bits), *(as_torch(w_bits[n]) for n in names))
    fn = _torch_function(torch, block.kind)
    regions = [("torch_eager", lambda: fn(*args), fn(*args))]
    compiled, first, info = compiler.build(torch, _torch_function(torch, block.kind), args)
    res["torch_compile"] = info
    if compiled is None:
        res["peers_skipped"]["torch_compile"] = info["unavailable"]
    else:
        regions.append(("torch_compile", compiled, first))
    return regions


# ---- one block --------------------------------------------------------------------------------


def _new_result(block: Block, threads: int, isa: str) -> dict[str, Any]:
    return {
        "block": block.name, "kind": block.kind, "spec": block.spec, "m": block.m, "d": block.d,
        "h": block.h, "flops": block.flops, "threads": threads, "cpu_isa": isa,
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

    res = _new_result(block, tgrad.num_threads(), tgrad.cpu_isa())
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


# ---- reports ----------------------------------------------------------------------------------


def _fmt_diff(d: dict[str, Any] | None) -> str:
    if not d or not math.isfinite(d.get("max_abs", math.nan)):
        return "—" if not d else str(d.get("detail", "—"))
    # no '|' in the text: it is a markdown table cell
    share = 100 * d["differ_share"]
    digits = 1 if 0 < share < 1 else 0  # 0.4%, not 0%, when a few elements differ
    return (f"{d['max_abs']:.3g} (largest output {d['max_abs_out']:.3g}; "
            f"{share:.{digits}f}% of elements differ)")


def format_block(res: dict[str, Any]) -> list[str]:
    """The key: value lines printed for one block (the first five are the stable contract)."""
    equal = res["fused_equals_unfused"]
    lines = [
        f"graph_block: {res['spec']}",
        f"graph_name: {res['block']}",
        f"graph_fused_equals_unfused: {'none' if equal is None else str(equal).lower()}",
        f"graph_pipeline_ok: {str(res['pipeline_ok']).lower()}",
        f"graph_median_s: {_fmt_s(res['median_s'])}",
        f"graph_gflops: {res['gflops']:.2f}",
        f"graph_repeat: {res['repeat']}",
        f"graph_threads: {res['threads']}",
        f"graph_cpu_isa: {res['cpu_isa']}",
    ]
    for side in ("fused", "unfused"):
        if side in res["kernels"]:
            lines.append(f"graph_kernels_{side}: {', '.join(res['kernels'][side])}")
    if res["byte_detail"]:
        lines.append(f"graph_byte_detail: {res['byte_detail']}")
    if res.get("load"):
        lines.append(f"graph_others_cpu: {res['load']['others']:.3f}")
    for err in res["errors"]:
        lines.append(f"graph_error: {err}")
    compile_s = (res.get("torch_compile") or {}).get("compile_s")
    for name, p in res["peers"].items():
        lines.append(f"peer_{name}_median_s: {_fmt_s(p['median_s'])}")
        lines.append(f"ratio_{name}: {p['ratio']:.2f} [{p['lo']:.2f}, {p['hi']:.2f}] {p['verdict']}")
        if name in res["differences"]:
            lines.append(f"diff_{name}: {_fmt_diff(res['differences'][name])}")
        if name == "torch_compile" and compile_s is not None:
            lines.append(f"peer_torch_compile_compile_s: {compile_s:.1f}")
    for name, why in res["peers_skipped"].items():
        lines.append(f"peer_{name}: unavailable: {why.removeprefix('unavailable: ')}")
    return lines


def _bytes_cell(res: dict[str, Any]) -> str:
    if res["fused_equals_unfused"] is True:
        return "identical"
    if res["fused_equals_unfused"] is False:
        return "**DIFFER**"
    return "**FAILED**"


def _region_cells(res: dict[str, Any], name: str) -> list[str]:
    p = res["peers"].get(name)
    if p is None:
        why = res["peers_skipped"].get(name)
        return ["unavailable" if why else "—", "—"]
    return [_fmt_time(p["median_s"]), _fmt_ratio(p)]


def format_markdown(report: dict[str, Any]) -> str:
    """bench-graph.md: how it was run, then one row per block."""
    env, results = report["environment"], report["results"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items()
                         if v and k in ("numpy", "torch"))
    out = [
        f"# tgrad bench --graph, {report['date']}",
        "",
        f"Command: `{report['command']}`  ",
        f"CPU: {env['cpu_model']} ({env['cpus_usable']} usable CPUs; "
        f"{', '.join(env['cpu_flags']) or 'no flags read'}), load average at start "
        f"{', '.join(f'{x:.2f}' for x in env['loadavg'] or [])}, at end "
        f"{', '.join(f'{x:.2f}' for x in env.get('loadavg_end') or [])}  ",
        f"tgrad {env['tgrad_library']}, ISA `{env['tgrad_cpu_isa']}`, {report['threads']} threads; "
        f"torch threads: {report['peer_threads'].get('torch', '—')}; {versions}",
        "",
        _load_line(env.get("others_load")),
        "",
        "Each region computes a whole block into memory, inputs and weights resident: tgrad "
        "realized with fusion on (\"fused\") and off (`tgrad.set_fusion(False)`, \"unfused\"), "
        "torch eager bf16 (`F.linear`, `F.gelu`/`F.silu`) and `torch.compile` of the same function "
        "(`dynamic=False`, compiled before timing). Time is the median of interleaved rounds "
        "(order rotated each round). A ratio is the median over paired rounds of region time / "
        "tgrad fused time (> 1: tgrad fused is faster; for \"unfused\", what fusion saves) with "
        "a 95% bootstrap interval; **win** only when the interval is above 1, loss when below, "
        "else tie. \"fused = unfused\" is a byte-for-byte check before timing. The last column is "
        "the largest |tgrad - torch eager| (torch's F.linear rounds once after the bias, tgrad "
        "rounds each op).",
        "",
    ]
    head = ["block", "M", "fused = unfused", "reps", "others' CPU", "tgrad fused",
            "tgrad GFLOP/s", "tgrad unfused", "unfused / fused", "torch eager",
            "torch eager / tgrad", "torch.compile", "torch.compile / tgrad",
            "max diff vs torch eager"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        row = [res["block"], str(res["m"]), _bytes_cell(res), str(res["repeat"]),
               _fmt_load(res.get("load")), _fmt_time(res["median_s"]),
               _fmt_gflops(res["gflops"])]
        for name in ("tgrad_unfused", "torch_eager", "torch_compile"):
            row += _region_cells(res, name)
        row.append(_fmt_diff(res["differences"].get("torch_eager")))
        out.append("| " + " | ".join(row) + " |")
    out += _notes(results)
    return "\n".join(out) + "\n"


def _notes(results: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    kernels = sorted({(r["kind"], ", ".join(r["kernels"].get("fused", [])),
                       len(r["kernels"].get("unfused", []))) for r in results if r["kernels"]})
    if kernels:
        out += ["", "Kernels (explain()): " + "; ".join(
            f"{KIND_LABELS[kind]} fused: {fused} (unfused: {n} kernels)"
            for kind, fused, n in kernels) + "."]
    compiled = [f"{r['spec']} {r['torch_compile']['compile_s']:.1f} s" for r in results
                if (r.get("torch_compile") or {}).get("compile_s") is not None]
    if compiled:
        out += ["", "torch.compile's compile time (first call): " + ", ".join(compiled) + "."]
    skipped = sorted({f"{REGION_LABELS.get(p, p)}: {why.removeprefix('unavailable: ')}"
                      for r in results for p, why in r["peers_skipped"].items()})
    if skipped:
        out += ["", "Unavailable: " + "; ".join(skipped) + "."]
    errors = [f"{r['spec']}: {e}" for r in results for e in r["errors"]]
    if errors:
        out += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    return out


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
    if args.doc is not None:  # fail before minutes of measurement, not after
        doc = Path(args.doc).read_text(encoding="utf-8") if Path(args.doc).is_file() else ""
        if DOC_BEGIN not in doc or DOC_END not in doc:
            return _usage_error(f"--doc {args.doc}: needs a '{DOC_BEGIN}' line and a '{DOC_END}' line")
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
    env["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    env["others_load"] = _others_load(cpu_start, _cpu_sample())
    report = _report(args, env, started, threads, peer_threads, results)
    _write(args, report)
    return 1 if failed else 0


def _report(args: argparse.Namespace, env: dict[str, Any], started: _dt.datetime, threads: int,
            peer_threads: dict[str, str], results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        **_report_head("tgrad-bench-graph/1", started, threads, peer_threads, env),
        "method": {
            "regions": {
                "tgrad": "the block's tgrad expression, .realize() with tgrad.set_fusion(True)",
                "tgrad_unfused": "the same with tgrad.set_fusion(False)",
                "torch_eager": "F.linear + F.gelu / F.silu on bf16 tensors sharing the input bytes",
                "torch_compile": "torch.compile(the same function, dynamic=False), compiled first",
            },
            "inputs": "x standard normal, weights and biases normal / sqrt(fan-in), rounded to "
                      "bf16 (RNE), seeded",
            "byte_check": "fused == unfused bit for bit before timing (else not timed, exit 1); "
                          "differences from torch reported, not required",
            "interleave": "the byte check is the first warm-up, a second round sizes the run; "
                          "per repetition every region once, order rotated by one per "
                          "repetition; gc disabled; quiet and hot as in tgrad.bench",
            "ratio": "median over repetitions i of samples[region][i] / samples['tgrad'][i]",
            "bootstrap": {"statistic": "median of the paired ratios", "interval": "percentile, 95%",
                          "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED},
            "verdict": "win if lo > 1, loss if hi < 1, else tie",
        },
        "results": results,
    }


def _write(args: argparse.Namespace, report: dict[str, Any]) -> None:
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(report), indent=1, allow_nan=False) + "\n"
    (out_dir / "bench-graph.json").write_text(text, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")
    markdown = format_markdown(report)
    (out_dir / "bench-graph.md").write_text(markdown, encoding="utf-8")
    if args.doc is not None:
        update_doc(Path(args.doc), markdown, begin=DOC_BEGIN, end=DOC_END)
    print()
    print("\n".join([
        f"bench_cpu: {report['environment']['cpu_model']}",
        f"bench_markdown: {out_dir / 'bench-graph.md'}",
        f"bench_json: {out_dir / 'bench-graph.json'}" + (f" (and {args.json})" if args.json else ""),
    ] + ([f"bench_doc: {args.doc}"] if args.doc is not None else [])), flush=True)
