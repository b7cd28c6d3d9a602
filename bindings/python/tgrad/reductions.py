"""Reductions and casts: ``tgrad.sum``, ``mean``, ``max``, ``min``, ``argmax``, ``argmin`` (also
Tensor methods) and ``Tensor.to(dtype)``.

Each is one libtgrad call (``tgrad_reduce``, ``tgrad_cast``), lazy like every op. ``sum`` and
``mean`` are correctly rounded (the exact sum, or exact sum / count, rounded once to the output
dtype), so the bytes never depend on threads, blocking or CPU variant; the extrema are exact.
Arguments follow numpy (``axis``, ``keepdims``, ``dtype``) and accept torch's spelling (``dim``,
``keepdim``). docs/numerics.md states the NaN, signed-zero, tie and empty-set rules.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

from . import errors
from ._ffi import ffi, lib
from .dtypes import DType, as_dtype
from .errors import _check

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["sum", "mean", "max", "min", "argmax", "argmin"]

_OPS = {"sum": int(lib.TGRAD_REDUCE_SUM), "mean": int(lib.TGRAD_REDUCE_MEAN), "max": int(lib.TGRAD_REDUCE_MAX),
        "min": int(lib.TGRAD_REDUCE_MIN), "argmax": int(lib.TGRAD_REDUCE_ARGMAX),
        "argmin": int(lib.TGRAD_REDUCE_ARGMIN)}


def _axes(name: str, axis: Any, dim: Any) -> list[int] | None:
    """The axes asked for (None: every axis); axis and dim are the same argument."""
    if dim is not None:
        if axis is not None:
            raise errors.InvalidArgumentError(f"{name}: give axis or dim, not both")
        axis = dim
    if axis is None:
        return None
    items: Sequence[Any] = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if isinstance(a, bool):
            raise errors.InvalidArgumentError(f"{name}: axis must be an int, got bool")
        try:
            out.append(operator.index(a))
        except TypeError:
            raise errors.InvalidArgumentError(f"{name}: axis must be an int or a tuple of ints, got "
                                              f"{type(a).__name__}") from None
        if not -(1 << 31) <= out[-1] < 1 << 31:
            raise errors.IndexOutOfRangeError(f"{name}: axis {out[-1]} is out of range")
    return out


def _keep(name: str, keepdims: Any, keepdim: Any) -> int:
    if keepdim is not None:
        keepdims = keepdim
    if not isinstance(keepdims, (bool, int)) or keepdims not in (0, 1):
        raise errors.InvalidArgumentError(f"{name}: keepdims must be a bool, got {keepdims!r}")
    return int(keepdims)


def reduce(name: str, x: Tensor, axis: Any = None, keepdims: Any = False, dtype: Any = None, dim: Any = None,
           keepdim: Any = None) -> Tensor:
    """The reduction `name` of x (the Tensor methods and module functions call this)."""
    from .tensor import Tensor

    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: expected a Tensor, got {type(x).__name__}")
    if x.dtype.code == int(lib.TGRAD_DTYPE_BOOL):  # numpy's rules for bool, composed (tgrad.compare)
        from .compare import reduce_bool

        return reduce_bool(name, x, axis, keepdims, dtype, dim, keepdim)
    axes = _axes(name, axis, dim)
    keep = _keep(name, keepdims, keepdim)
    out_dtype = 0 if dtype is None else as_dtype(dtype, f"tgrad.{name}").code
    out = ffi.new("tgrad_tensor_t *")
    if axes is None:
        status = lib.tgrad_reduce(_OPS[name], x._h, ffi.NULL, -1, keep, out_dtype, out)
    else:
        status = lib.tgrad_reduce(_OPS[name], x._h, ffi.new("int32_t[]", axes or [0]), len(axes), keep, out_dtype,
                                  out)
    _check(status)
    result = Tensor._wrap(int(out[0]), None)
    _report(name, result, x, {"axes": axes, "keepdims": keep, "dtype": result.dtype})
    return result


def _report(kind: str, out: Tensor, x: Tensor, kwargs: dict[str, Any]) -> None:
    """Tell tgrad.trace's recorder, while one runs (tgrad.trace_kinds replays these kinds)."""
    from .tensor import _RECORDER

    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.report(kind, out, (x,), kwargs)


def cast(x: Tensor, dtype: DType | Any) -> Tensor:
    """x converted to dtype (lazily; x itself when the dtype is the same): bfloat16 -> float32 is
    exact, float32 -> bfloat16 rounds to nearest even, int32 -> float rounds to nearest even,
    float -> int32 truncates toward zero (NaN or out of range: InvalidArgumentError at realize)."""
    from .tensor import Tensor

    target = as_dtype(dtype, "Tensor.to")
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_cast(x._h, target.code, out))
    result = Tensor._wrap(int(out[0]), x._shape)
    _report("cast", result, x, {"dtype": target})
    return result


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False, dtype: Any = None, *,
        dim: int | Sequence[int] | None = None, keepdim: bool | None = None) -> Tensor:
    """The correctly rounded sum over axis (every axis by default)."""
    return reduce("sum", x, axis, keepdims, dtype, dim, keepdim)


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False, dtype: Any = None, *,
         dim: int | Sequence[int] | None = None, keepdim: bool | None = None) -> Tensor:
    """The correctly rounded mean (exact sum / count, rounded once); NaN for an empty set."""
    return reduce("mean", x, axis, keepdims, dtype, dim, keepdim)


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False, dtype: Any = None, *,
        dim: int | Sequence[int] | None = None, keepdim: bool | None = None) -> Tensor:
    """The maximum (exact; NaN propagates). An empty set is InvalidArgumentError."""
    return reduce("max", x, axis, keepdims, dtype, dim, keepdim)


def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False, dtype: Any = None, *,
        dim: int | Sequence[int] | None = None, keepdim: bool | None = None) -> Tensor:
    """The minimum (exact; NaN propagates). An empty set is InvalidArgumentError."""
    return reduce("min", x, axis, keepdims, dtype, dim, keepdim)


def argmax(x: Tensor, axis: SupportsIndex | None = None, keepdims: bool = False, *, dim: SupportsIndex | None = None,
           keepdim: bool | None = None) -> Tensor:
    """The int32 index of the first maximum along axis (of the row-major flattening when axis is
    None); a NaN counts as the maximum (its first index)."""
    return reduce("argmax", x, axis, keepdims, None, dim, keepdim)


def argmin(x: Tensor, axis: SupportsIndex | None = None, keepdims: bool = False, *, dim: SupportsIndex | None = None,
           keepdim: bool | None = None) -> Tensor:
    """The int32 index of the first minimum along axis (see argmax)."""
    return reduce("argmin", x, axis, keepdims, None, dim, keepdim)
