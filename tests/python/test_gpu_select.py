"""The gather (take), concat (cat, stack) and slice_scatter kinds on the GPU routes (docs/kernels.md,
"The gather and concat routes"; slice_scatter renders as a concat of dst's part before the slice,
src and dst's part after it, or, with a start tensor, as one kernel that reads the start): rendered in MSL, OpenCL C and CUDA by one emitter (render_select.c), run on
PoCL (device="opencl", core tier) and on both emulators (MSL: slow tier; CUDA: cuda tier) with the
CPU's bytes for every element size (bool: 1 byte, bfloat16: 2, float32 and int32: 4), NaN payloads,
signed zeros and subnormals included (nothing is read as a number), through transposed, reversed,
sliced and expanded views, negative indices, index tensors that are views themselves, and empty
operands. A GPU gather's indices are checked on the host before its launch: an index out of range
is IndexOutOfRangeError at the call for computed indices, at realize for lazy ones, and nothing
is written either way.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_gpu_reduce import _cuda, _cxx, _opencl_ready

import tgrad
from tgrad import errors
from tgrad import render as R

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")

DTYPES = ("bfloat16", "float32", "int32", "bool")
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _bits(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random bit patterns of the dtype with its special values planted: NaNs with payloads,
    infinities, signed zeros, subnormals (bool: 0/1)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    if dtype == "bfloat16":
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
        bits[: 8] = [0x7FC1, 0xFF81, 0x7F80, 0x8000, 0x0000, 0x0001, 0x807F, 0xFFFF][: min(8, n)]
        return bits.view(ml_dtypes.bfloat16).reshape(shape)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    bits[: 6] = [0x7FC00001, 0xFF800001, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000][: min(6, n)]
    return bits.view(np.float32 if dtype == "float32" else np.int32).reshape(shape)


def _tensor(arr: np.ndarray, dtype: str, device: str = "cpu") -> tgrad.Tensor:
    return tgrad.Tensor.from_numpy(arr, dtype=getattr(tgrad, dtype), device=device)


def _bytes(t: tgrad.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).copy()


# Each case: (inputs: list of (shape, dtype-or-None for the case's dtype), build(tgrad-tensors) -> result).
# Index inputs are int32 arrays given directly.
IDX_A = np.array([[2, -1, 0], [-4, 3, 1]], np.int32)  # for an axis of extent 4
IDX_B = np.array([4, -5, 0, 2, 2, -1], np.int32)  # extent 5
GATHER: dict[str, tuple[list[Any], Callable[..., Any]]] = {
    "axis0_plain": ([(4, 6), IDX_A], lambda x, i: tgrad.take(x, i, axis=0)),
    "axis1_transposed": ([(5, 4), IDX_A], lambda x, i: tgrad.take(x.T, i, axis=1)),
    "middle_axis_reversed_view": ([(3, 5, 7), IDX_B], lambda x, i: tgrad.take(x[::-1, :, 1::2], i, axis=1)),
    "last_axis_index_view": ([(3, 4), IDX_A], lambda x, i: tgrad.take(x, i.T[::-1], axis=-1)),
    "expanded_source": ([(1, 5), IDX_B], lambda x, i: tgrad.take(x.expand(3, 5), i[::2], axis=1)),
    "scalar_index": ([(4, 6), np.array(-2, np.int32)], lambda x, i: tgrad.take(x, i, axis=0)),
    "empty_indices": ([(4, 6), np.zeros((0,), np.int32)], lambda x, i: tgrad.take(x, i, axis=1)),
    "long_rows": ([(9, 300), np.array([8, 0, -9, 4], np.int32)], lambda x, i: tgrad.take(x, i, axis=0)),
}
CONCAT: dict[str, tuple[list[Any], Callable[..., Any]]] = {
    "axis0_three": ([(2, 5), (3, 5), (1, 5)], lambda a, b, c: tgrad.cat([a, b, c], 0)),
    "axis1_views": ([(4, 3), (3, 4), (4, 6)], lambda a, b, c: tgrad.cat([a, b.T[::-1], c[:, ::-2]], 1)),
    "with_empty": ([(2, 3), (0, 3), (2, 3)], lambda a, b, c: tgrad.cat([a, b, c[::-1]], 0)),
    "stack_last": ([(3, 4), (3, 4)], lambda a, b: tgrad.stack([a, b.expand(3, 4)], -1)),
    "stack_middle_expanded": ([(1, 4), (2, 4)], lambda a, b: tgrad.stack([a.expand(2, 4), b, b[::-1]], 1)),
    "twenty_operands": ([(2, 3)] * 20, lambda *ts: tgrad.cat([t if i % 2 else t[::-1] for i, t in enumerate(ts)], 1)),
}
# slice_scatter renders as a concat of dst's part before the slice, src and dst's part after it
SCATTER: dict[str, tuple[list[Any], Callable[..., Any]]] = {
    "middle_axis0": ([(6, 5), (2, 5)], lambda d, s: tgrad.slice_scatter(d, s, 0, 3)),
    "start_axis1_views": ([(4, 7), (3, 4)], lambda d, s: tgrad.slice_scatter(d[::-1], s.T, 1, 0)),
    "end_last_axis": ([(2, 3, 6), (2, 3, 2)], lambda d, s: tgrad.slice_scatter(d, s[:, ::-1], -1, 4)),
    "whole_axis": ([(3, 4), (3, 4)], lambda d, s: tgrad.slice_scatter(d, s[::-1], 0, 0)),
    "empty_src": ([(3, 4), (3, 0)], lambda d, s: tgrad.slice_scatter(d, s, 1, 2)),
    "kv_cache_step": ([(1, 2, 8, 4), (1, 2, 1, 4)], lambda d, s: tgrad.slice_scatter(d, s, 2, 5)),
    # the start an int32 tensor (tgrad_slice_scatter_at): one kernel reads it, whatever its value
    "at_kv_cache_step": ([(1, 2, 8, 4), (1, 2, 1, 4), np.array([5], np.int32)],
                         lambda d, s, at: tgrad.slice_scatter(d, s, 2, at)),
    "at_views": ([(6, 5), (2, 5), np.array([7, 3, 1], np.int32)],
                 lambda d, s, at: tgrad.slice_scatter(d[::-1], s[:, ::-1], 0, at[1:2])),
    "at_0d_last_axis": ([(2, 3, 6), (2, 3, 2), np.array(4, np.int32)],
                        lambda d, s, at: tgrad.slice_scatter(d, s, -1, at)),
    "at_whole_axis": ([(3, 4), (3, 4), np.array([0], np.int32)], lambda d, s, at: tgrad.slice_scatter(d, s.T.T, 0, at)),
    "at_empty_src_at_the_end": ([(3, 4), (3, 0), np.array([4], np.int32)],
                                lambda d, s, at: tgrad.slice_scatter(d, s, 1, at)),
}
CASES = {**{f"gather_{k}": v for k, v in GATHER.items()}, **{f"concat_{k}": v for k, v in CONCAT.items()},
         **{f"slice_scatter_{k}": v for k, v in SCATTER.items()}}


def _arrays(name: str, dtype: str) -> list[tuple[np.ndarray, str]]:
    out = []
    for j, spec in enumerate(CASES[name][0]):
        if isinstance(spec, np.ndarray):
            out.append((spec, "int32"))
        else:
            out.append((_bits(dtype, spec, 100 * j + len(name)), dtype))
    return out


def _result(name: str, dtype: str, device: str) -> np.ndarray:
    ts = [_tensor(a, dt, device) for a, dt in _arrays(name, dtype)]
    try:
        with CASES[name][1](*ts) as y:
            assert y.device == device
            return _bytes(y)
    finally:
        for t in ts:
            t.release()


# ---- rendering (core) ------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_gather_and_concat_render_in_every_language(lang: str) -> None:
    seen = set()
    for name in CASES:
        for dtype in DTYPES:
            ts = [_tensor(a, dt) for a, dt in _arrays(name, dtype)]
            with CASES[name][1](*ts) as y:
                for i, step in enumerate(y.explain(json=True)["steps"]):
                    if name == "concat_twenty_operands":  # one CPU node of 20; cat groups them on a GPU
                        with pytest.raises(errors.RouteNotEligibleError, match="at most 15"):
                            R.render_tensor(y, None, lang, step=i)
                        continue
                    k = R.render_tensor(y, None, lang, step=i)
                    # slice_scatter renders as a concat (dst's parts and src)
                    want = "concat" if step["op"] == "slice_scatter" else step["op"]
                    assert k.route == want and k.route in ("gather", "concat"), (name, step)
                    assert k.threadgroup == (256, 1, 1) and k.buffer_names[-1] == "c"
                    assert f"({getattr(tgrad, dtype).itemsize}-byte elements" in k.source
                    assert (k.buffer_names == ("x", "ix", "c")) if k.route == "gather" else \
                        k.buffer_names[:-1] == tuple(f"x{j}" for j in range(len(k.buffer_names) - 1))
                    seen.add((k.name, k.source_hash))
            for t in ts:
                t.release()
    assert len({n for n, _ in seen}) == len(seen), "one entry-point name per kernel text"


@pytest.mark.parametrize("route", ["gather", "concat"])
def test_the_render_command_prints_gather_and_concat(route: str) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "tgrad", "render", "--shape", "5x7x3", "--route", route,
                          "--lang", "cuda"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert f'extern "C" __global__ void tgrad_{route}_' in run.stdout and f"(route {route}, language cuda)" in run.stdout


# ---- PoCL (core) -----------------------------------------------------------------------------------
@needs_opencl
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_pocl_gathers_and_concatenates_with_the_cpu_bytes(name: str, dtype: str) -> None:
    want = _result(name, dtype, "cpu")
    got = _result(name, dtype, "opencl")
    assert np.array_equal(got, want), name


@needs_opencl
def test_pocl_chains_gather_and_concat_lazily() -> None:
    """cat of lazy results, a take of that by lazy indices (themselves a cat on the device)."""
    x = _bits("bfloat16", (6, 8), 3)
    ids = [np.array([5, -6], np.int32), np.array([[0, 3], [-1, 2]], np.int32)]
    results = []
    for device in ("cpu", "opencl"):
        tx = _tensor(x, "bfloat16", device)
        t0, t1 = (_tensor(i, "int32", device) for i in ids)
        with tgrad.cat([tx[::2], tx[1::2]], 0) as both, tgrad.cat([t0, t1.reshape(-1)], 0) as lazy_ids:
            assert not lazy_ids.is_realized
            with tgrad.take(both, lazy_ids, axis=0) as y:
                results.append(_bytes(y))
    assert np.array_equal(results[0], results[1])


@needs_opencl
def test_pocl_refuses_an_index_out_of_range_before_writing() -> None:
    x = _tensor(_bits("float32", (4, 3), 1), "float32", "opencl")
    bad = _tensor(np.array([0, 4], np.int32), "int32", "opencl")
    with pytest.raises(errors.IndexOutOfRangeError, match="index 4"):
        tgrad.take(x, bad, axis=0)  # computed indices: at the call, read back from the device
    with pytest.raises(errors.IndexOutOfRangeError, match="index -5"):
        tgrad.take(x, [-5], axis=0)  # host indices
    a = _tensor(np.array([1], np.int32), "int32", "opencl")
    b = _tensor(np.array([-1, -5], np.int32), "int32", "opencl")
    lazy = tgrad.cat([a, b], 0)
    y = tgrad.take(x, lazy, axis=0)  # lazy indices: checked when the gather runs
    with pytest.raises(errors.IndexOutOfRangeError, match="index -5"):
        y.realize()
    assert not y.is_realized and lazy.is_realized  # the indices ran; the gather wrote nothing
    for t in (y, lazy, a, b, bad, x):
        t.release()


@needs_opencl
def test_pocl_checks_a_start_tensor_before_writing_and_reuses_one_kernel() -> None:
    dst = _tensor(_bits("bfloat16", (2, 9, 3), 4), "bfloat16", "opencl")
    src = _tensor(_bits("bfloat16", (2, 2, 3), 5), "bfloat16", "opencl")
    before = _bytes(dst)

    def pos(v: int, device: str = "opencl") -> tgrad.Tensor:
        return _tensor(np.array([v], np.int32), "int32", device)

    texts = set()
    for at in (0, 3, 7):  # the text does not depend on the position: one kernel for a decode's steps
        with tgrad.slice_scatter(dst, src, 1, pos(at)) as y:
            texts.add(R.render_tensor(y, None, "opencl", step=len(y.explain(json=True)["steps"]) - 1).source)
            assert np.array_equal(_bytes(y), _bytes(tgrad.slice_scatter(dst, src, 1, at)))
    assert len(texts) == 1
    with pytest.raises(errors.IndexOutOfRangeError, match="do not fit"):
        tgrad.slice_scatter(dst, src, 1, pos(8))  # computed: read back and checked at the call
    with pytest.raises(errors.DeviceMismatchError, match="start tensor"):
        tgrad.slice_scatter(dst, src, 1, pos(1, "cpu"))
    lazy = tgrad.take(_tensor(np.array([8, 1], np.int32), "int32", "opencl"), [0], axis=0)
    y = tgrad.slice_scatter(dst, src, 1, lazy)  # known when the take runs: checked before the launch
    with pytest.raises(errors.IndexOutOfRangeError, match="start tensor"):
        y.realize()
    assert not y.is_realized and np.array_equal(_bytes(dst), before)
    for t in (y, lazy, dst, src):
        t.release()


@needs_opencl
def test_pocl_concat_checks_its_operands_as_on_the_cpu() -> None:
    a = _tensor(np.zeros((2, 3), np.float32), "float32", "opencl")
    b = _tensor(np.zeros((2, 3), np.float32), "float32")
    with pytest.raises(errors.DeviceMismatchError):
        tgrad.cat([a, b])
    ids = _tensor(np.array([0], np.int32), "int32")
    with pytest.raises(errors.DeviceMismatchError):
        tgrad.take(a, ids)  # the indices on the CPU, x on the device
    from tgrad._ffi import ffi, lib

    handles = ffi.new("tgrad_tensor_t[]", [a._h] * 16)  # the C call refuses 16 operands on a device
    out = ffi.new("tgrad_tensor_t *")
    assert lib.tgrad_concat(16, handles, 0, out) == lib.TGRAD_ERR_ROUTE_NOT_ELIGIBLE
    for t in (a, b, ids):
        t.release()


# ---- the emulators -----------------------------------------------------------------------------------
def _element_size(source: str) -> int:
    m = re.search(r"\((\d)-byte elements", source)
    assert m, "the kernel names its element size"
    return int(m.group(1))


def _emulated(harness: Any, name: str, dtype: str) -> np.ndarray:
    arrays = _arrays(name, dtype)
    ts = [_tensor(a, dt) for a, dt in arrays]
    memory: dict[int, np.ndarray] = {}
    for t, (a, _) in zip(ts, arrays):
        memory[t.buffer_id] = np.ascontiguousarray(a).reshape(-1).view(UINT[a.dtype.itemsize]).copy()
    try:
        with CASES[name][1](*ts) as y:
            steps = y.explain(json=True)["steps"]
            kernels = [R.render_tensor(y, None, harness.lang, step=i) for i in range(len(steps))]
            harness.emu.compile_many([k.source for k in kernels if 0 not in k.grid])
            for k in kernels:
                out_at = len(k.buffer_names) - 1
                kind = UINT[_element_size(k.source)]
                bufs = [memory[bid][:n] for bid, n in zip(k.buffer_ids[:out_at], k.buffer_elements[:out_at])]
                bufs.append(np.full(k.buffer_elements[out_at], np.iinfo(kind).max, kind))  # unwritten: all ones
                if 0 not in k.grid:
                    bufs = harness.emu.run(harness.emu.compile(k.source), k.grid, k.threadgroup, bufs,
                                           [i != out_at for i in range(len(bufs))])
                memory[k.buffer_ids[out_at]] = bufs[out_at]
            return memory[y.buffer_id].view(np.uint8).copy()
    finally:
        for t in ts:
            t.release()


class _Msl:
    lang = "msl"

    def __init__(self) -> None:
        from msl_emu.driver import Emulator

        self.emu = Emulator()


@pytest.fixture(scope="module")
def msl() -> Any:
    return _Msl()


@pytest.fixture(scope="module")
def cuda() -> Any:
    return _cuda()


EMU_CASES = [(name, dtype) for name in CASES if name != "concat_twenty_operands"  # (PoCL's: cat groups it)
             for dtype in ("bool", "bfloat16", "int32")]


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize(("name", "dtype"), EMU_CASES)
def test_generated_msl_gathers_and_concatenates_with_the_cpu_bytes(msl: Any, name: str, dtype: str) -> None:
    assert np.array_equal(_emulated(msl, name, dtype), _result(name, dtype, "cpu")), name


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize(("name", "dtype"), EMU_CASES)
def test_generated_cuda_gathers_and_concatenates_with_the_cpu_bytes(cuda: Any, name: str, dtype: str) -> None:
    assert np.array_equal(_emulated(cuda, name, dtype), _result(name, dtype, "cpu")), name


@needs_cxx
@pytest.mark.slow
def test_the_emulator_catches_a_gather_that_ignores_negative_indices(msl: Any) -> None:
    """A planted defect (the normalization of negative indices dropped) reads before the source:
    the emulator's guard page reports it, or the bytes differ."""
    from msl_emu.driver import EmuError

    name, dtype = "gather_axis0_plain", "int32"
    original = R.render_tensor

    def broken(*args: Any, **kwargs: Any) -> R.Kernel:
        k = original(*args, **kwargs)
        src = re.sub(r"    if \(k < 0\)\n        k \+= \d+;\n", "", k.source)
        src = src.replace("if (k < 0 || k >=", "if (k >=")
        assert src != k.source
        return dataclasses.replace(k, source=src)

    R.render_tensor = broken
    try:
        try:
            got = _emulated(msl, name, dtype)
        except EmuError:
            return
    finally:
        R.render_tensor = original
    assert not np.array_equal(got, _result(name, dtype, "cpu"))


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("defect", ["start_ignored", "start_read_at_0"])
def test_the_emulator_catches_a_slice_scatter_that_misreads_its_start(msl: Any, defect: str) -> None:
    """Planted defects in the start-tensor kernel: the start taken as 0, or read from the start
    buffer's first word instead of its view's element (at_views reads at[1:2]): the bytes differ."""
    name, dtype = ("slice_scatter_at_kv_cache_step" if defect == "start_ignored" else "slice_scatter_at_views"), "int32"
    original = R.render_tensor

    def broken(*args: Any, **kwargs: Any) -> R.Kernel:
        k = original(*args, **kwargs)
        if defect == "start_ignored":
            src = re.sub(r"\(int\)x2\[\d+\]", "0", k.source)
        else:
            src = re.sub(r"x2\[\d+\]", "x2[0]", k.source)
        assert src != k.source or "x2" not in k.source
        return dataclasses.replace(k, source=src)

    R.render_tensor = broken
    try:
        got = _emulated(msl, name, dtype)
    finally:
        R.render_tensor = original
    assert not np.array_equal(got, _result(name, dtype, "cpu"))
