"""DLPack exchange, zero-copy both ways (private; the API is Tensor.__dlpack__,
Tensor.__dlpack_device__ and tgrad.from_dlpack).

Export: numpy's own DLPack exporter (C) over a uint16 array that views the tensor's memory, with
the capsule's dtype then set to bfloat16. The array's base holds a libtgrad handle of its own (an
identity permute of the tensor: a second owner of the same buffer, no copy), released when numpy's
deleter drops the array; so the memory lives while the consumer holds it, whatever happens to the
exporting Tensor or its handle. Why numpy's exporter rather than a capsule made here: a capsule's
destructor and a DLPack deleter may be called while an exception is pending (a consumer that
failed, a consumer's tensor freed during unwinding); numpy's are C functions that save and restore
it, while a ctypes or cffi callback cannot (CPython turns a result returned with an exception set
into a SystemError, and a failed callback into an "Exception ignored" report). A versioned capsule
(max_version >= (1, 0)) is flagged READ_ONLY: tgrad tensors are immutable. Negative strides (torch
cannot hold them), GPU tensors and copy=True export a fresh, writable copy (flagged IS_COPIED).

Import: every field of the producer's capsule (version, device, dtype, lanes, ndim, shape, strides,
byte offset, data) is checked before the capsule is consumed; a refused capsule is left unconsumed,
so the producer's capsule destructor frees it. A bf16 CPU capsule becomes a tgrad tensor over the
same memory through tgrad_tensor_from_external, with the producer's own deleter as libtgrad's: the
capsule is renamed "used_..." just before, and from then on its deleter runs exactly once, either
at once if libtgrad refuses or when the last tgrad tensor over the memory is released. f16/f32/f64
data is copied (rounded to bf16) and the capsule left to its destructor. ml_dtypes.bfloat16 numpy
arrays are viewed without DLPack (holding the array); other numpy arrays are converted.

The DLPack structs are declared to a private cffi FFI (not tgrad.h's); capsules are read through
the CPython C API with ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import operator
import threading
from typing import Any, NamedTuple

import numpy as np
from cffi import FFI  # type: ignore[import-untyped, unused-ignore]

from . import _bf16, _buildable, errors
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
_KIND = {_LEGACY: "DLManagedTensor *", _VERSIONED: "DLManagedTensorVersioned *"}
_INT64_MAX = (1 << 63) - 1
_ADDRESS_END = 1 << 64
_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}

_lock = threading.Lock()
_keys = itertools.count(1)
#: ml_dtypes.bfloat16 arrays viewed by tgrad tensors: key -> the array.
_imports: dict[int, Any] = {}

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
#: The capsule type (types.CapsuleType from Python 3.13): a capsule without a destructor.
_CAPSULE_TYPE: type = type(_api.PyCapsule_New(1, None, None))
# A renamed capsule keeps a pointer to its name: module-level buffers outlive every capsule.
_USED_NAMES = {name: ctypes.create_string_buffer(b"used_" + name) for name in _KIND}


# ---- export ----------------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_pair(value: Any, what: str) -> tuple[int, int]:
    """A (int, int) pair from a tuple or list (of ints or IntEnums), else InvalidArgumentError."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and not any(isinstance(v, bool) for v in value):
        try:
            return operator.index(value[0]), operator.index(value[1])
        except TypeError:
            pass
    raise errors.InvalidArgumentError(f"{what}: expected a pair of ints, got {value!r}")


def _export_versioned(stream: Any, max_version: Any, dl_device: Any, copy: Any) -> bool:
    """Check __dlpack__'s keyword values; True when the consumer takes a versioned capsule."""
    if stream is not None and not _is_int(stream):
        raise errors.InvalidArgumentError(f"__dlpack__: stream must be None or an int, got {stream!r}")
    if copy is not None and not isinstance(copy, bool):
        raise errors.InvalidArgumentError(f"__dlpack__: copy must be None, True or False, got {copy!r}")
    if dl_device is not None:
        device = _int_pair(dl_device, "__dlpack__: dl_device")
        if device != (KDL_CPU, 0):
            raise errors.BackendUnavailableError(
                f"__dlpack__: tgrad exports to the CPU (DLPack device (1, 0)) only, not {device}")
    if max_version is None:
        return False
    major, minor = _int_pair(max_version, "__dlpack__: max_version")
    if major < 0 or minor < 0:
        raise errors.InvalidArgumentError(f"__dlpack__: max_version {max_version!r} is negative")
    return (major, minor) >= VERSION


def _release_handle(handle: int, _pointer: Any, _release: Any = lib.tgrad_tensor_release) -> None:
    # ffi.gc's destructor: cffi saves and restores a pending exception around it.
    _release(handle)


def _shared_array(tensor: Any) -> np.ndarray[Any, Any]:
    """A uint16 array over the tensor's memory (CPU, strides >= 0) owning a handle of its own."""
    ndim, shape = tensor.ndim, tensor.shape
    if any(n == 0 for n in shape):
        return np.empty(shape, np.uint16)  # no memory to share
    out = tffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_tensor_permute(tensor._h, tffi.new("int32_t[]", list(range(ndim)) or [0]), ndim, out))
    handle = int(out[0])
    try:
        data = tffi.new("const uint16_t **")
        _check(lib.tgrad_tensor_data(handle, data))
        strides = tffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
        _check(lib.tgrad_tensor_strides(handle, strides))
    except BaseException:
        lib.tgrad_tensor_release(handle)
        raise
    steps = [int(strides[i]) for i in range(ndim)]
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, steps))
    keeper = tffi.gc(tffi.cast("uint16_t *", data[0]), functools.partial(_release_handle, handle))
    return np.ndarray(shape, np.uint16, buffer=tffi.buffer(keeper, 2 * extent),
                      strides=tuple(2 * s for s in steps))


def _copied_array(tensor: Any) -> np.ndarray[Any, Any]:
    """A fresh row-major uint16 array of the tensor's values (GPU tensors are read back)."""
    from .tensor import _host_array

    bits = _host_array(tensor.shape, np.uint16)  # numpy's MemoryError: OutOfMemoryError
    _check(lib.tgrad_tensor_read_bf16(tensor._h, tffi.from_buffer("uint16_t[]", bits), bits.size))
    return bits


def _array_capsule(array: np.ndarray[Any, Any], versioned: bool, copied: bool) -> Any:
    """numpy's DLPack capsule of a uint16 array, retyped bfloat16 (the same 16 bits)."""
    capsule = None
    if versioned:
        array.flags.writeable = copied  # numpy flags a read-only array READ_ONLY
        try:
            capsule = array.__dlpack__(max_version=VERSION)
        except TypeError:  # numpy < 2.1 exports legacy capsules only, of writable arrays
            array.flags.writeable = True
    if capsule is None:
        capsule = array.__dlpack__()
    name = _VERSIONED if _api.PyCapsule_IsValid(capsule, _VERSIONED) else _LEGACY
    managed = ffi.cast(_KIND[name], _api.PyCapsule_GetPointer(capsule, name))
    dtype = managed.dl_tensor.dtype
    dtype.code, dtype.bits, dtype.lanes = KDL_BFLOAT, 16, 1
    if name == _VERSIONED and copied:
        managed.flags |= FLAG_IS_COPIED
    return capsule


def export(tensor: Any, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
    """The DLPack capsule of `tensor` (see the module docstring)."""
    versioned = _export_versioned(stream, max_version, dl_device, copy)
    needs_copy = tensor.device != "cpu" or any(s < 0 for s in tensor.strides)
    if needs_copy and copy is False:
        raise errors.ViewNotExpressibleError(
            "__dlpack__(copy=False): negative strides or a GPU tensor cannot be shared; a copy is needed")
    copied = bool(copy) or needs_copy
    array = _copied_array(tensor) if copied else _shared_array(tensor)
    return _array_capsule(array, versioned, copied)


# ---- import ----------------------------------------------------------------------------------------
def _release_import_py(context: Any) -> None:
    with _lock:
        _imports.pop(int(tffi.cast("uintptr_t", context)), None)


_release_import: Any = tffi.callback("void(void *)", _release_import_py)  # kept alive: C holds it


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """(lowest, highest) element offset a non-empty view reaches from element [0, ..., 0]."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return lo, hi


def _external(address: int, shape: tuple[int, ...], strides: tuple[int, ...],
              deleter: Any, context: Any) -> Any:
    """A Tensor over bf16 memory at `address` (element [0, ...]) viewed with element strides;
    libtgrad calls deleter(context) when its last tensor is released. On a refusal the caller
    still owns the memory (libtgrad does not call the deleter)."""
    from .tensor import Tensor

    lo, hi = _span(shape, strides)
    out = tffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_tensor_from_external(
        tffi.cast("const uint16_t *", address + 2 * lo), hi - lo + 1, len(shape),
        tffi.new("int64_t[]", list(shape) or [0]), tffi.new("int64_t[]", list(strides) or [0]),
        deleter, context, out))
    return Tensor._wrap(int(out[0]))


def _from_numpy(array: np.ndarray[Any, Any]) -> Any:
    from .tensor import Tensor

    if _bf16.is_bf16(array.dtype):
        if array.size == 0 or any(s % 2 for s in array.strides):
            return Tensor.from_numpy(np.ascontiguousarray(array))
        key = next(_keys)
        with _lock:
            _imports[key] = array
        try:
            return _external(int(array.__array_interface__["data"][0]), array.shape,
                             tuple(s // 2 for s in array.strides), _release_import, tffi.cast("void *", key))
        except BaseException:
            with _lock:
                _imports.pop(key, None)
            raise
    return Tensor.from_numpy(array)  # float16 too: Tensor.from_numpy widens it exactly


class _Layout(NamedTuple):
    """A checked DLPack tensor: element [0, ...] at `address`, element strides, item bits."""

    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    bits: int
    shared: bool  # bf16: viewed in place; else float16/32/64, copied
    empty: bool


def _dtype_of(dl: Any) -> tuple[int, bool]:
    """(bits, shared) for a DLPack dtype tgrad takes, else DtypeUnsupportedError."""
    code, bits, lanes = int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)
    if lanes == 1 and (code, bits) == (KDL_BFLOAT, 16):
        return bits, True
    if lanes == 1 and code == KDL_FLOAT and bits in _FLOATS:
        return bits, False
    raise errors.DtypeUnsupportedError(
        f"from_dlpack: DLPack dtype (code {code}, bits {bits}, lanes {lanes}); tgrad takes bfloat16 "
        "without a copy and float16/32/64 rounded to bf16")


def _shape_of(dl: Any) -> tuple[int, ...]:
    ndim = int(dl.ndim)
    if not 0 <= ndim <= int(lib.TGRAD_MAX_DIMS):
        raise errors.InvalidArgumentError(f"from_dlpack: ndim {ndim} outside 0..{int(lib.TGRAD_MAX_DIMS)}")
    if ndim and dl.shape == ffi.NULL:
        raise errors.InvalidArgumentError(f"from_dlpack: a {ndim}-D DLPack tensor with a NULL shape")
    shape = tuple(int(dl.shape[i]) for i in range(ndim))
    if any(n < 0 for n in shape):
        raise errors.InvalidArgumentError(f"from_dlpack: negative extent in shape {shape}")
    if functools.reduce(operator.mul, shape, 1) * 2 > _INT64_MAX:
        raise errors.SizeOverflowError(f"from_dlpack: shape {shape} holds more elements than 64 bits count")
    # An import reads through numpy arrays of this shape (float32 for an empty or copied one):
    # [2**62, 0] holds nothing, yet numpy refuses it as too big. Refused here, before any numpy call.
    why = _buildable.problem(shape, 4)
    if why is not None:
        raise errors.SizeOverflowError(f"from_dlpack: shape {shape}: {why}")
    return shape


def _strides_of(dl: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    if dl.strides != ffi.NULL:
        return tuple(int(dl.strides[i]) for i in range(len(shape)))
    strides: list[int] = []  # NULL: compact row-major
    step = 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return tuple(strides)


def _layout(managed: Any, versioned: bool) -> _Layout:
    """Every field of a producer's DLPack tensor checked (nothing read from its memory); a
    refusal is a tgrad error."""
    if versioned and int(managed.version.major) != VERSION[0]:
        raise errors.VersionMismatchError(
            f"from_dlpack: DLPack {int(managed.version.major)}.{int(managed.version.minor)}; tgrad reads 1.x")
    dl = managed.dl_tensor
    device = (int(dl.device.device_type), int(dl.device.device_id))
    if device != (KDL_CPU, 0):
        raise errors.DeviceMismatchError(
            f"from_dlpack: the data is on DLPack device {device}; tgrad imports CPU memory (device (1, 0)): "
            "move it to the CPU first")
    bits, shared = _dtype_of(dl)
    shape = _shape_of(dl)
    strides = _strides_of(dl, shape)
    data, itemsize = int(ffi.cast("uintptr_t", dl.data)), bits // 8
    if any(n == 0 for n in shape):
        return _Layout(0, shape, strides, bits, shared, True)
    if data == 0:
        raise errors.InvalidArgumentError(f"from_dlpack: NULL data for a {shape} tensor")
    lo, hi = _span(shape, strides)
    if (hi - lo + 1) * itemsize > _INT64_MAX:
        raise errors.SizeOverflowError(f"from_dlpack: shape {shape} with strides {strides} spans more than 2^63 bytes")
    address = data + int(dl.byte_offset)
    if address % itemsize:
        raise errors.InvalidArgumentError(
            f"from_dlpack: data + byte_offset = {address:#x} is not aligned to the {itemsize}-byte element")
    if address + lo * itemsize <= 0 or address + (hi + 1) * itemsize > _ADDRESS_END:
        raise errors.SizeOverflowError(
            f"from_dlpack: shape {shape} with strides {strides} at {address:#x} leaves the 64-bit address space")
    return _Layout(address, shape, strides, bits, shared, False)


def _copied(layout: _Layout) -> Any:
    """A tgrad tensor of float data, rounded to bf16 (the producer's memory is only read)."""
    from .tensor import Tensor

    dtype = _FLOATS[layout.bits]
    if layout.empty:
        return Tensor.from_numpy(np.zeros(layout.shape, np.float32))
    itemsize = layout.bits // 8
    if functools.reduce(operator.mul, layout.shape, 1) * max(itemsize, 4) > _INT64_MAX:
        raise errors.SizeOverflowError(f"from_dlpack: a copy of a {layout.shape} tensor needs more than 2^63 bytes")
    lo, hi = _span(layout.shape, layout.strides)
    raw = np.frombuffer(ffi.buffer(ffi.cast("char *", layout.address + itemsize * lo), itemsize * (hi - lo + 1)),
                        dtype=dtype)
    try:
        host = np.lib.stride_tricks.as_strided(raw[-lo:], layout.shape, tuple(s * itemsize for s in layout.strides))
        values = np.array(host, dtype=dtype)  # Tensor.from_numpy takes float16 as it is
    except MemoryError as exc:
        raise errors.OutOfMemoryError(f"from_dlpack: a copy of a {layout.shape} tensor: {exc}") from None
    return Tensor.from_numpy(values)


def _adopt(managed: Any, layout: _Layout) -> Any:
    """A tgrad tensor over the producer's bf16 memory, its capsule consumed: the deleter is handed
    to libtgrad, or run here if libtgrad refuses."""
    deleter = managed.deleter
    try:
        return _external(layout.address, layout.shape, layout.strides,
                         tffi.cast("tgrad_deleter", int(ffi.cast("uintptr_t", deleter))),
                         tffi.cast("void *", int(ffi.cast("uintptr_t", managed))))
    except BaseException:
        if deleter != ffi.NULL:
            deleter(managed)
        raise


def _capsule_of(x: Any) -> tuple[Any, bytes]:
    """x's DLPack capsule (versioned when x offers it) and its name; a tgrad error otherwise."""
    device = None
    if hasattr(x, "__dlpack_device__"):
        try:
            device = x.__dlpack_device__()
        except Exception as exc:
            raise errors.InvalidArgumentError(f"from_dlpack: {type(x).__name__}.__dlpack_device__() failed: {exc!r}") from exc
        device = _int_pair(device, f"from_dlpack: {type(x).__name__}.__dlpack_device__()")
        if device[0] != KDL_CPU:
            raise errors.DeviceMismatchError(
                f"from_dlpack: the data is on DLPack device {device}; tgrad imports CPU memory "
                "(move it to the CPU first)")
    try:
        try:
            capsule = x.__dlpack__(max_version=VERSION)
        except TypeError:  # a producer older than DLPack 1.0
            capsule = x.__dlpack__()
    except Exception as exc:
        raise errors.InvalidArgumentError(f"from_dlpack: {type(x).__name__}.__dlpack__() failed: {exc!r}") from exc
    name = None
    if type(capsule) is _CAPSULE_TYPE:
        name = next((n for n in _KIND if _api.PyCapsule_IsValid(capsule, n)), None)
    if name is None:
        what = repr(_api.PyCapsule_GetName(capsule)) if type(capsule) is _CAPSULE_TYPE else type(capsule).__name__
        del capsule  # the producer's destructor runs now, not while the error unwinds
        raise errors.InvalidArgumentError(f"from_dlpack: __dlpack__ returned {what}, not a DLPack capsule (already used?)")
    return capsule, name


def from_dlpack(x: Any) -> Any:
    """A tgrad Tensor over `x` (see the module docstring)."""
    from .tensor import Tensor

    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return _from_numpy(x)
    if not hasattr(x, "__dlpack__"):
        raise errors.InvalidArgumentError(f"from_dlpack: {type(x).__name__} has no __dlpack__")
    capsule, name = _capsule_of(x)
    try:
        managed = ffi.cast(_KIND[name], _api.PyCapsule_GetPointer(capsule, name))
        layout = _layout(managed, name == _VERSIONED)
        if not layout.shared or layout.empty:
            return _copied(layout)  # the capsule is not consumed: its destructor frees it
        # Consumed from here on: the deleter runs exactly once, through libtgrad or _adopt.
        if _api.PyCapsule_SetName(capsule, _USED_NAMES[name]) != 0:
            raise errors.InternalError("from_dlpack: cannot mark the capsule used")
        return _adopt(managed, layout)
    except BaseException as exc:
        error = exc
    # Not consumed (or consumed and already released): dropped here, so that the producer's
    # capsule destructor runs with no exception pending (a ctypes or cffi one cannot cope).
    del capsule
    raise error
