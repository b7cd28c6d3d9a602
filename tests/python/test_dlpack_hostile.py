"""DLPack under attack: exports that outlive their tensor, consumers that fail, bad keyword values,
and forged capsules (non-CPU devices, bad dtypes, shapes, strides, offsets, pointers, versions).

The contract: a consumer gets the data or a clean exception and nothing is reported as ignored; a
refused capsule is left unconsumed, so the producer's deleter runs exactly once, through its
capsule destructor; an adopted one runs it exactly once, when the last tgrad tensor goes.
"""

from __future__ import annotations

import ctypes
import functools
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
from dlpack_forge import KDL_BFLOAT, KDL_CPU, KDL_FLOAT, CpuProducer, Forged, Producer

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


@pytest.mark.interop
@needs_torch
def test_torch_reads_an_export_after_the_tensor_is_released() -> None:
    t = _tensor(5, 64, 64)
    expected = t.to_bytes()
    y = torch.from_dlpack(t)
    t.release()
    _churn(len(expected))
    assert y.view(torch.int16).numpy().tobytes() == expected


@pytest.mark.interop
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


@pytest.mark.interop
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


def test_a_gpu_tensor_exports_a_cpu_copy_that_holds_no_handle(opencl_device: str) -> None:
    t = _tensor(17, 3, 5).to("opencl")
    expected = t.T.to_bytes()
    live = tgrad.live_tensors()
    consumer = _Consumer(t.T, max_version=(1, 0))
    assert consumer.managed.flags & _dlpack.FLAG_IS_COPIED and tgrad.live_tensors() == live
    assert consumer.bytes() == expected
    consumer.close()
    with pytest.raises(errors.ViewNotExpressibleError):
        t.__dlpack__(copy=False)


# ---- keyword values and released tensors (item 9) ----------------------------------------------------
BAD_KEYWORD_VALUES = [
    {"max_version": "x"}, {"max_version": (1,)}, {"max_version": (1, 0, 0)}, {"max_version": (1.0, 0)},
    {"max_version": (-1, 0)}, {"max_version": (True, 0)}, {"max_version": 1},
    {"dl_device": 5}, {"dl_device": "cpu"}, {"dl_device": (1,)}, {"dl_device": (1, "0")},
    {"copy": "maybe"}, {"copy": 1}, {"stream": "s"}, {"stream": 1.5},
]


def test_bad_keyword_values_raise_invalid_argument() -> None:
    t = _tensor(12, 2, 2)
    live = tgrad.live_tensors()
    for kwargs in BAD_KEYWORD_VALUES:
        with pytest.raises(errors.InvalidArgumentError):
            t.__dlpack__(**kwargs)
        assert tgrad.live_tensors() == live, kwargs


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


# ---- import: forged capsules are checked before they are consumed (items 4, 5) ----------------------
def _offer(producer: Producer, expected: bytes | None = None) -> BaseException | None:
    """tgrad.from_dlpack(producer): None on success (the bytes must be `expected`: the model's,
    taken before the producer's memory was handed over), else the exception; in both cases each
    capsule's deleter must have run exactly once."""
    live = tgrad.live_tensors()
    try:
        t = tgrad.from_dlpack(producer)
    except Exception as exc:
        assert producer.deleter_calls() == [1] * len(producer.made)
        assert tgrad.live_tensors() == live
        return exc
    assert expected is not None and t.to_bytes() == expected
    t.release()
    assert producer.deleter_calls() == [1] * len(producer.made)
    assert tgrad.live_tensors() == live
    return None


def _forged(**fields: Any) -> Forged:
    base: dict[str, Any] = {"shape": [2, 3], "strides": [3, 1], "store_bytes": 12}
    base.update(fields)
    return Forged(**base)


CUDA, VULKAN = 2, 7

FAULTS = [
    ("cuda device", _forged(device=(CUDA, 0)), errors.DeviceMismatchError),
    ("cuda host device", _forged(device=(3, 0)), errors.DeviceMismatchError),
    ("unknown device", _forged(device=(123456, 0)), errors.DeviceMismatchError),
    ("cpu device 7", _forged(device=(KDL_CPU, 7)), errors.DeviceMismatchError),
    ("int16", _forged(dtype=(0, 16, 1)), errors.DtypeUnsupportedError),
    ("bf16 x2 lanes", _forged(dtype=(KDL_BFLOAT, 16, 2)), errors.DtypeUnsupportedError),
    ("bf16 x0 lanes", _forged(dtype=(KDL_BFLOAT, 16, 0)), errors.DtypeUnsupportedError),
    ("bf32", _forged(dtype=(KDL_BFLOAT, 32, 1)), errors.DtypeUnsupportedError),
    ("float8", _forged(dtype=(KDL_FLOAT, 8, 1)), errors.DtypeUnsupportedError),
    ("ndim 9", _forged(ndim=9), errors.InvalidArgumentError),
    ("ndim -1", _forged(ndim=-1), errors.InvalidArgumentError),
    ("ndim 2^31-1", _forged(ndim=2**31 - 1), errors.InvalidArgumentError),
    ("NULL shape", _forged(shape=None, ndim=2), errors.InvalidArgumentError),
    ("negative extent", _forged(shape=[2, -3]), errors.InvalidArgumentError),
    ("strides 2^62", _forged(strides=[2**62, 2**62]), errors.SizeOverflowError),
    ("strides -2^63", _forged(strides=[-2**63, 1]), errors.SizeOverflowError),
    ("strides 2^63-1", _forged(strides=[3, 2**63 - 1]), errors.SizeOverflowError),
    ("extents 2^40 x 2^40", _forged(shape=[2**40, 2**40], strides=[0, 0]), errors.SizeOverflowError),
    ("extent 2^62", _forged(shape=[2**62, 1], strides=[0, 0]), errors.SizeOverflowError),
    ("NULL data", _forged(data=None), errors.InvalidArgumentError),
    ("misaligned bf16", _forged(byte_offset=1), errors.InvalidArgumentError),
    ("misaligned f32", _forged(dtype=(KDL_FLOAT, 32, 1), data=2, store_bytes=32), errors.InvalidArgumentError),
    ("byte_offset 2^64-2", _forged(byte_offset=2**64 - 2), errors.SizeOverflowError),
    ("below address 0", _forged(data=8, absolute=True, strides=[-3, -1]), errors.SizeOverflowError),
    ("version 0.9", _forged(version=(0, 9)), errors.VersionMismatchError),
    ("version 2.0", _forged(version=(2, 0)), errors.VersionMismatchError),
]


@pytest.mark.parametrize("forged, refusal", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_a_forged_capsule_is_refused_before_it_is_consumed(forged: Forged, refusal: type) -> None:
    # __dlpack_device__ missing, lying (the CPU) or honest: the capsule's own fields decide.
    for make in (Producer, functools.partial(CpuProducer, answer=(KDL_CPU, 0)), CpuProducer):
        producer = make(forged, forge.store_for(forged, 0))
        error = _offer(producer)
        if producer.made == []:  # refused on an honest answer alone, before a capsule was made
            assert isinstance(error, errors.DeviceMismatchError) and forged.device[0] != KDL_CPU
            continue
        assert isinstance(error, refusal), repr(error)
        assert len(producer.made) == 1


def test_item5_huge_strides_raise_a_tgrad_error_and_leak_nothing() -> None:
    forged = _forged(strides=[2**62, 2**62])
    producer = Producer(forged, forge.store_for(forged, 0))
    imports = dict(_dlpack._imports)
    assert isinstance(_offer(producer), errors.SizeOverflowError)
    assert _dlpack._imports == imports


def test_a_garbled_dlpack_device_is_refused_without_asking_for_a_capsule() -> None:
    forged = _forged()
    for answer in ("x", (1,), None, (1, 0, 0), ("1", "0")):
        producer = CpuProducer(forged, forge.store_for(forged, 0), answer=answer)
        assert isinstance(_offer(producer), errors.InvalidArgumentError), answer
        assert producer.made == []


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("dtype", [(KDL_BFLOAT, 16, 1), (KDL_FLOAT, 16, 1), (KDL_FLOAT, 32, 1), (KDL_FLOAT, 64, 1)])
def test_an_honest_capsule_comes_in_and_its_deleter_runs_once(versioned: bool, dtype: tuple[int, int, int]) -> None:
    itemsize = dtype[1] // 8
    forged = _forged(versioned=versioned, dtype=dtype, shape=[3, 2], strides=[1, -3], byte_offset=3 * itemsize,
                     store_bytes=6 * itemsize)
    store = forge.store_for(forged, 1)
    expected = forge.gather(forged, store)
    assert _offer(CpuProducer(forged, store), expected) is None


def test_an_adopted_capsule_is_freed_by_the_last_tgrad_tensor() -> None:
    forged = _forged(shape=[4, 4], strides=[4, 1], store_bytes=32)
    store = forge.store_for(forged, 2)
    expected = forge.gather(Forged(shape=[3, 4], strides=[1, 4], data=2, store_bytes=32), store)
    producer = Producer(forged, store)
    del store  # the capsule owns the memory: its deleter frees it
    t = tgrad.from_dlpack(producer)
    view = t.T[1:]
    t.release()
    assert producer.deleter_calls() == [0]
    assert view.to_bytes() == expected
    del view
    gc.collect()
    assert producer.deleter_calls() == [1]


def test_a_legacy_only_producer_is_asked_again_without_max_version() -> None:
    forged = _forged(versioned=False)
    store = forge.store_for(forged, 3)
    producer = Producer(forged, store, legacy_only=True)
    assert _offer(producer, forge.gather(forged, store)) is None and len(producer.made) == 1


def test_a_used_or_foreign_capsule_is_refused() -> None:
    t = _tensor(16, 2, 2)
    capsule = t.__dlpack__()
    assert forge.capsule_rename(capsule, forge.USED_NAMES[b"dltensor"]) == 0

    class Used:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return capsule

    with pytest.raises(errors.InvalidArgumentError, match="already used"):
        tgrad.from_dlpack(Used())
    # Named back, so that its destructor frees the export (the name buffer outlives the capsule).
    assert forge.capsule_rename(capsule, forge.NAMES[False]) == 0
    del capsule

    class NotACapsule:
        def __dlpack__(self, **kwargs: Any) -> Any:
            return object()

    with pytest.raises(errors.InvalidArgumentError, match="not a DLPack capsule"):
        tgrad.from_dlpack(NotACapsule())


def test_a_failing_producer_becomes_a_tgrad_error() -> None:
    class Broken:
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise BufferError("cannot export")

    with pytest.raises(errors.InvalidArgumentError, match="cannot export") as info:
        tgrad.from_dlpack(Broken())
    assert isinstance(info.value.__cause__, BufferError)


def test_a_refusal_after_the_capsule_is_consumed_runs_the_deleter_once() -> None:
    if tgrad.lib.tgrad_debug_fail_allocation(0, tgrad.ffi.NULL) != 0:
        pytest.skip("libtgrad was built without fault injection")
    failures = 0
    for n in range(1, 6):  # each allocation libtgrad makes while adopting the memory, in turn
        forged = _forged()
        store = forge.store_for(forged, n)
        producer, expected = Producer(forged, store), forge.gather(forged, store)
        del store
        tgrad.lib.tgrad_debug_fail_allocation(n, tgrad.ffi.NULL)
        try:
            error = _offer(producer, expected)
        finally:
            tgrad.lib.tgrad_debug_fail_allocation(0, tgrad.ffi.NULL)
        if error is None:
            break
        assert isinstance(error, errors.OutOfMemoryError), repr(error)
        failures += 1
    assert failures >= 1
