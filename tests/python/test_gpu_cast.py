"""The cast kind on the GPU routes (docs/kernels.md, "The cast route"): bfloat16 -> float32 (exact)
and float32 -> bfloat16 (round to nearest even, any NaN 0x7fc0) of a view, rendered in MSL, OpenCL C
and CUDA, with the CPU's bytes on PoCL (core tier) and on both emulators (slow, cuda), on every
bf16 pattern and on float32 ties, subnormals, NaNs and overflow; int32 -> float32 and bfloat16
(rounded once to nearest even, integers only) on ties, extremes and every magnitude; float32 and
bfloat16 -> int32 (truncated toward zero, integers only): a NaN or out-of-range element is flagged
by the kernel and the cast fails with the CPU's error, naming the same element.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_gpu_reduce import Harness, _cuda, _cxx, _msl, _opencl_ready

import tgrad
from tgrad import errors
from tgrad import render as R

needs_opencl = pytest.mark.skipif(not _opencl_ready(), reason="no usable OpenCL device")
needs_cxx = pytest.mark.skipif(not _cxx(), reason="no C++ compiler for the emulators")


def _f32_bits() -> np.ndarray:
    """float32 patterns around every rounding case: ties both ways, subnormals, NaNs, overflow."""
    rng = np.random.default_rng(5)
    edges = np.array([0, 0x80000000, 1, 0x8000, 0x7FFF, 0x18000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF,
                      0x7F7F8000, 0x7F7F7FFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00000, 0x007FFFFF,
                      0x807F8000], np.uint32)
    return np.concatenate([edges, rng.integers(0, 1 << 32, 4096 - len(edges), dtype=np.uint32)]).reshape(64, 64)


def _i32_values() -> np.ndarray:
    """int32 values around every rounding to float32 and bf16: exact ones, ties both ways (2^24 + 1,
    2^24 + 3, 257, 384, 385 in bf16), the extremes, and random ones of every magnitude."""
    rng = np.random.default_rng(6)
    edges = np.array([0, 1, -1, 2**31 - 1, -2**31, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 257, 259, 384, 385, -385,
                      0x01808000, 0x7FFFFF80, 0x7FFFFFC0, 255, 256, 511], np.int64)
    scale = np.exp2(rng.integers(0, 32, 4096 - len(edges)))
    draws = (rng.random(4096 - len(edges)) * scale).astype(np.int64) * rng.choice([-1, 1], 4096 - len(edges))
    return np.clip(np.concatenate([edges, draws]), -2**31, 2**31 - 1).astype(np.int32).reshape(64, 64)


def _f32_in_range() -> np.ndarray:
    """float32 values inside int32's range: every magnitude, both zeros, fractions, subnormals and
    the edges (the largest float32 below 2^31, -2^31 itself)."""
    rng = np.random.default_rng(7)
    edges = np.array([0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1.0, -1.0, 2147483520.0, -2147483648.0, -2147483520.0,
                      1e-40, -1e-40, 16777217.0, 8388607.5, -8388607.5], np.float32)
    draws = (rng.standard_normal(4096 - len(edges)) * np.exp2(rng.integers(-4, 31, 4096 - len(edges)))).astype(np.float32)
    draws = np.clip(draws, -2147483648.0, 2147483520.0).astype(np.float32)
    return np.concatenate([edges, draws]).astype(np.float32).reshape(64, 64)


CASES = {  # name: (base array, view on a tensor or numpy array, target dtype)
    "bf16_all_patterns": (np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256),
                          lambda x: x, "float32"),
    "bf16_transposed_slice": (np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256),
                              lambda x: x.T[::3, 1::2], "float32"),
    "f32_edges": (_f32_bits().view(np.float32), lambda x: x, "bfloat16"),
    "f32_negstep": (_f32_bits().view(np.float32), lambda x: x[::-1, ::-2], "bfloat16"),
    "i32_to_f32": (_i32_values(), lambda x: x, "float32"),
    "i32_transposed_to_bf16": (_i32_values(), lambda x: x.T[1::2], "bfloat16"),
    "f32_to_i32": (_f32_in_range(), lambda x: x, "int32"),
    "bf16_transposed_to_i32": (_f32_in_range().astype(ml_dtypes.bfloat16).clip(-2147483648.0, 2130706432.0),
                               lambda x: x.T[::2], "int32"),
}


def _tensor(name: str, device: str = "cpu") -> tgrad.Tensor:
    base = CASES[name][0]
    dtype = {np.dtype(np.float32): tgrad.float32, np.dtype(np.int32): tgrad.int32}.get(base.dtype, tgrad.bfloat16)
    return tgrad.Tensor.from_numpy(base, dtype=dtype, device=device)


def _result(name: str, device: str = "cpu") -> np.ndarray:
    _, view, to = CASES[name]
    with _tensor(name, device) as x:
        with view(x).to(getattr(tgrad, to)) as y:
            assert y.device == device
            return np.ascontiguousarray(y.numpy()).reshape(-1).view(np.uint8).copy()


@pytest.mark.parametrize("lang", ["msl", "opencl", "cuda"])
def test_a_cast_renders_in_every_language(lang: str) -> None:
    for name, (_, view, to) in CASES.items():
        with _tensor(name) as x:
            with view(x).to(getattr(tgrad, to)) as y:
                k = R.render_tensor(y, None, lang)
                flags = ("f",) if to == "int32" else ()  # to int32: a flag per element
                assert k.route == "cast" and k.buffer_names == ("x", "c") + flags and k.threadgroup == (256, 1, 1)


@needs_opencl
@pytest.mark.parametrize("name", list(CASES))
def test_pocl_casts_with_the_cpu_bytes(name: str) -> None:
    assert np.array_equal(_result(name, "opencl"), _result(name))


@needs_opencl
def test_casts_to_int32_and_back_run_on_the_device() -> None:
    a = np.array([[1.5, -2.0, 7.0], [0.25, 9.0, -4.0]], np.float32)
    with tgrad.Tensor.from_numpy(a, dtype=tgrad.float32, device="opencl") as x, x.to(tgrad.int32) as n:
        assert n.device == "opencl" and n.route == "opencl.cast"
        assert np.array_equal(n.numpy(), a.astype(np.int32))
        with tgrad.argmax(x, axis=1) as i, i.to(tgrad.float32) as f:
            assert f.device == "opencl" and f.route == "opencl.cast"
            assert np.array_equal(f.numpy(), np.argmax(a, axis=1).astype(np.float32))


@needs_opencl
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bad", [np.nan, -np.nan, np.inf, -np.inf, 2.0**31, -2.0**32, 3e38])
def test_a_cast_of_a_nan_or_out_of_range_value_to_int32_fails_on_the_device_as_on_the_cpu(dtype: str,
                                                                                          bad: float) -> None:
    """The kernel flags the element; the cast fails with the CPU's typed error, naming the first
    such element (in the view's order), and the input stays as it was."""
    a = np.arange(40, dtype=np.float32).reshape(5, 8) - 17.5
    a[3, 2], a[1, 6] = bad, bad  # the transposed view meets [3, 2] first (its element 2 * 5 + 3)
    dt = getattr(tgrad, dtype)
    messages = []
    for device in ("cpu", "opencl"):
        with tgrad.Tensor.from_numpy(a, dtype=dt, device=device) as x:
            with pytest.raises(errors.InvalidArgumentError, match="NaN or outside the int32 range") as failed:
                x.T.to(tgrad.int32).numpy()
            messages.append(str(failed.value))
            assert np.array_equal(x.to("cpu").numpy().view(np.uint8), tgrad.Tensor.from_numpy(a, dtype=dt).numpy().view(np.uint8))
    assert messages[0] == messages[1] and "element 13 " in messages[0], messages


def _emulated(harness: Harness, name: str) -> None:
    base, view, to = CASES[name]
    with _tensor(name) as x:
        memory: dict[int, np.ndarray] = {x.buffer_id: np.ascontiguousarray(base).view(
            np.uint16 if base.dtype == ml_dtypes.bfloat16 else np.uint32).ravel()}  # float32 and int32: 4 bytes
        with view(x).to(getattr(tgrad, to)) as y:
            kernels = [R.render_tensor(y, None, harness.lang, step=i) for i in range(len(y.explain(json=True)["steps"]))]
            harness.run(kernels, memory)
            got = memory[y.buffer_id].view(np.uint8)
            if to == "int32":
                assert not harness.flags.any(), name  # in range: nothing flagged
    assert np.array_equal(got, _result(name)), name


@pytest.fixture(scope="module")
def msl() -> Any:
    return _msl()


@pytest.fixture(scope="module")
def cuda() -> Any:
    return _cuda()


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_generated_msl_casts_with_the_cpu_bytes(msl: Harness, name: str) -> None:
    _emulated(msl, name)


@needs_cxx
@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CASES))
def test_generated_cuda_casts_with_the_cpu_bytes(cuda: Harness, name: str) -> None:
    _emulated(cuda, name)


@needs_cxx
@pytest.mark.parametrize("lang", [pytest.param("msl", marks=pytest.mark.slow), pytest.param("cuda", marks=pytest.mark.cuda)])
def test_the_generated_int32_cast_flags_exactly_the_elements_with_no_int32(lang: str) -> None:
    """float32 patterns of every kind: the kernel flags NaNs and the values outside [-2^31, 2^31),
    nothing else, and every other element is the CPU's truncation."""
    harness = _msl() if lang == "msl" else _cuda()
    bits = _f32_bits()
    with np.errstate(invalid="ignore"):  # signalling NaNs among the patterns
        values = bits.view(np.float32).astype(np.float64)
    bad = np.isnan(values) | (values >= 2.0**31) | (values < -2.0**31)
    with tgrad.Tensor.from_numpy(bits.view(np.float32), dtype=tgrad.float32) as x, x.to(tgrad.int32) as y:
        memory: dict[int, np.ndarray] = {x.buffer_id: bits.ravel()}
        harness.run([R.render_tensor(y, None, lang)], memory)
        got = memory[y.buffer_id].view(np.int32)
    assert np.array_equal(harness.flags != 0, bad.ravel())
    fine = ~bad.ravel()
    want = np.trunc(values.ravel()[fine]).astype(np.int64).astype(np.int32)
    assert np.array_equal(got[fine], want)
