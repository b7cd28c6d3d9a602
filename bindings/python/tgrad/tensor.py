"""Tensor: a Python handle on one libtgrad tensor.

Thin by design: every conversion, view, product and elementwise op is a libtgrad call; Python only moves numpy
buffers in and out and turns statuses into exceptions. Input is numpy only (float32, float64 or
ml_dtypes.bfloat16 arrays; wrap Python lists with numpy.asarray first).

Tensor is generic in its shape for static checkers (docs/typing.md): ``Tensor[Literal[32],
Literal[768]]`` or ``Tensor[M, N]`` with int-bound type variables; a bare ``Tensor`` has unknown
(Any) extents, so untyped code checks as before. ``a @ b`` is typed ``Tensor[A, B] @ Tensor[B, C]
-> Tensor[A, C]``, ``.T`` and ``.mT`` swap a 2-D tensor's extents, elementwise ops keep the shape
(same shape, a number, or a row broadcast ``Tensor[A, B] + Tensor[B]``; anything else gives unknown
extents), and `typed` states a shape with a run-time check. Nothing of this costs at run time.
"""

from __future__ import annotations

import builtins
import contextvars
import functools
import json as _json
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from types import EllipsisType, TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, SupportsIndex, TypeVar, Union, Unpack, cast, get_args, \
    get_origin, overload

import numpy as np
import numpy.typing as npt

from . import _bf16, _buildable, errors
from . import dtypes as _dtypes
from . import reductions as _reductions
from . import shape_ops as _shape_ops
from . import orders as _order
from ._ffi import ffi, lib
from ._tensor_base import _OUT, TensorBase, _out_slot
from ._tensor_base import bind as _bind_base
from .errors import _check

if TYPE_CHECKING:
    # The shape's default (PEP 696) lets a bare `Tensor` mean "any extents" without mypy --strict
    # asking for type arguments; checkers read typing_extensions' stub, run time needs no default.
    from typing_extensions import Self, TypeVarTuple

    from .ops import Operand, Scalar

    Shape = TypeVarTuple("Shape", default=Unpack[tuple[Any, ...]])
else:
    from typing import TypeVarTuple

    Shape = TypeVarTuple("Shape")

__all__ = ["Tensor", "matmul", "typed"]

#: Extents of a typed shape: int-bound, so a Literal[768] or an int (checked invariantly, so an
#: extent known on one side and not the other is written Any, the extent of a bare Tensor).
A = TypeVar("A", bound=int)
B = TypeVar("B", bound=int)
C = TypeVar("C", bound=int)
D = TypeVar("D", bound=int)
_Lead = TypeVarTuple("_Lead")
_T = TypeVar("_T", bound="Tensor[Unpack[tuple[Any, ...]]]")

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_MAX_DIMS = int(lib.TGRAD_MAX_DIMS)
_F32: np.dtype[Any] = np.dtype(np.float32)
_new_tensor = TensorBase.__new__
_DTYPE_NAMES: dict[int, str] = {int(lib.TGRAD_DTYPE_BF16): "bfloat16"}
#: repr summarizes past this many elements, showing this many at each end of an axis (numpy's
#: threshold and edgeitems).
_REPR_THRESHOLD = 1000
_REPR_EDGE = 3

ShapeArg = Union[SupportsIndex, Sequence[SupportsIndex]]
_BasicIndexItem = Union[SupportsIndex, slice, EllipsisType, None]
IndexItem = Union[_BasicIndexItem, Sequence[int], npt.NDArray[Any], "Tensor"]
_Maker = TypeVar("_Maker", bound=Callable[..., Any])

#: The recorder of the tgrad.trace call running in this context (None outside one). Every method
#: that makes a Tensor reports it through `_reports`; see tgrad.trace.
_RECORDER: contextvars.ContextVar[Any] = contextvars.ContextVar("tgrad_trace_recorder", default=None)


def _reports(kind: str) -> Callable[[_Maker], _Maker]:
    """Decorate a function that makes a Tensor: while tgrad.trace runs, the new tensor, the op's
    kind and the call's arguments (Tensors among them are its inputs) go to the recorder."""

    def decorate(make: _Maker) -> _Maker:
        @functools.wraps(make)
        def reporting(*args: Any, **kwargs: Any) -> Any:
            out = make(*args, **kwargs)
            recorder = _RECORDER.get()
            if recorder is not None:
                recorder.report(kind, out, args, kwargs)
            return out

        return cast(_Maker, reporting)

    return decorate


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or isinstance(value, np.ndarray):
        raise errors.InvalidArgumentError(f"{what}: expected an integer, got {type(value).__name__}")
    try:
        return operator.index(value)
    except TypeError:
        raise errors.InvalidArgumentError(
            f"{what}: expected an integer, got {type(value).__name__}"
        ) from None


def _int_args(args: tuple[Any, ...], what: str) -> list[int]:
    """Accept f(1, 2, 3) and f((1, 2, 3)) alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return [_as_int(a, what) for a in args]


def _int64_array(values: Sequence[int], what: str) -> Any:
    for v in values:
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise errors.SizeOverflowError(f"{what}: extent {v} does not fit in 64 bits")
    arr = ffi.new("int64_t[]", max(len(values), 1))
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def _axis(value: Any, what: str) -> int:
    axis = _as_int(value, what)
    if not _INT32_MIN <= axis <= _INT32_MAX:
        raise errors.IndexOutOfRangeError(f"{what}: axis {axis} is out of range")
    return axis


def _host_dtype(dtype: Any, what: str) -> np.dtype[Any]:
    """The host dtype asked for: bfloat16 (the default) or float32."""
    if dtype is None:
        return _bf16.dtype()
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return _bf16.dtype()
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError):
        raise errors.DtypeUnsupportedError(
            f"{what}: dtype {dtype!r} is not supported (bfloat16 or float32)"
        ) from None
    if _bf16.is_bf16(dt) or dt == _F32:
        return dt
    raise errors.DtypeUnsupportedError(f"{what}: dtype {dt} is not supported (bfloat16 or float32)")


class _Scratch(threading.local):
    """This thread's out-parameters for reading a shape (cffi releases the GIL during a C call,
    so threads cannot share them; allocating them for every call was a tenth of a decode step's
    Python time, as the handle out-parameter was: _tensor_base's per-thread slot)."""

    def __init__(self) -> None:
        self.ndim = ffi.new("int32_t *")
        self.shape = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
        self.dims = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))  # reshape's extents in


_SCRATCH = _Scratch()


def _new_handle(call: Callable[..., int], *args: Any) -> int:
    out = getattr(_OUT, "slot", None) or _out_slot()  # the product's per-thread slot (_tensor_base)
    _check(call(*args, out))
    return int(out[0])


class _Reversed:
    """`.T` as checkers see it: Tensor[A, B] -> Tensor[B, A]; a bare Tensor gives Tensor[Any, Any].
    Typed for 2-D tensors only (other ranks: permute, which gives unknown extents): one overload
    per rank would make a bare Tensor's `.T` ambiguous, which mypy types Any. At run time every
    axis is reversed, whatever the rank (the Tensor's `_reversed()`)."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Reversed: ...
    @overload
    def __get__(self, obj: Tensor[A, B], owner: type[Any]) -> Tensor[B, A]: ...
    def __get__(self, obj: Tensor[A, B] | None, owner: type[Any]) -> Any:
        return self if obj is None else obj._reversed()


class _MatrixTransposed:
    """`.mT` as checkers see it: the last two extents swapped, the leading ones kept."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _MatrixTransposed: ...
    @overload
    def __get__(self, obj: Tensor[Unpack[_Lead], A, B], owner: type[Any]) -> Tensor[Unpack[_Lead], B, A]: ...
    def __get__(self, obj: Tensor | None, owner: type[Any]) -> Any:
        return self if obj is None else obj._matrix_transposed()


class Tensor(TensorBase, Generic[Unpack[Shape]]):
    """An immutable bf16 tensor owned through one libtgrad handle.

    Views (``.T``, ``permute``, ``expand``, slicing, ``view``) share the buffer; ``@`` and the
    elementwise ops (``+ - * /``, ``relu()``, ``gelu()``, ...: tgrad.ops) are lazy and computed
    when read (``numpy()``) or ``realize()``-d. The handle is released when the object is
    collected, on ``release()``, or at the end of a ``with`` block.
    """

    # The handle, the shape once known, a weak-reference slot, releasing the handle, `@`,
    # realize() and numpy(): TensorBase, the hot path (C where built; tgrad._tensor_base).
    # _dtc: (handle, dtype) of the last `dtype` read: a handle names one tensor for good (its
    # generation, libtgrad/src/handles.c), so the pair stays true while _handle is that handle.
    __slots__ = ("_dtc",)
    _dtc: tuple[int, _dtypes.DType]
    # numpy must not turn a Tensor into an array behind an operator (ndarray @ Tensor): refuse.
    __array_ufunc__ = None

    def __init__(self, array: npt.NDArray[Any]) -> None:
        """Same as Tensor.from_numpy(array)."""
        self._handle = 0
        self._shape = None
        self._handle = _from_numpy_handle(array)
        self._shape = _library_shape(self._handle)  # libtgrad's, never the array's own claim
        if (recorder := _RECORDER.get()) is not None:
            recorder.report("constant", self, (), {})

    @classmethod
    def _wrap(cls, handle: int, shape: tuple[int, ...] | None = None) -> Tensor:
        """A Tensor owning `handle`; `shape` where the caller has it from libtgrad (another
        tensor's cached shape, read from libtgrad; then reading the tensor, or a product of two
        such tensors, asks libtgrad for it no more), else None. Never a shape Python objects
        claim: the cache is only ever libtgrad's answer (issue 33)."""
        tensor = _new_tensor(cls)
        tensor._handle = handle
        tensor._shape = shape
        return tensor

    @classmethod
    def _adopt(cls, handle: int) -> Tensor:
        """A Tensor owning a new `handle`, its shape read from libtgrad now (releases the handle
        if that fails)."""
        try:
            shape = _library_shape(handle)
        except BaseException:
            lib.tgrad_tensor_release(handle)
            raise
        return cls._wrap(handle, shape)

    # ---- creation -------------------------------------------------------------------------------
    @classmethod
    @_reports("constant")
    def from_numpy(cls, array: npt.NDArray[Any], device: str | None = None, dtype: Any = None) -> Tensor:
        """A tensor from a numpy array (ndim <= 8): bf16 by default, from float16, float32, float64
        or ml_dtypes.bfloat16 data.

        float16 (widened exactly to float32 first), float32 and float64 round to nearest even in
        libtgrad (float64 rounds once, directly);
        bfloat16 bits are copied unchanged. Any layout is accepted (copied to row-major first).
        dtype: tgrad.bfloat16 (the default), tgrad.float32 (float data kept exactly where it is
        float32 or narrower, float64 rounded once) or tgrad.int32 (integer data, each value in
        int32's range). device: "cpu" (default), "opencl", "cuda" or "metal" (BackendUnavailableError
        where it is not usable; checked before anything is allocated).
        """
        if dtype is not None and _dtypes.as_dtype(dtype, "Tensor.from_numpy") is not _dtypes.bfloat16:
            if device not in (None, "cpu"):  # float32 and int32 live on a device for reductions
                _ready(_device_number(device))
            typed = cls._adopt(_typed_handle(array, _dtypes.as_dtype(dtype, "Tensor.from_numpy")))
            if device in (None, "cpu"):
                return typed
            try:
                return typed.to(device)
            finally:
                typed.release()
        # The shape is read back from libtgrad: an ndarray subclass may claim another in Python.
        if device is None or device == "cpu":
            return cls._adopt(_from_numpy_handle(array))
        target = _device_number(device)
        _ready(target)
        host = cls._adopt(_from_numpy_handle(array))
        try:
            return host.to(device)
        finally:
            host.release()

    @classmethod
    @_reports("constant")
    def from_bf16_bits(cls, bits: npt.NDArray[np.uint16]) -> Tensor:
        """A tensor whose elements are exactly the given raw bf16 bit patterns (a uint16 array)."""
        if isinstance(bits, np.generic):
            bits = np.asarray(bits)
        if not isinstance(bits, np.ndarray):
            raise errors.InvalidArgumentError(
                f"Tensor.from_bf16_bits: expected a numpy.ndarray of uint16, got {type(bits).__name__}"
            )
        bits = _plain(bits)
        if bits.dtype.kind != "u" or bits.dtype.itemsize != 2:
            raise errors.DtypeUnsupportedError(
                f"Tensor.from_bf16_bits: dtype {bits.dtype} is not supported (uint16 bit patterns)"
            )
        return cls._adopt(_bits_handle(bits))

    # ---- devices -------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Where the tensor's buffer lives: "cpu", "opencl", "cuda" or "metal"."""
        out = ffi.new("int32_t *")
        _check(lib.tgrad_tensor_device(self._handle, out))
        return _DEVICE_NAMES[int(out[0])]

    def to(self, device: Any) -> Tensor:
        """The same values on `device` (this tensor's view when it is already there; otherwise
        realized and copied now, compact row-major); or, given a dtype (tgrad.float32, "int32",
        numpy.float32, ...), the values cast to it, lazily (reductions.cast)."""
        if _dtypes.is_dtype_like(device):
            return _reductions.cast(self, device)
        handle = _new_handle(lib.tgrad_tensor_to, self._handle, _device_number(device))
        return Tensor._wrap(handle, self._shape)  # the same shape, on the device

    # ---- lifetime -------------------------------------------------------------------------------
    def release(self) -> None:
        """Release the handle now; later releases are no-ops, other uses raise InvalidHandleError."""
        handle, self._handle = self._handle, 0
        if handle:
            _check(lib.tgrad_tensor_release(handle))

    def __enter__(self) -> Tensor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    @property
    def _h(self) -> int:
        if not self._handle:
            raise errors.InvalidHandleError("tensor has been released")
        return self._handle

    # ---- copies and pickling ------------------------------------------------------------------
    # Without these, copy and pickle would duplicate the raw handle: two owners of one handle, and
    # releasing either would break the other. A tensor is an immutable value, so a copy is a
    # second handle on the same buffer and view; a pickle carries the value itself.
    def __copy__(self) -> Tensor:
        """A new owner of the same value: ``t[...]``, a second handle on the same buffer (no data
        is copied; releasing either tensor leaves the other whole)."""
        return self[...]

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        # The buffer never changes, so sharing it is as deep as a copy needs to be.
        return self[...]

    def __reduce__(self) -> tuple[Callable[..., Tensor], tuple[bytes, tuple[int, ...], str]]:
        """Pickle by value: the logical view as little-endian bf16 bytes, its shape and device
        (unpickling where that device is unusable raises BackendUnavailableError)."""
        return _unpickle, (self.to_bytes(), self.shape, self.device)

    # ---- properties -----------------------------------------------------------------------------
    # ---- gradients (hgcore; tgrad.autograd, docs/autograd.md) ------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether this tensor's buffer requires a gradient (a marked leaf, or a result of one
        made while gradients were enabled)."""
        out = ffi.new("int32_t *")
        _check(lib.tgrad_tensor_requires_grad(self._h, out))
        return bool(out[0])

    @requires_grad.setter
    def requires_grad(self, on: bool) -> None:
        self.requires_grad_(on)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark this tensor as a leaf whose gradient backward() accumulates into .grad; self."""
        from . import autograd

        _check(lib.tgrad_tensor_set_requires_grad(self._h, int(bool(requires_grad))))
        if requires_grad:
            autograd._register(self)
        return self

    @property
    def grad(self) -> Tensor | None:
        """The gradient backward() accumulated (None until then; settable)."""
        return getattr(self, "_grad", None)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"grad must be a Tensor or None, not {type(value).__name__}")
        self._grad = value

    def backward(self, gradient: Tensor | None = None, *, grad_dtype: Any = None) -> None:
        """Add d self / d leaf to .grad of every live leaf marked with requires_grad_() (gradient:
        the seed, of self's shape; None for a one-element self)."""
        from . import autograd

        autograd.backward(self, gradient, grad_dtype)

    def detach(self) -> Tensor:
        """A copy of the values with no history: a constant (the requires_grad flag belongs to
        the buffer, so detaching copies it)."""
        from .autograd import no_grad

        with no_grad():
            flat = self.reshape(-1) if self.ndim != 1 else self
            copy = Tensor._adopt(_new_handle(lib.tgrad_concat, 1, ffi.new("tgrad_tensor_t[]", [flat._h]), 0))
            return copy.reshape(*self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def shape(self) -> tuple[int, ...]:
        h = self._h  # a released tensor raises, cached shape or not
        shape = self._shape
        if shape is None:
            shape = self._shape = _library_shape(h)
        return shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements of the underlying buffer (0 for expanded axes, < 0 when reversed)."""
        h = self._h
        ndim = self.ndim
        out = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
        _check(lib.tgrad_tensor_strides(h, out))
        return tuple(int(out[i]) for i in range(ndim))

    @property
    def offset(self) -> int:
        """Offset of the first element in the underlying buffer, in elements."""
        out = ffi.new("int64_t *")
        _check(lib.tgrad_tensor_offset(self._h, out))
        return int(out[0])

    @property
    def size(self) -> int:
        out = ffi.new("int64_t *")
        _check(lib.tgrad_tensor_numel(self._h, out))
        return int(out[0])

    @property
    def itemsize(self) -> int:
        """Bytes of one element (2 for bfloat16, 4 for float32 and int32)."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the logical view's elements (size * itemsize), as numpy's nbytes."""
        return self.size * self.itemsize

    @property
    def dtype(self) -> _dtypes.DType:
        """The element type: tgrad.bfloat16, tgrad.float32 or tgrad.int32 (equal to its name too)."""
        h = self._h
        try:
            seen, dt = self._dtc
            if seen == h:
                return dt
        except AttributeError:
            pass
        out = ffi.new("int32_t *")
        _check(lib.tgrad_tensor_dtype(h, out))
        dt = _dtypes.from_code(int(out[0]))
        self._dtc = (h, dt)
        return dt

    def float(self) -> Tensor:
        """The values as float32 (exact from bfloat16)."""
        return _reductions.cast(self, _dtypes.float32)

    def bfloat16(self) -> Tensor:
        """The values as bfloat16 (float32 rounds to nearest even)."""
        return _reductions.cast(self, _dtypes.bfloat16)

    # ---- reductions (tgrad.reductions: correctly rounded sums, exact extrema) ----------------
    def sum(self, axis: Any = None, keepdims: bool = False, dtype: Any = None, *, dim: Any = None,
            keepdim: bool | None = None) -> Tensor:
        """The correctly rounded sum over axis (every axis by default); numpy's or torch's spelling."""
        return _reductions.reduce("sum", self, axis, keepdims, dtype, dim, keepdim)

    def mean(self, axis: Any = None, keepdims: bool = False, dtype: Any = None, *, dim: Any = None,
             keepdim: bool | None = None) -> Tensor:
        """The correctly rounded mean over axis (every axis by default)."""
        return _reductions.reduce("mean", self, axis, keepdims, dtype, dim, keepdim)

    def max(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool | None = None) -> Tensor:
        """The exact maximum over axis (every axis by default); NaN propagates."""
        return _reductions.reduce("max", self, axis, keepdims, None, dim, keepdim)

    def min(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool | None = None) -> Tensor:
        """The exact minimum over axis (every axis by default); NaN propagates."""
        return _reductions.reduce("min", self, axis, keepdims, None, dim, keepdim)

    def argmax(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None,
               keepdim: bool | None = None) -> Tensor:
        """The int32 index of the first maximum (of the row-major flattening when axis is None)."""
        return _reductions.reduce("argmax", self, axis, keepdims, None, dim, keepdim)

    def argmin(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None,
               keepdim: bool | None = None) -> Tensor:
        """The int32 index of the first minimum (of the row-major flattening when axis is None)."""
        return _reductions.reduce("argmin", self, axis, keepdims, None, dim, keepdim)

    @property
    def is_realized(self) -> bool:
        out = ffi.new("int32_t *")
        _check(lib.tgrad_tensor_is_realized(self._h, out))
        return bool(out[0])

    def shares_buffer(self, other: Tensor) -> bool:
        """True when both tensors are views of one buffer."""
        if not isinstance(other, Tensor):
            raise errors.InvalidArgumentError(
                f"shares_buffer: expected a Tensor, got {type(other).__name__}"
            )
        out = ffi.new("int32_t *")
        _check(lib.tgrad_tensor_same_buffer(self._h, other._h, out))
        return bool(out[0])

    @property
    def route(self) -> str:
        """The route that computed (or, while pending, would compute) this tensor's buffer:
        "cpu.avx512bf16.gemm", "cpu.copy", "cpu.zeros", "host", ... Views report their base's."""
        return _c_text(lib.tgrad_tensor_route, self._h)

    @property
    def buffer_id(self) -> int:
        """The number naming this tensor's buffer (shared by its views; "buf#N" in explain)."""
        out = ffi.new("uint64_t *")
        _check(lib.tgrad_tensor_buffer_id(self._h, out))
        return int(out[0])

    def explain(self, *, json: bool = False) -> Any:
        """What realizing this tensor runs (or, once realized, what ran): one line per kernel with
        its route, shapes, the operands' views (composed or materialized), bytes, and the buffers
        allocated and freed. json=True returns libtgrad's JSON plan as a dict ({"steps": [...]}).
        Runs, allocates and changes nothing."""
        if json:
            return _json.loads(_c_text(lib.tgrad_tensor_explain, self._h, int(lib.TGRAD_FORMAT_JSON)))
        return _c_text(lib.tgrad_tensor_explain, self._h, int(lib.TGRAD_FORMAT_TEXT))

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        """The truth of a one-element tensor (nonzero; NaN is true), as numpy's; InvalidArgumentError
        (a ValueError) for any other size."""
        return builtins.bool(self._one_value("bool()") != 0)

    def __repr__(self) -> str:
        """numpy's way for a computed tensor: its values (past 1000 elements summarized as numpy's
        threshold=1000, edgeitems=3 do, reading only the corners it shows), then shape, dtype and
        a device other than the CPU. A lazy tensor is not computed to be printed: it says so, and
        how to compute it."""
        if not self._handle:
            return "Tensor(released)"
        try:
            shape, dtype, device = self.shape, self.dtype, self.device
            where = "" if device == "cpu" else f", device={device}"
            if not self.is_realized:
                return (f"Tensor(shape={shape}, dtype={dtype}{where}, lazy: not computed yet; "
                        ".realize() computes it, .numpy() reads its values)")
            summarized = self.size > _REPR_THRESHOLD
            values = np.array2string(_repr_values(self, summarized), separator=", ", prefix="Tensor(",
                                     threshold=0 if summarized else _REPR_THRESHOLD, edgeitems=_REPR_EDGE)
            return f"Tensor({values}, shape={shape}, dtype={dtype}{where})"
        except errors.TgradError as exc:
            return f"Tensor(<{exc.code}>)"

    # ---- reading --------------------------------------------------------------------------------
    if TYPE_CHECKING:  # TensorBase's, typed here
        def realize(self) -> Self:
            """Compute a lazy tensor now (no-op when realized); returns self."""
            ...

        def numpy(self, dtype: npt.DTypeLike | None = None) -> npt.NDArray[Any]:
            """A new numpy array of the values: ml_dtypes.bfloat16 by default, or float32 (exact)."""
            ...

    def _numpy_own(self) -> npt.NDArray[Any]:
        """numpy() of a float32 or int32 tensor: a float32 or int32 array of its exact values."""
        h = self._handle or self._h  # _h raises for a released tensor
        shape = self._shape if self._shape is not None else self.shape
        values = np.empty(shape, dtype=self.dtype.numpy)
        _check(lib.tgrad_tensor_read(h, ffi.from_buffer("char[]", values), values.nbytes))
        return values

    def _numpy_as(self, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """numpy(dtype) for a dtype given (numpy() without one is TensorBase's hot path)."""
        if dtype is None or self.dtype is not _dtypes.bfloat16:
            own = self._numpy_own() if self.dtype is not _dtypes.bfloat16 else self._bits(_bf16.dtype())
            if dtype is None or np.dtype(dtype) == own.dtype:
                return own
            if own.dtype == np.bool_:  # 0 and 1 are exact in every numpy dtype
                return own.astype(np.dtype(dtype))
            if own.dtype == np.int32:
                raise errors.DtypeUnsupportedError(
                    f"Tensor.numpy: an int32 tensor reads as int32 (asked for {np.dtype(dtype)})")
        dt = _host_dtype(dtype, "Tensor.numpy")
        if dt != _F32:
            return self._bits().view(dt)
        h = self._handle or self._h  # _h raises for a released tensor
        shape = self._shape if self._shape is not None else self.shape
        values = _host_array(shape, np.float32)
        _check(lib.tgrad_tensor_read_f32(h, ffi.from_buffer("float[]", values), values.size))
        return values

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        if copy is False:
            raise errors.InvalidArgumentError("a Tensor cannot be viewed by numpy without a copy")
        if dtype is None:
            return self.numpy()
        try:
            return self.numpy(dtype)
        except errors.DtypeUnsupportedError:
            # Other dtypes: numpy's own cast from the exact float32 widening.
            return self.numpy(np.float32).astype(dtype)

    def tolist(self) -> Any:
        """The values as nested Python lists of floats (a float for a 0-d tensor), as numpy's
        tolist: each the exact value of its bf16 element (libtgrad widens to float32); bools and
        ints for bool and int32 tensors."""
        return (self.numpy(np.float32) if self.dtype.is_floating_point else self.numpy()).tolist()

    def __float__(self) -> builtins.float:  # builtins': Tensor.float() is a method
        """The value of a one-element tensor (any rank); InvalidArgumentError for another size."""
        size = self.size
        if size != 1:
            raise errors.InvalidArgumentError(
                f"float(): only a one-element tensor converts to a Python float; this one has shape "
                f"{self.shape} ({size} elements)")
        if not self.dtype.is_floating_point:  # int32, bool: exact
            return builtins.float(self._one_value("float()"))
        value = ffi.new("float[1]")
        _check(lib.tgrad_tensor_read_f32(self._h, value, 1))
        return float(value[0])

    def _bits(self, dtype: npt.DTypeLike = np.uint16) -> npt.NDArray[Any]:
        """The values' bf16 bit patterns, a new array of the shape of a 2-byte `dtype` (uint16, or
        ml_dtypes.bfloat16 for numpy())."""
        h = self._handle or self._h  # _h raises for a released tensor
        shape = self._shape if self._shape is not None else self.shape
        bits = _host_array(shape, dtype)
        status = lib.tgrad_tensor_read_bf16(h, ffi.from_buffer("uint16_t[]", bits), bits.size)
        if status:
            _check(status)
        return bits

    def to_bytes(self) -> bytes:
        """The logical view, row-major, as little-endian bf16 bytes."""
        bits = self._bits()
        try:
            return bits.astype("<u2", copy=False).tobytes()
        except MemoryError:
            raise errors.OutOfMemoryError(f"to_bytes: cannot allocate {bits.nbytes} bytes") from None

    # ---- views ----------------------------------------------------------------------------------
    T = _Reversed()
    mT = _MatrixTransposed()

    @_reports("transpose")
    def _reversed(self) -> Tensor:
        return self.permute(list(range(self.ndim))[::-1])

    def _matrix_transposed(self) -> Tensor:
        ndim = self.ndim
        if ndim < 2:
            raise errors.RankMismatchError(f".mT: needs at least 2 dimensions, the tensor has {ndim}")
        return self.transpose(ndim - 2, ndim - 1)  # reported to tgrad.trace as that transpose

    @_reports("transpose")
    def transpose(self, axis0: SupportsIndex | None = None, axis1: SupportsIndex | None = None) -> Tensor:
        """Swap two axes (zero-copy); with no arguments, reverse all axes like .T."""
        if axis0 is None and axis1 is None:
            return self._reversed()
        if axis0 is None or axis1 is None:
            raise errors.InvalidArgumentError("transpose: give two axes, or none to reverse all")
        a0, a1 = _axis(axis0, "transpose"), _axis(axis1, "transpose")
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_transpose, self._h, a0, a1))

    @_reports("permute")
    def permute(self, *axes: ShapeArg) -> Tensor:
        """Reorder axes (zero-copy): permute(1, 0) or permute((1, 0))."""
        values = [_axis(a, "permute") for a in _int_args(axes, "permute")]
        arr = ffi.new("int32_t[]", max(len(values), 1))
        for i, v in enumerate(values):
            arr[i] = v
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_permute, self._h, arr, len(values)))

    @_reports("expand")
    def expand(self, *shape: ShapeArg) -> Tensor:
        """Broadcast size-1 axes to the given extents (stride 0, zero-copy); -1 keeps an extent."""
        values = _int_args(shape, "expand")
        arr = _int64_array(values, "expand")
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_expand, self._h, arr, len(values)))

    @_reports("reshape")
    def reshape(self, *shape: ShapeArg) -> Tensor:
        """Same elements, new shape (one extent may be -1); copies lazily when strides cannot express it."""
        if 0 < len(shape) <= _MAX_DIMS:  # extents given as ints (a layer's forward): no lists made
            dims = _SCRATCH.dims
            for i, v in enumerate(shape):
                if type(v) is not int or not _INT64_MIN <= v <= _INT64_MAX:
                    break
                dims[i] = v
            else:
                return Tensor._wrap(_new_handle(lib.tgrad_tensor_reshape, self._h, dims, len(shape)))
        values = _int_args(shape, "reshape")
        arr = _int64_array(values, "reshape")
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_reshape, self._h, arr, len(values)))

    @_reports("view")
    def view(self, *shape: ShapeArg) -> Tensor:
        """Like reshape, but never copies: raises ViewNotExpressibleError instead."""
        values = _int_args(shape, "view")
        arr = _int64_array(values, "view")
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_view, self._h, arr, len(values)))

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """torch.narrow: the `length` elements from `start` along `dim` (negative dim and start
        count from the end), a view (one tgrad_tensor_slice); out of range raises
        IndexOutOfRangeError. The same view as slicing that one axis, made with less Python."""
        shape = self.shape
        axis = _axis(dim, "narrow")
        if not -len(shape) <= axis < len(shape):
            raise errors.IndexOutOfRangeError(f"narrow: dim {dim} is out of range for {len(shape)} dimensions")
        axis %= len(shape)
        extent, first, count = shape[axis], _as_int(start, "narrow start"), _as_int(length, "narrow length")
        if first < 0:
            first += extent
        if not (0 <= first <= extent and 0 <= count <= extent - first):
            raise errors.IndexOutOfRangeError(
                f"narrow: start {start} and length {length} do not fit in extent {extent} of dim {dim}")
        out = Tensor._wrap(_new_handle(lib.tgrad_tensor_slice, self._h, axis, first, first + count, 1, 0))
        if (recorder := _RECORDER.get()) is not None:  # traced as the slice it is
            recorder.report("getitem", out, (self, (slice(None),) * axis + (slice(first, first + count),)), {})
        return out

    @_reports("contiguous")
    def contiguous(self) -> Tensor:
        """A compact row-major tensor with the same values (shares the buffer when already compact)."""
        return Tensor._wrap(_new_handle(lib.tgrad_tensor_contiguous, self._h))

    def __getitem__(self, key: IndexItem | tuple[IndexItem, ...]) -> Tensor:
        """numpy indexing: integers, slices, one Ellipsis and None (new axes) are zero-copy views;
        one integer array (a list, a numpy integer array or an int32 Tensor) gathers along its
        axis (tgrad.take, a copy)."""
        if _shape_ops.is_extended_key(key):
            return _shape_ops.getitem(self, key)
        return self._getitem_basic(cast(Any, key))

    @_reports("getitem")
    def _getitem_basic(self, key: _BasicIndexItem | tuple[_BasicIndexItem, ...]) -> Tensor:
        """numpy basic indexing: integers, slices and one Ellipsis (all zero-copy)."""
        items = key if isinstance(key, tuple) else (key,)
        parsed: list[int | slice | None] = []  # None marks the Ellipsis
        for item in items:
            if item is ...:
                if None in parsed:
                    raise errors.InvalidArgumentError("Tensor index: only one Ellipsis (...) is allowed")
                parsed.append(None)
            elif isinstance(item, slice):
                parsed.append(item)
            elif isinstance(item, (bool, np.bool_, np.ndarray)) or item is None:
                raise errors.InvalidArgumentError(
                    f"Tensor index: {type(item).__name__} indices are not supported "
                    "(integers, slices and ... only)"
                )
            else:
                try:
                    parsed.append(operator.index(item))
                except TypeError:
                    raise errors.InvalidArgumentError(
                        f"Tensor index: {type(item).__name__} indices are not supported "
                        "(integers, slices and ... only)"
                    ) from None
        ndim = self.ndim
        used = sum(1 for p in parsed if p is not None)
        if used > ndim:
            raise errors.IndexOutOfRangeError(
                f"too many indices: tensor is {ndim}-dimensional, but {used} were indexed"
            )
        if None in parsed:
            at = parsed.index(None)
            parsed[at : at + 1] = [slice(None)] * (ndim - used)

        current = self._h
        owned: list[int] = []
        try:
            axis = 0
            for p in parsed:
                if isinstance(p, slice):
                    if p.start is None and p.stop is None and p.step is None:
                        axis += 1
                        continue
                    start, stop, step, flags = _slice_args(p, self._extent(current, axis))
                    current = _new_handle(lib.tgrad_tensor_slice, current, axis, start, stop, step, flags)
                    owned.append(current)
                    axis += 1
                else:
                    assert p is not None
                    if not _INT64_MIN <= p <= _INT64_MAX:
                        raise errors.IndexOutOfRangeError(f"Tensor index: index {p} is out of range")
                    current = _new_handle(lib.tgrad_tensor_select, current, axis, p)
                    owned.append(current)
            if not owned:  # t[...] or t[:]: a new handle on the same view
                shape = self.shape
                current = _new_handle(lib.tgrad_tensor_view, current, _int64_array(shape, "index"), len(shape))
                owned.append(current)
            result = owned.pop()
        finally:
            for handle in owned:
                lib.tgrad_tensor_release(handle)
        return Tensor._wrap(result)

    @staticmethod
    def _extent(handle: int, axis: int) -> int:
        shape = ffi.new("int64_t[]", int(lib.TGRAD_MAX_DIMS))
        _check(lib.tgrad_tensor_shape(handle, shape))
        return int(shape[axis])

    # ---- matmul ---------------------------------------------------------------------------------
    def matmul(self: Tensor[A, B], other: Tensor[B, C], *,
               out_dtype: _dtypes.DType | str | None = None) -> Tensor[A, C]:
        """self @ other with torch.matmul's rules (see `tgrad.matmul`), lazily (computed when read
        or realized). out_dtype tgrad.float32 gives the fp32 accumulators unrounded."""
        return matmul(self, other, out_dtype=out_dtype)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule over this tensor's memory, zero-copy and read-only (tgrad tensors are
        immutable); the memory lives until the consumer releases it, even if this tensor is
        released first. Negative strides, GPU tensors and copy=True export a fresh CPU copy
        (copy=False refuses the first two). Bad values raise InvalidArgumentError, a device other
        than the CPU BackendUnavailableError. See docs/interop.md."""
        from . import _dlpack

        self._h  # a released tensor raises InvalidHandleError
        return _dlpack.export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0): tgrad shares host memory (a GPU tensor exports a CPU copy)."""
        self._h  # a released tensor raises InvalidHandleError
        return (1, 0)

    # The shape types of `@`: method-level type variables, so a contracted extent known on both
    # sides must agree (Tensor[A, B] @ Tensor[B, C]); a bare Tensor's Any extents agree with any.
    # At run time TensorBase's `@` (other than a Tensor: NotImplemented, then Python tries
    # other.__rmatmul__, else TypeError).
    if TYPE_CHECKING:
        def __matmul__(self: Tensor[A, B], other: Tensor[B, C]) -> Tensor[A, C]: ...

    # No __rmatmul__: `x @ t` with x no Tensor is a TypeError (numpy defers here through
    # __array_ufunc__ = None, then finds none), and a catch-all one would hand checkers an
    # untyped fallback for `a @ b` whose extents disagree.

    # ---- elementwise ops (tgrad.ops: lazy, broadcasting, numbers as 0-d bf16 tensors) -----------
    # An operand that is no number gives NotImplemented: Python asks the other operand, then
    # raises TypeError, as numpy and torch do. Typed: the same shape or a number keeps the shape,
    # a row ([B] with [A, B], either side) gives [A, B], anything else unknown extents.
    @overload
    def __add__(self, other: Tensor[Unpack[Shape]] | Scalar) -> Tensor[Unpack[Shape]]: ...
    @overload
    def __add__(self: Tensor[A, B], other: Tensor[B]) -> Tensor[A, B]: ...
    @overload
    def __add__(self: Tensor[B], other: Tensor[A, B]) -> Tensor[A, B]: ...
    @overload
    def __add__(self, other: Tensor) -> Tensor: ...
    def __add__(self, other: Operand) -> Tensor:
        return _ops.add(self, other) if _ops._is_operand(other) else NotImplemented

    def __radd__(self, other: Scalar) -> Tensor[Unpack[Shape]]:
        return _ops.add(other, self) if _ops._is_operand(other) else NotImplemented

    @overload
    def __sub__(self, other: Tensor[Unpack[Shape]] | Scalar) -> Tensor[Unpack[Shape]]: ...
    @overload
    def __sub__(self: Tensor[A, B], other: Tensor[B]) -> Tensor[A, B]: ...
    @overload
    def __sub__(self: Tensor[B], other: Tensor[A, B]) -> Tensor[A, B]: ...
    @overload
    def __sub__(self, other: Tensor) -> Tensor: ...
    def __sub__(self, other: Operand) -> Tensor:
        return _ops.sub(self, other) if _ops._is_operand(other) else NotImplemented

    def __rsub__(self, other: Scalar) -> Tensor[Unpack[Shape]]:
        return _ops.sub(other, self) if _ops._is_operand(other) else NotImplemented

    @overload
    def __mul__(self, other: Tensor[Unpack[Shape]] | Scalar) -> Tensor[Unpack[Shape]]: ...
    @overload
    def __mul__(self: Tensor[A, B], other: Tensor[B]) -> Tensor[A, B]: ...
    @overload
    def __mul__(self: Tensor[B], other: Tensor[A, B]) -> Tensor[A, B]: ...
    @overload
    def __mul__(self, other: Tensor) -> Tensor: ...
    def __mul__(self, other: Operand) -> Tensor:
        return _ops.mul(self, other) if _ops._is_operand(other) else NotImplemented

    def __rmul__(self, other: Scalar) -> Tensor[Unpack[Shape]]:
        return _ops.mul(other, self) if _ops._is_operand(other) else NotImplemented

    @overload
    def __truediv__(self, other: Tensor[Unpack[Shape]] | Scalar) -> Tensor[Unpack[Shape]]: ...
    @overload
    def __truediv__(self: Tensor[A, B], other: Tensor[B]) -> Tensor[A, B]: ...
    @overload
    def __truediv__(self: Tensor[B], other: Tensor[A, B]) -> Tensor[A, B]: ...
    @overload
    def __truediv__(self, other: Tensor) -> Tensor: ...
    def __truediv__(self, other: Operand) -> Tensor:
        return _ops.div(self, other) if _ops._is_operand(other) else NotImplemented

    def __rtruediv__(self, other: Scalar) -> Tensor[Unpack[Shape]]:
        return _ops.div(other, self) if _ops._is_operand(other) else NotImplemented

    def __neg__(self) -> Tensor[Unpack[Shape]]:
        return _ops.neg(self)

    def __abs__(self) -> Tensor[Unpack[Shape]]:
        return _ops.abs(self)

    def add(self, other: Operand) -> Tensor:
        """tgrad.add(self, other) (tgrad.ops)."""
        return _ops.add(self, other)

    def sub(self, other: Operand) -> Tensor:
        """tgrad.sub(self, other) (tgrad.ops)."""
        return _ops.sub(self, other)

    def mul(self, other: Operand) -> Tensor:
        """tgrad.mul(self, other) (tgrad.ops)."""
        return _ops.mul(self, other)

    def div(self, other: Operand) -> Tensor:
        """tgrad.div(self, other) (tgrad.ops)."""
        return _ops.div(self, other)

    def maximum(self, other: Operand) -> Tensor:
        """tgrad.maximum(self, other) (tgrad.ops)."""
        return _ops.maximum(self, other)

    def minimum(self, other: Operand) -> Tensor:
        """tgrad.minimum(self, other) (tgrad.ops)."""
        return _ops.minimum(self, other)

    def relu(self) -> Tensor[Unpack[Shape]]:
        """tgrad.relu(self) (tgrad.ops)."""
        return _ops.relu(self)

    def gelu(self, approximate: str = "none") -> Tensor[Unpack[Shape]]:
        """tgrad.gelu(self, approximate): "none" (erf) or "tanh" (tgrad.ops)."""
        return _ops.gelu(self, approximate)

    def silu(self) -> Tensor[Unpack[Shape]]:
        """tgrad.silu(self) (tgrad.ops)."""
        return _ops.silu(self)

    def sigmoid(self) -> Tensor[Unpack[Shape]]:
        """tgrad.sigmoid(self) (tgrad.ops)."""
        return _ops.sigmoid(self)

    def tanh(self) -> Tensor[Unpack[Shape]]:
        """tgrad.tanh(self) (tgrad.ops)."""
        return _ops.tanh(self)

    def exp(self) -> Tensor[Unpack[Shape]]:
        """tgrad.exp(self) (tgrad.ops)."""
        return _ops.exp(self)

    def neg(self) -> Tensor[Unpack[Shape]]:
        """tgrad.neg(self) (tgrad.ops)."""
        return _ops.neg(self)

    def abs(self) -> Tensor[Unpack[Shape]]:
        """tgrad.abs(self) (tgrad.ops)."""
        return _ops.abs(self)

    def square(self) -> Tensor[Unpack[Shape]]:
        """tgrad.square(self) (tgrad.ops)."""
        return _ops.square(self)

    def rsqrt(self) -> Tensor[Unpack[Shape]]:
        """tgrad.rsqrt(self) (tgrad.ops)."""
        return _ops.rsqrt(self)

    # --- hshape: shape ops (tgrad.shape_ops) ---
    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """tgrad.squeeze(self, dim): a view without axes of extent 1."""
        return _shape_ops.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Tensor:
        """tgrad.unsqueeze(self, dim): a view with a new axis of extent 1 at dim."""
        return _shape_ops.unsqueeze(self, dim)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """tgrad.flatten(self, start_dim, end_dim): axes merged (a view where strides allow)."""
        return _shape_ops.flatten(self, start_dim, end_dim)

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """tgrad.split(self, ...): views along dim (torch.split)."""
        return _shape_ops.split(self, split_size_or_sections, dim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """tgrad.chunk(self, chunks, dim): at most `chunks` views along dim (torch.chunk)."""
        return _shape_ops.chunk(self, chunks, dim)

    def take(self, indices: Any, axis: int | None = 0) -> Tensor:
        """tgrad.take(self, indices, axis): numpy's take along one axis (a gather)."""
        return _shape_ops.take(self, indices, axis)

    # --- hcreate: creation (tgrad.creation) ---
    def item(self) -> builtins.float | int:
        """The value of a one-element tensor (any rank) as a Python float (bfloat16, float32:
        exact) or int (int32); InvalidArgumentError for another size."""
        size = self.size
        if size != 1:
            raise errors.InvalidArgumentError(
                f"item(): only a one-element tensor has an item; this one has shape {self.shape} ({size} elements)")
        if self.dtype == _dtypes.int32:
            return int(self.numpy().reshape(()))
        return float(self)

    # --- hcmp: comparisons, where, logic, truth (tgrad.compare) ---
    # Comparisons are elementwise and give bool tensors (tgrad.compare); a Tensor stays hashable by
    # identity, as torch's: `t in {t}` and dict keys work, while `t == u` compares values.
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> Any:
        return _compare.eq(self, other) if _compare._is_comparable(other) else NotImplemented

    def __ne__(self, other: object) -> Any:
        return _compare.ne(self, other) if _compare._is_comparable(other) else NotImplemented

    def __lt__(self, other: Operand) -> Tensor:
        return _compare.lt(self, other) if _compare._is_comparable(other) else NotImplemented

    def __le__(self, other: Operand) -> Tensor:
        return _compare.le(self, other) if _compare._is_comparable(other) else NotImplemented

    def __gt__(self, other: Operand) -> Tensor:
        return _compare.gt(self, other) if _compare._is_comparable(other) else NotImplemented

    def __ge__(self, other: Operand) -> Tensor:
        return _compare.ge(self, other) if _compare._is_comparable(other) else NotImplemented

    def __and__(self, other: Any) -> Tensor:
        return _compare.bitwise("&", self, other)  # type: ignore[no-any-return]

    def __rand__(self, other: Any) -> Tensor:
        return _compare.bitwise("&", other, self)  # type: ignore[no-any-return]

    def __or__(self, other: Any) -> Tensor:
        return _compare.bitwise("|", self, other)  # type: ignore[no-any-return]

    def __ror__(self, other: Any) -> Tensor:
        return _compare.bitwise("|", other, self)  # type: ignore[no-any-return]

    def __xor__(self, other: Any) -> Tensor:
        return _compare.bitwise("^", self, other)  # type: ignore[no-any-return]

    def __rxor__(self, other: Any) -> Tensor:
        return _compare.bitwise("^", other, self)  # type: ignore[no-any-return]

    def __invert__(self) -> Tensor:
        return _compare.invert(self)

    def __int__(self) -> int:
        """The value of a one-element tensor truncated toward zero, as int(numpy value)."""
        return builtins.int(self._one_value("int()"))

    def _one_value(self, what: str) -> Any:
        """The Python value of a one-element tensor (float, int or bool); InvalidArgumentError (a
        ValueError, as numpy's "truth value ... is ambiguous") for another size."""
        size = self.size
        if size != 1:
            raise errors.InvalidArgumentError(
                f"{what}: the truth value or number of a tensor with more than one element is ambiguous "
                f"(shape {self.shape}, {size} elements); use .any() or .all(), or index one element")
        values = self.numpy(np.float32) if self.dtype.is_floating_point else self.numpy()
        return values.reshape(-1)[0].item()

    def eq(self, other: Operand) -> Tensor:
        """self == other (tgrad.compare)."""
        return _compare.eq(self, other)

    def ne(self, other: Operand) -> Tensor:
        """self != other (tgrad.compare)."""
        return _compare.ne(self, other)

    def lt(self, other: Operand) -> Tensor:
        """self < other (tgrad.compare)."""
        return _compare.lt(self, other)

    def le(self, other: Operand) -> Tensor:
        """self <= other (tgrad.compare)."""
        return _compare.le(self, other)

    def gt(self, other: Operand) -> Tensor:
        """self > other (tgrad.compare)."""
        return _compare.gt(self, other)

    def ge(self, other: Operand) -> Tensor:
        """self >= other (tgrad.compare)."""
        return _compare.ge(self, other)

    def where(self, condition: Tensor, other: Any) -> Tensor:
        """tgrad.where(condition, self, other), as torch's Tensor.where."""
        return _compare.where(condition, self, other)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """self with `value` where mask is True (tgrad.compare.masked_fill)."""
        return _compare.masked_fill(self, mask, value)

    def logical_not(self) -> Tensor:
        """tgrad.logical_not(self)."""
        return _compare.logical_not(self)

    def logical_and(self, other: Tensor) -> Tensor:
        """tgrad.logical_and(self, other)."""
        return _compare.logical_and(self, other)

    def logical_or(self, other: Tensor) -> Tensor:
        """tgrad.logical_or(self, other)."""
        return _compare.logical_or(self, other)

    def logical_xor(self, other: Tensor) -> Tensor:
        """tgrad.logical_xor(self, other)."""
        return _compare.logical_xor(self, other)

    def any(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool | None = None) -> Tensor:
        """tgrad.any(self, axis): whether any element is nonzero (bool)."""
        return _compare.any(self, axis, keepdims, dim=dim, keepdim=keepdim)

    def all(self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool | None = None) -> Tensor:
        """tgrad.all(self, axis): whether every element is nonzero (bool)."""
        return _compare.all(self, axis, keepdims, dim=dim, keepdim=keepdim)

    # --- hsoft: softmax, log_softmax, logsumexp (tgrad.softmax: correctly rounded) ---
    def softmax(self, dim: Any = None, dtype: Any = None, *, axis: Any = None) -> Tensor:
        """tgrad.softmax(self, dim) (tgrad.softmax): correctly rounded along dim (last by default)."""
        from .softmax import softmax

        return softmax(self, dim, dtype=dtype, axis=axis)

    def log_softmax(self, dim: Any = None, dtype: Any = None, *, axis: Any = None) -> Tensor:
        """tgrad.log_softmax(self, dim) (tgrad.softmax): correctly rounded along dim."""
        from .softmax import log_softmax

        return log_softmax(self, dim, dtype=dtype, axis=axis)

    def logsumexp(self, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
                  keepdims: bool | None = None, dtype: Any = None) -> Tensor:
        """tgrad.logsumexp(self, dim) (tgrad.softmax): correctly rounded, the axis reduced."""
        from .softmax import logsumexp

        return logsumexp(self, dim, keepdim, axis=axis, keepdims=keepdims, dtype=dtype)

    # --- hew: sqrt, log, log1p, sin, cos, pow, clamp / clip (tgrad.elementwise_more) ---
    def sqrt(self) -> Tensor[Unpack[Shape]]:
        """tgrad.sqrt(self) (tgrad.elementwise_more)."""
        return _ew_more.sqrt(self)

    def log(self) -> Tensor[Unpack[Shape]]:
        """tgrad.log(self) (tgrad.elementwise_more)."""
        return _ew_more.log(self)

    def log1p(self) -> Tensor[Unpack[Shape]]:
        """tgrad.log1p(self) (tgrad.elementwise_more)."""
        return _ew_more.log1p(self)

    def sin(self) -> Tensor[Unpack[Shape]]:
        """tgrad.sin(self) (tgrad.elementwise_more)."""
        return _ew_more.sin(self)

    def cos(self) -> Tensor[Unpack[Shape]]:
        """tgrad.cos(self) (tgrad.elementwise_more)."""
        return _ew_more.cos(self)

    def pow(self, exponent: Operand) -> Tensor:
        """tgrad.pow(self, exponent) (tgrad.elementwise_more)."""
        return _ew_more.pow(self, exponent)

    def __pow__(self, other: Operand) -> Tensor:
        return _ew_more.pow(self, other) if _ops._is_operand(other) else NotImplemented

    def __rpow__(self, other: Scalar) -> Tensor:
        return _ew_more.pow(other, self) if _ops._is_operand(other) else NotImplemented

    def clamp(self, min: Operand | None = None, max: Operand | None = None) -> Tensor:  # noqa: A002
        """tgrad.clamp(self, min, max) (tgrad.elementwise_more)."""
        return _ew_more.clamp(self, min, max)

    def clip(self, min: Operand | None = None, max: Operand | None = None) -> Tensor:  # noqa: A002
        """tgrad.clip(self, min, max): clamp's other name."""
        return _ew_more.clamp(self, min, max)


def _repr_values(t: Tensor, summarized: bool) -> npt.NDArray[Any]:
    """The values repr prints, as numpy: all of them, or (summarized) only the corners numpy's
    summary shows. Each axis longer than 2 * edgeitems becomes edgeitems from each end around one
    filler element that numpy's summary skips ("..."), so array2string with threshold=0 prints
    exactly what it prints for the whole tensor; one read per corner block."""

    def read(view: Tensor) -> npt.NDArray[Any]:
        return view.numpy(np.float32) if view.dtype is _dtypes.bfloat16 else view.numpy()

    if not summarized:
        return read(t)
    edge, shape = _REPR_EDGE, t.shape
    long_axes = [axis for axis, n in enumerate(shape) if n > 2 * edge]
    out: npt.NDArray[Any] | None = None
    for corner in range(1 << len(long_axes)):
        src: list[slice] = [slice(None)] * len(shape)
        dst: list[slice] = [slice(None)] * len(shape)
        for bit, axis in enumerate(long_axes):
            end = (corner >> bit) & 1
            src[axis] = slice(shape[axis] - edge, shape[axis]) if end else slice(0, edge)
            dst[axis] = slice(edge + 1, 2 * edge + 1) if end else slice(0, edge)
        block = read(t[tuple(src)])
        if out is None:
            out = np.zeros([2 * edge + 1 if n > 2 * edge else n for n in shape], block.dtype)
        out[tuple(dst)] = block
    assert out is not None
    return out


def _c_text(call: Callable[..., int], *args: Any) -> str:
    """A string from a libtgrad call with the (dst, cap, len) contract: ask the length with cap 0,
    then read; asks again if the text grew in between (another thread realized the graph)."""
    length = ffi.new("size_t *")
    probe = ffi.new("char[1]")
    too_small = int(lib.TGRAD_ERR_BUFFER_TOO_SMALL)
    status = call(*args, probe, 0, length)
    for _ in range(8):
        if status != too_small:
            _check(status)
        cap = int(length[0]) + 1
        buf = ffi.new("char[]", cap)
        status = call(*args, buf, cap, length)
        if status == 0:
            return str(ffi.string(buf, cap).decode("utf-8", "replace"))
    raise errors.InternalError("the text kept growing between the length query and the read")


def _slice_args(s: slice, extent: int) -> tuple[int, int, int, int]:
    flags = 0
    if s.start is None:
        flags |= int(lib.TGRAD_SLICE_START_NONE)
        start = 0
    else:
        start = _clamp64(_as_int(s.start, "slice start"))
    if s.stop is None:
        flags |= int(lib.TGRAD_SLICE_STOP_NONE)
        stop = 0
    else:
        stop = _clamp64(_as_int(s.stop, "slice stop"))
    # A step of at least the extent selects one element at most, whatever its size: clamping it to
    # the extent keeps the meaning and keeps the library's stride arithmetic in range.
    step = 1 if s.step is None else _as_int(s.step, "slice step")
    limit = max(extent, 1)
    step = max(-limit, min(limit, step))
    return start, stop, step, flags


def _clamp64(value: int) -> int:
    # Slice bounds clamp to the extent like numpy, so bounds past int64 mean the same as its limits.
    return max(_INT64_MIN, min(_INT64_MAX, value))


def _bits_handle(bits: npt.NDArray[Any]) -> int:
    bits = _plain(bits)
    data = np.ascontiguousarray(bits, dtype=np.uint16)  # 1-d for a 0-d array: the shape is bits'
    shape = bits.shape
    return _new_handle(
        lib.tgrad_tensor_from_bf16,
        ffi.from_buffer("uint16_t[]", data),
        len(shape),
        _int64_array(shape, "from_bf16"),
    )


_DEVICE_NAMES = {int(lib.TGRAD_DEVICE_CPU): "cpu", int(lib.TGRAD_DEVICE_METAL): "metal",
                 int(lib.TGRAD_DEVICE_OPENCL): "opencl", int(lib.TGRAD_DEVICE_CUDA): "cuda"}


def _device_number(device: Any) -> int:
    if not isinstance(device, str):
        raise errors.InvalidArgumentError(f"device: expected a name (cpu, opencl, cuda, metal), got {type(device).__name__}")
    out = ffi.new("int32_t *")
    _check(lib.tgrad_device_by_name(device.encode(), out))
    return int(out[0])


def _ready(device: int) -> None:
    """Raise BackendUnavailableError (with the backend's reason) unless `device` is usable."""
    name, built, available, text = ffi.new("char **"), ffi.new("int32_t *"), ffi.new("int32_t *"), ffi.new("char **")
    _check(lib.tgrad_backend(device, name, built, available, text))
    if not available[0]:
        raise errors.BackendUnavailableError(f"{ffi.string(name[0]).decode()}: {ffi.string(text[0]).decode()}")


def _typed_handle(array: Any, dtype: _dtypes.DType) -> int:
    """A float32 or int32 tensor's handle from a numpy array (Tensor.from_numpy with dtype)."""
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise errors.InvalidArgumentError(
            f"Tensor.from_numpy: expected a numpy.ndarray, got {type(array).__name__} "
            "(wrap Python data with numpy.asarray first)")
    plain = _plain(array)  # the buffer's own shape (a 0-d array stays 0-d: ascontiguousarray gives 1-d)
    data, src = _dtypes.host_array(plain, dtype, "Tensor.from_numpy")
    return _new_handle(lib.tgrad_tensor_from_host, ffi.from_buffer("char[]", data), src, plain.ndim,
                       _int64_array(plain.shape, "from_numpy"), dtype.code)


def _host_array(shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """numpy.empty(shape, dtype) for reading a tensor back; numpy's MemoryError (and its "array is
    too big") become OutOfMemoryError, as every allocation failure in tgrad does."""
    try:
        return np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError) as exc:
        count = 1
        for extent in shape:
            count *= extent
        raise errors.OutOfMemoryError(
            f"numpy(): cannot allocate the host array of shape {shape} ({count} elements of "
            f"{np.dtype(dtype).itemsize} bytes): {type(exc).__name__}: {str(exc)[:120]}") from None


def _library_shape(handle: int) -> tuple[int, ...]:
    """The shape libtgrad holds for `handle`: the one source of a Tensor's shape."""
    scratch = _SCRATCH
    ndim, out = scratch.ndim, scratch.shape
    _check(lib.tgrad_tensor_ndim(handle, ndim))
    _check(lib.tgrad_tensor_shape(handle, out))
    return tuple(out[0:ndim[0]])


def _plain(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`array` as a plain numpy.ndarray over the same memory: the shape, strides and dtype of
    the buffer itself. An ndarray subclass may override `shape`, `strides`, `dtype`, `__array__`
    or `__array_interface__` in Python, and a property may answer differently each time it is
    read; the base-class view reads none of them (numpy copies the C-level descriptor)."""
    return array if type(array) is np.ndarray else np.ndarray.view(array, np.ndarray)


def _from_numpy_handle(array: Any) -> int:
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise errors.InvalidArgumentError(
            f"Tensor.from_numpy: expected a numpy.ndarray, got {type(array).__name__} "
            "(wrap Python data with numpy.asarray first)"
        )
    array = _plain(array)  # from here every read of shape, dtype and memory is the buffer's own
    dt = array.dtype
    shape = array.shape
    if dt.kind == "b":  # numpy's bool gives a tgrad.bool tensor (as torch.from_numpy)
        return _typed_handle(array, _dtypes.bool_)
    if _bf16.is_bf16(dt):
        return _bits_handle(np.ascontiguousarray(array).view(np.uint16).reshape(shape))
    if dt.kind == "f" and dt.itemsize == 2:
        # float16 widens to float32 exactly (every float16 is a float32); libtgrad's one rounding
        # to bf16 follows. The one float16 path: from_dlpack and safetensors F16 come here too.
        array = array.astype(np.float32)
        dt = array.dtype
    if dt.kind == "f" and dt.itemsize == 4:
        data = np.ascontiguousarray(array, dtype=np.float32)
        ptr, call = ffi.from_buffer("float[]", data), lib.tgrad_tensor_from_f32
    elif dt.kind == "f" and dt.itemsize == 8:
        data = np.ascontiguousarray(array, dtype=np.float64)
        ptr, call = ffi.from_buffer("double[]", data), lib.tgrad_tensor_from_f64
    else:
        raise errors.DtypeUnsupportedError(
            f"Tensor.from_numpy: dtype {dt} is not supported (float16, float32, float64 or ml_dtypes.bfloat16)"
        )
    return _new_handle(call, ptr, len(shape), _int64_array(shape, "from_numpy"))


def _unpickle(data: bytes, shape: tuple[int, ...], device: str) -> Tensor:
    """The tensor Tensor.__reduce__ describes: little-endian bf16 `data` of `shape` on `device`."""
    if not isinstance(data, bytes) or not isinstance(shape, tuple):
        raise errors.InvalidArgumentError(
            f"Tensor unpickle: expected bytes and a shape tuple, got {type(data).__name__} and "
            f"{type(shape).__name__}")
    extents = [_as_int(extent, "Tensor unpickle: shape") for extent in shape]
    numel = 1
    for extent in extents:
        numel *= extent
    if min(extents, default=0) < 0 or len(data) != 2 * numel:
        raise errors.InvalidArgumentError(
            f"Tensor unpickle: {len(data)} bytes do not hold a bf16 tensor of shape {shape}")
    why = _buildable.problem(extents, 2)  # [2**62, 0] holds 0 bytes, yet numpy cannot build it
    if why is not None:
        raise errors.InvalidArgumentError(f"Tensor unpickle: shape {shape[:10]}: {why}")
    host = Tensor.from_bf16_bits(np.frombuffer(data, dtype="<u2").reshape(shape))
    if device == "cpu":
        return host
    try:
        return host.to(device)
    finally:
        host.release()


def matmul(a: Tensor[A, B], b: Tensor[B, C], *, out_dtype: _dtypes.DType | str | None = None,
           order: str | None = None) -> Tensor[A, C]:
    """a @ b with torch.matmul's rules, lazily; checks shapes now.

    [M, K] @ [K, N] gives [M, N]; [..., M, K] @ [..., K, N] gives [..., M, N], each batch the 2-D
    product of its matrices (the same bytes), with the batch axes broadcast by numpy's rule and
    every operand read through its view (strides, expand, transposes: no copies). A 1-D operand
    is promoted as torch does ([K] as [1, K] on the left, [K, 1] on the right) and the added axis
    is removed from the result. 0-d operands raise RankMismatchError, batch axes that do not
    broadcast or inner dimensions that differ ShapeMismatchError. Batched products run on GPU
    devices too (one product per threadgroup z, docs/kernels.md); a batch of more than 65,535
    products there raises RouteNotEligibleError.

    out_dtype: None or tgrad.bfloat16 (the default, ``a @ b``), or tgrad.float32: the fp32
    accumulators of the documented order without their final rounding (NaN canonical); the bf16
    result is exactly that value rounded to nearest even. On a GPU device the naive and tiled
    routes store it too (tc stores bf16 only), and elementwise ops are not fused into it
    (docs/numerics.md, "out_dtype").

    order: None (this thread's, tgrad.matmul_order), "pairwise" or "block32": the accumulation
    order (docs/numerics.md, "The block32 order"; block32 runs on AMX where the CPU has it)."""
    for name, operand in (("a", a), ("b", b)):
        if not isinstance(operand, Tensor):
            raise errors.InvalidArgumentError(
                f"matmul: operand {name} must be a Tensor, got {type(operand).__name__}"
            )
    target = _dtypes.bfloat16 if out_dtype is None else _dtypes.as_dtype(out_dtype, "matmul")
    if target is _dtypes.bfloat16 and order is None:
        return a @ b
    code = int(lib.tgrad_matmul_order()) if order is None else _order.order_code(order, "matmul")
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_matmul_ordered(a._h, b._h, target.code, code, out))
    sa, sb = a._shape, b._shape  # libtgrad checked the shapes; other ranks: read when asked
    shape = (sa[0], sb[1]) if sa is not None and sb is not None and len(sa) == len(sb) == 2 else None
    result = Tensor._wrap(int(out[0]), shape)
    if target is _dtypes.bfloat16 and (recorder := _RECORDER.get()) is not None:  # tgrad.trace replays it
        recorder.report("matmul", result, (a, b), {"order": order})
    return result


_bind_base(Tensor, _RECORDER)
_shape_ops.bind(Tensor, _RECORDER)


@overload
def typed(x: Tensor, shape: type[_T], /) -> _T: ...
@overload
def typed(x: Tensor, a: A, /) -> Tensor[A]: ...
@overload
def typed(x: Tensor, a: A, b: B, /) -> Tensor[A, B]: ...
@overload
def typed(x: Tensor, a: A, b: B, c: C, /) -> Tensor[A, B, C]: ...
@overload
def typed(x: Tensor, a: A, b: B, c: C, d: D, /) -> Tensor[A, B, C, D]: ...
def typed(x: Tensor, /, *shape: Any) -> Any:
    """`x`, its shape stated for static checkers and checked now (docs/typing.md):

        h: Tensor[Literal[32], Literal[768]] = tgrad.typed(x, 32, 768)
        h = tgrad.typed(x, Tensor[Literal[32], Literal[768]])   # the same, without the annotation

    Extents given as ints are checked; in the second form Literal extents are checked, int, Any
    and type variables accept any extent. RankMismatchError when the number of axes differs,
    ShapeMismatchError when an extent does; the tensor itself is returned, unchanged."""
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"typed: expected a Tensor, got {type(x).__name__}")
    if len(shape) == 1 and not isinstance(shape[0], int):
        wanted = _stated_extents(shape[0])
    else:
        wanted = [_extent_arg(e) for e in shape]
    if wanted is None:
        return x
    actual = x.shape
    if len(wanted) != len(actual):
        raise errors.RankMismatchError(
            f"typed: stated {len(wanted)} axes {_shape_text(wanted)}, the tensor has shape {actual}")
    if any(w is not None and w != a for w, a in zip(wanted, actual)):
        raise errors.ShapeMismatchError(f"typed: stated shape {_shape_text(wanted)}, the tensor has shape {actual}")
    return x


def _extent_arg(extent: Any) -> int:
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
        raise errors.InvalidArgumentError(f"typed: extent {extent!r} is not a non-negative int")
    return extent


def _stated_extents(form: Any) -> list[int | None] | None:
    """The extents a `Tensor[...]` form states (None: any extent), or None when it states no rank
    (a bare Tensor, or an unpacked tuple[int, ...])."""
    if form is Tensor:
        return None
    if get_origin(form) is not Tensor:
        raise errors.InvalidArgumentError(f"typed: expected extents or a Tensor[...] type, got {form!r}")
    wanted: list[int | None] = []
    for arg in get_args(form):
        if get_origin(arg) is Literal:
            (value,) = get_args(arg)
            wanted.append(_extent_arg(value))
        elif get_origin(arg) is Unpack or getattr(arg, "__unpacked__", False) or isinstance(arg, TypeVarTuple):
            return None
        else:
            wanted.append(None)  # int, Any, a TypeVar
    return wanted


def _shape_text(extents: Sequence[int | None]) -> str:
    return "(" + ", ".join("?" if e is None else str(e) for e in extents) + ("," if len(extents) == 1 else "") + ")"


# The ops are defined on Tensor, and Tensor's operators call them: imported last, once Tensor exists.
from . import ops as _ops  # noqa: E402
from . import compare as _compare  # noqa: E402
from . import elementwise_more as _ew_more  # noqa: E402
