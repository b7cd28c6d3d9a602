"""DLPack under attack: exports that outlive their tensor, consumers that fail, bad keyword values.

The contract: a consumer gets the data or a clean exception and nothing is reported as ignored.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import _dlpack, errors

import dlpack_forge as forge

try:
    import torch
except ImportError:  # CI may not install torch: its tests skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every "Exception ignored" report (sys.unraisablehook) made during the test."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    yield seen


def _tensor(seed: int, *shape: int) -> tgrad.Tensor:
    values = np.random.default_rng(seed).standard_normal(shape).astype(BF16)
    return tgrad.Tensor.from_numpy(values)


def _churn(nbytes: int) -> None:
    """Allocate, fill and free tensors of the size just freed, so that a stale pointer into the
    freed block reads other values (without ASan, which reports the read itself)."""
    for seed in range(8):
        t = tgrad.Tensor.from_numpy(np.full(nbytes // 2, seed + 100, np.float32))
        t.realize()
        del t


class _Consumer:
    """A minimal DLPack consumer in ctypes: takes the capsule (renames it), reads the elements
    row-major on demand, and calls the deleter when closed (what torch or numpy do)."""

    def __init__(self, producer: Any, **kwargs: Any) -> None:
        capsule = producer.__dlpack__(**kwargs)
        self.name = forge.capsule_name(capsule)
        kind = {b"dltensor": forge.DLManagedTensor, b"dltensor_versioned": forge.DLManagedTensorVersioned}[self.name]
        address = forge.capsule_pointer(capsule, self.name)
        assert forge.capsule_rename(capsule, forge.USED_NAMES[self.name]) == 0
        self.managed = kind.from_address(address)

    def bytes(self) -> bytes:
        """The elements, row-major: the memory is read with memcpy (ctypes.string_at), which ASan
        checks, then gathered."""
        dl = self.managed.dl_tensor
        shape = [dl.shape[i] for i in range(dl.ndim)]
        strides = [dl.strides[i] for i in range(dl.ndim)]
        hi = sum((n - 1) * s for n, s in zip(shape, strides))  # tgrad exports strides >= 0
        raw = np.frombuffer(ctypes.string_at(dl.data + dl.byte_offset, 2 * (hi + 1)), np.uint16)
        return np.lib.stride_tricks.as_strided(raw, shape, [2 * s for s in strides]).tobytes()

    def close(self) -> None:
        self.managed.deleter(ctypes.addressof(self.managed))


# ---- export: the consumer's memory outlives the tensor (item 3) --------------------------------------
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_an_export_outlives_the_release_of_its_tensor(max_version: Any) -> None:
    t = _tensor(1, 64, 64)
    expected = t.to_bytes()
    consumer = _Consumer(t, max_version=max_version)
    t.release()
    _churn(len(expected))
    assert consumer.bytes() == expected  # ASan: heap-use-after-free here before the fix
    consumer.close()


def test_an_export_of_a_view_outlives_the_with_block() -> None:
    with _tensor(2, 16, 24) as t, t.T[::2] as view:
        expected = view.to_bytes()
        consumer = _Consumer(view, max_version=(1, 0))
    _churn(16 * 24 * 2)
    assert consumer.bytes() == expected
    consumer.close()


def test_an_export_holds_one_handle_until_the_deleter_runs() -> None:
    t = _tensor(3, 4, 4)
    live = tgrad.live_tensors()
    consumer = _Consumer(t, max_version=(1, 0))
    assert tgrad.live_tensors() == live + 1
    t.release()
    assert tgrad.live_tensors() == live
    consumer.close()
    assert tgrad.live_tensors() == live - 1


def test_an_unconsumed_export_releases_its_handle() -> None:
    t = _tensor(4, 4, 4)
    live = tgrad.live_tensors()
    for kwargs in ({}, {"max_version": (1, 0)}, {"copy": True}):
        capsule = t.__dlpack__(**kwargs)
        del capsule
        assert tgrad.live_tensors() == live


@needs_torch
def test_torch_reads_an_export_after_the_tensor_is_released() -> None:
    t = _tensor(5, 64, 64)
    expected = t.to_bytes()
    y = torch.from_dlpack(t)
    t.release()
    _churn(len(expected))
    assert y.view(torch.int16).numpy().tobytes() == expected


@needs_torch
def test_torch_reads_an_export_after_the_with_block() -> None:
    with _tensor(6, 32, 32) as t:
        expected = t.to_bytes()
        y = torch.from_dlpack(t)
    _churn(len(expected))
    assert y.view(torch.int16).numpy().tobytes() == expected


# ---- consumers: the data or a clean exception, nothing ignored (item 8) -----------------------------
def test_numpy_refuses_bf16_cleanly_and_nothing_is_reported(unraisable: list[Any], capfd: pytest.CaptureFixture[str]) -> None:
    t = _tensor(7, 2, 3)
    live = tgrad.live_tensors()
    for _ in range(3):
        try:
            array = np.from_dlpack(t)
        except SystemError as exc:  # before the fix: "returned NULL without setting an exception"
            pytest.fail(f"numpy's exception was lost: {exc!r}")
        except (RuntimeError, BufferError, TypeError) as exc:  # numpy has no bfloat16 DLPack dtype
            assert "ctypes" not in str(exc)
        else:  # a numpy that takes bf16 gets the data, read-only
            assert array.view(np.uint16).tobytes() == t.to_bytes() and not array.flags.writeable
            del array
    gc.collect()
    assert tgrad.live_tensors() == live
    assert unraisable == [] and capfd.readouterr().err == ""


def test_a_capsule_freed_while_an_exception_is_set_keeps_that_exception(unraisable: list[Any], capfd: pytest.CaptureFixture[str]) -> None:
    t = _tensor(8, 2, 3)
    live = tgrad.live_tensors()
    for kwargs in ({}, {"max_version": (1, 0)}, {"copy": True}):
        with pytest.raises(TypeError, match="unsupported operand"):
            t.__dlpack__(**kwargs) + 1  # the interpreter frees the capsule with the TypeError set
    assert tgrad.live_tensors() == live
    assert unraisable == [] and capfd.readouterr().err == ""


@needs_torch
def test_a_torch_tensor_freed_while_an_exception_is_set_keeps_that_exception(unraisable: list[Any], capfd: pytest.CaptureFixture[str]) -> None:
    t = _tensor(9, 3, 3)
    live = tgrad.live_tensors()
    one: Any = 1
    with pytest.raises(TypeError, match="unsupported operand"):
        # The TypeError is set while the interpreter drops the pending tuple item, the torch
        # tensor: its deleter runs then. (Not torch's own operator: its C++ exceptions abort
        # under the ASan runtime.)
        (torch.from_dlpack(t), one + "x")
    gc.collect()
    assert tgrad.live_tensors() == live
    assert unraisable == [] and capfd.readouterr().err == ""


def test_numpy_respects_the_read_only_flag_of_a_versioned_export() -> None:
    t = _tensor(10, 3, 4)
    capsule = t.__dlpack__(max_version=(1, 0))
    managed = forge.DLManagedTensorVersioned.from_address(forge.capsule_pointer(capsule, b"dltensor_versioned"))
    assert managed.flags & _dlpack.FLAG_READ_ONLY and not managed.flags & _dlpack.FLAG_IS_COPIED
    managed.dl_tensor.dtype.code = 1  # the same 16 bits as kDLUInt, which numpy takes

    class Holder:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    array = np.from_dlpack(Holder())
    assert not array.flags.writeable
    assert array.tobytes() == t.to_bytes()
    with pytest.raises(ValueError, match="read-only"):
        array[0, 0] = 1


def test_copy_true_exports_an_independent_writable_copy() -> None:
    t = _tensor(11, 3, 4)
    expected = t.to_bytes()
    capsule = t.__dlpack__(max_version=(1, 0), copy=True)
    managed = forge.DLManagedTensorVersioned.from_address(forge.capsule_pointer(capsule, b"dltensor_versioned"))
    assert managed.flags & _dlpack.FLAG_IS_COPIED and not managed.flags & _dlpack.FLAG_READ_ONLY
    ctypes.c_uint16.from_address(managed.dl_tensor.data).value ^= 0xFFFF  # the consumer writes
    assert t.to_bytes() == expected


# ---- keyword values and released tensors (item 9) ----------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {"max_version": "x"}, {"max_version": (1,)}, {"max_version": (1, 0, 0)}, {"max_version": (1.0, 0)},
    {"max_version": (-1, 0)}, {"max_version": (True, 0)}, {"max_version": 1},
    {"dl_device": 5}, {"dl_device": "cpu"}, {"dl_device": (1,)}, {"dl_device": (1, "0")},
    {"copy": "maybe"}, {"copy": 1}, {"stream": "s"}, {"stream": 1.5},
], ids=repr)
def test_bad_keyword_values_raise_invalid_argument(kwargs: dict[str, Any]) -> None:
    t = _tensor(12, 2, 2)
    live = tgrad.live_tensors()
    with pytest.raises(errors.InvalidArgumentError):
        t.__dlpack__(**kwargs)
    assert tgrad.live_tensors() == live


def test_a_device_other_than_the_cpu_is_unavailable() -> None:
    t = _tensor(13, 2, 2)
    with pytest.raises(errors.BackendUnavailableError):
        t.__dlpack__(dl_device=(2, 0))
    t.__dlpack__(dl_device=(1, 0), max_version=[1, 0])  # a list is taken like a tuple


def test_an_unknown_keyword_is_a_type_error_as_the_protocol_expects() -> None:
    # Consumers probe producers with max_version and fall back on TypeError: Python's own.
    with pytest.raises(TypeError):
        _tensor(14, 2, 2).__dlpack__(no_such_keyword=1)


def test_a_released_tensor_has_no_dlpack_device_and_no_capsule() -> None:
    t = _tensor(15, 2, 2)
    t.release()
    with pytest.raises(errors.InvalidHandleError):
        t.__dlpack_device__()
    with pytest.raises(errors.InvalidHandleError):
        t.__dlpack__()
