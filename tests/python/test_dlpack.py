"""DLPack: zero-copy both ways with torch bf16 tensors, numpy bf16 arrays in, lifetimes that do
not depend on which side is released first, read-only exports."""

from __future__ import annotations

import gc
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import _dlpack, errors

BF16 = np.dtype(ml_dtypes.bfloat16)


def _tgrad(bf16_bits: Any, *shape: int) -> tgrad.Tensor:
    return tgrad.Tensor.from_bf16_bits(bf16_bits(*shape))


def _data(t: tgrad.Tensor) -> int:
    out = tgrad.ffi.new("const uint16_t **")
    tgrad._check(tgrad.lib.tgrad_tensor_data(t._h, out))
    return int(tgrad.ffi.cast("uintptr_t", out[0]))


def test_dlpack_device_is_the_cpu(bf16_bits: Any) -> None:
    assert _tgrad(bf16_bits, 2, 2).__dlpack_device__() == (1, 0)


def test_numpy_bf16_array_comes_in_without_a_copy(bf16_bits: Any) -> None:
    bits = bf16_bits(6, 5)
    a = bits.view(BF16)
    t = tgrad.from_dlpack(a[::2, 1:].T)
    assert t.to_bytes() == np.ascontiguousarray(bits[::2, 1:].T).tobytes()
    del a, bits
    gc.collect()
    assert t.shape == (4, 3) and len(t.to_bytes()) == 24  # the array is held by the tensor


def test_numpy_float_arrays_round_to_bf16() -> None:
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert tgrad.from_dlpack(x).to_bytes() == x.astype(BF16).tobytes()
    assert tgrad.from_dlpack(x.astype(np.float16)).to_bytes() == x.astype(np.float16).astype(np.float32).astype(BF16).tobytes()


def test_non_float_arrays_are_refused() -> None:
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.from_dlpack(np.arange(3))


try:
    import torch
except ImportError:  # CI may not install torch: its tests skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@pytest.mark.interop
@needs_torch
def test_torch_bf16_comes_in_zero_copy_with_identical_bytes() -> None:
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    t = tgrad.from_dlpack(x)
    assert _data(t) == x.data_ptr()
    assert t.to_bytes() == x.view(torch.int16).numpy().tobytes()


@pytest.mark.interop
@needs_torch
def test_torch_non_contiguous_strides_come_in_as_views() -> None:
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    for view in (x.T, x[1::2, ::3], x[:, 2]):
        t = tgrad.from_dlpack(view)
        assert t.shape == tuple(view.shape) and t.strides == tuple(view.stride())
        assert t.to_bytes() == view.contiguous().view(torch.int16).numpy().tobytes()


@pytest.mark.interop
@needs_torch
def test_torch_source_deleted_first_keeps_the_memory_alive() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(torch.bfloat16)
    expected = x.view(torch.int16).numpy().tobytes()
    t = tgrad.from_dlpack(x)
    del x
    gc.collect()
    assert t.to_bytes() == expected
    assert (t @ t.T).shape == (3, 3)
    del t
    gc.collect()
    assert not _dlpack._imports


@pytest.mark.interop
@needs_torch
def test_torch_float32_is_rounded_to_bf16() -> None:
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    assert tgrad.from_dlpack(x.T).to_bytes() == x.T.contiguous().to(torch.bfloat16).view(torch.int16).numpy().tobytes()


@pytest.mark.interop
@needs_torch
def test_tgrad_goes_out_to_torch_zero_copy(bf16_bits: Any) -> None:
    a = _tgrad(bf16_bits, 4, 6)
    x = torch.from_dlpack(a)
    assert x.dtype == torch.bfloat16 and x.data_ptr() == _data(a)
    assert x.view(torch.int16).numpy().tobytes() == a.to_bytes()


@pytest.mark.interop
@needs_torch
def test_tgrad_views_go_out_with_their_strides(bf16_bits: Any) -> None:
    a = _tgrad(bf16_bits, 4, 6)
    for view in (a.T, a[1::2, ::2], a[:1].expand(3, 6)):
        x = torch.from_dlpack(view)
        assert tuple(x.stride()) == view.strides and x.data_ptr() == _data(view)
        assert x.contiguous().view(torch.int16).numpy().tobytes() == view.to_bytes()


@pytest.mark.interop
@needs_torch
def test_negative_strides_go_out_as_a_copy_or_are_refused(bf16_bits: Any) -> None:
    a = _tgrad(bf16_bits, 4, 6)[::-1]
    x = torch.from_dlpack(a)
    assert x.view(torch.int16).numpy().tobytes() == a.to_bytes()
    with pytest.raises(errors.ViewNotExpressibleError):
        a.__dlpack__(copy=False)


@pytest.mark.interop
@needs_torch
def test_tgrad_deleted_first_keeps_the_export_alive(bf16_bits: Any) -> None:
    a = (_tgrad(bf16_bits, 8, 8) @ _tgrad(bf16_bits, 8, 8))
    expected = a.to_bytes()
    live = tgrad.live_tensors()
    x = torch.from_dlpack(a)
    del a
    gc.collect()
    assert x.view(torch.int16).numpy().tobytes() == expected
    del x
    gc.collect()
    assert tgrad.live_tensors() == live - 1  # the export's own handle went with x


@pytest.mark.interop
@needs_torch
def test_versioned_export_is_read_only(bf16_bits: Any) -> None:
    a = _tgrad(bf16_bits, 2, 3)
    live = tgrad.live_tensors()
    capsule = a.__dlpack__(max_version=(1, 0))
    name = _dlpack._api.PyCapsule_GetName(capsule)
    assert name == b"dltensor_versioned"
    managed = _dlpack.ffi.cast("DLManagedTensorVersioned *", _dlpack._api.PyCapsule_GetPointer(capsule, name))
    assert managed.flags & _dlpack.FLAG_READ_ONLY and managed.version.major == 1
    assert (managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits) == (_dlpack.KDL_BFLOAT, 16)
    del capsule, managed  # an unconsumed capsule frees its export
    gc.collect()
    assert tgrad.live_tensors() == live


@pytest.mark.interop
@needs_torch
def test_round_trip_tgrad_torch_tgrad_shares_one_buffer(bf16_bits: Any) -> None:
    a = _tgrad(bf16_bits, 3, 5)
    b = tgrad.from_dlpack(torch.from_dlpack(a))
    assert _data(b) == _data(a) and b.to_bytes() == a.to_bytes()
