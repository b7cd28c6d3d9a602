"""Correctly rounded ``softmax``, ``log_softmax`` and ``logsumexp`` along one axis (also Tensor
methods; ``tgrad.nn.functional`` forwards ``F.softmax`` and ``F.log_softmax`` here).

Each is one libtgrad call (``tgrad_softmax``), lazy like every op. Every output is the exact value
of its mathematics on the inputs, rounded once to the output dtype, so the bytes never depend on
threads, CPU variant or fusion (docs/numerics.md, "softmax, log_softmax, logsumexp"). The
signatures follow torch (``dim``, ``dtype``, ``keepdim``) and accept numpy's spelling (``axis``,
``keepdims``). ``dtype=`` picks the output dtype (bfloat16 or float32) as torch's
``softmax(x, dim, dtype=torch.float32)`` does, without rounding the input first.
"""

from __future__ import annotations

import operator
from typing import Any

from . import errors
from ._ffi import ffi, lib
from .dtypes import as_dtype
from .errors import _check
from .tensor import _RECORDER, Tensor

__all__ = ["softmax", "log_softmax", "logsumexp"]

_OPS = {"softmax": int(lib.TGRAD_SOFTMAX_SOFTMAX), "log_softmax": int(lib.TGRAD_SOFTMAX_LOG_SOFTMAX),
        "logsumexp": int(lib.TGRAD_SOFTMAX_LOGSUMEXP)}


def _axis(name: str, dim: Any, axis: Any, default: int | None) -> int:
    if axis is not None:
        if dim is not None:
            raise errors.InvalidArgumentError(f"tgrad.{name}: give dim or axis, not both")
        dim = axis
    if dim is None:
        if default is None:
            raise errors.InvalidArgumentError(f"tgrad.{name}: dim is required")
        dim = default
    if isinstance(dim, bool):
        raise errors.InvalidArgumentError(f"tgrad.{name}: dim must be an int, got bool")
    try:
        d = operator.index(dim)
    except TypeError:
        raise errors.InvalidArgumentError(f"tgrad.{name}: dim must be an int, got {type(dim).__name__}") from None
    if not -(1 << 31) <= d < 1 << 31:
        raise errors.IndexOutOfRangeError(f"tgrad.{name}: dim {d} is out of range")
    return d


def _run(name: str, x: Any, dim: int, keepdims: int, dtype: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: expected a Tensor, got {type(x).__name__}")
    out_dtype = 0 if dtype is None else as_dtype(dtype, f"tgrad.{name}").code
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_softmax(_OPS[name], x._h, dim, keepdims, out_dtype, out))
    result = Tensor._wrap(int(out[0]), None)
    if _RECORDER.get() is not None:
        _report(name, result, x, {"dim": dim, "keepdims": bool(keepdims), "dtype": result.dtype})
    return result


def _report(kind: str, out: Tensor, x: Tensor, kwargs: dict[str, Any]) -> None:
    """Tell tgrad.trace's recorder, while one runs (it records the kind as not replayed)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.report(kind, out, (x,), kwargs)


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None, *,
            axis: int | None = None) -> Tensor:
    """exp(x_i) / sum_j exp(x_j) along dim (the last axis by default), correctly rounded to dtype
    (x's dtype by default; bfloat16 or float32)."""
    return _run("softmax", input, _axis("softmax", dim, axis, -1), 0, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None, *,
                axis: int | None = None) -> Tensor:
    """x_i - log(sum_j exp(x_j)) along dim (the last axis by default), correctly rounded."""
    return _run("log_softmax", input, _axis("log_softmax", dim, axis, -1), 0, dtype)


def logsumexp(input: Tensor, dim: int | None = None, keepdim: bool | None = None, *, axis: int | None = None,
              keepdims: bool | None = None, dtype: Any = None) -> Tensor:
    """log(sum_j exp(x_j)) along dim (required, as in torch), correctly rounded; the axis is
    removed, or kept with extent 1 (keepdim=True)."""
    if keepdim is not None and keepdims is not None:
        raise errors.InvalidArgumentError("tgrad.logsumexp: give keepdim or keepdims, not both")
    keep = keepdim if keepdim is not None else keepdims if keepdims is not None else False
    if not isinstance(keep, (bool, int)) or keep not in (0, 1):
        raise errors.InvalidArgumentError(f"tgrad.logsumexp: keepdim must be a bool, got {keep!r}")
    return _run("logsumexp", input, _axis("logsumexp", dim, axis, None), int(keep), dtype)
