"""The cast kind on the GPU routes (docs/kernels.md, "The cast route"): bfloat16 -> float32 (exact)
and float32 -> bfloat16 (round to nearest even, any NaN 0x7fc0) of a view, rendered in MSL, OpenCL C
and CUDA, with the CPU's bytes on PoCL (core tier) and on both emulators (slow, cuda), on every
bf16 pattern and on float32 ties, subnormals, NaNs and overflow; int32 -> float32 and bfloat16
(rounded once to nearest even, integers only) on ties, extremes and every magnitude. Casts to int32
stay on the CPU: a device has no way to fail a cast of NaN, so they are refused there when the node
is made.
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


CASES = {  # name: (base array, view on a tensor or numpy array, target dtype)
    "bf16_all_patterns": (np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256),
                          lambda x: x, "float32"),
    "bf16_transposed_slice": (np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256),
                              lambda x: x.T[::3, 1::2], "float32"),
    "f32_edges": (_f32_bits().view(np.float32), lambda x: x, "bfloat16"),
    "f32_negstep": (_f32_bits().view(np.float32), lambda x: x[::-1, ::-2], "bfloat16"),
    "i32_to_f32": (_i32_values(), lambda x: x, "float32"),
    "i32_transposed_to_bf16": (_i32_values(), lambda x: x.T[1::2], "bfloat16"),
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
                assert k.route == "cast" and k.buffer_names == ("x", "c") and k.threadgroup == (256, 1, 1)


@needs_opencl
@pytest.mark.parametrize("name", list(CASES))
def test_pocl_casts_with_the_cpu_bytes(name: str) -> None:
    assert np.array_equal(_result(name, "opencl"), _result(name))


@needs_opencl
def test_casts_to_int32_stay_on_the_cpu_and_from_int32_run_on_the_device() -> None:
    a = np.array([[1.5, -2.0, 7.0], [0.25, 9.0, -4.0]], np.float32)
    with tgrad.Tensor.from_numpy(a, dtype=tgrad.float32, device="opencl") as x:
        with pytest.raises(errors.DtypeUnsupportedError, match="int32"):
            x.to(tgrad.int32)  # a NaN or an out-of-range value must fail the cast: no way on a device
        with tgrad.argmax(x, axis=1) as i, i.to(tgrad.float32) as f:
            assert f.device == "opencl" and f.route == "opencl.cast"
            assert np.array_equal(f.numpy(), np.argmax(a, axis=1).astype(np.float32))


def _emulated(harness: Harness, name: str) -> None:
    base, view, to = CASES[name]
    with _tensor(name) as x:
        memory: dict[int, np.ndarray] = {x.buffer_id: np.ascontiguousarray(base).view(
            np.uint16 if base.dtype == ml_dtypes.bfloat16 else np.uint32).ravel()}  # float32 and int32: 4 bytes
        with view(x).to(getattr(tgrad, to)) as y:
            kernels = [R.render_tensor(y, None, harness.lang, step=i) for i in range(len(y.explain(json=True)["steps"]))]
            harness.run(kernels, memory)
            got = memory[y.buffer_id].view(np.uint8)
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
