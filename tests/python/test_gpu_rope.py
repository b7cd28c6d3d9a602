"""The rope kind on the GPU routes (route rope, gen/render_rope.c; docs/kernels.md, "The rope
route"): rope and rope_backward rendered in MSL, OpenCL C and CUDA, one thread per (row, position),
in double with the CPU's operations and a bound for the device's sin and cos; a position with an
undecided value (or a non-finite input) is flagged and rerun on the host by the CPU's own code.

Promises checked here:
- PoCL gives the CPU's bytes: half-split and interleaved pairs, a partial rotary_dim, inv_freq given,
  batched positions [B, L], rope_backward, position 0, large positions, NaN and inf inputs, views;
- a value just off a bf16 midpoint is flagged and rerun (TGRAD_DEBUG_ROPE_DEVICE_ROWS), random ones
  are not;
- every language renders the kind (one route, the same buffers); the MSL has no floating-point
  type, its doubles are kernels/gpu/softdouble.h's binary64 in integers (sin and cos softmath.h's);
- the generated CUDA runs on the CUDA emulator with the CPU's bytes and the same flags;
- the generated MSL runs on the MSL emulator (slow tier) with the CPU's bytes and, on these inputs,
  exactly the CUDA emulator's flags (the midpoint's position included);
- planted defects are caught: a flag never set, a dropped last pair, a dropped pass-through copy
  (CUDA and MSL), and a software double ordering a sum's operands by exponent alone (MSL).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad import render as R
from tgrad._ffi import ffi, lib
from emulators import msl  # noqa: F401,E402 (the MSL emulator fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (keyword arguments, batched positions, backward)
CONFIGS = [({}, False, False), ({"interleaved": True}, False, False), ({"rotary_dim": 8}, False, False),
           ({"inv_freq": True}, False, False), ({}, True, False), ({"interleaved": True}, False, True)]
# theta = 1 * 2^-30: cos = 1 - 2^-61, 2^21 sin = 2^-9 - 2^-69 / 6: y1 = 1 - 2^-9 - 2^-61 + ..., just
# below the bf16 midpoint 1 - 2^-9 (exact: 0x3F7F); the double lands on the midpoint (ties: 0x3F80)
NEAR = (np.array([[[1.0, 2.0 ** 21]]], np.float32), np.array([1], np.int32), np.array([2.0 ** -30], np.float32))


def _opencl_ready() -> bool:
    try:
        tgrad.Tensor.from_numpy(np.zeros(1, np.float32), device="opencl").release()
        return True
    except errors.BackendUnavailableError:
        return False


needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")


def _device_rows() -> int:
    c = ffi.new("int64_t[]", int(lib.TGRAD_DEBUG_NORM_COUNT))
    assert lib.tgrad_debug_norm_slow_path(c, int(lib.TGRAD_DEBUG_NORM_COUNT)) == 0
    return c[int(lib.TGRAD_DEBUG_ROPE_DEVICE_ROWS)]


def _make(device: str, x: np.ndarray, pos: np.ndarray, inv: np.ndarray | None, kw: dict, backward: bool,
          view: Any = lambda t: t) -> tgrad.Tensor:
    xt = view(tgrad.Tensor.from_numpy(x, dtype="bfloat16", device=device))
    p = tgrad.Tensor.from_numpy(pos, dtype="int32", device=device)
    args = dict(kw)
    if inv is not None:
        args["inv_freq"] = tgrad.Tensor.from_numpy(inv, dtype="float32", device=device)
    return (tgrad.rope_backward if backward else tgrad.rope)(xt, p, **args)


def _bits(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).view(np.uint16).copy()


def _same(x: np.ndarray, pos: np.ndarray, inv: np.ndarray | None = None, kw: dict | None = None,
          backward: bool = False, view: Any = lambda t: t, device: str = "opencl") -> None:
    kw = kw or {}
    want = _bits(_make("cpu", x, pos, inv, kw, backward, view))
    y = _make(device, x, pos, inv, kw, backward, view)
    assert y.device == device
    got = _bits(y)
    assert np.array_equal(got, want), (kw, backward, x.shape)


def _case(kw: dict, batched: bool, rng: np.random.Generator, shape=(2, 3, 8, 16)) -> tuple:
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    L = shape[-2]
    pos = rng.integers(0, 5000, (shape[0], L) if batched else L).astype(np.int32)
    pos.flat[0] = 0
    rd = kw.get("rotary_dim", shape[-1])
    inv = (rng.random(rd // 2) * 0.5).astype(np.float32) if kw.get("inv_freq") else None
    return x, pos, inv, {k: v for k, v in kw.items() if k != "inv_freq"}


# ---- PoCL (core) ----------------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("kw,batched,backward", CONFIGS)
def test_pocl_gives_the_cpu_bytes(kw: dict, batched: bool, backward: bool) -> None:
    rng = np.random.default_rng(len(str(kw)) + 7 * batched + 13 * backward)
    x, pos, inv, k = _case(kw, batched, rng)
    _same(x, pos, inv, k, backward)
    x[0, 1, 2, 3], x[1, 0, 5, 0], x[1, 2, 7, 9] = np.inf, np.nan, -np.inf  # the host's positions
    _same(x, pos, inv, k, backward)


@needs_opencl
def test_pocl_gives_the_cpu_bytes_through_views_and_at_large_positions() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((8, 3, 16)) * 3).astype(np.float32)
    _same(x, rng.integers(0, 99, 8).astype(np.int32), view=lambda t: t.transpose(0, 1))     # x [3, 8, 16]
    _same(x, np.array([2**31 - 1, 10**6, 123456789], np.int32))                            # huge theta
    _same(x, np.arange(8, dtype=np.int32), view=lambda t: t[:, 1:, ::2].transpose(0, 1))  # a step


@needs_opencl
def test_a_value_near_a_midpoint_is_rerun_on_the_host_and_random_ones_are_not() -> None:
    d0 = _device_rows()
    _same(*NEAR)
    assert _device_rows() - d0 == 1
    y = _make("opencl", *NEAR, {}, False)
    assert _bits(y)[0, 0, 0] == 0x3F7F
    rng = np.random.default_rng(9)
    d0 = _device_rows()
    x, pos, _, _ = _case({}, False, rng, shape=(4, 64, 64))
    _same(x, pos)
    assert _device_rows() - d0 <= 1


def _floating_words(source: str) -> list[str]:
    """The lines of source that name double or float outside a // comment."""
    return [line for line in source.splitlines() if re.search(r"\b(double|float)\b", line.split("//")[0])]


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
@pytest.mark.parametrize("backward", [False, True], ids=["rope", "rope_backward"])
def test_every_language_renders_the_kind(lang: str, backward: bool) -> None:
    y = _make("cpu", np.ones((4, 8), np.float32), np.arange(4, dtype=np.int32), None, {}, backward)
    k = R.render_tensor(y, None, lang)
    assert k.route == "rope" and list(k.buffer_names) == ["x", "pos", "c", "f"] and "tg_nm_fast" in k.source
    if lang == "msl":  # no double in Metal: the software double's, in integers
        assert "typedef struct tg_f64" in k.source and _floating_words(k.source) == []


# ---- the CUDA emulator -------------------------------------------------------------------------------
def _cxx() -> bool:
    from cuda_emu.driver import find_cxx

    return find_cxx() is not None


needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulator")


@pytest.fixture(scope="module")
def cuda() -> Any:
    from cuda_emu.driver import Emulator

    return Emulator()


def _emulated(emu: Any, x: np.ndarray, pos: np.ndarray, inv: np.ndarray | None, kw: dict, backward: bool,
              mutate: tuple[str, str] | None = None,
              lang: str = "cuda") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the emulated bytes after the host's rerun of the flagged positions, the flags, the CPU's),
    of the kernel in lang ("cuda" or "msl", emu that language's emulator)."""
    y = _make("cpu", x, pos, inv, kw, backward)
    k = R.render_tensor(y, None, lang)
    want = _bits(y).reshape(-1, x.shape[-1])
    source = k.source
    if mutate:
        assert mutate[0] in source, mutate[0]
        source = source.replace(mutate[0], mutate[1], 1)
    ins = [np.ascontiguousarray(tgrad.Tensor.from_numpy(x, dtype="bfloat16").numpy()).view(np.uint16).ravel(),
           pos.astype(np.int32).view(np.uint32).ravel()]
    if inv is not None:
        ins.append(inv.astype(np.float32).view(np.uint32).ravel())
    bufs = ins + [np.full(k.buffer_elements[-2], 0xFFFF, np.uint16), np.full(k.buffer_elements[-1], 7, np.uint32)]
    bufs = emu.run(emu.compile(source), k.grid, k.threadgroup, bufs, [True] * len(ins) + [False, False])
    got, flags = bufs[-2].reshape(-1, x.shape[-1]).copy(), bufs[-1]
    got[flags != 0] = want[flags != 0]
    return got.ravel(), flags, want.ravel()


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("kw,batched,backward", CONFIGS)
def test_generated_cuda_gives_the_cpu_bytes(cuda: Any, kw: dict, batched: bool, backward: bool) -> None:
    rng = np.random.default_rng(5)
    x, pos, inv, k = _case(kw, batched, rng, shape=(2, 2, 5, 16))
    x[0, 1, 2, 3] = np.nan
    got, flags, want = _emulated(cuda, x, pos, inv, k, backward)
    assert set(np.unique(flags)) <= {0, 1} and flags.reshape(2, 2, 5)[0, 1, 2] == 1
    assert np.array_equal(got, want)



@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("kw,batched,backward", CONFIGS)
def test_generated_msl_gives_the_cpu_bytes_and_the_cuda_flags(msl: Any, cuda: Any, kw: dict, batched: bool,
                                                              backward: bool) -> None:
    """The CUDA test's case (a NaN's position flagged) under the MSL emulator: the CPU's bytes, and
    the CUDA emulator's flags (the same doubles; sin and cos softmath.h's, within the same bound)."""
    rng = np.random.default_rng(5)
    x, pos, inv, k = _case(kw, batched, rng, shape=(2, 2, 5, 16))
    x[0, 1, 2, 3] = np.nan
    got, flags, want = _emulated(msl, x, pos, inv, k, backward, lang="msl")
    assert flags.reshape(2, 2, 5)[0, 1, 2] == 1 and np.array_equal(got, want)
    assert np.array_equal(flags, _emulated(cuda, x, pos, inv, k, backward)[1])


@needs_cxx
@pytest.mark.slow
def test_generated_msl_flags_the_value_near_a_midpoint_as_cuda_does(msl: Any, cuda: Any) -> None:
    got, flags, want = _emulated(msl, *NEAR, {}, False, lang="msl")
    assert flags.tolist() == [1] == _emulated(cuda, *NEAR, {}, False)[1].tolist() and np.array_equal(got, want)


# ---- planted defects -----------------------------------------------------------------------------------
def _planted_defects_are_caught(emu: Any, lang: str) -> None:
    got, flags, want = _emulated(emu, *NEAR, {}, False, lang=lang)
    assert flags.tolist() == [1] and np.array_equal(got, want)
    # the binary128 fallback never taken: the flag never set, the kernel's undecided value kept
    got, _, want = _emulated(emu, *NEAR, {}, False, mutate=("f[q] = undecided;", "f[q] = 0u;"), lang=lang)
    assert not np.array_equal(got, want)
    rng = np.random.default_rng(6)
    x, pos, _, _ = _case({}, False, rng, shape=(1, 4, 16))
    got, _, want = _emulated(emu, x, pos, None, {}, False, mutate=("i < 8; i++", "i < 7; i++"),
                             lang=lang)  # a dropped pair
    assert not np.array_equal(got, want)
    got, _, want = _emulated(emu, x, pos, None, {"rotary_dim": 8}, False,
                             mutate=("k < 16; k++", "k < 15; k++"), lang=lang)  # a dropped pass-through copy
    assert not np.array_equal(got, want)


@needs_cxx
@pytest.mark.cuda
def test_planted_defects_are_caught(cuda: Any) -> None:
    _planted_defects_are_caught(cuda, "cuda")


@needs_cxx
@pytest.mark.slow
def test_planted_defects_are_caught_in_msl(msl: Any) -> None:
    _planted_defects_are_caught(msl, "msl")


@needs_cxx
@pytest.mark.slow
def test_the_msl_emulator_catches_a_software_double_that_orders_a_sum_by_exponent_alone(msl: Any) -> None:
    """softdouble.h's tg_sd_sum taking the larger operand by exponent alone: x - y with |y| > |x|
    in the same binade wraps around below 0, and y1 = x1 cos - x2 sin with it. (A tie or a sticky
    bit lost moves a double by an ulp the bound absorbs: tests/c/test_gpu_softdouble.c catches
    those bit for bit.)"""
    rng = np.random.default_rng(5)
    x, pos, inv, k = _case({}, False, rng, shape=(2, 2, 5, 16))
    got, _, want = _emulated(msl, x, pos, inv, k, False, lang="msl")
    assert np.array_equal(got, want)
    got, _, want = _emulated(msl, x, pos, inv, k, False, lang="msl",
                             mutate=("if (xb > xa || (xb == xa && tg_sd_less128(ma, mb))) {", "if (xb > xa) {"))
    assert not np.array_equal(got, want)
