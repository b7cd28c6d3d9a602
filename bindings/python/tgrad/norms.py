"""Correctly rounded norms: ``tgrad.rms_norm`` and ``tgrad.layer_norm`` with torch's signatures
(``torch.nn.functional.rms_norm`` / ``layer_norm``), and rotary position embedding
(``tgrad.rope``).

Each is one libtgrad call (``tgrad_rms_norm``, ``tgrad_layer_norm``), lazy like every op, and
returns the exact value of its formula over the last ``len(normalized_shape)`` axes rounded once
to bfloat16 (docs/numerics.md, "Norms"): so the bytes never depend on threads, CPU variant or
fusion. ``eps`` is used as the double nearest the Python float given; ``rms_norm``'s default
``eps=None`` is ``torch.finfo(x.dtype).eps`` (bfloat16: 2^-7 = 0.0078125).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import errors
from ._ffi import ffi, lib
from .dtypes import float32, int32
from .errors import _check
from .tensor import _RECORDER, Tensor

__all__ = ["layer_norm", "rms_norm", "rope", "rope_backward"]

#: torch.finfo(dtype).eps by tgrad dtype name (rms_norm's default eps).
_FINFO_EPS = {"bfloat16": 2.0**-7, "float32": 2.0**-23}


def _naxes(name: str, x: Tensor, normalized_shape: Any) -> int:
    """len(normalized_shape), after checking it is x's trailing shape (torch's rule)."""
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: expected a Tensor, got {type(x).__name__}")
    if type(normalized_shape) is int:  # the common cases first: an int, or a tuple of ints, that fit
        if x.shape and x.shape[-1] == normalized_shape:
            return 1
    elif type(normalized_shape) is tuple and normalized_shape and all(type(d) is int for d in normalized_shape):
        n = len(normalized_shape)
        if n <= len(x.shape) and x.shape[len(x.shape) - n:] == normalized_shape:
            return n
    items: Sequence[Any] = normalized_shape if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
    try:
        shape = tuple(operator.index(d) for d in items if not isinstance(d, bool))
    except TypeError:
        raise errors.InvalidArgumentError(f"tgrad.{name}: normalized_shape must be an int or a sequence of ints, "
                                          f"got {normalized_shape!r}") from None
    if len(shape) != len(items) or not shape:
        raise errors.InvalidArgumentError(f"tgrad.{name}: normalized_shape must be an int or a non-empty sequence "
                                          f"of ints, got {normalized_shape!r}")
    if len(shape) > len(x.shape) or tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        raise errors.ShapeMismatchError(f"tgrad.{name}: normalized_shape {list(shape)} is not the trailing shape "
                                        f"of the input {list(x.shape)}")
    return len(shape)


def _param(name: str, what: str, p: Any) -> Any:
    if p is None:
        return 0
    if not isinstance(p, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: {what} must be a Tensor or None, got {type(p).__name__}")
    return p._h


def _eps(name: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise errors.InvalidArgumentError(f"tgrad.{name}: eps must be a float, got {type(eps).__name__}")
    return float(eps)


def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x * weight / sqrt(mean(x^2) + eps) over the trailing normalized_shape, rounded once."""
    naxes = _naxes("rms_norm", x, normalized_shape)
    e = _FINFO_EPS.get(x.dtype.name, 2.0**-7) if eps is None else _eps("rms_norm", eps)
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_rms_norm(x._h, _param("rms_norm", "weight", weight), naxes, e, out))
    result = Tensor._wrap(int(out[0]), tuple(x.shape))
    if _RECORDER.get() is not None:
        _report("rms_norm", result, x, {"normalized_shape": list(x.shape[len(x.shape) - naxes:]), "eps": e})
    return result


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape (biased
    variance), rounded once."""
    naxes = _naxes("layer_norm", x, normalized_shape)
    e = _eps("layer_norm", eps)
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_layer_norm(x._h, _param("layer_norm", "weight", weight), _param("layer_norm", "bias", bias),
                                naxes, e, out))
    result = Tensor._wrap(int(out[0]), tuple(x.shape))
    if _RECORDER.get() is not None:
        _report("layer_norm", result, x, {"normalized_shape": list(x.shape[len(x.shape) - naxes:]), "eps": e})
    return result


def rope(x: Tensor, positions: Any, base: float = 10000.0, *, rotary_dim: int | None = None,
         interleaved: bool = False, scaling: Any = None, inv_freq: Any = None) -> Tensor:
    """Rotary position embedding of x [..., L, d] at int32 positions [L] or [B, L] (a Tensor or
    anything numpy reads): pairs (i, i + rotary_dim/2) (Hugging Face Llama's "rotate half") or,
    interleaved, (2i, 2i + 1) of the first rotary_dim features (default d) rotate by
    theta_i = p * base^(-2i/rotary_dim), or p * inv_freq[i] with inv_freq's float32 values taken as
    exact (Llama-3's rope scaling computes such a table); each output rounded once
    (docs/numerics.md, "Rotary position embedding")."""
    return _rope("rope", 0, x, positions, base, rotary_dim, interleaved, scaling, inv_freq)


def rope_backward(g: Tensor, positions: Any, base: float = 10000.0, *, rotary_dim: int | None = None,
                  interleaved: bool = False, scaling: Any = None, inv_freq: Any = None) -> Tensor:
    """rope's derivative: the transpose rotation (by -theta_i) of the gradient g of rope's result,
    (g1 cos + g2 sin, g2 cos - g1 sin) for each pair, the other features passing through; the
    same arguments as rope, each output the exact value rounded once (docs/numerics.md, "Rotary
    position embedding")."""
    return _rope("rope_backward", 1, g, positions, base, rotary_dim, interleaved, scaling, inv_freq)


def _rope(name: str, backward: int, x: Any, positions: Any, base: Any, rotary_dim: Any, interleaved: Any,
          scaling: Any, inv_freq: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: expected a Tensor, got {type(x).__name__}")
    if scaling is not None:
        raise errors.InvalidArgumentError(f"tgrad.{name}: scaling is not supported; pass the scaled frequencies as "
                                          "inv_freq= (float32 [rotary_dim / 2])")
    if not isinstance(interleaved, (bool, int)) or interleaved not in (0, 1):
        raise errors.InvalidArgumentError(f"tgrad.{name}: interleaved must be a bool, got {interleaved!r}")
    rd = 0 if rotary_dim is None else rotary_dim
    if isinstance(rd, bool) or not isinstance(rd, int) or not 0 <= rd < 1 << 31:
        raise errors.InvalidArgumentError(f"tgrad.{name}: rotary_dim must be a positive int, got {rotary_dim!r}")
    if rotary_dim is not None and rd == 0:
        raise errors.InvalidArgumentError(f"tgrad.{name}: rotary_dim must be at least 2")
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise errors.InvalidArgumentError(f"tgrad.{name}: base must be a float, got {type(base).__name__}")
    if not isinstance(positions, Tensor):
        arr = np.asarray(positions)
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < -(1 << 31) or arr.max() >= 1 << 31)):
            raise errors.InvalidArgumentError(f"tgrad.{name}: positions must be integers that fit int32")
        positions = Tensor.from_numpy(np.ascontiguousarray(arr, np.int32), dtype=int32)
    freq = 0
    if inv_freq is not None:
        if not isinstance(inv_freq, Tensor):
            inv_freq = Tensor.from_numpy(np.ascontiguousarray(np.asarray(inv_freq, np.float32)), dtype=float32)
        freq = inv_freq._h
    out = ffi.new("tgrad_tensor_t *")
    make = lib.tgrad_rope_backward if backward else lib.tgrad_rope
    _check(make(x._h, positions._h, freq, float(base), rd, int(interleaved), out))
    result = Tensor._wrap(int(out[0]), tuple(x.shape))
    _report(name, result, x, {"base": float(base), "rotary_dim": rd, "interleaved": bool(interleaved)})
    return result


def slow_path_counts() -> tuple[int, int]:
    """(elements evaluated, elements decided exactly) by the norms and their backward ops
    (rms_norm_backward, layer_norm_backward) in this process (a debug counter: docs/numerics.md
    reports the rate)."""
    counts = ffi.new("int64_t[2]")
    _check(lib.tgrad_debug_norm_slow_path(counts, 2))
    return int(counts[0]), int(counts[1])


def rope_slow_path_counts() -> tuple[int, int, int]:
    """(values evaluated, decided in binary128, undecided by binary128 too) by rope in this
    process (a debug counter: docs/numerics.md reports the rate)."""
    counts = ffi.new("int64_t[5]")
    _check(lib.tgrad_debug_norm_slow_path(counts, 5))
    return int(counts[2]), int(counts[3]), int(counts[4])


def _report(kind: str, out: Tensor, x: Tensor, kwargs: dict[str, Any]) -> None:
    """Tell tgrad.trace's recorder, while one runs."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.report(kind, out, (x,), kwargs)
