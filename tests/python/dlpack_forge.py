"""Forged DLPack producers for the hostile-capsule tests (a helper module, not a test file).

A `Forged` describes every field of a DLManagedTensor or DLManagedTensorVersioned; `Producer`
builds it with ctypes (independently of tgrad's own cdef) over a numpy byte store when its
`__dlpack__` is called, wraps it in a PyCapsule whose destructor calls the deleter while the
capsule is unconsumed (as the DLPack spec asks of producers), and counts how often the deleter runs.
The deleter also frees the store, so that a consumer reading it afterwards is a use-after-free
(visible under ASan). `gather` is the model: the values a correct consumer sees, row-major.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
from typing import Any

import ml_dtypes
import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


KDL_CPU, KDL_FLOAT, KDL_BFLOAT = 1, 2, 4
NUMPY_OF = {(KDL_BFLOAT, 16): np.uint16, (KDL_FLOAT, 16): np.float16, (KDL_FLOAT, 32): np.float32,
            (KDL_FLOAT, 64): np.float64}

#: Deleter calls so far, by the managed struct's address.
deleted: dict[int, int] = {}
#: What a managed struct keeps alive until its deleter runs (the producer's memory).
_stores: dict[int, Any] = {}
#: Structs and arrays the capsules point into: kept for the whole run, so that a second deleter
#: call is counted rather than being a use-after-free in this module.
_structs: list[Any] = []


def _on_delete(address: int | None) -> None:
    address = int(address or 0)
    deleted[address] = deleted.get(address, 0) + 1
    _stores.pop(address, None)  # the producer's memory is gone now


DELETER = _Deleter(_on_delete)

_api = ctypes.pythonapi
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _Destructor)(
    ("PyCapsule_New", _api))
# The destructor gets a capsule being freed: raw pointers only.
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
NAMES = {False: ctypes.create_string_buffer(b"dltensor"), True: ctypes.create_string_buffer(b"dltensor_versioned")}
USED_NAMES = {name.value: ctypes.create_string_buffer(b"used_" + name.value) for name in NAMES.values()}
# A live capsule, for consumers: its name, its pointer, renaming it (to a name that outlives it).
capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
capsule_rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))


def _capsule_destructor(capsule: int | None) -> None:
    for name in NAMES.values():
        if capsule and _is_valid(capsule, name):
            _on_delete(_get_pointer(capsule, name))


DESTRUCTOR = _Destructor(_capsule_destructor)


@dataclasses.dataclass
class Forged:
    """Every field of a forged DLPack tensor. data/byte_offset are relative: `data` is an offset
    into the store in bytes (None: a NULL pointer), or an absolute address when `absolute`."""

    versioned: bool = True
    version: tuple[int, int] = (1, 0)
    flags: int = 0
    device: tuple[int, int] = (KDL_CPU, 0)
    dtype: tuple[int, int, int] = (KDL_BFLOAT, 16, 1)
    ndim: int | None = None  # None: len(shape)
    shape: list[int] | None = dataclasses.field(default_factory=list)  # None: a NULL pointer
    strides: list[int] | None = None  # None: a NULL pointer (compact row-major)
    data: int | None = 0
    absolute: bool = False
    byte_offset: int = 0
    store_bytes: int = 64


def store_for(forged: Forged, seed: int) -> np.ndarray[Any, Any]:
    """A byte store of the forged size: random bf16 bits, or small integers (exact in every float
    type) for float dtypes, so that a correct copy is exact."""
    gen = np.random.default_rng(seed)
    nbytes = max(forged.store_bytes, 8)
    numpy_type = NUMPY_OF.get(forged.dtype[:2])
    if numpy_type is None or numpy_type is np.uint16:
        return gen.integers(0, 256, nbytes, dtype=np.uint8)
    count = nbytes // np.dtype(numpy_type).itemsize + 1
    return gen.integers(-128, 128, count).astype(numpy_type).view(np.uint8)[:nbytes].copy()


class Producer:
    """A __dlpack__ producer of one forged capsule per call (counted in `made`)."""

    def __init__(self, forged: Forged, store: np.ndarray[Any, Any], legacy_only: bool = False) -> None:
        self.forged, self.legacy_only = forged, legacy_only
        self.store: np.ndarray[Any, Any] | None = store  # handed to the first capsule made
        self.made: list[int] = []  # managed struct addresses

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        f, store = self.forged, self.store
        assert store is not None, "one capsule per producer: its deleter frees the store"
        self.store = None  # from now on the capsule owns the memory
        managed: Any = DLManagedTensorVersioned() if f.versioned else DLManagedTensor()
        if f.versioned:
            managed.version.major, managed.version.minor = f.version
            managed.flags = f.flags
        dl = managed.dl_tensor
        base = store.ctypes.data
        dl.data = None if f.data is None else (f.data if f.absolute else base + f.data)
        dl.device.device_type, dl.device.device_id = f.device
        dl.ndim = len(f.shape or []) if f.ndim is None else f.ndim
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = f.dtype
        arrays = []
        for field, values in (("shape", f.shape), ("strides", f.strides)):
            if values is not None:
                array = (ctypes.c_int64 * 16)(*values)  # room past ndim: a lying ndim reads zeros
                arrays.append(array)
                setattr(dl, field, ctypes.cast(array, ctypes.POINTER(ctypes.c_int64)))
        dl.byte_offset = f.byte_offset
        managed.deleter = DELETER
        address = ctypes.addressof(managed)
        _structs.append((managed, arrays))
        _stores[address] = store
        self.made.append(address)
        return _new_capsule(address, NAMES[f.versioned], DESTRUCTOR)

    def deleter_calls(self) -> list[int]:
        return [deleted.get(address, 0) for address in self.made]


class CpuProducer(Producer):
    """A producer that also answers __dlpack_device__ (with `answer`, which may lie)."""

    def __init__(self, forged: Forged, store: np.ndarray[Any, Any], answer: Any = "honest", **kw: Any) -> None:
        super().__init__(forged, store, **kw)
        self.answer = forged.device if answer == "honest" else answer

    def __dlpack_device__(self) -> Any:
        return self.answer


def gather(forged: Forged, store: np.ndarray[Any, Any]) -> bytes:
    """The model: the forged tensor's elements, row-major, as the bf16 bytes tgrad must hold
    (bf16 bits unchanged; float values rounded to bf16, exact for the stores above)."""
    shape = list(forged.shape or [])
    numpy_type = NUMPY_OF[forged.dtype[:2]]
    itemsize = np.dtype(numpy_type).itemsize
    strides = forged.strides
    if strides is None:
        strides = [int(np.prod(shape[i + 1:], dtype=object)) for i in range(len(shape))]
    if any(n == 0 for n in shape):
        return b""
    origin = forged.data + forged.byte_offset
    values = []
    for index in itertools.product(*(range(n) for n in shape)):
        at = origin + itemsize * sum(i * s for i, s in zip(index, strides))
        values.append(store[at:at + itemsize].view(numpy_type)[0])
    out = np.array(values, dtype=numpy_type).reshape(shape)
    if numpy_type is np.uint16:
        return out.astype("<u2").tobytes()
    return out.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype("<u2").tobytes()
