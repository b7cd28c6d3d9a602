"""float32 elementwise ops on the GPU routes (issue 37): add, sub, mul, div, maximum, minimum,
relu, neg, abs, square, sqrt and rsqrt on float32 tensors of a device render as a float32 elementwise
kernel (kernels/gpu/elementwise_f32.h, integers only) in MSL, OpenCL C and CUDA, and give the
CPU's bytes (src/ops/elementwise_f32.c: correctly rounded, gradual underflow, NaN 0x7fc00000).

- PoCL (device="opencl"): every op on drawn operands that reach every path of the text (special
  values, subnormals, near-cancellation, overflow and underflow), through broadcasts and
  transposed views, and bf16 operands promoted to float32 on the device.
- The emulators (MSL: slow tier; CUDA: cuda tier): the rendered kernels under shuffled fiber
  orders and with fp32 subnormals flushed (the text has no floating-point instruction, so the
  device's subnormal handling cannot matter), against the CPU; a kernel whose rounding breaks
  ties upward is caught.
- The transcendental ops compute in binary64 (tests/python/test_gpu_transcendental_f32.py).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from emulators import emulator

UNARY: dict[str, Callable[[tgrad.Tensor], tgrad.Tensor]] = {
    "relu": tgrad.relu, "neg": tgrad.neg, "abs": tgrad.abs, "square": tgrad.square,
    "sqrt": lambda x: tgrad.ops.apply("sqrt", x), "rsqrt": lambda x: tgrad.ops.apply("rsqrt", x),
}
BINARY: dict[str, Callable[[Any, Any], tgrad.Tensor]] = {
    "add": tgrad.add, "sub": tgrad.sub, "mul": tgrad.mul, "div": tgrad.div,
    "maximum": tgrad.maximum, "minimum": tgrad.minimum,
}
SPECIALS = np.array([0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x80800000, 0x3F800000,
                     0xBF800000, 0x3F800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00123,
                     0x7F800001, 0x0D800000, 0x34000000, 0x5F800000, 0x1F800000, 0x3F000000], np.uint32)
N = 4096


def _with_exp(rng: np.random.Generator, exps: np.ndarray) -> np.ndarray:
    """Random floats (sign and fraction) with the biased exponents `exps`."""
    return ((rng.integers(0, 1 << 32, exps.shape, dtype=np.uint64).astype(np.uint32) & np.uint32(0x807FFFFF))
            | (exps.astype(np.uint32) << np.uint32(23)))


def pairs(seed: int = 0, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """n operand pairs (float32 bits), eight kinds in turn as tests/c/test_gpu_elementwise_f32.c
    draws them: anything, nearby binades, subnormals, products near underflow, quotients near
    overflow, cancellation, sums near zero, specials against anything."""
    rng = np.random.default_rng(seed)
    k = n // 8
    e = lambda lo, span: rng.integers(lo, lo + span, k)
    base = e(1, 254)
    kinds = [
        (rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32), rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32)),
        (_with_exp(rng, base), _with_exp(rng, (base + rng.integers(0, 40, k)) % 254 + 1)),
        (_with_exp(rng, e(0, 3)), _with_exp(rng, e(0, 3))),
        (_with_exp(rng, e(64, 16)), _with_exp(rng, e(48, 16))),
        (_with_exp(rng, e(190, 40)), _with_exp(rng, e(100, 30))),
    ]
    a5 = _with_exp(rng, e(127, 4))
    kinds.append((a5, a5 ^ np.uint32(0x80000000) ^ rng.integers(0, 8, k).astype(np.uint32)))
    kinds.append((_with_exp(rng, e(1, 30)), _with_exp(rng, e(1, 30)) ^ (rng.integers(0, 2, k).astype(np.uint32) << np.uint32(31))))
    kinds.append((SPECIALS[rng.integers(0, len(SPECIALS), k)], _with_exp(rng, e(0, 256))))
    a = np.concatenate([x for x, _ in kinds] + [np.repeat(SPECIALS, len(SPECIALS))])
    b = np.concatenate([y for _, y in kinds] + [np.tile(SPECIALS, len(SPECIALS))])
    return a.astype(np.uint32), b.astype(np.uint32)


def _f32(bits: np.ndarray, device: str = "cpu") -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(bits.view(np.float32), dtype=tgrad.float32, device=device)


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).view(np.uint32)


def _differ(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray | None = None) -> str:
    bad = np.flatnonzero(got.ravel() != want.ravel())
    if not bad.size:
        return ""
    i = int(bad[0])
    pair = f"{int(a.ravel()[i]):08x}" + ("" if b is None else f", {int(b.ravel()[i]):08x}")
    return f"{bad.size} of {want.size} differ; first ({pair}): cpu {int(want.ravel()[i]):08x} gpu {int(got.ravel()[i]):08x}"


# ---- PoCL ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(BINARY))
def test_pocl_binary_ops_give_the_cpu_float32_bytes(name: str, opencl_device: str) -> None:
    a, b = pairs(len(name))
    want = _bits(BINARY[name](_f32(a), _f32(b)))
    y = BINARY[name](_f32(a, "opencl"), _f32(b, "opencl"))
    assert y.device == "opencl" and y.dtype == tgrad.float32 and "opencl.elementwise" in y.explain()
    got = _bits(y)
    assert not _differ(got, want, a, b), f"{name}: {_differ(got, want, a, b)}"


@pytest.mark.parametrize("name", list(UNARY))
def test_pocl_unary_ops_give_the_cpu_float32_bytes(name: str, opencl_device: str) -> None:
    a, b = pairs(7)
    x = np.concatenate([a, b])
    want = _bits(UNARY[name](_f32(x)))
    got = _bits(UNARY[name](_f32(x, "opencl")))
    assert not _differ(got, want, x), f"{name}: {_differ(got, want, x)}"


def test_pocl_float32_ops_through_views_broadcasts_and_promotion(opencl_device: str) -> None:
    """The model's shapes of use: scores [B, H, L, S] times a scalar plus a broadcast mask, a
    product's float32 accumulators plus a bf16 bias (promoted on the device), a transposed
    operand; each the CPU's bytes."""
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    mask = np.where(rng.random((5, 7)) < 0.3, -np.inf, 0.0).astype(np.float32)
    bias = rng.standard_normal(7).astype(np.float32)

    def run(device: str) -> list[np.ndarray]:
        s = tgrad.Tensor.from_numpy(scores, dtype=tgrad.float32, device=device)
        m = tgrad.Tensor.from_numpy(mask, dtype=tgrad.float32, device=device)
        bf = tgrad.Tensor.from_numpy(bias, dtype=tgrad.bfloat16, device=device)
        outs = [s * (1.0 / np.sqrt(7.0)) + m, s + bf, s.transpose(2, 3) / s.transpose(2, 3)[..., :1, :],
                tgrad.maximum(s[:, :, ::-1], m[::-1])]
        return [_bits(y) for y in outs]

    for i, (got, want) in enumerate(zip(run("opencl"), run("cpu"))):
        assert np.array_equal(got, want), f"case {i}"


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_float32_kernels_render_in_every_language_in_integers(lang: str) -> None:
    """(The transcendental ops' float32 kernels compute in binary64: test_gpu_transcendental_f32.py.)"""
    x = _f32(np.arange(6, dtype=np.float32).view(np.uint32))
    k = R.render_tensor(tgrad.add(x, x.reshape(2, 3)[:1].reshape(-1)[:1]), None, lang)
    assert "tg_f32_add" in k.source and "uint *x" in k.source and "typedef" in k.source
    code = [line.split("//")[0] for line in k.source.splitlines()]
    assert not [line for line in code if re.search(r"\b(float|double|half)\b", line)]  # integers only
    k = R.render_tensor(tgrad.ops.apply("gelu", x), None, lang)  # binary64 with a bound (flags "f")
    assert "tg_tf_gelu(v)" in k.source and k.buffer_names[-1] == "f"


# ---- the emulators -----------------------------------------------------------------------------------
def _emulated(emu: Any, lang: str, y: tgrad.Tensor, memory: dict[int, np.ndarray], mutate: Any = None,
              ftz: bool = False) -> np.ndarray:
    kern = R.render_tensor(y, None, lang)
    out_at = kern.buffer_names.index("c")
    bufs = [np.full(cnt, 0xFFFFFFFF, np.uint32) if i == out_at else memory[bid][:cnt]
            for i, (bid, cnt) in enumerate(zip(kern.buffer_ids, kern.buffer_elements))]
    source = mutate(kern.source) if mutate else kern.source
    out = emu.run(emu.compile(source), kern.grid, kern.threadgroup, bufs, [i != out_at for i in range(len(bufs))],
                  order="shuffle", seed=1, ftz=ftz)[out_at]
    return np.asarray(out[:int(np.prod(y.shape))])


def _all_ops(emu: Any, lang: str, mutate: Any = None, ftz: bool = False) -> list[tuple[str, str]]:
    """(op, mismatch) for every float32 op whose emulated kernel differs from the CPU."""
    a, b = pairs(11, 1024)
    x, z = _f32(a), _f32(b)
    memory = {x.buffer_id: a, z.buffer_id: b}
    cases = [(n, f(x, z), a, b) for n, f in BINARY.items()] + [(n, f(x), a, None) for n, f in UNARY.items()]
    out = []
    for name, y, first, second in cases:
        got = _emulated(emu, lang, y, memory, mutate, ftz)
        why = _differ(got, _bits(y), first, second)
        if why:
            out.append((name, why))
    return out


@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow),  # the MSL emulator: slow tier
                                  pytest.param("cuda", marks=pytest.mark.cuda)])  # the CUDA emulator: cuda tier
def test_the_generated_float32_kernels_give_the_cpu_bytes(lang: str) -> None:
    emu = emulator(lang)
    assert _all_ops(emu, lang) == []
    assert _all_ops(emu, lang, ftz=True) == []  # integers only: a flushing device computes the same bytes


@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow),
                                  pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_emulator_catches_a_float32_kernel_that_breaks_ties_upward(lang: str) -> None:
    emu = emulator(lang)
    upward = lambda src: src.replace("if (rest > tie || (rest == tie", "if (rest >= tie || (rest == tie")
    broken = {name for name, _ in _all_ops(emu, lang, upward)}
    assert {"add", "sub", "mul"} <= broken  # (an exact tie of a quotient is a subnormal rarity)
