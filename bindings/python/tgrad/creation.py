"""Tensor creation the torch way: ``tensor``, ``zeros``, ``ones``, ``full``, ``empty``, ``arange``,
``linspace``, ``eye`` and the ``*_like`` forms (docs/random.md, "Creation").

Values are built on the host and handed to libtgrad (``tgrad_tensor_from_host``), which rounds
each floating value once to the tensor's dtype (round to nearest even). Python does no rounding to
bfloat16 or float32: where a value is not a float64 already (``arange`` with fractional steps,
``linspace``), it is computed exactly (``fractions.Fraction``) and passed as the float64 rounded
to odd, from which libtgrad's one rounding to 8 or 24 bits gives the exact value's (53 >= 24 + 2).

dtypes: floating data gives bfloat16 (the default, as torch's default float dtype would be here),
Python or numpy integers give int32 (torch gives int64, which tgrad does not have: values outside
int32 are refused), bool data is refused (tgrad has no bool dtype yet).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from . import _bf16, errors
from . import dtypes as _dtypes
from ._ffi import lib
from .tensor import Tensor, _as_int, _from_numpy_handle, _new_handle, _reports, _typed_handle

__all__ = ["tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "eye", "zeros_like", "ones_like",
           "full_like", "empty_like"]

_F64_EXACT_INT = 1 << 53


def _shape(size: Sequence[Any], what: str) -> tuple[int, ...]:
    """zeros(2, 3), zeros((2, 3)) and zeros([2, 3]) alike; extents are ints >= 0."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = tuple(_as_int(s, what) for s in size)
    for s in shape:
        if s < 0:
            raise errors.InvalidArgumentError(f"{what}: negative extent {s} in shape {shape}")
    return shape


def _dtype_of(dtype: Any, default: _dtypes.DType, what: str) -> _dtypes.DType:
    return default if dtype is None else _dtypes.as_dtype(dtype, what)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, (float, np.floating)) and not isinstance(value, bool))


def _odd(value: Fraction) -> float:
    """The float64 nearest to `value` rounded to odd: truncated toward zero, its last bit set when
    inexact. Rounding that to 24 bits or fewer (libtgrad) gives the exact value's rounding."""
    d = float(value)  # correctly rounded (CPython divides integers exactly)
    if math.isinf(d) or Fraction(d) == value:
        return d
    if abs(Fraction(d)) > abs(value):
        d = math.nextafter(d, 0.0)
    if d == 0.0:
        return math.copysign(5e-324, value)
    (bits,) = struct.unpack("<q", struct.pack("<d", d))
    return float(struct.unpack("<d", struct.pack("<q", bits | 1))[0])


def _make(values: np.ndarray, dtype: _dtypes.DType, device: Any) -> Tensor:
    """A tensor of `dtype` from a host array whose kind fits it (floats for bfloat16 and float32,
    ints for int32), on `device`; nothing reported to a running trace (the caller reports)."""
    handle = _from_numpy_handle(values) if dtype is _dtypes.bfloat16 else _typed_handle(values, dtype)
    host = Tensor._adopt(handle)
    if device is None or device == "cpu":
        return host
    try:
        return host.to(device)
    finally:
        host.release()


def _from_host(values: np.ndarray, dtype: _dtypes.DType, device: Any, what: str) -> Tensor:
    """A tensor of `dtype` from host values (float64 or ints): libtgrad rounds floats once; ints
    for a floating dtype go through an int32 tensor and libtgrad's cast (round to nearest even)."""
    if values.dtype.kind in "iu" and dtype.is_floating_point:
        if values.size and (int(values.min()) < -(1 << 31) or int(values.max()) >= 1 << 31):
            if int(np.abs(values.astype(object)).max()) > _F64_EXACT_INT:
                raise errors.InvalidArgumentError(
                    f"{what}: integers beyond 2^53 for a {dtype.name} tensor (round them first)")
            return _make(values.astype(np.float64), dtype, device)  # exact in float64
        ints = Tensor._adopt(_typed_handle(values, _dtypes.int32))
        try:
            cast = Tensor._adopt(_new_handle(lib.tgrad_cast, ints._handle, dtype.code))
        finally:
            ints.release()
        if device is None or device == "cpu":
            return cast
        try:
            return cast.to(device)
        finally:
            cast.release()
    if values.dtype.kind == "f" and not dtype.is_floating_point:
        raise errors.DtypeUnsupportedError(
            f"{what}: floating values for an int32 tensor (make a floating tensor and cast it with .to(tgrad.int32))")
    return _make(values, dtype, device)


def _tensor(data: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor holding `data`: a Python number, nested lists or tuples of numbers, a numpy array
    or a Tensor (its values). Floats give bfloat16 unless dtype says float32; integers give int32
    (or a floating dtype asked for: libtgrad rounds them); bool is refused (no bool dtype yet).
    Ragged lists are InvalidArgumentError."""
    if isinstance(data, Tensor):
        data = data.numpy()
    if isinstance(data, (bool, np.bool_)):
        raise errors.DtypeUnsupportedError("tensor: bool data (tgrad has no bool dtype yet; use 0 and 1)")
    try:
        values = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise errors.InvalidArgumentError(f"tensor: data is not a rectangular array of numbers ({exc})") from None
    if _bf16.is_bf16(values.dtype):
        want = _dtype_of(dtype, _dtypes.bfloat16, "tensor")
        if want is _dtypes.int32:
            raise errors.DtypeUnsupportedError("tensor: bfloat16 values for an int32 tensor (cast with .to)")
        return _make(values, want, device)
    kind = values.dtype.kind
    if kind == "b":
        raise errors.DtypeUnsupportedError("tensor: bool data (tgrad has no bool dtype yet; use 0 and 1)")
    if kind == "O" and values.size:
        raise errors.InvalidArgumentError(f"tensor: data is not a rectangular array of numbers (numpy made {values.dtype})")
    if kind not in "iuf" and not (kind == "O" and values.size == 0):
        raise errors.DtypeUnsupportedError(f"tensor: data of numpy dtype {values.dtype} is not numbers")
    if values.size == 0 and kind not in "iu":
        values = values.astype(np.float64)
    if kind == "u" and values.dtype.itemsize == 8:
        if values.size and int(values.max()) >= 1 << 63:
            raise errors.InvalidArgumentError("tensor: values beyond int64")
        values = values.astype(np.int64)
    if values.ndim > 8:
        raise errors.InvalidArgumentError(f"tensor: {values.ndim} dimensions (at most 8)")
    default = _dtypes.int32 if values.dtype.kind in "iu" else _dtypes.bfloat16
    if values.dtype.kind == "f" and values.dtype.itemsize < 8:
        values = values.astype(np.float64)  # float16 and float32 widen exactly
    return _from_host(values, _dtype_of(dtype, default, "tensor"), device, "tensor")


tensor = _reports("constant")(_tensor)


@_reports("constant")
def full(size: Any, fill_value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor of shape `size` with every element `fill_value` rounded once to dtype (default:
    int32 for an int fill, bfloat16 for a float one)."""
    if not _is_number(fill_value):
        raise errors.InvalidArgumentError(f"full: fill_value must be a number, got {type(fill_value).__name__}")
    shape = _shape((size,) if not isinstance(size, (tuple, list)) else tuple(size), "full")
    want = _dtype_of(dtype, _dtypes.int32 if _is_int(fill_value) else _dtypes.bfloat16, "full")
    # One element rounded by libtgrad, then repeated on the host at the tensor's own width.
    one = _tensor(fill_value, dtype=want)
    try:
        value = one.numpy()
    finally:
        one.release()
    return _make(np.full(shape, value, dtype=value.dtype), want, device)


def zeros(*size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor of zeros (+0.0), bfloat16 unless dtype says otherwise."""
    want = _dtype_of(dtype, _dtypes.bfloat16, "zeros")
    return full(_shape(size, "zeros"), 0.0 if want.is_floating_point else 0, dtype=want, device=device)


def ones(*size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor of ones, bfloat16 unless dtype says otherwise."""
    want = _dtype_of(dtype, _dtypes.bfloat16, "ones")
    return full(_shape(size, "ones"), 1.0 if want.is_floating_point else 1, dtype=want, device=device)


def empty(*size: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """zeros: tgrad hands out no uninitialized memory, so an empty tensor holds +0.0 (or 0)."""
    return zeros(*size, dtype=dtype, device=device)


def _exact_steps(start: Fraction, end: Fraction, step: Fraction) -> int:
    n = math.ceil((end - start) / step)
    return max(n, 0)


@_reports("constant")
def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: str | None = None) -> Tensor:
    """torch.arange: the values start + i * step for i = 0, 1, ... while below end (above it for a
    negative step); arange(n) is arange(0, n). Integer arguments give int32; any float gives
    bfloat16 (or dtype). Each value is the exact start + i * step rounded once to the dtype; the
    count is ceil((end - start) / step) computed exactly (torch computes it in double)."""
    if end is None:
        start, end = 0, start
    for name, v in (("start", start), ("end", end), ("step", step)):
        if not _is_number(v) or not math.isfinite(v):
            raise errors.InvalidArgumentError(f"arange: {name} must be a finite number, got {v!r}")
    if step == 0:
        raise errors.InvalidArgumentError("arange: step must not be 0")
    all_int = _is_int(start) and _is_int(end) and _is_int(step)
    want = _dtype_of(dtype, _dtypes.int32 if all_int else _dtypes.bfloat16, "arange")
    fs, fe, fd = Fraction(start), Fraction(end), Fraction(step)
    n = _exact_steps(fs, fe, fd)
    if n > 1 << 40:
        raise errors.InvalidArgumentError(f"arange: {n} elements is too many")
    last = fs + (n - 1) * fd if n else fs
    if fs.denominator == 1 and fd.denominator == 1 and max(abs(fs), abs(last)) <= _F64_EXACT_INT:
        values = int(fs) + int(fd) * np.arange(n, dtype=np.int64)  # exact integers
        if not want.is_floating_point:
            if values.size and (values.min() < -(1 << 31) or values.max() >= 1 << 31):
                raise errors.InvalidArgumentError(f"arange: values {fs}..{last} do not fit int32")
            return _make(values.astype(np.int32), want, device)
        return _make(values.astype(np.float64), want, device)  # exact in float64
    if not want.is_floating_point:
        raise errors.DtypeUnsupportedError("arange: fractional values for an int32 tensor")
    values = np.array([_odd(fs + i * fd) for i in range(n)], dtype=np.float64)
    return _make(values, want, device)


@_reports("constant")
def linspace(start: Any, end: Any, steps: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """`steps` values from start to end: element i is the exact start + i * (end - start) /
    (steps - 1) rounded once (the last is end itself; steps = 1 gives start). torch evaluates a
    two-sided formula in the dtype's arithmetic and can differ in the last bit. bfloat16 unless
    dtype says float32."""
    n = _as_int(steps, "linspace steps")
    if n < 0:
        raise errors.InvalidArgumentError(f"linspace: steps must be >= 0, got {n}")
    for name, v in (("start", start), ("end", end)):
        if not _is_number(v) or not math.isfinite(v):
            raise errors.InvalidArgumentError(f"linspace: {name} must be a finite number, got {v!r}")
    want = _dtype_of(dtype, _dtypes.bfloat16, "linspace")
    if not want.is_floating_point:
        raise errors.DtypeUnsupportedError("linspace: gives bfloat16 or float32")
    fs, fe = Fraction(start), Fraction(end)
    values = np.array([_odd(fs + (fe - fs) * i / (n - 1)) if n > 1 else float(fs) for i in range(n)],
                      dtype=np.float64)
    return _make(values, want, device)


@_reports("constant")
def eye(n: Any, m: Any = None, dtype: Any = None, device: str | None = None) -> Tensor:
    """An n x m tensor (m = n by default) with ones on the diagonal, zeros elsewhere."""
    rows = _as_int(n, "eye n")
    cols = rows if m is None else _as_int(m, "eye m")
    if rows < 0 or cols < 0:
        raise errors.InvalidArgumentError(f"eye: n and m must be >= 0, got {rows}, {cols}")
    want = _dtype_of(dtype, _dtypes.bfloat16, "eye")
    host = np.eye(rows, cols, dtype=np.int32 if want is _dtypes.int32 else np.float32)
    return _make(host, want, device)


def _like(x: Tensor, what: str) -> tuple[tuple[int, ...], _dtypes.DType, str]:
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{what}: expected a Tensor, got {type(x).__name__}")
    return x.shape, x.dtype, x.device


def zeros_like(x: Tensor, dtype: Any = None, device: str | None = None) -> Tensor:
    """zeros of x's shape, dtype and device (unless given)."""
    shape, dt, dev = _like(x, "zeros_like")
    return zeros(shape, dtype=dt if dtype is None else dtype, device=dev if device is None else device)


def ones_like(x: Tensor, dtype: Any = None, device: str | None = None) -> Tensor:
    """ones of x's shape, dtype and device (unless given)."""
    shape, dt, dev = _like(x, "ones_like")
    return ones(shape, dtype=dt if dtype is None else dtype, device=dev if device is None else device)


def full_like(x: Tensor, fill_value: Any, dtype: Any = None, device: str | None = None) -> Tensor:
    """fill_value in x's shape, dtype and device (unless given)."""
    shape, dt, dev = _like(x, "full_like")
    return full(shape, fill_value, dtype=dt if dtype is None else dtype, device=dev if device is None else device)


def empty_like(x: Tensor, dtype: Any = None, device: str | None = None) -> Tensor:
    """zeros_like: tgrad hands out no uninitialized memory."""
    return zeros_like(x, dtype=dtype, device=device)
