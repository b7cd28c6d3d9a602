"""The blocks ``python -m tgrad bench --graph`` times (tgrad.bench.graph): MLP blocks and their
sets, their seeded inputs, the block as tgrad ops and as torch ops, torch.compile's state over a
run, and how two results compare (fused against unfused bit for bit, tgrad against torch)."""

from __future__ import annotations

import argparse
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

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

def _kernels(tgrad: Any, program: Callable[[], Any], fused: bool) -> list[str]:
    """The kernels realize would run, from explain(): e.g. ['matmul+add+gelu', 'matmul+add']."""
    tgrad.set_fusion(fused)
    plan = program().explain(json=True)
    return [str(step.get("kernel") or step.get("op")) for step in plan.get("steps", [])]


def _product_routes(tgrad: Any, program: Callable[[], Any]) -> list[str]:
    """The routes of the fused block's products, from explain(): e.g. ['cpu.amx.gemm'] (they say
    which matmul order ran: bench --order)."""
    tgrad.set_fusion(True)
    steps = program().explain(json=True).get("steps", [])
    return sorted({str(s["route"]) for s in steps if s.get("op") == "matmul" and s.get("route")})


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
