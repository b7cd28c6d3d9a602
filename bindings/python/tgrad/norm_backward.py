"""The norms' input gradients as ops: ``rms_norm_backward(x, g, normalized_shape, weight, eps)`` and
``layer_norm_backward(x, g, normalized_shape, weight, eps)``, the dx of ``rms_norm`` / ``layer_norm``
for the gradient ``g`` of their result (torch computes the same dx in its fused
``_fused_rms_norm_backward`` / ``native_layer_norm_backward``):

- rms_norm:   dx = rinv g w - x rinv^3 sum(g w x) / N,  rinv = 1 / sqrt(mean(x^2) + eps);
- layer_norm: dx = rinv (g w - mean(g w) - xh mean(g w xh)),  xh = (x - mean(x)) rinv,
  rinv = 1 / sqrt(var(x) + eps) (biased),

sums and means over the trailing ``normalized_shape`` (N elements), w = 1 without a weight. Each
output is the exact value rounded once to ``dtype`` (docs/numerics.md, "rms_norm_backward,
layer_norm_backward"), so the bytes never depend on threads or CPU variant. One libtgrad call each
(``tgrad_rms_norm_backward``, ``tgrad_layer_norm_backward``), lazy like every op; the gradient
engine's vjp rule of the norms calls them for dx. CPU only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import errors
from ._ffi import ffi, lib
from .dtypes import as_dtype
from .errors import _check
from .norms import _FINFO_EPS, _eps, _naxes, _param

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["layer_norm_backward", "rms_norm_backward"]


def rms_norm_backward(x: Tensor, g: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                      eps: float | None = None, *, dtype: Any = None) -> Tensor:
    """rms_norm's dx for the gradient g of its result (x, g: one shape, bfloat16 or float32 each;
    weight as rms_norm's; eps None: torch.finfo(x.dtype).eps, as rms_norm), correctly rounded to
    dtype (g's dtype by default; bfloat16 or float32)."""
    name = "rms_norm_backward"
    naxes = _naxes(name, x, normalized_shape)
    e = _FINFO_EPS.get(x.dtype.name, 2.0**-7) if eps is None else _eps(name, eps)
    return _run(name, lib.tgrad_rms_norm_backward, x, g, weight, naxes, e, dtype)


def layer_norm_backward(x: Tensor, g: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
                        eps: float = 1e-5, *, dtype: Any = None) -> Tensor:
    """layer_norm's dx for the gradient g of its result (the bias has no part in it); the
    arguments as rms_norm_backward's, eps 1e-5 by default as layer_norm's."""
    name = "layer_norm_backward"
    naxes = _naxes(name, x, normalized_shape)
    return _run(name, lib.tgrad_layer_norm_backward, x, g, weight, naxes, _eps(name, eps), dtype)


def _run(name: str, make: Any, x: Tensor, g: Any, weight: Any, naxes: int, eps: float, dtype: Any) -> Tensor:
    from .tensor import Tensor

    if not isinstance(g, Tensor):
        raise errors.InvalidArgumentError(f"tgrad.{name}: g must be a Tensor, got {type(g).__name__}")
    out_dtype = 0 if dtype is None else as_dtype(dtype, f"tgrad.{name}").code
    out = ffi.new("tgrad_tensor_t *")
    _check(make(x._h, g._h, _param(name, "weight", weight), naxes, eps, out_dtype, out))
    return Tensor._wrap(int(out[0]), tuple(x.shape))
