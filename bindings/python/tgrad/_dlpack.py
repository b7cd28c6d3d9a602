"""DLPack exchange, zero-copy both ways (private; the API is Tensor.__dlpack__,
Tensor.__dlpack_device__ and tgrad.from_dlpack).

Export: a DLManagedTensor (or, when the consumer asks for max_version >= (1, 0), a
DLManagedTensorVersioned flagged READ_ONLY: tgrad tensors are immutable) over tgrad_tensor_data and
the tensor's own shape and strides. The exported struct keeps the Tensor object alive in a registry;
its deleter (a cffi callback) drops it, so the memory lives while the consumer holds it, whatever
happens to the exporter. Negative strides (torch cannot hold them) and GPU tensors export a
contiguous CPU copy (flagged IS_COPIED) unless copy=False, which refuses them.

Import: a bf16 CPU DLPack capsule becomes a tgrad tensor over the same memory through
tgrad_tensor_from_external, whose deleter calls the producer's deleter when the last tgrad tensor
using it is released. ml_dtypes.bfloat16 numpy arrays are viewed the same way (holding the array).
f32/f64/f16 data is converted (rounded to bf16, a copy); other types are refused.

The DLPack structs are declared to a private cffi FFI (not tgrad.h's); capsules are made and read
through the CPython C API with ctypes.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any

import ml_dtypes
import numpy as np
from cffi import FFI  # type: ignore[import-untyped, unused-ignore]

from . import errors
from ._ffi import ffi as tffi
from ._ffi import lib
from .errors import _check

_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self); uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
"""
ffi: Any = FFI()
ffi.cdef(_CDEF)

KDL_CPU = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
VERSION = (1, 0)
_LEGACY, _VERSIONED = b"dltensor", b"dltensor_versioned"

_lock = threading.Lock()
_keys = itertools.count(1)
#: Exports alive in consumers: key -> (Tensor, cdata the struct points into).
_exports: dict[int, tuple[Any, ...]] = {}
#: Imports alive in tgrad: key -> what keeps the producer's memory (a managed pointer or an array).
_imports: dict[int, Any] = {}

_api = ctypes.pythonapi
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _Destructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
# Capsule names must outlive the capsules: module-level buffers.
_NAMES = {name: ctypes.create_string_buffer(name) for name in
          (_LEGACY, _VERSIONED, b"used_dltensor", b"used_dltensor_versioned")}


def _drop_export(ctx: Any) -> None:
    with _lock:
        _exports.pop(int(ffi.cast("uintptr_t", ctx)), None)


def _legacy_deleter_py(managed: Any) -> None:
    _drop_export(managed.manager_ctx)


_legacy_deleter: Any = ffi.callback("void(DLManagedTensor *)", _legacy_deleter_py)  # kept alive: C holds it


def _versioned_deleter_py(managed: Any) -> None:
    _drop_export(managed.manager_ctx)


_versioned_deleter: Any = ffi.callback("void(DLManagedTensorVersioned *)", _versioned_deleter_py)  # kept alive: C holds it


def _capsule_destructor(capsule: int | None) -> None:
    # Runs while the capsule is being freed: raw pointers only. An unconsumed capsule still owns
    # its tensor, so its deleter runs; a consumed one was renamed "used_..." by its consumer.
    for name, kind in ((_LEGACY, "DLManagedTensor *"), (_VERSIONED, "DLManagedTensorVersioned *")):
        if capsule and _api.PyCapsule_IsValid(capsule, _NAMES[name]):
            managed = ffi.cast(kind, _api.PyCapsule_GetPointer(capsule, _NAMES[name]))
            if managed.deleter != ffi.NULL:
                managed.deleter(managed)
            return


_DESTRUCTOR = _Destructor(_capsule_destructor)


def export(tensor: Any, max_version: tuple[int, int] | None, dl_device: Any, copy: bool | None) -> Any:
    """The DLPack capsule of `tensor` (see the module docstring)."""
    if dl_device is not None and tuple(dl_device) != (KDL_CPU, 0):
        raise errors.BackendUnavailableError(f"__dlpack__: tgrad exports to the CPU only, not device {tuple(dl_device)}")
    copied = False
    if copy or tensor.device != "cpu" or any(s < 0 for s in tensor.strides):
        if copy is False:
            raise errors.ViewNotExpressibleError(
                "__dlpack__(copy=False): negative strides or a GPU tensor cannot be shared; a copy is needed")
        tensor = (tensor.to("cpu") if tensor.device != "cpu" else tensor).contiguous()
        copied = True
    data = tffi.new("const uint16_t **")
    _check(lib.tgrad_tensor_data(tensor._h, data))
    ndim = tensor.ndim
    shape = ffi.new("int64_t[]", list(tensor.shape) or [0])
    strides = ffi.new("int64_t[]", list(tensor.strides) or [0])
    versioned = max_version is not None and tuple(max_version) >= VERSION
    managed = ffi.new("DLManagedTensorVersioned *" if versioned else "DLManagedTensor *")
    dl = managed.dl_tensor
    dl.data = ffi.cast("void *", int(tffi.cast("uintptr_t", data[0])))
    dl.device.device_type, dl.device.device_id = KDL_CPU, 0
    dl.ndim = ndim
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = KDL_BFLOAT, 16, 1
    dl.shape, dl.strides, dl.byte_offset = shape, strides, 0
    key = next(_keys)
    managed.manager_ctx = ffi.cast("void *", key)
    if versioned:
        managed.version.major, managed.version.minor = VERSION
        managed.flags = FLAG_READ_ONLY | (FLAG_IS_COPIED if copied else 0)
        managed.deleter = _versioned_deleter
    else:
        managed.deleter = _legacy_deleter
    with _lock:
        _exports[key] = (tensor, managed, shape, strides)
    name = _VERSIONED if versioned else _LEGACY
    return _api.PyCapsule_New(int(ffi.cast("uintptr_t", managed)), _NAMES[name], _DESTRUCTOR)


def _release_import_py(context: Any) -> None:
    with _lock:
        held = _imports.pop(int(tffi.cast("uintptr_t", context)), None)
    if isinstance(held, tuple):  # (managed pointer, its C type)
        managed = ffi.cast(held[1], held[0])
        if managed.deleter != ffi.NULL:
            managed.deleter(managed)


_release_import: Any = tffi.callback("void(void *)", _release_import_py)  # kept alive: C holds it


def _external(address: int, shape: tuple[int, ...], strides: tuple[int, ...], keep: Any) -> Any:
    """A Tensor over bf16 memory at `address` (element [0, ...]) viewed with element strides."""
    from .tensor import Tensor

    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides) if n > 0)
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides) if n > 0)
    empty = any(n == 0 for n in shape)
    extent = 0 if empty else hi - lo + 1
    key = next(_keys)
    with _lock:
        _imports[key] = keep
    out = tffi.new("tgrad_tensor_t *")
    status = lib.tgrad_tensor_from_external(
        tffi.cast("const uint16_t *", address + 2 * lo), extent, len(shape),
        tffi.new("int64_t[]", list(shape) or [0]), tffi.new("int64_t[]", list(strides) or [0]),
        _release_import, tffi.cast("void *", key), out)
    if status != 0:
        with _lock:
            _imports.pop(key, None)
        _check(status)
    return Tensor._wrap(int(out[0]))


def _from_numpy(array: np.ndarray[Any, Any]) -> Any:
    from .tensor import Tensor

    if array.dtype == np.dtype(ml_dtypes.bfloat16):
        if array.size == 0:
            return Tensor.from_numpy(array)
        strides = tuple(s // 2 for s in array.strides)
        if any(s % 2 for s in array.strides):
            return Tensor.from_numpy(np.ascontiguousarray(array))
        return _external(int(array.__array_interface__["data"][0]), array.shape, strides, array)
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    return Tensor.from_numpy(array)


def from_dlpack(x: Any) -> Any:
    """A tgrad Tensor over `x` (see the module docstring)."""
    from .tensor import Tensor

    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return _from_numpy(x)
    if not hasattr(x, "__dlpack__"):
        raise errors.InvalidArgumentError(f"from_dlpack: {type(x).__name__} has no __dlpack__")
    if hasattr(x, "__dlpack_device__"):
        device = tuple(x.__dlpack_device__())
        if int(device[0]) != KDL_CPU:
            raise errors.DeviceMismatchError(
                f"from_dlpack: the data is on DLPack device {device}; tgrad imports CPU memory "
                "(move it to the CPU first)")
    try:
        capsule = x.__dlpack__(max_version=VERSION)
    except TypeError:
        capsule = x.__dlpack__()
    name = _api.PyCapsule_GetName(capsule)
    if name not in (_LEGACY, _VERSIONED):
        raise errors.InvalidArgumentError(f"from_dlpack: capsule named {name!r} (already used?)")
    kind = "DLManagedTensorVersioned *" if name == _VERSIONED else "DLManagedTensor *"
    pointer = _api.PyCapsule_GetPointer(id(capsule), _NAMES[name])  # CPython: id() is the address
    managed = ffi.cast(kind, pointer)
    if name == _VERSIONED and managed.version.major > VERSION[0]:
        raise errors.VersionMismatchError(f"from_dlpack: DLPack {managed.version.major}.{managed.version.minor}")
    # From here on tgrad owns the managed tensor: the capsule must not free it.
    if _api.PyCapsule_SetName(capsule, _NAMES[b"used_" + name]) != 0:
        raise errors.InternalError("from_dlpack: cannot mark the capsule used")
    dl = managed.dl_tensor
    shape = tuple(int(dl.shape[i]) for i in range(dl.ndim))
    itemsize = dl.dtype.bits // 8
    if dl.strides == ffi.NULL:
        strides_e: list[int] = []
        acc = 1
        for n in reversed(shape):
            strides_e.insert(0, acc)
            acc *= n
        strides = tuple(strides_e)
    else:
        strides = tuple(int(dl.strides[i]) for i in range(dl.ndim))
    address = int(ffi.cast("uintptr_t", dl.data)) + int(dl.byte_offset)
    code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)
    keep = (int(ffi.cast("uintptr_t", managed)), kind)
    if (code, bits, lanes) == (KDL_BFLOAT, 16, 1):
        return _external(address, shape, strides, keep)
    try:
        if code != KDL_FLOAT or lanes != 1 or bits not in (16, 32, 64):
            raise errors.DtypeUnsupportedError(
                f"from_dlpack: DLPack dtype (code {code}, bits {bits}, lanes {lanes}); tgrad takes "
                "bfloat16 without a copy and float16/32/64 rounded to bf16")
        if any(n == 0 for n in shape):
            host = np.zeros(shape, {16: np.float16, 32: np.float32, 64: np.float64}[bits])
        else:
            lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
            hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
            raw = np.frombuffer(ffi.buffer(ffi.cast("char *", address + itemsize * lo), itemsize * (hi - lo + 1)),
                                dtype={16: np.float16, 32: np.float32, 64: np.float64}[bits])
            host = np.lib.stride_tricks.as_strided(raw[-lo:], shape, tuple(s * itemsize for s in strides))
        return _from_numpy(np.array(host))
    finally:
        if (code, bits, lanes) != (KDL_BFLOAT, 16, 1) and managed.deleter != ffi.NULL:
            managed.deleter(managed)
